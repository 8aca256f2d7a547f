"""Float32 exp, log, tanh, sigmoid and erf computed inline (codegen/vecmath.py): errors in ulp
against float64 references over dense sweeps, through compiled models on vectors of 128, 256
and the host's bits (SSE2 without FMA, AVX2 and the host with it) and on scalars; special
values; every half; the polynomials are the fits."""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import polyonnx
from polyonnx.codegen import vecmath
from polyonnx.codegen.elf import undefined_symbols
from polyonnx.codegen.target import vector_bits
from tests.codegen.vecmath_fit import FITS, fit_float32

_erf = np.vectorize(math.erf, otypes=[float])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


REFERENCE = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf}
"""float64 references (correctly rounded to float32 but for a rare tie)."""

MAX_ULP = {"exp": 1.5, "log": 1.0, "tanh": 3.0, "sigmoid": 2.5, "erf": 1.5}
"""The bound per function (measured maxima over 2**24-point sweeps: docs/performance.md)."""

RANGE = {
    "exp": (-105.0, 90.0),
    "log": (0.0, 4.0),
    "tanh": (-10.0, 10.0),
    "sigmoid": (-105.0, 20.0),
    "erf": (-4.5, 4.5),
}
"""Where each function's values are not yet constant (or its reduction is short)."""

THRESHOLDS = {
    "exp": (vecmath.EXP_MIN, vecmath.EXP_MAX, 88.72284, -87.33655, 0.0, 0.34657),
    "log": (1.0, 2.0**-126, math.sqrt(0.5), math.sqrt(2.0)),
    "tanh": (vecmath.TANH_SMALL, -vecmath.TANH_SMALL, 0.0, 9.0),
    "sigmoid": (0.0, -87.33655, -103.9),
    "erf": (vecmath.ERF_SMALL, -vecmath.ERF_SMALL, vecmath.ERF_ONE, 3.92, 0.0),
}
"""Points where the method changes: every float near them is tried."""

CPUS = (None, "x86-64", "x86-64-v3")
"""The host (AVX-512 or AVX2, FMA), SSE2 (128 bits, no FMA), AVX2 with FMA (256 bits)."""


def _one_op_model(
    op: str, shape: list[int], dtype: int = onnx.TensorProto.FLOAT
) -> onnx.ModelProto:
    return oh.make_model(
        oh.make_graph(
            [oh.make_node(op, ["x"], ["y"])],
            op.lower(),
            [oh.make_tensor_value_info("x", dtype, shape)],
            [oh.make_tensor_value_info("y", dtype, shape)],
        ),
        opset_imports=[oh.make_opsetid("", 19)],
    )


ONNX_OP = {"exp": "Exp", "log": "Log", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf"}


def _run(op: str, x: np.ndarray, cpu: str | None, vector: bool, inspect: bool = True) -> np.ndarray:
    """``op`` of ``x`` by a compiled one-op model (object code for ``cpu``). Vector code: a
    vector loop over ``x``; scalar code: rows of 3 (shorter than any vector) at opt level 1
    (no LLVM vectoriser). With ``inspect``, first check that the code calls no function and
    has the vectors it should."""
    shape = [x.size] if vector else [x.size // 3, 3]
    model = _one_op_model(ONNX_OP[op], shape)
    options = polyonnx.Options(cpu=cpu, opt_level=3 if vector else 1, num_threads=1, cache=False)
    if inspect:
        obj = polyonnx.emit(model, "obj", options)
        assert isinstance(obj, bytes)
        assert not undefined_symbols(obj)
        text = polyonnx.emit(model, "llvm", options)
        assert isinstance(text, str)
        lanes = {int(n) for n in re.findall(r"<(\d+) x float>", text)}
        assert max(lanes, default=1) == (vector_bits(options) // 32 if vector else 1), lanes
    session = polyonnx.InferenceSession(model, options=options)
    return session.run(None, {"x": x.reshape(shape)})[0].reshape(-1)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ulps of ``want`` (float64); 0 where both are NaN or both the
    same infinity, inf where only one is NaN or infinite."""
    got = got.astype(np.float64)
    with np.errstate(over="ignore"):
        rounded = want.astype(np.float32).astype(np.float64)
    _, e = np.frexp(np.abs(want))
    ulp = np.maximum(np.ldexp(1.0, e - 24), 2.0**-149)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want) / ulp
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    inf_want = np.isinf(rounded) & ~nan_want
    err = np.where(inf_want, np.where(got == rounded, 0.0, np.inf), err)
    err = np.where(np.isinf(got) & ~inf_want, np.inf, err)
    return np.where(nan_got | nan_want, np.where(nan_got == nan_want, 0.0, np.inf), err)


def sweep(op: str, n: int, seed: int = 0) -> np.ndarray:
    """An even grid over the function's range, random bit patterns (every finite float
    equally likely), small magnitudes spread over many binades, and the floats next to
    each threshold of the method."""
    rng = np.random.default_rng(seed)
    lo, hi = RANGE[op]
    grid = np.linspace(lo, hi, n, dtype=np.float32)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    spread = (rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-40, 1.5, n)).astype(np.float32)
    if op == "log":
        spread = np.abs(spread)
    near = [
        np.float32(t) + np.arange(-512, 512, dtype=np.float32) * np.spacing(np.float32(t))
        for t in THRESHOLDS[op]
    ]
    x = np.concatenate([grid, bits, spread, *near])
    return x[np.isfinite(x)]


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("cpu", CPUS, ids=lambda c: c or "host")
@pytest.mark.parametrize("op", list(vecmath.FUNCTIONS))
def test_within_the_ulp_bound(op: str, cpu: str | None, vector: bool) -> None:
    x = sweep(op, 1 << 16 if vector else 1 << 13)
    x = x[: x.size // 3 * 3]
    y = _run(op, x, cpu, vector)
    with np.errstate(all="ignore"):
        err = ulps(y, REFERENCE[op](x.astype(np.float64)))
    worst = int(np.argmax(err))
    assert err[worst] <= MAX_ULP[op], (x[worst], y[worst])


NAN, INF = math.nan, math.inf
SPECIAL = {
    "exp": [
        (NAN, NAN),
        (INF, INF),
        (-INF, 0.0),
        (0.0, 1.0),
        (-0.0, 1.0),
        (88.72284, INF),
        (89.0, INF),
        (1e30, INF),
        (-104.0, 0.0),
        (-1e30, 0.0),
        (-103.27893, 2.0**-149),
    ],
    "log": [
        (NAN, NAN),
        (-1.0, NAN),
        (-INF, NAN),
        (-1e-45, NAN),
        (0.0, -INF),
        (-0.0, -INF),
        (INF, INF),
        (1.0, 0.0),
        (2.0**-149, -149 * math.log(2)),
        (2.0**-130, -130 * math.log(2)),
        (3.4028235e38, math.log(3.4028235e38)),
    ],
    "tanh": [
        (NAN, NAN),
        (INF, 1.0),
        (-INF, -1.0),
        (0.0, 0.0),
        (-0.0, -0.0),
        (2.0**-140, 2.0**-140),
        (-(2.0**-100), -(2.0**-100)),
        (20.0, 1.0),
        (-50.0, -1.0),
    ],
    "sigmoid": [
        (NAN, NAN),
        (INF, 1.0),
        (-INF, 0.0),
        (0.0, 0.5),
        (-0.0, 0.5),
        (100.0, 1.0),
        (-100.0, math.exp(-100.0)),
        (-88.5, math.exp(-88.5)),
        (-104.0, 0.0),
    ],
    "erf": [
        (NAN, NAN),
        (INF, 1.0),
        (-INF, -1.0),
        (0.0, 0.0),
        (-0.0, -0.0),
        (2.0**-140, 2 / math.sqrt(math.pi) * 2.0**-140),
        (-(2.0**-100), -2 / math.sqrt(math.pi) * 2.0**-100),
        (4.0, 1.0),
        (-10.0, -1.0),
        (1e30, 1.0),
    ],
}
"""(x, op(x)) for NaN, infinities, signed zeros, overflow, underflow and denormals."""


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("cpu", CPUS, ids=lambda c: c or "host")
@pytest.mark.parametrize("op", list(SPECIAL))
def test_special_values(op: str, cpu: str | None, vector: bool) -> None:
    x = np.array([v for v, _ in SPECIAL[op]], np.float32)
    want = np.array([v for _, v in SPECIAL[op]], np.float64)
    # Every value in every lane of a vector (and at each position of a row of 3).
    n = len(x)
    y = _run(op, np.tile(x, 48), cpu, vector, inspect=False).reshape(48, n)
    for row in y:
        err = ulps(row, want)
        assert (err <= MAX_ULP[op]).all(), list(zip(x, row, want, strict=True))
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(row[zero]), np.signbit(want[zero]))


@pytest.mark.parametrize("op", ["Exp", "Log", "Tanh", "Sigmoid", "Erf"])
def test_every_half_through_float32(op: str) -> None:
    """float16 computes through the float32 functions: every half comes out within one
    half-precision ulp of the float64 value (correctly rounded but for double rounding)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    sess = polyonnx.InferenceSession(
        _one_op_model(op, [x.size], onnx.TensorProto.FLOAT16),
        options=polyonnx.Options(num_threads=1, cache=False),
    )
    got = sess.run(None, {"x": x})[0]
    with np.errstate(all="ignore"):
        want = REFERENCE[op.lower()](x.astype(np.float64))
        rounded = want.astype(np.float16)
    nan = np.isnan(rounded)
    np.testing.assert_array_equal(np.isnan(got), nan)
    step = np.abs(
        got[~nan].view(np.uint16).astype(np.int32) - rounded[~nan].view(np.uint16).astype(np.int32)
    )
    same_sign = np.signbit(got[~nan]) == np.signbit(rounded[~nan])
    assert (step[same_sign] <= 1).all()
    assert (got[~nan][~same_sign] == 0).all() and (rounded[~nan][~same_sign] == 0).all()


@pytest.mark.parametrize("fit", FITS, ids=lambda f: f.name)
def test_polynomials_are_the_minimax_fits(fit) -> None:
    """vecmath's coefficients are as good as a fresh fit (python -m tests.codegen.vecmath_fit
    prints one): none mistyped, none left over from another interval or degree."""
    fresh = fit.error(fit_float32(fit))
    assert fit.error(fit.stored) <= fresh * 1.02 + 1e-3
