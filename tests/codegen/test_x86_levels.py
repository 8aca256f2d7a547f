"""The x86 levels and CPUs: each gets its vector width, register count and tile shapes from the
target; the ones this host can execute run MNIST, the small CNN and a node-suite subset, the
others compile to objects that call nothing but the allowed functions."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

import polyonnx
from polyonnx import backend
from polyonnx.codegen.elf import undefined_symbols
from polyonnx.codegen.target import (
    codegen_config,
    enabled_features,
    host_cpu,
    vector_bits,
    vector_registers,
)
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.testing import assert_relative_error, onnxruntime_outputs
from polyonnx.testing.zoo import mnist_model, small_cnn
from tests.backend import suite
from tests.codegen.test_libcalls import ALLOWED

V2 = frozenset({"sse4.2", "sse4.1", "ssse3", "popcnt", "cx16"})
V3 = V2 | {"avx", "avx2", "fma", "bmi", "bmi2", "f16c", "lzcnt", "movbe"}
SKX = V3 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
ZEN3 = V3 | {"sha", "vaes", "vpclmulqdq", "adx", "clzero"}
#: LLVM's CPU name -> (vector bits, vector registers, the host features its code may use).
LEVELS: dict[str, tuple[int, int, frozenset[str]]] = {
    "x86-64-v2": (128, 16, V2),
    "x86-64-v3": (256, 16, V3),
    "haswell": (256, 16, V3),
    "znver3": (256, 16, ZEN3),
    "skylake-avx512": (512, 32, SKX),
    "znver4": (
        512,
        32,
        SKX | ZEN3 | {"avx512vnni", "avx512bf16", "avx512vbmi", "avx512vbmi2", "gfni"},
    ),
    "sapphirerapids": (
        512,
        32,
        SKX | {"avx512fp16", "avx512bf16", "avx512vnni", "amx-tile", "amx-bf16", "amx-int8"},
    ),
}
#: What a model's object may call: the kernels' allowed functions, and the C API's (the
#: workspace's allocation, the weights the library links beside the object).
MODEL_ALLOWED = ALLOWED | {"aligned_alloc", "free", "polyonnx_weights"}
#: Node cases each runnable level runs (a spread over the op families).
LEVEL_CASES = suite.read_portable()[::6]

pytestmark = pytest.mark.skipif(
    not host_cpu()[0].startswith("x86_64"), reason="the host is not x86-64"
)


def _missing(cpu: str) -> list[str]:
    """The features ``cpu``'s code may use that this host lacks."""
    return sorted(LEVELS[cpu][2] - enabled_features(host_cpu()[2]))


def _runnable(cpu: str) -> polyonnx.Options:
    missing = _missing(cpu)
    if missing:
        pytest.skip(f"this host cannot run {cpu} code: it lacks {', '.join(missing)}")
    return polyonnx.Options(cpu=cpu, num_threads=2)


@pytest.mark.parametrize("cpu", LEVELS)
def test_the_target_sizes_vectors_registers_and_tiles(cpu: str) -> None:
    bits, registers, _ = LEVELS[cpu]
    options = polyonnx.Options(cpu=cpu)
    assert (vector_bits(options), vector_registers(options)) == (bits, registers)
    config = codegen_config(options)
    assert (config.vector_bits, config.vector_registers) == (bits, registers)
    tiling = Tiling.for_vector_bits(bits, registers=registers)
    # Two vectors wide; 12 of 16 or 16 of 32 registers hold accumulators.
    assert tiling.vector == 2 * bits // 32
    assert tiling.unroll * 2 == (12 if registers == 16 else 16)


@pytest.mark.parametrize("cpu", LEVELS)
def test_every_level_compiles_to_allowed_calls(cpu: str) -> None:
    options = polyonnx.Options(cpu=cpu, num_threads=2, cache=False)
    for model in (mnist_model(), small_cnn()):
        obj = polyonnx.emit(model, "obj", options)
        assert isinstance(obj, bytes)
        called = undefined_symbols(obj)
        assert called is not None and called <= MODEL_ALLOWED, sorted(
            (called or set()) - MODEL_ALLOWED
        )


@pytest.mark.parametrize("cpu", LEVELS)
def test_models_match_onnxruntime(cpu: str) -> None:
    options = _runnable(cpu)
    rng = np.random.default_rng(0)
    for model, shape in ((mnist_model(), (1, 1, 28, 28)), (small_cnn(), (1, 3, 32, 32))):
        feeds = {model.graph.input[0].name: rng.standard_normal(shape).astype(np.float32)}
        got = polyonnx.InferenceSession(model, options=options).run(None, feeds)
        assert_relative_error(got, onnxruntime_outputs(model, feeds), 1e-4)


@pytest.mark.parametrize("cpu", LEVELS)
def test_node_cases_pass(cpu: str) -> None:
    options = _runnable(cpu)
    failures = {}
    for name in LEVEL_CASES:
        case = suite.all_cases()[name]
        model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
        rep = backend.prepare(model, "CPU", options=options)
        for inputs, expected in suite.data_sets(case, model):
            try:
                suite.assert_similar_outputs(expected, list(rep.run(inputs)), case.rtol, case.atol)
            except AssertionError as e:
                failures[name] = str(e).strip().splitlines()[0][:300]
    assert not failures, f"{len(failures)} of {len(LEVEL_CASES)} failed for {cpu}: {failures}"
