"""ConvTranspose computed as a 1x1 Conv and an overlap-add (Col2Im or DepthToSpace)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import pipeline
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs

RNG = np.random.default_rng(5)


def _model(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    *,
    bias: bool = True,
    opset: int = 18,
    dtype: int = TensorProto.FLOAT,
    **attrs: object,
) -> tuple[onnx.ModelProto, np.ndarray]:
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    inits = [numpy_helper.from_array(RNG.standard_normal(w_shape).astype(np_dtype), "w")]
    inputs = ["x", "w"]
    if bias:
        channels = w_shape[1] * int(attrs.get("group", 1))  # type: ignore[call-overload]
        inits.append(numpy_helper.from_array(RNG.standard_normal(channels).astype(np_dtype), "b"))
        inputs.append("b")
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", inputs, ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", dtype, x_shape)],
        [helper.make_tensor_value_info("y", dtype, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, RNG.standard_normal(x_shape).astype(np_dtype)


CASES = {
    # U-Net's up-convolution: no overlap, a DepthToSpace.
    "kernel_2_stride_2": (((1, 8, 6, 7), (8, 4, 2, 2)), {"strides": [2, 2]}, "DepthToSpace"),
    # DCGAN / pix2pix: 4x4 taps, stride 2, pad 1.
    "kernel_4_stride_2_pad_1": (
        ((1, 6, 5, 5), (6, 3, 4, 4)),
        {"strides": [2, 2], "pads": [1, 1, 1, 1]},
        "Col2Im",
    ),
    # The usual decoder up-sampler: 3x3, stride 2, pad 1, output padding 1.
    "output_padding": (
        ((1, 4, 5, 6), (4, 5, 3, 3)),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        "Col2Im",
    ),
    "asymmetric_pads_and_dilation": (
        ((2, 3, 4, 5), (3, 2, 3, 2)),
        {"strides": [3, 2], "pads": [0, 2, 1, 0], "dilations": [2, 1]},
        "Col2Im",
    ),
    "groups": (((1, 6, 4, 4), (6, 2, 2, 2)), {"strides": [2, 2], "group": 3}, "DepthToSpace"),
    "groups_overlapping": (
        ((1, 4, 4, 4), (4, 3, 3, 3)),
        {"strides": [2, 2], "group": 2, "pads": [1, 1, 1, 1]},
        "Col2Im",
    ),
    # Kernel = stride, but dilated: the taps overlap, so not a DepthToSpace.
    "kernel_2_stride_2_dilated": (
        ((1, 4, 5, 5), (4, 3, 2, 2)),
        {"strides": [2, 2], "dilations": [2, 2]},
        "Col2Im",
    ),
    "stride_1": (((1, 3, 5, 5), (3, 4, 3, 3)), {}, "Col2Im"),
    "valid": (((1, 3, 4, 4), (3, 2, 2, 3)), {"strides": [1, 2], "auto_pad": "VALID"}, "Col2Im"),
    "one_d": (((1, 4, 9), (4, 3, 4)), {"strides": [2], "pads": [1, 1]}, "Col2Im"),
    "three_d": (((1, 2, 3, 3, 3), (2, 2, 2, 2, 2)), {"strides": [2, 2, 2]}, "Col2Im"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_rewritten_and_matching_onnxruntime(case: str, bias: bool) -> None:
    (x_shape, w_shape), attrs, overlap_add = CASES[case]
    model, x = _model(x_shape, w_shape, bias=bias, **attrs)
    ops = [n.op_type for n in pipeline.to_graph(model, None, Options()).nodes]
    assert "ConvTranspose" not in ops and overlap_add in ops, ops
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    want = onnxruntime_outputs(model, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_older_opsets_use_the_internal_overlap_add() -> None:
    """Col2Im is an ONNX op from opset 18: an opset-11 model gets polyonnx's own."""
    model, x = _model((1, 3, 4, 4), (3, 2, 3, 3), opset=11, strides=[2, 2], pads=[1, 1, 1, 1])
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("attrs", "dtype"),
    [
        ({"strides": [2, 2], "output_shape": [9, 9]}, TensorProto.FLOAT),  # SAME-like, derived
        ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, TensorProto.FLOAT),
        ({"strides": [2, 2]}, TensorProto.FLOAT16),  # rounds before summing: kept
    ],
)
def test_kept_where_the_rewrite_does_not_apply(attrs: dict, dtype: int) -> None:
    model, x = _model((1, 3, 4, 4), (3, 2, 2, 2), dtype=dtype, **attrs)
    ops = [n.op_type for n in pipeline.to_graph(model, None, Options()).nodes]
    assert "ConvTranspose" in ops
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    want = onnxruntime_outputs(model, {"x": x})[0]
    tol = 1e-2 if dtype == TensorProto.FLOAT16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)
