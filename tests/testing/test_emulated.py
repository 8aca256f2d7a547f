"""Shared libraries for AArch64, POWER9 and RISC-V (with V), run under qemu-user: MNIST and a
small CNN match onnxruntime, the node-suite cases of ``tests/backend/portable_cases.txt`` the
suite's references.

Each test batches its libraries into one emulated process (:func:`run_libraries`); the node
cases are split in chunks that pytest-xdist runs in parallel. Without a target's cross
compiler or qemu-user the target's tests skip, saying which Debian package is missing
(``.ci/run`` installs them).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.testing import assert_relative_error, onnxruntime_outputs
from polyonnx.testing.emulated import (
    TARGETS,
    EmulatedTarget,
    Job,
    emulator_workaround,
    graph_input_names,
    library_feeds,
    run_libraries,
)
from polyonnx.testing.examples import conv_model
from polyonnx.testing.zoo import mnist_model, small_cnn
from tests.backend import suite

CASES = suite.read_portable()
#: Node cases per target are run in this many tests (an emulated process each).
CHUNKS = 8
CROSS = ("aarch64", "ppc64le", "riscv64")


def _target(name: str) -> EmulatedTarget:
    target = TARGETS[name]
    reason = target.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return target


def _matmul() -> onnx.ModelProto:
    """y = x @ w, [256, 256]: large enough for parallel loops on 2 threads."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 256)), "w")
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "matmul",
            [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [256, 256])],
            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [256, 256])],
            [w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", [*CROSS, "aarch64-sve"])
def test_models_match_onnxruntime(name: str, threads: int, tmp_path: Path) -> None:
    """MNIST, the small CNN and a GEMM, on one thread and on the library's thread pool."""
    target = _target(name)
    rng = np.random.default_rng(threads)
    jobs, want = [], []
    for model, x in (
        (mnist_model(), rng.standard_normal((1, 1, 28, 28)).astype(np.float32)),
        (small_cnn(), rng.standard_normal((1, 3, 32, 32)).astype(np.float32)),
        (_matmul(), rng.standard_normal((256, 256))),
    ):
        compiled = polyonnx.compile(model, target.options(num_threads=threads))
        lib = write_library(compiled, tmp_path / f"{model.graph.name}.so")
        jobs.append(Job(lib, compiled.metadata(), (x,)))
        want.append(onnxruntime_outputs(model, {model.graph.input[0].name: x}))
    # (The GEMM's rows run on the pool, which the library links for itself.)
    assert (b"polyonnx_parallel_for" in jobs[-1].library.read_bytes()) == (threads > 1)
    for got, expected in zip(run_libraries(target, jobs, tmp_path / "run"), want, strict=True):
        assert not isinstance(got, str), got
        assert_relative_error(got, expected, 1e-4)


@pytest.mark.parametrize("name", CROSS)
def test_a_conv_in_half_blocks_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    """12 channels: blocks of 4 where the target's 32 vector registers hold paired tiles."""
    target = _target(name)
    model, x = conv_model(12, 10), np.random.default_rng(0).standard_normal((1, 12, 10, 10))
    x = x.astype(np.float32)
    compiled = polyonnx.compile(model, target.options(num_threads=1))
    assert "ConvBlocked" in {n.op_type for n in compiled.graph.nodes}
    lib = write_library(compiled, tmp_path / "conv.so")
    (got,) = run_libraries(target, [Job(lib, compiled.metadata(), (x,))], tmp_path / "run")
    assert not isinstance(got, str), got
    assert_relative_error(got, onnxruntime_outputs(model, {"x": x}), 1e-4)


def test_riscv64_code_uses_the_v_extension(tmp_path: Path) -> None:
    """The GEMM's library dies of an illegal instruction where the CPU lacks V."""
    target = _target("riscv64")
    compiled = polyonnx.compile(_matmul(), target.options(num_threads=1))
    lib = write_library(compiled, tmp_path / "matmul.so")
    job = Job(lib, compiled.metadata(), (np.ones((256, 256)),))
    (got,) = run_libraries(
        replace(target, qemu=("qemu-riscv64", "-cpu", "rv64,v=false")), [job], tmp_path
    )
    assert isinstance(got, str) and "died" in got, got


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("name", CROSS)
def test_node_cases_match_the_suite(name: str, chunk: int, tmp_path: Path) -> None:
    target = _target(name)
    names = CASES[chunk::CHUNKS]
    jobs, references = [], []
    for case_name in names:
        case = suite.all_cases()[case_name]
        model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
        ((inputs, outputs),) = suite.data_sets(case, model)
        options = target.options(num_threads=1)
        options = emulator_workaround(target, case_name, options) or options
        compiled = polyonnx.compile(model, options)
        lib = write_library(compiled, tmp_path / f"{case_name}.so")
        feeds = library_feeds(graph_input_names(model), inputs, compiled.metadata())
        jobs.append(Job(lib, compiled.metadata(), feeds))
        references.append((case, outputs))
    failures = {}
    results = run_libraries(target, jobs, tmp_path / "run")
    for case_name, got, (case, want) in zip(names, results, references, strict=True):
        try:
            assert not isinstance(got, str), got
            suite.assert_similar_outputs(want, got, case.rtol, case.atol)
        except AssertionError as e:
            failures[case_name] = str(e).strip().splitlines()[0][:300]
    assert not failures, f"{len(failures)} of {len(names)} cases failed on {name}: {failures}"
