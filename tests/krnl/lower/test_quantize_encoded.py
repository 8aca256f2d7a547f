"""QuantizeLinear / DequantizeLinear with the encoded types (int4, int2, float8, float4): bit
for bit as the ONNX reference, per tensor and per axis."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

TYPES = {
    "int4": TensorProto.INT4,
    "uint4": TensorProto.UINT4,
    "int2": TensorProto.INT2,
    "uint2": TensorProto.UINT2,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "float4_e2m1fn": TensorProto.FLOAT4E2M1,
}


def _zero_point(dtype: str, n: int) -> np.ndarray:
    values = np.arange(n) % 2 if dtype.startswith(("int", "uint")) else np.zeros(n)
    return values.astype(np.dtype(dtype))


@pytest.mark.parametrize("dtype", sorted(TYPES))
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_and_dequantize(dtype: str, per_axis: bool):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((3, 4)) * 6).astype(np.float32)
    n = 4 if per_axis else 1
    scale = np.linspace(0.5, 2.0, n).astype(np.float32).reshape(-1 if per_axis else ())
    zp = _zero_point(dtype, n).reshape(-1 if per_axis else ())
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    q = model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)],
        [tensor("x", [3, 4])],
        [tensor("y", [3, 4], TYPES[dtype])],
        inits,
        opset=25,
    )
    (got,) = polyonnx.InferenceSession(q).run(None, {"x": x})
    (ref,) = onnx_reference_outputs(q, {"x": x})
    np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))

    d = model(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
        [tensor("q", [3, 4], TYPES[dtype])],
        [tensor("y", [3, 4])],
        inits,
        opset=25,
    )
    (back,) = polyonnx.InferenceSession(d).run(None, {"q": ref})
    (want,) = onnx_reference_outputs(d, {"q": ref})
    np.testing.assert_array_equal(back, want)


def test_float8_quantize_without_saturation_overflows_to_nan():
    m = model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], saturate=0)],
        [tensor("x", [3])],
        [tensor("y", [3], TensorProto.FLOAT8E4M3FN)],
        [
            numpy_helper.from_array(np.array(1.0, np.float32), "s"),
            numpy_helper.from_array(np.array(0, ml_dtypes.float8_e4m3fn), "z"),
        ],
        opset=25,
    )
    x = np.array([1.0, 500.0, -1e6], np.float32)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    assert got[0] == 1.0 and np.isnan(got[1:].astype(np.float32)).all()


@pytest.mark.parametrize("offset", [0.0, 3.0, -3.0])
def test_dynamic_quantize_linear(offset: float):
    # Mixed signs, all positive (0 joins the range), all negative.
    m = model(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
        [tensor("x", [4, 5])],
        [
            tensor("y", [4, 5], TensorProto.UINT8),
            tensor("s", []),
            tensor("z", [], TensorProto.UINT8),
        ],
        opset=13,
    )
    x = (np.random.default_rng(4).standard_normal((4, 5)) + offset).astype(np.float32)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    ref = onnx_reference_outputs(m, {"x": x})
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)
