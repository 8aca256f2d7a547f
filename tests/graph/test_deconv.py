"""ConvTranspose computed as a 1x1 Conv and an overlap-add (OverlapAdd or DepthToSpace)."""

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
        "OverlapAdd",
    ),
    # The usual decoder up-sampler: 3x3, stride 2, pad 1, output padding 1.
    "output_padding": (
        ((1, 4, 5, 6), (4, 5, 3, 3)),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
        "OverlapAdd",
    ),
    "asymmetric_pads_and_dilation": (
        ((2, 3, 4, 5), (3, 2, 3, 2)),
        {"strides": [3, 2], "pads": [0, 2, 1, 0], "dilations": [2, 1]},
        "OverlapAdd",
    ),
    "groups": (((1, 6, 4, 4), (6, 2, 2, 2)), {"strides": [2, 2], "group": 3}, "DepthToSpace"),
    "groups_overlapping": (
        ((1, 4, 4, 4), (4, 3, 3, 3)),
        {"strides": [2, 2], "group": 2, "pads": [1, 1, 1, 1]},
        "OverlapAdd",
    ),
    # Kernel = stride, but dilated: the taps overlap, so not a DepthToSpace.
    "kernel_2_stride_2_dilated": (
        ((1, 4, 5, 5), (4, 3, 2, 2)),
        {"strides": [2, 2], "dilations": [2, 2]},
        "OverlapAdd",
    ),
    "stride_1": (((1, 3, 5, 5), (3, 4, 3, 3)), {}, "OverlapAdd"),
    "valid": (((1, 3, 4, 4), (3, 2, 2, 3)), {"strides": [1, 2], "auto_pad": "VALID"}, "OverlapAdd"),
    "one_d": (((1, 4, 9), (4, 3, 4)), {"strides": [2], "pads": [1, 1]}, "OverlapAdd"),
    "three_d": (((1, 2, 3, 3, 3), (2, 2, 2, 2, 2)), {"strides": [2, 2, 2]}, "OverlapAdd"),
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


def test_older_opsets_are_rewritten_too() -> None:
    """OverlapAdd is polyonnx's own op: an opset-11 model (before ONNX's Col2Im) gets it."""
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


def _generator(channels: tuple[int, ...], group: int, rank: int) -> onnx.ModelProto:
    """A DCGAN-style stack: ConvTranspose (4-tap, stride 2, pad 1), BatchNormalization, Relu
    per layer, on ``channels[0]`` input channels at 3 pixels per axis."""
    nodes, inits = [], []
    x = "x"
    for k, (cin, cout) in enumerate(zip(channels, channels[1:], strict=False)):
        w = RNG.standard_normal((cin, cout // group) + (4,) * rank).astype(np.float32) * 0.1
        stats = [RNG.uniform(0.5, 2, cout), RNG.standard_normal(cout),
                 RNG.standard_normal(cout), RNG.uniform(0.5, 2, cout)]  # fmt: skip
        names = [f"w{k}", f"s{k}", f"b{k}", f"m{k}", f"v{k}"]
        for name, a in zip(names, [w, *stats], strict=True):
            inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        nodes += [
            helper.make_node("ConvTranspose", [x, f"w{k}"], [f"t{k}"], strides=[2] * rank,
                             pads=[1] * 2 * rank, group=group),
            helper.make_node("BatchNormalization", [f"t{k}", *names[1:]], [f"n{k}"]),
            helper.make_node("Relu", [f"n{k}"], [f"y{k}"]),
        ]  # fmt: skip
        x = f"y{k}"
    graph = helper.make_graph(
        nodes,
        "generator",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels[0]] + [3] * rank)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("channels", "group", "rank"),
    [((64, 64, 32), 1, 2), ((64, 128, 64), 2, 2), ((64, 64), 1, 1), ((64, 64), 1, 3)],
)
def test_overlap_add_stays_channel_blocked(channels: tuple[int, ...], group: int, rank: int):
    """Between blocked convolutions the overlap-add reads the columns in the channel-blocked
    layout (tap-major: a block of output channels at one tap is a block of columns) and the
    BatchNormalization is in the weights: no layout change in the stack (block sizes up to
    32 divide every group's channels here)."""
    model = _generator(channels, group, rank)
    ops = [n.op_type for n in pipeline.to_graph(model, None, Options()).nodes]
    assert ops.count("OverlapAddBlocked") == len(channels) - 1, ops
    assert "BatchNormalization" not in ops and ops.count("FromBlocked") == 1, ops
    x = RNG.standard_normal((1, channels[0]) + (3,) * rank).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    want = onnxruntime_outputs(model, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_overlap_add_of_channels_not_in_whole_blocks_leaves_the_blocked_layout() -> None:
    """Three output channels (an RGB image): tap-major columns are not whole blocks of one
    tap, so the overlap-add runs on NCHW columns."""
    model = _generator((64, 3), 1, 2)
    ops = [n.op_type for n in pipeline.to_graph(model, None, Options()).nodes]
    assert "OverlapAdd" in ops and "OverlapAddBlocked" not in ops, ops
    x = RNG.standard_normal((1, 64, 3, 3)).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
