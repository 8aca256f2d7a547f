"""Lowerings refuse what they cannot do (UnsupportedOpError) and bad attributes (ModelError)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import polyonnx
from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import Graph, Node
from polyonnx.krnl.lower.registry import LowerContext, Lowered, lower_node, supported_ops
from tests.krnl.harness import check_op, graph_from_model, make_model, rand


def one_node(
    op: str,
    inputs: list[tuple[str, np.ndarray]],
    attrs: dict[str, Any] | None = None,
    opset: int = 17,
    constants: tuple[str, ...] = (),
) -> tuple[Graph, Node]:
    model = make_model(op, inputs, attrs, opset, {n: a for n, a in inputs if n in constants})
    graph = graph_from_model(model)
    return graph, graph.nodes[0]


def with_attrs(node: Node, **attrs: Any) -> Node:
    return dataclasses.replace(node, attrs=tuple(sorted({**dict(node.attrs), **attrs}.items())))


def lower(graph: Graph, node: Node) -> Lowered:
    return lower_node(node, LowerContext(graph))


def test_every_requested_op_is_registered() -> None:
    ops = {
        "Conv",
        "BatchNormalization",
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Clip",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Sum",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Max",
        "Min",
        "Gemm",
        "MatMul",
        "Softmax",
        "LogSoftmax",
        "LRN",
        "Transpose",
        "Concat",
        "ConstantOfShape",
        "Pad",
        "Exp",
        "Log",
        "Sqrt",
        "Neg",
        "Abs",
        "Reciprocal",
        "Pow",
    }
    assert ops <= set(supported_ops())
    assert not {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"} & set(
        supported_ops()
    )


def test_unregistered_op() -> None:
    graph, node = one_node("Relu", [("x", rand(3))])
    with pytest.raises(UnsupportedOpError, match="Frobnicate.*relu_0"):
        lower(graph, dataclasses.replace(node, op_type="Frobnicate"))


def test_lower_node_wraps_plain_tuples() -> None:
    graph, node = one_node("Relu", [("x", rand(3))])
    lowered = lower(graph, node)
    assert isinstance(lowered, Lowered) and lowered.temps == () and len(lowered.nests) == 1


@pytest.mark.parametrize(
    "attrs,match",
    [
        ({"strides": (0, 1)}, "'strides' must be positive"),
        ({"dilations": (1, -1)}, "'dilations' must be positive"),
        ({"pads": (1, 1)}, "'pads' must have 4 values"),
        ({"pads": (1, 1, -1, 1)}, "'pads' must be non-negative"),
        ({"auto_pad": "BOGUS"}, "'auto_pad' has unknown value"),
        ({"group": 3}, "'group' = 3 must divide"),
        ({"kernel_shape": (2, 2)}, "'kernel_shape' disagrees"),
    ],
)
def test_conv_bad_attributes(attrs: dict[str, Any], match: str) -> None:
    graph, node = one_node(
        "Conv", [("x", rand(1, 2, 4, 4)), ("w", rand(2, 2, 3, 3))], constants=("w",)
    )
    with pytest.raises(ModelError, match=f"conv_0.*{match}"):
        lower(graph, with_attrs(node, **attrs))


def test_conv_output_shape_mismatch() -> None:
    graph, node = one_node("Conv", [("x", rand(1, 2, 4, 4)), ("w", rand(2, 2, 3, 3))])
    with pytest.raises(ShapeError, match="conv_0.*expected"):
        lower(graph, with_attrs(node, pads=(1, 1, 1, 1)))


def test_conv_integer_unsupported() -> None:
    graph, node = one_node("Relu", [("x", np.zeros((1, 1, 3, 3), np.int32))])
    conv = Node("c", "Conv", ("x", "x"), ("y",))
    with pytest.raises(UnsupportedOpError, match="only float"):
        lower(graph, conv)


def test_max_pool_int8() -> None:
    x = np.arange(-40, 10, dtype=np.int8).reshape(1, 2, 5, 5)
    check_op("MaxPool", [("x", x)], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]})


def test_pool_requires_kernel_shape() -> None:
    graph, node = one_node("MaxPool", [("x", rand(1, 1, 4, 4))], {"kernel_shape": [2, 2]})
    with pytest.raises(ModelError, match="'kernel_shape' is required"):
        lower(graph, dataclasses.replace(node, attrs=()))


def per_channel_model(op: str, scale: str, size: int) -> onnx.ModelProto:
    """``op`` on x: float32[3, 3, 4, 6] (after a Tanh) with per-channel inputs of ``size``
    elements, or with the activation itself as the scale when ``scale`` is "t"."""
    params = ["s", "b", "m", "v"] if op == "BatchNormalization" else ["s", "b"]
    inits = [numpy_helper.from_array(rand(size) ** 2 + 1, p) for p in params]
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 3, 4, 6])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node(op, ["t", scale, *params[1:]], ["y"], name="norm"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op", ["BatchNormalization", "InstanceNormalization"])
@pytest.mark.parametrize("size", [2, 4])
def test_normalization_parameters_one_per_channel(op: str, size: int) -> None:
    # ONNX's checker accepts a scale of the wrong size (only strict shape inference objects);
    # onnxruntime refuses it, and read by channel it would give a wrong answer or run out of
    # bounds.
    with pytest.raises(ShapeError, match=rf"'norm' \({op}\): input 1 's' has shape \[{size}\]"):
        polyonnx.compile(per_channel_model(op, "s", size))


def test_activation_as_batch_norm_scale() -> None:
    # A fuzzed model (seed 7341771): BatchNormalization's scale renamed to a 4-D activation.
    with pytest.raises(ShapeError, match=r"input 1 't' has shape \[3, 3, 4, 6\]; it must be \[3\]"):
        polyonnx.compile(per_channel_model("BatchNormalization", "t", 3))


def test_lrn_needs_size() -> None:
    graph, node = one_node("LRN", [("x", rand(1, 3, 2, 2))], {"size": 3})
    with pytest.raises(ModelError, match="'size' must be a positive integer"):
        lower(graph, with_attrs(node, size=0))


def test_softmax_axis_out_of_range() -> None:
    graph, node = one_node("Softmax", [("x", rand(2, 3))])
    with pytest.raises(ModelError, match="'axis' = 2 is out of range"):
        lower(graph, with_attrs(node, axis=2))


def test_transpose_bad_perm() -> None:
    graph, node = one_node("Transpose", [("x", rand(2, 3))])
    with pytest.raises(ModelError, match="not a permutation"):
        lower(graph, with_attrs(node, perm=(0, 0)))


def test_pad_reflect_too_wide() -> None:
    graph, node = one_node("Pad", [("x", rand(2, 3))], {"pads": [0, 1, 0, 1]}, opset=10)
    node = with_attrs(node, mode="reflect", pads=(0, 3, 0, 3))
    graph = dataclasses.replace(
        graph, values={**graph.values, "y": dataclasses.replace(graph.values["y"], shape=(2, 9))}
    )
    with pytest.raises(ModelError, match="reflect padding of 3"):
        lower(graph, node)


def test_pad_wrong_pads_length() -> None:
    graph, node = one_node("Pad", [("x", rand(2, 3))], {"pads": [0, 1, 0, 1]}, opset=10)
    with pytest.raises(ModelError, match="pads has 2 values, expected 4"):
        lower(graph, with_attrs(node, pads=(1, 1)))


def test_concat_requires_axis() -> None:
    graph, node = one_node("Concat", [("a", rand(2)), ("b", rand(2))], {"axis": 0})
    with pytest.raises(ModelError, match="'axis' is required"):
        lower(graph, dataclasses.replace(node, attrs=()))


def test_elementwise_dtype_checks() -> None:
    graph, node = one_node("Relu", [("x", np.zeros(3, np.int32))])
    with pytest.raises(UnsupportedOpError, match="Sigmoid.*int32; supported: float16"):
        lower(graph, dataclasses.replace(node, op_type="Sigmoid"))


@pytest.mark.parametrize("opset", [7, 9])
def test_batch_norm_with_statistics_outputs_is_training_mode(opset: int) -> None:
    # Before opset 14, five outputs mean training mode (onnxruntime normalises by the batch's
    # statistics); ONNX's inference types only Y, which read "no static shape" before.
    params = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    node = helper.make_node(
        "BatchNormalization", ["x", *"sbmv"], ["y", "rm", "rv", "sm", "sv"], name="bn"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        params,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    with pytest.raises(UnsupportedOpError, match=r"'bn'\): training mode"):
        polyonnx.compile(model)


def test_pad_axis_given_twice() -> None:
    """ONNX leaves a repeated Pad axis undefined: refused, not padded by whichever came last."""
    pads, value = np.array([1, 1, 0, 2], np.int64), np.array(0, np.float32)
    inputs = [("x", rand(2, 3)), ("pads", pads), ("value", value), ("axes", np.array([1, 0]))]
    graph, node = one_node("Pad", inputs, opset=18, constants=("pads", "value", "axes"))
    graph = dataclasses.replace(graph, constants={**graph.constants, "axes": np.array([1, -1])})
    with pytest.raises(ModelError, match=r"axes \[1, 1\] name an axis twice"):
        lower(graph, node)
