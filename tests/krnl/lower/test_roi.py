"""RoiAlign, compiled, against the ONNX reference and onnxruntime: both modes, both coordinate
transformations, fixed and adaptive sampling (the windowed loops: rois far larger than the
input, partly or wholly outside it), empty rois, batches, float64, opset 10."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs
from tests.reliability.models import model, tensor

# [x1, y1, x2, y2] in input coordinates (spatial_scale 1): inside, partly outside, a roi much
# larger than the input (its adaptive sample count exceeds the window), wholly outside, and
# reversed corners (an empty roi under half_pixel).
_ROIS = np.array(
    [
        [0.5, 1.0, 4.5, 5.0],
        [-2.0, 3.0, 4.0, 9.5],
        [-40.0, -35.0, 50.0, 45.0],
        [20.0, 20.0, 30.0, 27.0],
        [4.0, 4.0, 1.0, 2.0],
        [1.2, 0.3, 2.1, 1.4],
    ],
    np.float32,
)


def _model(
    shape: tuple[int, ...], n_rois: int, elem: int = TensorProto.FLOAT, opset: int = 16, **attrs
) -> onnx.ModelProto:
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], **attrs)
    out = [n_rois, shape[1], attrs.get("output_height", 1), attrs.get("output_width", 1)]
    return model(
        [node],
        [
            tensor("x", list(shape), elem),
            tensor("rois", [n_rois, 4], elem),
            tensor("idx", [n_rois], TensorProto.INT64),
        ],
        [tensor("y", out, elem)],
        opset=opset,
    )


def _feeds(
    shape: tuple[int, ...], rois: np.ndarray, dtype: str = "float32"
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    idx = np.arange(len(rois), dtype=np.int64) % shape[0]
    return {"x": x, "rois": rois.astype(dtype), "idx": idx}


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], ort: bool = True) -> None:
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    (ref,) = onnx_reference_outputs(m, feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    if ort:
        np.testing.assert_allclose(got, onnxruntime_outputs(m, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode: str, transform: str, ratio: int) -> None:
    shape = (2, 3, 7, 6)
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": transform,
        "sampling_ratio": ratio,
        "output_height": 3,
        "output_width": 2,
    }
    _check(_model(shape, len(_ROIS), **attrs), _feeds(shape, _ROIS))


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_random_rois_adaptive(mode: str) -> None:
    # Corners anywhere in and around the input, some reversed: the two-pass adaptive path.
    # (onnxruntime fails on a roi reversed along one axis only: a negative sample count.)
    rng = np.random.default_rng(11)
    rois = rng.uniform(-6.0, 18.0, (24, 4)).astype(np.float32)
    shape = (2, 3, 12, 9)
    m = _model(shape, len(rois), mode=mode, output_height=4, output_width=3)
    _check(m, _feeds(shape, rois), ort=False)


def test_float16() -> None:
    # Accumulated in float32 and rounded once, as the reference (which computes in float32).
    shape = (1, 2, 6, 6)
    for ratio in (0, 2):
        m = _model(shape, len(_ROIS), TensorProto.FLOAT16, sampling_ratio=ratio, output_height=2)
        feeds = _feeds(shape, _ROIS, "float16")
        (got,) = polyonnx.InferenceSession(m).run(None, feeds)
        (ref,) = onnx_reference_outputs(m, feeds)
        np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=2e-3)


def test_spatial_scale_and_many_samples() -> None:
    # Rois in image coordinates, a quarter-size feature map; a fixed ratio above the window.
    shape = (1, 2, 5, 5)
    m = _model(
        shape, len(_ROIS), spatial_scale=0.25, sampling_ratio=13, output_height=2, output_width=2
    )
    _check(m, _feeds(shape, _ROIS * 4))


def test_float64_and_opset_10() -> None:
    # (The reference shifts by half a pixel at opset 10 too; onnxruntime, as the spec, does not.)
    shape = (2, 2, 6, 6)
    m = _model(shape, len(_ROIS), TensorProto.DOUBLE, opset=10, output_height=2, output_width=3)
    feeds = _feeds(shape, _ROIS, "float64")
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(got, onnxruntime_outputs(m, feeds)[0], rtol=1e-12, atol=1e-12)


def test_batch_index_out_of_range_is_an_input_error() -> None:
    shape = (2, 1, 4, 4)
    feeds = _feeds(shape, _ROIS[:2])
    feeds["idx"] = np.array([0, 2], np.int64)
    session = polyonnx.InferenceSession(_model(shape, 2, sampling_ratio=2))
    with pytest.raises(polyonnx.InputError, match="out of range"):
        session.run(None, feeds)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(polyonnx.ModelError, match="mode"):
        polyonnx.InferenceSession(_model((1, 1, 4, 4), 1, mode="median"))
