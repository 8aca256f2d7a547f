"""Reductions, ArgMax/ArgMin, Hardmax and CumSum vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.shapes import REDUCTIONS
from polyonnx.krnl.lower.registry import LowerContext, lower_node
from tests.krnl.harness import check_op, rand

REDUCE = list(REDUCTIONS)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op: str, keepdims: int) -> None:
    x = np.abs(rand(2, 3, 4)) + 0.1
    check_op(
        op,
        [("x", x), ("axes", np.array([0, -1], np.int64))],
        {"keepdims": keepdims},
        opset=18,
        constants=("axes",),
    )


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceLogSumExp"])
def test_reduce_axes_attribute(op: str) -> None:
    check_op(op, [("x", rand(3, 4))], {"axes": [1], "keepdims": 0}, opset=13)


def test_reduce_all_axes_by_default() -> None:
    check_op("ReduceSum", [("x", rand(2, 3))], opset=13)


def test_reduce_noop_with_empty_axes() -> None:
    check_op("ReduceSum", [("x", rand(2, 3))], {"noop_with_empty_axes": 1}, opset=13)


def test_reduce_int() -> None:
    x = np.array([[1, -2, 3], [4, 5, -6]], np.int32)
    check_op(
        "ReduceSum", [("x", x), ("axes", np.array([1], np.int64))], opset=18, constants=("axes",)
    )
    check_op("ReduceMax", [("x", x)], {"keepdims": 0}, opset=18)


def test_reduce_runtime_axes_is_unsupported() -> None:
    values = {
        "x": Value("x", "float32", (2, 3)),
        "axes": Value("axes", "int64", (1,)),
        "y": Value("y", "float32", (2, 1)),
    }
    node = Node("sum0", "ReduceSum", ("x", "axes"), ("y",))
    graph = Graph("g", (values["x"], values["axes"]), (values["y"],), (node,), values, {}, 13)
    with pytest.raises(UnsupportedOpError, match="sum0.*axes input 'axes' is computed at run"):
        lower_node(node, LowerContext(graph))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(
    "attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1, "select_last_index": 1}]
)
def test_arg(op: str, attrs: dict) -> None:
    x = np.array([[1, 3, 3, 0], [2, 2, 1, 5], [0, 0, 0, 0]], np.float32)
    check_op(op, [("x", x)], attrs, opset=13)


@pytest.mark.parametrize("axis", [0, -1])
def test_hardmax(axis: int) -> None:
    check_op("Hardmax", [("x", rand(3, 4))], {"axis": axis}, opset=13)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum(exclusive: int, reverse: int, axis: int) -> None:
    check_op(
        "CumSum",
        [("x", rand(3, 4)), ("axis", np.array(axis, np.int32))],
        {"exclusive": exclusive, "reverse": reverse},
        constants=("axis",),
    )
