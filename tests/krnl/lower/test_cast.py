"""Cast to and from the encoded types (bfloat16, float8, float4, int4...): bit for bit as the
ONNX reference converts, across rounding ties, subnormals, overflow, infinities and NaN."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

ENCODED = {
    "bfloat16": TensorProto.BFLOAT16,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
    "float4_e2m1fn": TensorProto.FLOAT4E2M1,
    "int4": TensorProto.INT4,
    "uint4": TensorProto.UINT4,
    "int2": TensorProto.INT2,
    "uint2": TensorProto.UINT2,
}
SOURCES = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}


def _cast_model(src: int, dst: int, n: int, **attrs: object) -> object:
    return model(
        [helper.make_node("Cast", ["x"], ["y"], to=dst, **attrs)],
        [tensor("x", [n], src)],
        [tensor("y", [n], dst)],
        opset=25,
    )


def _floats(dtype: str) -> np.ndarray:
    """Random magnitudes over the formats' ranges, every float8 value and the midpoints
    between neighbours (ties), and the special values."""
    rng = np.random.default_rng(3)
    values = [
        rng.standard_normal(200) * 10.0 ** rng.integers(-8, 6, 200),
        np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).astype(np.float32),
        np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32),
    ]
    grid = np.unique(values[2][np.isfinite(values[2])])
    values.append((grid[1:] + grid[:-1]) / 2)  # ties of e4m3
    values.append(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.4e38, 0.25]))
    with np.errstate(over="ignore"):  # (float16 overflows to infinity: also a case)
        return np.concatenate(values).astype(dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.itemsize}")


@pytest.mark.parametrize("src", sorted(SOURCES))
@pytest.mark.parametrize("dst", sorted(ENCODED))
@pytest.mark.parametrize("saturate", [1, 0])
def test_encode_matches_reference_bit_for_bit(src: str, dst: str, saturate: int):
    # (An integer out of range gives 0.)
    x = np.linspace(-20, 20, 161).astype(src) if dst.startswith(("int", "uint")) else _floats(src)
    m = _cast_model(SOURCES[src], ENCODED[dst], len(x), saturate=saturate)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    (ref,) = onnx_reference_outputs(m, {"x": x})
    assert got.dtype == ref.dtype
    np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("src", sorted(ENCODED))
@pytest.mark.parametrize("dst", ["float32", "float16"])
def test_decode_every_code(src: str, dst: str):
    codes = np.arange(256, dtype=np.uint8) if src != "bfloat16" else np.arange(65536)
    if src in ("int4", "uint4", "float4_e2m1fn"):
        codes = codes[:16]
    elif src in ("int2", "uint2"):
        codes = codes[:4]
    x = codes.astype(np.uint16 if src == "bfloat16" else np.uint8).view(np.dtype(src))
    dst_type = SOURCES[dst]
    m = _cast_model(ENCODED[src], dst_type, len(x))
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    (ref,) = onnx_reference_outputs(m, {"x": x})
    np.testing.assert_array_equal(got, ref)  # (NaN equals NaN here)


def test_e8m0_round_modes():
    x = np.array([0.0, 0.124, 0.25, 1.1, 1.5, 1.75, 3.0, 3e38, np.inf, np.nan], np.float32)
    for mode in ("up", "down", "nearest"):
        m = _cast_model(
            TensorProto.FLOAT, TensorProto.FLOAT8E8M0, len(x), round_mode=mode, saturate=1
        )
        (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
        (ref,) = onnx_reference_outputs(m, {"x": x})
        np.testing.assert_array_equal(_bits(got), _bits(ref))


def test_arithmetic_on_an_encoded_type_is_refused():
    # (bfloat16 is computed, in float32: tests/krnl/lower/test_bfloat16.py.)
    m = model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [tensor("x", [4], TensorProto.FLOAT8E4M3FN)],
        [tensor("y", [4], TensorProto.FLOAT8E4M3FN)],
        opset=21,
    )
    with pytest.raises(UnsupportedOpError, match="float8_e4m3fn"):
        polyonnx.InferenceSession(m)


def test_float64_to_float8_is_refused():
    m = _cast_model(TensorProto.DOUBLE, TensorProto.FLOAT8E4M3FN, 4)
    with pytest.raises(UnsupportedOpError, match="round twice"):
        polyonnx.InferenceSession(m)


@pytest.mark.parametrize(
    ("src", "dst", "values"),
    [
        (TensorProto.FLOAT, TensorProto.INT32, np.array([1.0, -0.0, np.inf, np.nan], np.float32)),
        (TensorProto.BFLOAT16, TensorProto.UINT16, np.arange(4).astype(ml_dtypes.bfloat16)),
        (TensorProto.BOOL, TensorProto.UINT8, np.array([True, False, True, True])),
    ],
)
def test_bit_cast_keeps_the_bits(src: int, dst: int, values: np.ndarray):
    m = model(
        [helper.make_node("BitCast", ["x"], ["y"], to=dst)],
        [tensor("x", [4], src)],
        [tensor("y", [4], dst)],
        opset=26,
    )
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": values})
    np.testing.assert_array_equal(got, values.view(got.dtype))


def test_values_of_an_encoded_type_are_moved_as_they_are():
    # OneHot only selects between its two values: their bfloat16 codes are copied.
    m = model(
        [helper.make_node("OneHot", ["i", "depth", "v"], ["y"])],
        [tensor("i", [3], TensorProto.INT64), tensor("v", [2], TensorProto.BFLOAT16)],
        [tensor("y", [3, 4], TensorProto.BFLOAT16)],
        [numpy_helper.from_array(np.array(4, np.int64), "depth")],
    )
    v = np.array([-1.5, 3.0], ml_dtypes.bfloat16)
    feeds = {"i": np.array([0, 3, 1], np.int64), "v": v}
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    (ref,) = onnx_reference_outputs(m, feeds)
    np.testing.assert_array_equal(_bits(got), _bits(ref))
