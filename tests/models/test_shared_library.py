"""Ahead-of-time shared libraries: write, load back in Python, and call from C."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.testing import assert_relative_error, onnxruntime_outputs

_C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"

/* Usage: main INPUT.bin -- reads IN floats; prints the metadata, the OUT outputs of
 * polyonnx_run (its workspace allocated where memory was left dirty), then those of the
 * second of two runs in a workspace the program keeps. */
int main(int argc, char **argv) {
    static float input[IN], output[OUT], kept[OUT];
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f || fread(input, sizeof input, 1, f) != 1) return 3;
    fclose(f);
    size_t size = polyonnx_workspace_size();
    void *dirty = malloc(size);
    if (!dirty) return 5;
    memset(dirty, 0xff, size);  /* NaN bytes: a border not zeroed would show */
    free(dirty);
    void *inputs[] = {input};
    void *outputs[] = {output};
    if (polyonnx_run(inputs, outputs) != 0) return 4;
    void *workspace = aligned_alloc(64, size);
    if (!workspace) return 5;
    memset(workspace, 0, size);
    void *kept_outputs[] = {kept};
    for (int run = 0; run < 2; run++)
        if (polyonnx_run_in(inputs, kept_outputs, workspace) != 0) return 4;
    free(workspace);
    printf("%s\n", polyonnx_metadata());
    for (int i = 0; i < OUT; i++) printf("%.9g\n", output[i]);
    for (int i = 0; i < OUT; i++) printf("%.9g\n", kept[i]);
    return 0;
}
"""


@pytest.fixture
def mnist_library(tmp_path, mnist_model):
    """mnist.so and mnist.h written into tmp_path."""
    return write_library(polyonnx.compile(mnist_model), tmp_path / "mnist.so")


def test_library_loads_back_into_an_inference_session(mnist_library, mnist_model):
    assert mnist_library.with_suffix(".h").exists()
    sess = polyonnx.InferenceSession(mnist_library)
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        ("Input3", [1, 1, 28, 28], "tensor(float)")
    ]
    x = np.random.default_rng(3).standard_normal((1, 1, 28, 28)).astype(np.float32)
    got = sess.run(None, {"Input3": x})
    want = onnxruntime_outputs(mnist_model, {"Input3": x})
    assert_relative_error(got, want, 1e-4, ["Plus214_Output_0"])
    jit = polyonnx.InferenceSession(mnist_model).run(None, {"Input3": x})
    assert_relative_error(got, jit, 1e-6, ["Plus214_Output_0"])


def test_library_refuses_other_shapes(mnist_library):
    sess = polyonnx.InferenceSession(mnist_library)
    with pytest.raises(polyonnx.InputError, match="Input3"):
        sess.run(None, {"Input3": np.zeros((2, 1, 28, 28), np.float32)})


def _bordered_model() -> onnx.ModelProto:
    """x -> conv 1x1 -> relu -> conv 3x3 pad 1: the relu writes into a zero-bordered buffer."""
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float32)
    w2 = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "bordered",
        [helper.make_tensor_value_info("x", f, [1, 64, 5, 5])],
        [helper.make_tensor_value_info("y", f, [1, 64, 5, 5])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@pytest.mark.parametrize("name", ["mnist", "bordered"])
def test_c_program_links_the_library_and_matches_python(tmp_path, mnist_model, name):
    model = mnist_model if name == "mnist" else _bordered_model()
    compiled = polyonnx.compile(model)
    if name == "bordered":  # (what the dirty heap checks: polyonnx_run zeroes the borders)
        assert compiled.plan.zeroed_size > 0
    library = write_library(compiled, tmp_path / "model.so")
    [x_info], [y_info] = compiled.program.inputs, compiled.program.outputs
    n_in, n_out = (int(np.prod(v.shape)) for v in (x_info, y_info))
    (tmp_path / "main.c").write_text(_C_MAIN)
    exe = tmp_path / "main"
    subprocess.run(
        [
            "cc",
            "-O1",
            f"-DIN={n_in}",
            f"-DOUT={n_out}",
            "-o",
            str(exe),
            str(tmp_path / "main.c"),
            f"-I{tmp_path}",
            str(library),
            f"-Wl,-rpath,{tmp_path}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    x = np.random.default_rng(4).standard_normal(x_info.shape).astype(np.float32)
    (tmp_path / "x.bin").write_bytes(x.tobytes())
    proc = subprocess.run(
        [str(exe), str(tmp_path / "x.bin")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    meta, *values = proc.stdout.splitlines()
    assert [i["name"] for i in json.loads(meta)["inputs"]] == [x_info.name]
    from_c = np.array([float(v) for v in values], np.float32).reshape(2, *y_info.shape)
    [from_python] = polyonnx.InferenceSession(library).run(None, {x_info.name: x})
    for run in from_c:
        assert_relative_error([run], [from_python], 1e-6, [y_info.name])
