"""ConvInteger and QLinearConv vs onnxruntime (interpreted here; compiled in
tests/models/test_quantized_models.py). Integer results must match exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as oh

import polyonnx
from polyonnx.errors import ShapeError
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import check_op
from tests.reliability.models import const, model, tensor

EXACT = {"rtol": 0.0, "atol": 0.0}


def _ints(dtype: Any, *shape: int, seed: int = 0) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("constant_w", [False, True])
def test_conv_integer_padded_strided_grouped(constant_w: bool) -> None:
    """The padding reads x_zero_point (0 once centred), not 0: a padded window with a large
    zero point would be far off otherwise."""
    check_op(
        "ConvInteger",
        [
            ("x", _ints(np.uint8, 1, 4, 7, 6)),
            ("w", _ints(np.uint8, 6, 2, 3, 3, seed=1)),
            ("xz", np.array(200, np.uint8)),
            ("wz", np.array(131, np.uint8)),
        ],
        {"pads": [1, 2, 1, 0], "strides": [2, 1], "group": 2},
        constants=("w", "xz", "wz") if constant_w else (),
        **EXACT,
    )


@pytest.mark.parametrize(
    "attrs",
    [{"auto_pad": "SAME_LOWER", "strides": [1, 2]}, {"pads": [2, 1, 0, 1], "dilations": [2, 1]}],
)
def test_conv_integer_no_zero_points(attrs: dict[str, Any]) -> None:
    check_op(
        "ConvInteger",
        [("x", _ints(np.int8, 2, 3, 8, 8)), ("w", _ints(np.int8, 4, 3, 2, 3, seed=2))],
        attrs,
        constants=("w",),
        **EXACT,
    )


@pytest.mark.parametrize("constant_w", [False, True])
def test_qlinear_conv_uint8_bias(constant_w: bool) -> None:
    check_op(
        "QLinearConv",
        [
            ("x", _ints(np.uint8, 1, 3, 6, 6)),
            ("xs", np.array(0.02, np.float32)),
            ("xz", np.array(120, np.uint8)),
            ("w", _ints(np.uint8, 5, 3, 3, 3, seed=3)),
            ("ws", np.array(0.01, np.float32)),
            ("wz", np.array(128, np.uint8)),
            ("ys", np.array(0.9, np.float32)),
            ("yz", np.array(100, np.uint8)),
            ("b", np.random.default_rng(4).integers(-5000, 5000, 5).astype(np.int32)),
        ],
        {"pads": [1, 1, 1, 1]},
        constants=("w", "ws", "wz", "b") if constant_w else (),
        **EXACT,
    )


def test_qlinear_conv_int8_per_channel_depthwise_saturating() -> None:
    """Per-output-channel scales and zero points; a small y_scale sends values past int8's
    range (saturation)."""
    check_op(
        "QLinearConv",
        [
            ("x", _ints(np.int8, 1, 4, 5, 5)),
            ("xs", np.array(0.05, np.float32)),
            ("xz", np.array(-3, np.int8)),
            ("w", _ints(np.int8, 4, 1, 3, 3, seed=5)),
            ("ws", np.array([0.01, 0.02, 0.005, 0.03], np.float32)),
            ("wz", np.zeros(4, np.int8)),
            ("ys", np.array(0.3, np.float32)),
            ("yz", np.array(7, np.int8)),
        ],
        {"pads": [1, 1, 1, 1], "group": 4},
        constants=("w", "ws", "wz"),
        **EXACT,
    )


def test_qlinear_conv_halfway_rounds_to_even() -> None:
    """Accumulators landing exactly on .5 after the rescale: round half to even, as ONNX
    specifies (2.5 -> 2, 3.5 -> 4, -2.5 -> -2)."""
    x = np.array([5, 7, -5, 9, -7, 1], np.int8).reshape(1, 1, 1, 6)
    m = model(
        [oh.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        [tensor("x", [1, 1, 1, 6], T.INT8)],
        [tensor("y", [1, 1, 1, 6], T.INT8)],
        [
            const("xs", np.array(1.0, np.float32)),
            const("xz", np.array(0, np.int8)),
            const("w", np.ones((1, 1, 1, 1), np.int8)),
            const("ws", np.array(0.5, np.float32)),
            const("wz", np.array(0, np.int8)),
            const("ys", np.array(1.0, np.float32)),
            const("yz", np.array(0, np.int8)),
        ],
    )
    [got] = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(got.ravel(), [2, 4, -2, 4, -4, 0])
    np.testing.assert_array_equal(got, onnxruntime_outputs(m, {"x": x})[0])


def _qconv_model(x_zp: np.ndarray) -> Any:
    return model(
        [oh.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        [tensor("x", [1, 2, 4, 4], T.UINT8)],
        [tensor("y", [1, 3, 4, 4], T.UINT8)],
        [
            const("xs", np.array(0.1, np.float32)),
            const("xz", x_zp),
            const("w", np.ones((3, 2, 1, 1), np.uint8)),
            const("ws", np.array(0.1, np.float32)),
            const("wz", np.array(0, np.uint8)),
            const("ys", np.array(0.1, np.float32)),
            const("yz", np.array(0, np.uint8)),
        ],
    )


def test_qlinear_conv_per_channel_x_zero_point_refused() -> None:
    """ONNX quantizes X per tensor: a zero point per input channel is a ShapeError naming it."""
    with pytest.raises(ShapeError, match="'xz'.*single value"):
        polyonnx.InferenceSession(_qconv_model(np.array([1, 2], np.uint8)))
