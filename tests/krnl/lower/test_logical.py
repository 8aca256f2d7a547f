"""Comparisons, logical and bitwise ops, BitShift, Where and Cast vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.krnl.lower.registry import LowerContext, lower_node
from tests.krnl.harness import check_op, rand


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint32"])
def test_comparison(op: str, dtype: str) -> None:
    a = np.array([[1, 5, 3], [4, 2, 6]], dtype)
    b = np.array([3, 5, 1], dtype)
    check_op(op, [("a", a), ("b", b)], opset=16)


def test_equal_bool() -> None:
    check_op(
        "Equal",
        [("a", np.array([True, False, True])), ("b", np.array([True, True, False]))],
        opset=13,
    )


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op: str) -> None:
    a = rand(2, 3) > 0
    b = rand(3, seed=1) > 0
    check_op(op, [("a", a), ("b", b)])


def test_not() -> None:
    check_op("Not", [("x", rand(2, 3) > 0)])


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op: str) -> None:
    a = np.array([[12, -7, 255], [1, 0, -1]], np.int32)
    check_op(op, [("a", a), ("b", np.array([10, 3, 17], np.int32))], opset=18)


def test_bitwise_not() -> None:
    check_op("BitwiseNot", [("x", np.array([0, 1, 200, 255], np.uint8))], opset=18)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(direction: str) -> None:
    x = np.array([16, 4, 1, 255], np.uint8)
    check_op(
        "BitShift", [("x", x), ("n", np.array([1, 2, 3, 1], np.uint8))], {"direction": direction}
    )


def test_where_broadcast() -> None:
    check_op("Where", [("c", rand(2, 1, 3) > 0), ("x", rand(4, 3, seed=1)), ("z", rand(3, seed=2))])


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("float32", "int32"),
        ("float32", "float16"),
        ("int64", "float64"),
        ("float32", "bool"),
        ("bool", "float32"),
        ("uint8", "int8"),
        ("int32", "uint64"),
    ],
)
def test_cast(src: str, dst: str) -> None:
    x = (
        np.array([[0.0, 1.5, -2.7], [3.2, 100.0, 0.4]])
        if src.startswith("float")
        else np.array([[0, 1, 2], [3, 100, 4]])
    )
    x = (x > 1) if src == "bool" else x.astype(src)
    if src.startswith("float") and dst.startswith("uint"):
        x = np.abs(x)
    from onnx import helper

    check_op("Cast", [("x", x)], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))})


def test_cast_like() -> None:
    check_op("CastLike", [("x", rand(2, 3)), ("like", np.zeros(1, np.float64))], opset=15)


@pytest.mark.parametrize(
    ("src", "dtype", "why"),
    [
        ("float32", "object", "string"),
        # (Encodings are computed from float16 / float32 only: these would round twice.)
        ("float64", "float8_e4m3fn", "round twice"),
        ("int64", "bfloat16", "round twice"),
    ],
)
def test_cast_to_unsupported_type(src: str, dtype: str, why: str) -> None:
    values = {"x": Value("x", src, (3,)), "y": Value("y", dtype, (3,))}
    node = Node("cast0", "Cast", ("x",), ("y",), {"to": 0})
    graph = Graph("g", (values["x"],), (values["y"],), (node,), values, {}, 19)
    with pytest.raises(UnsupportedOpError, match="cast0.*" + why):
        lower_node(node, LowerContext(graph))
