"""Dead convolution taps: cut only where every read is padding, same values as onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import polyonnx
from polyonnx import pipeline
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs


def _conv_model(
    x_shape: tuple[int, ...],
    w: np.ndarray,
    pads: list[int],
    dilations: list[int],
    strides: list[int],
) -> onnx.ModelProto:
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], pads=pads, dilations=dilations, strides=strides
    )
    bias = np.linspace(-1, 1, w.shape[0]).astype(np.float32)
    graph = helper.make_graph(
        [conv],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _kernel_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    graph = pipeline.to_graph(model, None, Options())
    [conv] = [n for n in graph.nodes if n.op_type == "Conv"]
    return tuple(graph.constants[conv.inputs[1]].shape[2:])


@pytest.mark.parametrize(
    ("size", "kernel", "pads", "dilation", "stride", "live"),
    [
        ((14, 14), (3, 3), [24, 24, 24, 24], 24, 1, (1, 1)),  # DeepLab's atrous rates
        ((14, 14), (3, 3), [36, 36, 36, 36], 36, 1, (1, 1)),
        ((14, 14), (3, 3), [12, 12, 12, 12], 12, 1, (3, 3)),  # every tap reads somewhere
        ((5, 9), (3, 3), [6, 6, 6, 6], 6, 1, (1, 3)),  # one axis only
        ((6,), (5,), [9, 2], 3, 1, (3,)),  # asymmetric: the first two taps read padding
        ((7, 7), (3, 3), [8, 8, 8, 8], 8, 2, (1, 1)),  # strided
        ((4, 4, 4), (3, 3, 3), [5, 5, 5, 5, 5, 5], 5, 1, (1, 1, 1)),  # 3-D
        ((9,), (3,), [10, 10], 10, 3, (1,)),  # stride with a remainder past the end
    ],
)
def test_trimmed_convs_match_onnxruntime(
    size: tuple[int, ...],
    kernel: tuple[int, ...],
    pads: list[int],
    dilation: int,
    stride: int,
    live: tuple[int, ...],
) -> None:
    rng = np.random.default_rng(len(size) + dilation)
    w = rng.standard_normal((4, 3, *kernel)).astype(np.float32)
    rank = len(size)
    model = _conv_model((1, 3, *size), w, pads, [dilation] * rank, [stride] * rank)
    assert _kernel_shape(model) == live
    x = rng.standard_normal((1, 3, *size)).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_non_finite_weights_on_dead_taps_are_kept() -> None:
    """inf * 0 is NaN: with an inf on a tap that reads only padding, the spec's zero padding
    (and onnx.reference) make the outputs NaN; onnxruntime skips padding, the pass stays off."""
    w = np.ones((2, 1, 3, 3), np.float32)
    w[0, 0, 0, 0] = np.inf
    model = _conv_model((1, 1, 5, 5), w, [8, 8, 8, 8], [8, 8], [1, 1])
    assert _kernel_shape(model) == (3, 3)
    x = np.ones((1, 1, 5, 5), np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.isnan(want[0, 0]).all() and not np.isnan(want[0, 1]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
