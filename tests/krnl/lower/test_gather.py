"""Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand
from tests.reliability.models import model, tensor


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis: int) -> None:
    idx = np.array([[0, -1], [2, 1]], np.int64)
    check_op("Gather", [("x", rand(3, 4, 3)), ("i", idx)], {"axis": axis})


def test_gather_scalar_index_int32() -> None:
    check_op("Gather", [("x", rand(5, 2)), ("i", np.array(-2, np.int32))], {"axis": 0})


def test_gather_constant_indices() -> None:
    check_op(
        "Gather",
        [("x", np.arange(12, dtype=np.int64).reshape(3, 4)), ("i", np.array([3, 0, 0], np.int64))],
        {"axis": 1},
        constants=("i",),
    )


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(axis: int) -> None:
    idx = np.array([[0, 1, -1], [1, 0, 2]], np.int64)
    check_op("GatherElements", [("x", rand(3, 3)), ("i", idx)], {"axis": axis})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims: int) -> None:
    x = rand(2, 3, 4)
    if batch_dims == 0:
        idx = np.array([[[0, 1], [1, -1]], [[1, 2], [0, 0]]], np.int64)
    else:
        idx = np.array([[[1], [2]], [[0], [-1]]], np.int64)
    check_op("GatherND", [("x", x), ("i", idx)], {"batch_dims": batch_dims})


def test_gather_nd_full_index() -> None:
    check_op("GatherND", [("x", rand(2, 3)), ("i", np.array([[1, 2], [0, 0]], np.int64))])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements(reduction: str, axis: int) -> None:
    idx = np.array([[1, 0, 2], [0, 2, -1]], np.int64)
    if reduction == "none":
        idx = (
            np.array([[1, 0, 2], [0, 2, 1]], np.int64)
            if axis == 0
            else np.array([[1, 0, 2], [0, 2, -2]], np.int64)
        )
    attrs = {"axis": axis} | ({} if reduction == "none" else {"reduction": reduction})
    check_op(
        "ScatterElements",
        [("x", rand(3, 3)), ("i", idx), ("u", rand(2, 3, seed=1))],
        attrs,
        opset=18,
    )


def test_scatter_elements_smaller_updates() -> None:
    check_op(
        "ScatterElements",
        [("x", rand(4, 5)), ("i", np.array([[3], [0]], np.int64)), ("u", rand(2, 1, seed=1))],
        {"axis": 1},
        opset=18,
    )


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction: str) -> None:
    idx = (
        np.array([[0], [2]], np.int64)
        if reduction == "none"
        else np.array([[0], [2], [0]], np.int64)
    )
    u = rand(len(idx), 3, 2, seed=1)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    check_op("ScatterND", [("x", rand(4, 3, 2)), ("i", idx), ("u", u)], attrs, opset=18)


def test_scatter_nd_elements() -> None:
    check_op(
        "ScatterND",
        [("x", rand(3, 4)), ("i", np.array([[1, 2], [-1, 0]], np.int64)), ("u", rand(2, seed=2))],
    )


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis: int) -> None:
    idx = np.array([[1, -1, 7], [0, 2, -4]], np.int64)
    check_op(
        "OneHot",
        [("i", idx), ("d", np.array(3, np.int64)), ("v", np.array([0.5, 2.0], np.float32))],
        {"axis": axis},
        constants=("d",),
    )


def test_one_hot_float_indices() -> None:
    check_op(
        "OneHot",
        [
            ("i", np.array([1.7, 0.2, 2.0], np.float32)),
            ("d", np.array([4.0], np.float32)),
            ("v", np.array([0, 5], np.float32)),
        ],
        constants=("d",),
    )


def test_one_hot_runtime_depth_unsupported() -> None:
    model = make_model(
        "OneHot",
        [
            ("i", np.array([1], np.int64)),
            ("d", np.array(3, np.int64)),
            ("v", np.array([0, 1], np.int64)),
        ],
        constants={"d": np.array(3, np.int64)},
    )
    graph = graph_from_model(model)
    graph = type(graph)(
        graph.name, graph.inputs, graph.outputs, graph.nodes, graph.values, {}, graph.opset
    )
    with pytest.raises(UnsupportedOpError, match="depth"):
        node_kernel(graph, graph.nodes[0])


def test_data_dependent_shapes_lower_to_a_maximal_buffer() -> None:
    # NonZero's extent is data-dependent: see tests/krnl/lower/test_dynamic.py.
    from polyonnx.graph.ir import Graph, Node, Value
    from polyonnx.krnl.lower.registry import LowerContext, lower_node

    x = Value("x", "float32", (4,))
    y = Value("y", "int64", (1, "nz_count"))
    graph = Graph(
        "g", (x,), (y,), (Node("nz", "NonZero", ("x",), ("y",)),), {"x": x, "y": y}, {}, 13
    )
    [dyn] = lower_node(graph.nodes[0], LowerContext(graph)).dynamic
    assert (dyn.value, dyn.shape, dyn.counts) == ("y", (1, 4), ("", "nz__count"))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_writes_each_batch_from_its_index(mode: str):
    m = model(
        [helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode)],
        [tensor("c", [3, 2, 5, 4]), tensor("u", [3, 2, 3, 4]), tensor("w", [3], TensorProto.INT64)],
        [tensor("y", [3, 2, 5, 4])],
        opset=24,
    )
    rng = np.random.default_rng(9)
    feeds = {
        "c": rng.standard_normal((3, 2, 5, 4)).astype(np.float32),
        "u": rng.standard_normal((3, 2, 3, 4)).astype(np.float32),
        "w": np.array([0, 2, 4 if mode == "circular" else 1], np.int64),
    }
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    (ref,) = onnx_reference_outputs(m, feeds)
    np.testing.assert_array_equal(got, ref)
