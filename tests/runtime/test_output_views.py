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


def test_an_output_listed_twice_fills_both_slots():
    # Regression: buffers are bound to output slots by name, so the first of two outputs of
    # one name was never written (onnxruntime returns the value twice).
    m = model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3]), tensor("y", [2, 3])],
    )
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    sess = polyonnx.InferenceSession(m)
    assert [o.name for o in sess.get_outputs()] == ["y", "y"]
    a, b = sess.run(None, {"x": x})
    np.testing.assert_array_equal(a, np.maximum(x, 0))
    np.testing.assert_array_equal(b, np.maximum(x, 0))


def test_an_input_that_is_also_an_output_is_returned_unchanged():
    # Regression: the output slot took the input's name, so the model read its input from the
    # caller's output buffer.
    m = model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3]), tensor("x", [2, 3])],
    )
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    sess = polyonnx.InferenceSession(m)
    assert [o.name for o in sess.get_outputs()] == ["y", "x"]
    y, same = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_array_equal(same, x)
    assert sess.run(["x"], {"x": x})[0].tolist() == x.tolist()
