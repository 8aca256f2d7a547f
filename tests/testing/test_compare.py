"""Output comparisons: the backend suite's element-wise check and the relative-error check."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.testing import ATOL, RTOL, assert_close, assert_relative_error, max_errors

F = np.float32


def test_max_errors_over_outputs():
    errors = max_errors(
        [np.array([1, 2], F), np.array([10], F)], [np.array([1, 2.5], F), np.array([8], F)]
    )
    assert (errors.absolute, errors.relative) == (2.0, 0.25)
    assert str(errors) == "max abs err 2, max rel err 0.25"


def test_max_errors_of_zero_references_and_other_shapes():
    zero = np.zeros(2, F)
    assert max_errors([zero], [zero]).relative == 0.0
    assert max_errors([np.ones(2, F)], [zero]).relative == float("inf")
    assert max_errors([np.ones(3, F)], [zero]).absolute == float("inf")


def test_assert_close_has_the_backend_suites_tolerances():
    assert (RTOL, ATOL) == (1e-3, 1e-7)
    want = np.array([1.0, -2.0, np.nan], F)
    assert_close([want * (1 + 0.9 * RTOL)], [want])
    with pytest.raises(AssertionError, match="output y"):
        assert_close([want * (1 + 2 * RTOL)], [want], names=["y"])


@pytest.mark.parametrize(
    "got,message",
    [
        ([np.ones((2, 1), F)], "shape"),
        ([np.ones(2, np.float64)], "dtype"),
        ([np.ones(2, F), np.ones(2, F)], "2 outputs"),
    ],
)
def test_assert_close_checks_shape_dtype_and_count(got, message):
    with pytest.raises(AssertionError, match=message):
        assert_close(got, [np.ones(2, F)])


def test_assert_relative_error_against_the_largest_value():
    want = np.array([100.0, 0.001], F)
    assert_relative_error([want + 0.05], [want], 1e-3)
    with pytest.raises(AssertionError, match="output 0: relative error 0.002 > 0.001"):
        assert_relative_error([want + 0.2], [want], 1e-3)
    with pytest.raises(AssertionError, match="not finite"):
        assert_relative_error([want], [np.array([np.inf, 0], F)], 1e-3)
