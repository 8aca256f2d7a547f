"""Transpose, Concat, Pad and ConstantOfShape vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from polyonnx.errors import UnsupportedOpError
from tests.krnl.harness import check, check_op, graph_from_model, make_model, node_kernel, rand


@pytest.mark.parametrize("perm", [None, (0, 2, 1), (2, 0, 1), (1, 0, 2)], ids=str)
def test_transpose(perm: tuple[int, ...] | None) -> None:
    check_op("Transpose", [("x", rand(2, 3, 4))], {} if perm is None else {"perm": perm})


def test_transpose_int_4d() -> None:
    check_op(
        "Transpose",
        [("x", np.arange(24, dtype=np.int64).reshape(1, 2, 3, 4))],
        {"perm": [0, 2, 3, 1]},
    )


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_concat(axis: int) -> None:
    shapes = [[2, 3, 2], [2, 3, 2], [2, 3, 2]]
    for k, s in enumerate(shapes):
        s[axis] = k + 1
    check_op("Concat", [(f"x{k}", rand(*s, seed=k)) for k, s in enumerate(shapes)], {"axis": axis})


def test_concat_with_constant_and_empty() -> None:
    check_op(
        "Concat",
        [("a", rand(2, 3)), ("b", rand(2, 0, seed=1)), ("c", rand(2, 2, seed=2))],
        {"axis": 1},
        constants=("c",),
    )


PADS = [[0, 1, 1, 0, 2, 1], [1, 0, 0, 1, 0, 0], [0, 2, 2, 0, 2, 2], [0, -1, 1, 0, 1, -1]]


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads", PADS, ids=str)
def test_pad(mode: str, pads: list[int]) -> None:
    check_op(
        "Pad",
        [("x", rand(2, 3, 4)), ("pads", np.array(pads, np.int64))],
        {"mode": mode},
        opset=19,
        constants=("pads",),
    )


def test_pad_constant_value_input() -> None:
    check_op(
        "Pad",
        [
            ("x", rand(1, 2, 3)),
            ("pads", np.array([0, 0, 1, 0, 1, 2], np.int64)),
            ("value", np.array(2.5, np.float32)),
        ],
        constants=("pads",),
    )


def test_pad_axes() -> None:
    check_op(
        "Pad",
        [
            ("x", rand(2, 3)),
            ("pads", np.array([1, 2], np.int64)),
            ("value", np.array(-1.0, np.float32)),
            ("axes", np.array([-1], np.int64)),
        ],
        opset=18,
        constants=("pads", "axes"),
    )


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_opset2(mode: str) -> None:
    check_op(
        "Pad", [("x", rand(3, 4))], {"pads": [1, 2, 0, 1], "mode": mode, "value": 0.5}, opset=7
    )


def test_pad_runtime_pads_unsupported() -> None:
    model = make_model("Pad", [("x", rand(3)), ("pads", np.array([1, 1], np.int64))])
    graph = graph_from_model(model)
    with pytest.raises(UnsupportedOpError, match="pads"):
        node_kernel(graph, graph.nodes[0])


@pytest.mark.parametrize(
    "value", [None, np.array([1.5], np.float32), np.array([7], np.int64), np.array([True])], ids=str
)
def test_constant_of_shape(value: np.ndarray | None) -> None:
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    model = make_model(
        "ConstantOfShape",
        [("shape", np.array([2, 3], np.int64))],
        attrs,
        constants={"shape": np.array([2, 3], np.int64)},
    )
    check(model, {})
