"""Unary, Clip and broadcasting binary / variadic ops vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.krnl.harness import check_op, rand

UNARY = {
    "Relu": {},
    "LeakyRelu": {"alpha": 0.2},
    "Sigmoid": {},
    "Tanh": {},
    "Exp": {},
    "Neg": {},
    "Abs": {},
    "Reciprocal": {},
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op: str) -> None:
    check_op(op, [("x", rand(2, 3, 4))], UNARY[op])


@pytest.mark.parametrize("op", ["Log", "Sqrt"])
def test_unary_positive(op: str) -> None:
    check_op(op, [("x", np.abs(rand(3, 4)) + 0.1)])


def test_leaky_relu_default_alpha() -> None:
    check_op("LeakyRelu", [("x", rand(5))])


@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs"])
def test_unary_int(op: str) -> None:
    check_op(op, [("x", np.arange(-6, 6, dtype=np.int32).reshape(3, 4))])


@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (None, 0.3), (-0.2, None), (None, None)])
def test_clip_inputs(bounds: tuple[float | None, float | None]) -> None:
    lo, hi = bounds
    inputs = [("x", rand(2, 5))]
    inputs.append(("lo", np.array(lo, np.float32)) if lo is not None else ("", None))
    if hi is not None:
        inputs.append(("hi", np.array(hi, np.float32)))
    check_op("Clip", inputs)


def test_clip_bounds_as_constants() -> None:
    check_op(
        "Clip",
        [("x", rand(2, 5)), ("lo", np.array(-0.1, np.float32)), ("hi", np.array(0.4, np.float32))],
        constants=("lo", "hi"),
    )


@pytest.mark.parametrize("attrs", [{"min": -0.5, "max": 0.25}, {"max": 0.1}, {}])
def test_clip_attrs_opset6(attrs: dict) -> None:
    check_op("Clip", [("x", rand(3, 4))], attrs, opset=6)


def test_clip_int() -> None:
    check_op(
        "Clip",
        [("x", np.arange(-5, 5, dtype=np.int64)), ("lo", np.array(-2)), ("hi", np.array(3))],
        opset=13,
    )


SHAPES = [
    ((2, 3, 4), (2, 3, 4)),
    ((2, 3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((1,), (2, 3)),
    ((), (2, 2)),
    ((3, 1, 1), (1, 2, 1)),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_broadcast(op: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = rand(*shapes[0]), rand(*shapes[1], seed=1)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
    check_op(op, [("a", a), ("b", b)])


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_int(op: str) -> None:
    a = np.array([[7, -7, 5], [-9, 8, 1]], np.int32)
    b = np.array([2, 3, -4], np.int32)
    check_op(op, [("a", a), ("b", b)])


def test_binary_constant_operand() -> None:
    check_op("Add", [("a", rand(1, 3, 2, 2)), ("b", rand(3, 1, 1, seed=1))], constants=("b",))


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
@pytest.mark.parametrize("n", [1, 3])
def test_variadic(op: str, n: int) -> None:
    shapes = [(2, 3), (3,), (2, 1)][:n]
    check_op(op, [(f"x{k}", rand(*s, seed=k)) for k, s in enumerate(shapes)])


def test_pow() -> None:
    check_op("Pow", [("a", np.abs(rand(2, 3)) + 0.5), ("b", rand(3, seed=1))])


def test_pow_int_exponent() -> None:
    check_op("Pow", [("a", rand(2, 3)), ("b", np.array([2, 3, 0], np.int64))])


@pytest.mark.parametrize("exponent", [-2, -1, 0, 1, 2, 3, 7, 16, 17, 2.5])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pow_by_a_constant(exponent: float, dtype: str) -> None:
    # integers in POW_BY_PRODUCTS are products (17 and 2.5 stay pow); zeros, infinities and
    # NaN included (signs of zero and infinity as pow gives them)
    x = np.concatenate([rand(10), [-0.0, 0.0, np.inf, -np.inf, np.nan, 1e-20]])
    check_op(
        "Pow",
        [("a", x.astype(dtype)), ("b", np.array(exponent, dtype))],
        constants=("b",),
        rtol=1e-3 if dtype == "float16" else 1e-5,
    )


def test_pow_by_a_small_integer_calls_no_pow() -> None:
    import onnx.helper as oh
    from onnx import TensorProto, numpy_helper

    import polyonnx

    node = oh.make_node("Pow", ["x", "e"], ["y"])
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [8])
    y = oh.make_tensor_value_info("y", TensorProto.FLOAT, [8])
    for exponent, calls in ((3.0, False), (0.5, True)):
        e = numpy_helper.from_array(np.array(exponent, np.float32), "e")
        model = oh.make_model(oh.make_graph([node], "g", [x], [y], [e]))
        assert ("pow(" in str(polyonnx.emit(model, "krnl"))) == calls


@pytest.mark.parametrize("op", ["Add", "Mul", "Max"])
def test_binary_float64(op: str) -> None:
    check_op(op, [("a", rand(2, 3, dtype="float64")), ("b", rand(3, seed=1, dtype="float64"))])


# --------------------------------------------------------------------------- math, activations

MATH = [
    "Sin",
    "Cos",
    "Tan",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Erf",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Softplus",
    "Softsign",
    "Mish",
    "HardSwish",
]


@pytest.mark.parametrize("op", MATH)
def test_math(op: str) -> None:
    check_op(op, [("x", rand(2, 5) * 2)], opset=18)


@pytest.mark.parametrize("op", ["Asin", "Acos", "Atanh"])
def test_math_unit_interval(op: str) -> None:
    check_op(op, [("x", np.tanh(rand(3, 4)))])


def test_acosh() -> None:
    check_op("Acosh", [("x", np.abs(rand(6)) + 1.0)])


ACTIVATIONS = {
    "Elu": {"alpha": 0.5},
    "Selu": {},
    "Celu": {"alpha": 2.0},
    "Gelu": {},
    "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
    "ThresholdedRelu": {"alpha": 0.2},
    "Shrink": {"lambd": 0.6, "bias": 0.1},
}


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
def test_activation(op: str) -> None:
    check_op(op, [("x", rand(2, 3, 4))], ACTIVATIONS[op], opset=20)


def test_gelu_tanh() -> None:
    check_op("Gelu", [("x", rand(7))], {"approximate": "tanh"}, opset=20)


def test_float16_math_is_computed_in_float32() -> None:
    check_op("Sigmoid", [("x", rand(2, 4, dtype="float16"))], rtol=1e-3, atol=1e-3)


def test_isnan_isinf() -> None:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    check_op("IsNaN", [("x", x)])
    check_op("IsInf", [("x", x)])
    check_op("IsInf", [("x", x)], {"detect_negative": 0})
    check_op("IsInf", [("x", x)], {"detect_positive": 0})


def test_prelu_broadcast_slope() -> None:
    check_op("PRelu", [("x", rand(2, 3, 4)), ("s", rand(3, 1, seed=1))])


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float64"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod(dtype: str, fmod: int) -> None:
    if dtype == "float64" and not fmod:
        pytest.skip("onnxruntime requires fmod=1 for floats")
    signed = dtype != "uint8"
    a = np.array([7, -7, 5, 9, 0, -3] if signed else [7, 8, 5, 9, 0, 3], dtype)
    b = np.array([3, 3, -2, 4, 5, -2] if signed else [3, 3, 2, 4, 5, 2], dtype)
    check_op("Mod", [("a", a), ("b", b)], {"fmod": fmod})


def test_mean() -> None:
    check_op("Mean", [("a", rand(2, 3)), ("b", rand(3, seed=1)), ("c", rand(2, 1, seed=2))])


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint64"])
def test_binary_more_int_types(dtype: str) -> None:
    a = np.array([[7, 9, 5], [200 % 120, 8, 1]], dtype)
    b = np.array([2, 3, 4], dtype)
    for op in ("Add", "Mul", "Div"):
        check_op(op, [("a", a), ("b", b)], opset=14)


def test_pow_int_base() -> None:
    check_op(
        "Pow",
        [("a", np.array([2, 3, -4], np.int64)), ("b", np.array([3, 2, 1], np.int64))],
        opset=15,
    )
