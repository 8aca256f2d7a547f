"""Zero Pads folded into the Convs that read them (tf2onnx's ZeroPadding2D + valid conv)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import pipeline
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes import fold_pads_into_convs
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs

RNG = np.random.default_rng(7)


def _model(
    pads: list[int],
    *,
    axes: list[int] | None = None,
    value: float | None = None,
    mode: str = "constant",
    conv_pads: list[int] | None = None,
    also_relu: bool = False,
    two_convs: bool = False,
) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    pad_inputs = ["x", "pads", "", ""]
    if value is not None:
        inits.append(numpy_helper.from_array(np.array(value, np.float32), "value"))
        pad_inputs[2] = "value"
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        pad_inputs[3] = "axes"
    w = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "w"))
    conv_attrs = {"group": 8, "strides": [2, 2], "pads": conv_pads or [0, 0, 0, 0]}
    nodes = [
        helper.make_node("Pad", pad_inputs, ["p"], mode=mode),
        helper.make_node("Conv", ["p", "w"], ["y"], **conv_attrs),
    ]
    outputs = ["y"]
    if also_relu:
        nodes.append(helper.make_node("Relu", ["p"], ["r"]))
        outputs.append("r")
    if two_convs:
        nodes.append(helper.make_node("Conv", ["p", "w"], ["z"], group=8))
        outputs.append("z")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 15, 16])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(
    ("kwargs", "folded"),
    [
        ({"pads": [0, 0, 0, 0, 0, 0, 1, 1]}, True),  # Keras' correct_pad for a stride-2 conv
        ({"pads": [0, 0, 1, 2, 0, 0, 3, 0], "conv_pads": [1, 0, 0, 1]}, True),
        ({"pads": [1, 0, 0, 1], "axes": [-2, 3]}, True),
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 0.0}, True),
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "two_convs": True}, True),
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "value": 1.5}, False),  # not what a conv pads
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "mode": "reflect"}, False),
        ({"pads": [0, 0, 1, 1, 0, 0, 1, 1], "also_relu": True}, False),  # another reader
        ({"pads": [1, 0, 1, 1, 0, 0, 1, 1]}, False),  # an image of zeros is not padding
        ({"pads": [0, 0, 1, 1, 0, 0, -1, 1]}, False),  # a crop
    ],
)
def test_folded_where_exact_and_same_values(kwargs: dict, folded: bool) -> None:
    model = _model(**kwargs)
    graph = pipeline.to_graph(model, None, Options())
    assert ("Pad" not in [n.op_type for n in graph.nodes]) == folded
    x = RNG.standard_normal((1, 8, 15, 16)).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})
    for a, b in zip(got, onnxruntime_outputs(model, {"x": x}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_axes_out_of_range_are_not_folded() -> None:
    """An axis outside the rank is the Pad's lowering's to refuse, never wrapped round."""
    v = {n: Value(n, "float32", s) for n, s in [("x", (1, 2, 6, 6)), ("p", (1, 2, 7, 7))]}
    v |= {"y": Value("y", "float32", (1, 2, 3, 3)), "w": Value("w", "float32", (2, 1, 3, 3))}
    consts = {
        "pads": np.array([1, 0, 0, 1]),
        "axes": np.array([2, 7]),  # 7 % 4 would be axis 3
        "w": np.ones((2, 1, 3, 3), np.float32),
    }
    for name, c in consts.items():
        v[name] = Value(name, c.dtype.name, c.shape)
    pad = Node("pad", "Pad", ("x", "pads", "", "axes"), ("p",))
    conv = Node("conv", "Conv", ("p", "w"), ("y",), {"group": 2, "strides": (2, 2)})
    g = Graph("g", (v["x"],), (v["y"],), (pad, conv), v, consts)
    assert fold_pads_into_convs(g) is g
