"""Resize vs onnxruntime: nearest modes, coordinate transformations, linear, cubic, sizes,
axes, tf_crop_and_resize extrapolation."""

from __future__ import annotations

import numpy as np
import pytest

import polyonnx
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import check, check_op, make_model, rand

F = np.float32


def _resize(
    attrs: dict,
    scales: list[float] | None = None,
    sizes: list[int] | None = None,
    roi: list[float] | None = None,
    x: np.ndarray | None = None,
) -> None:
    x = rand(1, 2, 4, 4) if x is None else x
    inputs = [
        ("x", x),
        ("roi", np.array(roi, F)) if roi is not None else ("", None),
        ("scales", np.array(scales, F)) if scales is not None else ("", None),
    ]
    if sizes is not None:
        inputs.append(("sizes", np.array(sizes, np.int64)))
    check_op(
        "Resize",
        inputs,
        attrs,
        opset=19,
        constants=("roi", "scales", "sizes"),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("ctm", ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
def test_nearest(nearest_mode: str, ctm: str) -> None:
    _resize(
        {"mode": "nearest", "nearest_mode": nearest_mode, "coordinate_transformation_mode": ctm},
        scales=[1, 1, 1.75, 0.5],
    )


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "ctm",
    ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"],
)
def test_linear_cubic(mode: str, ctm: str) -> None:
    _resize({"mode": mode, "coordinate_transformation_mode": ctm}, scales=[1, 1, 2, 0.75])


def test_sizes_axes_and_policy() -> None:
    _resize({"mode": "linear", "axes": [3, 2]}, sizes=[3, 7])
    _resize({"mode": "nearest", "keep_aspect_ratio_policy": "not_larger"}, sizes=[1, 2, 7, 5])


def test_cubic_exclude_outside_and_a() -> None:
    _resize({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, scales=[1, 1, 0.8, 1.6])


def test_tf_crop_and_resize() -> None:
    _resize(
        {
            "mode": "linear",
            "coordinate_transformation_mode": "tf_crop_and_resize",
            "extrapolation_value": 10.0,
        },
        sizes=[1, 2, 3, 3],
        roi=[0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7],
    )


def test_uint8_nearest_and_linear() -> None:
    x = (np.arange(32) * 7 % 256).astype(np.uint8).reshape(1, 2, 4, 4)
    _resize({"mode": "nearest"}, scales=[1, 1, 2, 2], x=x)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_ceil", "floor"])
def test_tf_half_pixel_for_nn_opset11(nearest_mode: str) -> None:
    """tf2onnx's nearest resize with half_pixel_centers (opset 11 only): x = (y + 0.5) / scale,
    no half-pixel shift back; onnxruntime runs it, it was refused as an unknown mode."""
    check_op(
        "Resize",
        [
            ("x", rand(1, 2, 5, 4)),
            ("roi", np.array([], F)),
            ("scales", np.array([1, 1, 2, 1.5], F)),
        ],
        {
            "mode": "nearest",
            "nearest_mode": nearest_mode,
            "coordinate_transformation_mode": "tf_half_pixel_for_nn",
        },
        opset=11,
        constants=("roi", "scales"),
    )


@pytest.mark.parametrize(
    ("mode", "ctm", "shape", "scales"),
    [
        # float32 positions: 2 / float32(2/3) is 3.0 in float32, 2.99999991 in float64
        ("nearest", "asymmetric", (1, 1, 6, 3), [1, 1, 2 / 3, 1]),
        ("nearest", "pytorch_half_pixel", (1, 1, 5, 2), [1, 1, 0.6, 1]),
        # align_corners divides by the integer output length less one, not scale * in - 1
        ("linear", "align_corners", (1, 1, 2, 7), [1, 1, 1, 2.2]),
        ("cubic", "align_corners", (1, 1, 4, 4), [1, 1, 0.6, 0.6]),
        # pytorch_half_pixel to a single pixel reads position 0 (the spec), not -0.5
        ("cubic", "pytorch_half_pixel", (1, 1, 5, 4), [1, 1, 0.3, 1]),
    ],
)
def test_positions_as_onnxruntime_computes_them(
    mode: str, ctm: str, shape: tuple[int, ...], scales: list[float]
) -> None:
    # Wrong answers on YOLO/DeepLab-style non-integer factors: positions were computed in
    # float64 with onnx.reference's scale * in_w for the resized length.
    _resize(
        {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": "floor"},
        scales=scales,
        x=np.arange(np.prod(shape), dtype=F).reshape(shape),
    )


@pytest.mark.parametrize(
    ("attrs", "shape", "sizes"),
    [
        ({"mode": "linear"}, (1, 3, 7, 7), [1, 3, 112, 112]),  # DeepLab's 16x upsampling
        ({"mode": "cubic"}, (1, 2, 5, 6), [1, 2, 9, 4]),
        ({"mode": "linear", "antialias": 1}, (1, 2, 17, 13), [1, 2, 6, 5]),
        ({"mode": "linear"}, (1, 2, 3, 4, 5), [1, 2, 6, 7, 3]),  # trilinear
        ({"mode": "linear", "axes": [3, 2]}, (2, 3, 4, 5), [7, 9]),
    ],
)
def test_one_pass_per_interpolated_axis(attrs: dict, shape: tuple, sizes: list[int]) -> None:
    """Two or more interpolated axes run as one pass each (innermost first, through temps),
    compiled as well as interpreted, and give onnxruntime's values."""
    x = rand(*shape)
    model = make_model(
        "Resize",
        [("x", x), ("", None), ("", None), ("sizes", np.array(sizes, np.int64))],
        attrs,
        opset=19,
        constants={"sizes": np.array(sizes, np.int64)},
    )
    check(model, {"x": x})
    compiled = polyonnx.compile(model)
    [kernel] = compiled.program.kernels
    interpolated = sum(
        a != b for a, b in zip(shape, compiled.program.outputs[0].shape, strict=True)
    )
    assert len(kernel.body) == interpolated
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
