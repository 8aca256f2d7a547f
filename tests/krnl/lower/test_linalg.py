"""Det against onnxruntime (interpreted krnl) and numpy (compiled): pivoting, row swaps,
singular matrices, batches, 1x1 and float64."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import polyonnx
from tests.krnl.harness import check_op, rand
from tests.reliability.models import model, tensor


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (5, 5), (2, 4, 4), (2, 3, 3, 3)])
def test_det_random(shape: tuple[int, ...]) -> None:
    check_op("Det", [("x", rand(*shape))], rtol=1e-4, atol=1e-5)


def test_det_needs_pivoting() -> None:
    # A zero leading entry: without a row swap the elimination divides by 0.
    x = np.array([[0.0, 2.0, 1.0], [3.0, 4.0, 5.0], [1.0, 0.0, 2.0]], np.float32)
    check_op("Det", [("x", x)])


def test_det_singular_is_zero() -> None:
    x = np.array(
        [
            [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]],  # two dependent rows
            [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],  # a zero row
            [[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 5.0, 6.0]],  # a zero column
        ],
        np.float32,
    )
    check_op("Det", [("x", x)], atol=1e-5)


def test_det_compiled_float64_and_ties() -> None:
    # Equal magnitudes in the pivot column: the first is taken (as LAPACK), and the compiled
    # code agrees with numpy in float64.
    x = np.array(
        [
            [[2.0, 1.0, 0.0], [-2.0, 3.0, 1.0], [2.0, 0.0, 5.0]],
            [[1.0, 2.0, 0.0], [3.0, 1.0, 2.0], [0.5, 0.0, 1.0]],
        ],
        np.float64,
    )
    m = model(
        [helper.make_node("Det", ["x"], ["y"])],
        [tensor("x", [2, 3, 3], TensorProto.DOUBLE)],
        [tensor("y", [2], TensorProto.DOUBLE)],
        opset=13,
    )
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12)
