"""QuantizeLinear / DequantizeLinear, and a small QDQ int8 model, vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as oh

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnxruntime_outputs
from tests.reliability.models import const, model, tensor

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_then_dequantize(dtype, per_axis: bool):
    scale = np.array([0.02, 0.05, 0.1], np.float32) if per_axis else np.array(0.03, np.float32)
    zp = np.array([3, 0, 5] if per_axis else 4, dtype)
    elem = {np.uint8: T.UINT8, np.int8: T.INT8, np.int16: T.INT16}[dtype]
    m = model(
        [
            oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
            oh.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
        ],
        [tensor("x", [2, 3, 5])],
        [tensor("q", [2, 3, 5], elem), tensor("y", [2, 3, 5])],
        [const("s", scale), const("z", zp)],
        opset=21,
    )
    # Halfway values (round half to even) and values past the range (saturation).
    x = np.concatenate([RNG.uniform(-9, 9, 24), [0.015, 0.045, -0.075, 1e3, -1e3, 0.0]])
    feeds = {"x": x.reshape(2, 3, 5).astype(np.float32)}
    got = polyonnx.InferenceSession(m).run(None, feeds)
    ref = onnxruntime_outputs(m, feeds)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)


def test_a_qdq_int8_conv_model():
    # The form int8 models from real exporters take: Q/DQ pairs around a float Conv.
    w = RNG.integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        oh.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        oh.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        oh.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        oh.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("QuantizeLinear", ["r", "sy", "zy"], ["y"]),
    ]
    m = model(
        nodes,
        [tensor("x", [1, 3, 8, 8])],
        [tensor("y", [1, 4, 8, 8], T.UINT8)],
        [
            const("sx", np.array(0.02, np.float32)),
            const("zx", np.array(128, np.uint8)),
            const("w", w),
            const("sw", np.array([0.01, 0.02, 0.005, 0.03], np.float32)),
            const("zw", np.zeros(4, np.int8)),
            const("sy", np.array(0.05, np.float32)),
            const("zy", np.array(0, np.uint8)),
        ],
        opset=19,
    )
    feeds = {"x": RNG.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)}
    got = polyonnx.InferenceSession(m).run(None, feeds)[0]
    ref = onnxruntime_outputs(m, feeds)[0]
    # float32 sums in another order may put a value on the other side of a rounding boundary.
    assert np.abs(got.astype(np.int32) - ref.astype(np.int32)).max() <= 1
    assert (got == ref).mean() > 0.99


def test_blocked_scales_are_refused():
    m = model(
        [oh.make_node("DequantizeLinear", ["q", "s"], ["y"], axis=1, block_size=2)],
        [tensor("q", [2, 4], T.INT8)],
        [tensor("y", [2, 4])],
        [const("s", np.ones((2, 2), np.float32))],
        opset=21,
    )
    with pytest.raises(UnsupportedOpError, match="block_size"):
        polyonnx.InferenceSession(m)
