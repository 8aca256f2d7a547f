"""Graph outputs that are views of inputs own their memory and are ready before use."""

import numpy as np
from onnx import helper

import polyonnx
from tests.reliability.models import model, tensor


def test_a_view_of_an_input_that_is_an_output_and_also_consumed():
    # Regression (fuzz graph seed 194): the output's copy kernel runs before its readers.
    m = model(
        [helper.make_node("Flatten", ["x"], ["y"], axis=1), helper.make_node("Neg", ["y"], ["z"])],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3]), tensor("z", [2, 3])],
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, z = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, -x)


def test_an_output_and_an_identity_of_it_are_both_returned():
    # Regression: the Identity's output claimed the memory of the output it views, and the
    # other output was then "copied" from itself (left unwritten).
    m = model(
        [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Identity", ["t"], ["y"])],
        [tensor("x", [4])],
        [tensor("y", [4]), tensor("t", [4])],
    )
    x = np.array([-1.0, 0.0, 1.0, 2.0], np.float32)
    y, t = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(t, np.maximum(x, 0))
    np.testing.assert_array_equal(y, np.maximum(x, 0))
