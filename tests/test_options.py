"""Options refuse values that cannot work, naming the field."""

from __future__ import annotations

import pytest

import polyonnx
from polyonnx.options import Options
from polyonnx.testing.examples import conv_model


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"opt_level": 4}, "opt_level must be 0..3"),
        ({"num_threads": 0}, "num_threads must be >= 1"),
        ({"max_tensor_bytes": 0}, "max_tensor_bytes must be >= 1"),
        ({"isl_max_operations": 0}, "isl_max_operations must be >= 1"),
    ],
)
def test_out_of_range_values_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Options(**fields)


@pytest.mark.parametrize("threads", [2.0, "2", True])
def test_num_threads_must_be_an_int(threads: object) -> None:
    with pytest.raises(TypeError, match="num_threads must be an int or None"):
        Options(num_threads=threads)  # type: ignore[arg-type]


def test_options_given_where_num_threads_goes_says_how_to_pass_them() -> None:
    """``InferenceSession(model, Options(...))``: the options are its third argument."""
    with pytest.raises(TypeError, match=r"pass options as options=Options\(\.\.\.\)"):
        polyonnx.InferenceSession(conv_model(), Options(num_threads=1))  # type: ignore[arg-type]
