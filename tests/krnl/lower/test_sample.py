"""GridSample against the ONNX reference: every mode, padding and corner alignment, grid
positions well outside the input, 2-D and 3-D."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor


def _grid_model(x_shape: list[int], grid_shape: list[int], **attrs: object) -> object:
    y_shape = [*x_shape[:2], *grid_shape[1:-1]]
    return model(
        [helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)],
        [tensor("x", x_shape), tensor("g", grid_shape)],
        [tensor("y", y_shape)],
        opset=22,
    )


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode: str, padding: str, align: int):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    g = rng.uniform(-3.5, 3.5, (2, 6, 7, 2)).astype(np.float32)  # (far outside too)
    m = _grid_model(
        [2, 3, 5, 4], [2, 6, 7, 2], mode=mode, padding_mode=padding, align_corners=align
    )
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x, "g": g})
    (ref,) = onnx_reference_outputs(m, {"x": x, "g": g})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d(mode: str):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    g = rng.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    m = _grid_model([1, 2, 3, 4, 5], [1, 2, 3, 4, 3], mode=mode)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x, "g": g})
    (ref,) = onnx_reference_outputs(m, {"x": x, "g": g})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_unknown_mode_is_refused():
    m = _grid_model([1, 1, 2, 2], [1, 1, 1, 2], mode="area")
    with pytest.raises(polyonnx.ModelError, match="mode"):
        polyonnx.InferenceSession(m)
