"""Runtime functions LLVM calls: defined by polyonnx, exact, and the only calls besides libm.

On CPUs without AVX512-FP16, LLVM turns a ``double`` -> ``half`` conversion into a call of
``__truncdfhf2`` (and, without F16C, every ``half`` conversion into a call), which JIT code
used to jump to address 0 for: a segfault of the whole process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import polyonnx
from polyonnx.codegen.builtins import BUILTINS
from polyonnx.codegen.elf import undefined_symbols
from polyonnx.codegen.parallel_runtime import ENTRY

T = onnx.TensorProto
_ONNX = {
    "float16": T.FLOAT16,
    "float32": T.FLOAT,
    "float64": T.DOUBLE,
    "int8": T.INT8,
    "uint8": T.UINT8,
    "int16": T.INT16,
    "uint16": T.UINT16,
    "int32": T.INT32,
    "uint32": T.UINT32,
    "int64": T.INT64,
    "uint64": T.UINT64,
    "bool": T.BOOL,
}


def _cast_model(src: str, dst: str, n: int) -> onnx.ModelProto:
    return oh.make_model(
        oh.make_graph(
            [oh.make_node("Cast", ["x"], ["y"], to=_ONNX[dst])],
            f"cast_{src}_{dst}",
            [oh.make_tensor_value_info("x", _ONNX[src], [n])],
            [oh.make_tensor_value_info("y", _ONNX[dst], [n])],
        ),
        opset_imports=[oh.make_opsetid("", 19)],
    )


def _half_edges(dtype: type) -> np.ndarray:
    """Every half, the midpoints between neighbours (ties), a step of the source type either
    side of those, values past the largest half, and the specials."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(dtype))
    mid = (finite[:-1] + finite[1:]) / 2
    around = np.concatenate(
        [mid, np.nextafter(mid, dtype(np.inf)), np.nextafter(mid, dtype(-np.inf))]
    )
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            65504,
            65519.99,
            65520,
            1e6,
            -1e30,
            5.96e-8,
            2.98e-8,
            2.99e-8,
            1e-10,
            np.finfo(dtype).tiny,
            np.finfo(dtype).max,
        ],
        dtype=dtype,
    )
    rng = np.random.default_rng(0)
    spread = (rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000)).astype(dtype)
    return np.concatenate([finite, around, specials, spread])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(
        got[~nan].view(
            np.uint16 if got.itemsize == 2 else np.uint32 if got.itemsize == 4 else np.uint64
        ),
        want[~nan].view(
            np.uint16 if want.itemsize == 2 else np.uint32 if want.itemsize == 4 else np.uint64
        ),
    )


# x86-64 has no F16C: every half conversion is one of polyonnx's functions.
CPUS = ("x86-64", None)


@pytest.mark.parametrize("cpu", CPUS, ids=lambda c: c or "host")
@pytest.mark.parametrize("src", ["float64", "float32"])
def test_narrowing_to_half_rounds_like_numpy(src: str, cpu: str | None) -> None:
    x = _half_edges(np.dtype(src).type)
    sess = polyonnx.InferenceSession(
        _cast_model(src, "float16", x.size),
        options=polyonnx.Options(cpu=cpu, num_threads=1, cache=False),
    )
    with np.errstate(over="ignore"):
        _same(sess.run(None, {"x": x})[0], x.astype(np.float16))


@pytest.mark.parametrize("cpu", CPUS, ids=lambda c: c or "host")
@pytest.mark.parametrize("dst", ["float64", "float32"])
def test_every_half_widens_exactly(dst: str, cpu: str | None) -> None:
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    sess = polyonnx.InferenceSession(
        _cast_model("float16", dst, x.size),
        options=polyonnx.Options(cpu=cpu, num_threads=1, cache=False),
    )
    _same(sess.run(None, {"x": x})[0], x.astype(dst))


def test_double_to_half_alone_in_a_fresh_process() -> None:
    """The node suite's test_cast_DOUBLE_to_FLOAT16, run alone, segfaulted on CPUs without
    AVX512-FP16: no library loaded before it defined ``__truncdfhf2``."""
    code = textwrap.dedent("""
        import numpy as np, onnx, onnx.helper as oh, polyonnx
        T = onnx.TensorProto
        m = oh.make_model(oh.make_graph([oh.make_node("Cast", ["x"], ["y"], to=T.FLOAT16)],
            "g", [oh.make_tensor_value_info("x", T.DOUBLE, [4])],
            [oh.make_tensor_value_info("y", T.FLOAT16, [4])]),
            opset_imports=[oh.make_opsetid("", 19)])
        s = polyonnx.InferenceSession(m, options=polyonnx.Options(cache=False))
        x = np.array([0.1, -2.5, 65504.0, 1e-7])
        assert (s.run(None, {"x": x})[0] == x.astype(np.float16)).all()
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def _dtype_paths_model() -> onnx.ModelProto:
    """Every Cast between the supported types, the float math ops at each float type
    (bfloat16's in float32, its conversions by bit arithmetic), bfloat16's softmax, and
    integer division and powers: what LLVM may lower to runtime calls."""
    nodes, inputs, outputs = [], [], []
    floats = ("float16", "float32", "float64", "bfloat16")
    types = {**_ONNX, "bfloat16": T.BFLOAT16}
    inputs.append(oh.make_tensor_value_info("x_bfloat16", T.BFLOAT16, [19]))
    nodes.append(oh.make_node("Softmax", ["x_bfloat16"], ["Softmax_bfloat16"]))
    outputs.append(oh.make_tensor_value_info("Softmax_bfloat16", T.BFLOAT16, [19]))
    for src in _ONNX:
        inputs.append(oh.make_tensor_value_info(f"x_{src}", _ONNX[src], [19]))
        for dst in _ONNX:
            nodes.append(oh.make_node("Cast", [f"x_{src}"], [f"c_{src}_{dst}"], to=_ONNX[dst]))
            outputs.append(oh.make_tensor_value_info(f"c_{src}_{dst}", _ONNX[dst], [19]))
    unary = (
        "Exp",
        "Log",
        "Sqrt",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Tanh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Erf",
        "Sigmoid",
        "Floor",
        "Ceil",
        "Round",
        "Abs",
        "Neg",
        "Reciprocal",
        "Softplus",
    )
    for t in floats:
        for op in unary:
            nodes.append(oh.make_node(op, [f"x_{t}"], [f"{op}_{t}"]))
            outputs.append(oh.make_tensor_value_info(f"{op}_{t}", types[t], [19]))
        for op, attrs in (("Pow", {}), ("Mod", {"fmod": 1}), ("Div", {}), ("Max", {})):
            nodes.append(oh.make_node(op, [f"x_{t}", f"x_{t}"], [f"{op}_{t}"], **attrs))
            outputs.append(oh.make_tensor_value_info(f"{op}_{t}", types[t], [19]))
    for t in ("int32", "int64", "uint8"):
        for op in ("Div", "Mod", "Pow") if t != "uint8" else ("Div", "Mod"):
            nodes.append(oh.make_node(op, [f"x_{t}", f"x_{t}"], [f"{op}_{t}"]))
            outputs.append(oh.make_tensor_value_info(f"{op}_{t}", _ONNX[t], [19]))
    return oh.make_model(
        oh.make_graph(nodes, "dtype_paths", inputs, outputs),
        opset_imports=[oh.make_opsetid("", 19)],
    )


#: What generated code may call: libm, libc's memory functions, polyonnx's own functions.
LIBM = {
    f + suffix
    for f in (
        "exp",
        "log",
        "sqrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "erf",
        "floor",
        "ceil",
        "roundeven",
        "fmod",
        "pow",
        "fabs",
        "fmin",
        "fmax",
        "exp2",
        "log2",
        "log10",
        "round",
        "trunc",
    )
    for suffix in ("", "f")
}
INLINE_FLOAT32 = {"expf", "logf", "tanhf", "erff"}
"""Computed inline in float32 (and float16): polyonnx.codegen.vecmath, never called."""
WORKSPACE = {"aligned_alloc", "free"}
"""``polyonnx_run``'s workspace, for a model with intermediate buffers (the softmax's)."""
ALLOWED = (
    (LIBM - INLINE_FLOAT32) | {"memset", "memcpy", "memmove", ENTRY} | WORKSPACE | set(BUILTINS)
)


@pytest.mark.parametrize(
    "cpu", ["x86-64", "x86-64-v2", "x86-64-v3", "skylake-avx512", "znver4", "sapphirerapids"]
)
def test_object_code_calls_only_known_functions(cpu: str) -> None:
    options = polyonnx.Options(cpu=cpu, num_threads=2, cache=False)
    obj = polyonnx.emit(_dtype_paths_model(), "obj", options)
    assert isinstance(obj, bytes)
    called = undefined_symbols(obj)
    assert called is not None
    assert called <= ALLOWED, sorted(called - ALLOWED)
    # The model's float32 math does reach the object code (sinh is still libm's).
    assert "sinhf" in called


#: Symbols a target's linker defines: the TOC base of the POWER ELF v2 ABI.
LINKER_DEFINED = {"powerpc64le": {".TOC."}}


@pytest.mark.parametrize(
    "target, features",
    [
        ("aarch64-linux-gnu", None),
        ("aarch64-linux-gnu", "+sve"),
        ("powerpc64le-linux-gnu", None),
        ("riscv64-linux-gnu", None),
    ],
)
def test_cross_object_code_calls_only_known_functions(target: str, features: str | None) -> None:
    """(riscv64 included: without its F and D features every float operation would call a
    soft-float routine such as ``__addsf3``.)"""
    cpu = "pwr9" if target.startswith("powerpc") else None
    options = polyonnx.Options(
        target=target, cpu=cpu, features=features, num_threads=2, cache=False
    )
    obj = polyonnx.emit(_dtype_paths_model(), "obj", options)
    called = undefined_symbols(obj)
    allowed = ALLOWED | LINKER_DEFINED.get(target.split("-")[0], set())
    assert called is not None and called <= allowed, sorted((called or set()) - allowed)


def test_shared_library_defines_what_it_calls(tmp_path) -> None:
    """A library converting double to half links polyonnx's own ``__truncdfhf2`` (hidden):
    it loads and runs, and exports nothing but the C API."""
    from polyonnx.codegen.aot import write_library

    x = _half_edges(np.float64)[:5000]
    options = polyonnx.Options(num_threads=1, cache=False)
    path = write_library(
        polyonnx.compile(_cast_model("float64", "float16", x.size), options), tmp_path / "cast.so"
    )
    with np.errstate(over="ignore"):
        _same(polyonnx.InferenceSession(str(path)).run(None, {"x": x})[0], x.astype(np.float16))
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True
    ).stdout
    assert "__truncdfhf2" not in exported
