"""Col2Im against the ONNX reference: strides, pads, dilations, 1-D to 3-D images."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [
        ([7], [3], {"strides": [2], "pads": [1, 2]}),
        ([6, 7], [2, 3], {"dilations": [2, 1], "strides": [1, 2], "pads": [1, 0, 0, 1]}),
        ([4, 3, 5], [2, 1, 3], {"strides": [2, 1, 1]}),
    ],
)
def test_col2im(image: list[int], block: list[int], attrs: dict[str, list[int]]):
    rank = len(image)
    dil, strides = attrs.get("dilations", [1] * rank), attrs.get("strides", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    blocks = [
        (image[d] + pads[d] + pads[rank + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(rank)
    ]
    shape = [2, 3 * int(np.prod(block)), int(np.prod(blocks))]
    m = model(
        [helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)],
        [tensor("x", shape)],
        [tensor("y", [2, 3, *image])],
        [
            numpy_helper.from_array(np.array(image, np.int64), "image"),
            numpy_helper.from_array(np.array(block, np.int64), "block"),
        ],
        opset=18,
    )
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    (ref,) = onnx_reference_outputs(m, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attr", ["strides", "dilations"])
def test_non_positive_strides_and_dilations_are_refused(attr: str) -> None:
    m = model(
        [helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **{attr: [0, 1]})],
        [tensor("x", [1, 4, 9])],
        [tensor("y", [1, 1, 4, 4])],
        [
            numpy_helper.from_array(np.array([4, 4], np.int64), "image"),
            numpy_helper.from_array(np.array([2, 2], np.int64), "block"),
        ],
        opset=18,
    )
    with pytest.raises(polyonnx.errors.ModelError, match=f"'{attr}' must be positive"):
        polyonnx.InferenceSession(m)
