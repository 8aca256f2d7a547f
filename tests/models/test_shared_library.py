"""Ahead-of-time shared libraries: write, load back in Python, and call from C."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

import polyonnx
from polyonnx.codegen.aot import write_library

from .conftest import assert_close

_C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mnist.h"

/* Usage: main INPUT.bin -- reads 784 floats, prints the metadata and the 10 logits. */
int main(int argc, char **argv) {
    static float input[1 * 1 * 28 * 28], output[1 * 10];
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f || fread(input, sizeof input, 1, f) != 1) return 3;
    fclose(f);
    void *inputs[] = {input};
    void *outputs[] = {output};
    int rc = polyonnx_run(inputs, outputs);
    if (rc != 0) return 4;
    printf("%s\n", polyonnx_metadata());
    for (int i = 0; i < 10; i++) printf("%.9g\n", output[i]);
    return 0;
}
"""


@pytest.fixture
def mnist_library(tmp_path, mnist_model):
    """mnist.so and mnist.h written into tmp_path."""
    return write_library(polyonnx.compile(mnist_model), tmp_path / "mnist.so")


def test_library_loads_back_into_an_inference_session(mnist_library, mnist_model,
                                                      onnxruntime_run):
    assert mnist_library.with_suffix(".h").exists()
    sess = polyonnx.InferenceSession(mnist_library)
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == \
        [("Input3", [1, 1, 28, 28], "tensor(float)")]
    x = np.random.default_rng(3).standard_normal((1, 1, 28, 28)).astype(np.float32)
    got = sess.run(None, {"Input3": x})
    assert_close(got, onnxruntime_run(mnist_model, {"Input3": x}), ["Plus214_Output_0"])
    jit = polyonnx.InferenceSession(mnist_model).run(None, {"Input3": x})
    assert_close(got, jit, ["Plus214_Output_0"], tol=1e-6)


def test_library_refuses_other_shapes(mnist_library):
    sess = polyonnx.InferenceSession(mnist_library)
    with pytest.raises(polyonnx.InputError, match="Input3"):
        sess.run(None, {"Input3": np.zeros((2, 1, 28, 28), np.float32)})


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_program_links_the_library_and_matches_python(tmp_path, mnist_library):
    (tmp_path / "main.c").write_text(_C_MAIN)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(tmp_path / "main.c"), f"-I{tmp_path}",
                    str(mnist_library), f"-Wl,-rpath,{tmp_path}"], check=True,
                   capture_output=True, text=True)
    x = np.random.default_rng(4).standard_normal((1, 1, 28, 28)).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    proc = subprocess.run([str(exe), str(tmp_path / "x.bin")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    meta, *values = proc.stdout.splitlines()
    assert [i["name"] for i in json.loads(meta)["inputs"]] == ["Input3"]
    from_c = np.array([float(v) for v in values], np.float32).reshape(1, 10)
    [from_python] = polyonnx.InferenceSession(mnist_library).run(None, {"Input3": x})
    assert_close([from_c], [from_python], ["Plus214_Output_0"], tol=1e-6)
