"""Convolutions that are fully-connected layers run as Gemm: which ones, and native results
vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.frontend import import_model
from polyonnx.graph.passes import conv_as_gemm, dense, optimize
from polyonnx.testing import assert_close, onnxruntime_outputs, random_feeds

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)


def _conv_model(x_shape, w_shape, bias: bool = True, **attrs) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(RNG.standard_normal(w_shape).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(w_shape[0]).astype("f4"), "b"))
        inputs.append("b")
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["y"], **attrs)],
        "dense",
        [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize(
    "x_shape, w_shape, bias",
    [
        ((1, 256, 1, 1), (100, 256, 1, 1), True),  # a classifier on a pooled map
        ((3, 32, 5, 5), (24, 32, 5, 5), False),  # VGG's fc as a conv, batch 3
        ((1, 64, 7), (50, 64, 7), True),  # 1-D
    ],
)
def test_a_conv_covering_its_input_is_a_gemm_and_matches(x_shape, w_shape, bias):
    model = _conv_model(x_shape, w_shape, bias)
    assert [n.op_type for n in conv_as_gemm(optimize(import_model(model))).nodes] == [
        "Reshape",
        "Gemm",
        "Reshape",
    ]
    sess = polyonnx.InferenceSession(model, options=polyonnx.Options(cache=False))
    feeds = random_feeds(sess.get_inputs())
    assert_close(sess.run(None, feeds), onnxruntime_outputs(model, feeds))


def test_a_small_layer_keeps_its_conv():
    model = _conv_model((1, 64, 1, 1), (8, 64, 1, 1))
    assert [n.op_type for n in conv_as_gemm(optimize(import_model(model))).nodes] == ["Conv"]


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs",
    [
        ((1, 8, 3, 3), (4, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # padded: a 3x3 output
        ((1, 8, 3, 3), (4, 4, 3, 3), {"group": 2}),
        ((1, 8, 5, 5), (4, 8, 3, 3), {"dilations": [2, 2]}),
        ((1, 8, 4, 4), (4, 8, 2, 2), {}),  # a 3x3 output
    ],
)
def test_other_convs_stay_convs(x_shape, w_shape, attrs, monkeypatch):
    monkeypatch.setattr(dense, "MIN_WEIGHT_BYTES", 0)
    model = _conv_model(x_shape, w_shape, **attrs)
    assert "Gemm" not in [n.op_type for n in conv_as_gemm(optimize(import_model(model))).nodes]
