"""String feeds and outputs at the session boundary: marshalling to fixed-width code points,
the widths a session compiles for, and the errors for what is not a string (or should not be)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import InputError
from polyonnx.runtime.session import WIDTH_STEP
from tests.reliability.models import model, relu, tensor

S = TensorProto.STRING


@pytest.fixture(scope="module")
def upper() -> polyonnx.InferenceSession:
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER")
    return polyonnx.InferenceSession(
        model([node], [tensor("x", [None], S)], [tensor("y", [None], S)], opset=13)
    )


def test_inputs_and_outputs_are_strings(upper: polyonnx.InferenceSession) -> None:
    assert [(a.name, a.type) for a in upper.get_inputs()] == [("x", "tensor(string)")]
    [y] = upper.run(None, {"x": np.array(["ab", "ç"], dtype=object)})
    assert y.dtype == object and y.tolist() == ["AB", "Ç"]


@pytest.mark.parametrize(
    "feed",
    [["ab", "cd"], np.array(["ab", "cd"]), np.array([b"ab", b"cd"], dtype=object)],
    ids=["list", "numpy-unicode", "utf8-bytes"],
)
def test_feeds_of_every_string_form(upper: polyonnx.InferenceSession, feed: object) -> None:
    [y] = upper.run(None, {"x": feed})
    assert y.tolist() == ["AB", "CD"]


def test_widths_share_a_program_up_to_the_step(upper: polyonnx.InferenceSession) -> None:
    short, longer = "a" * (WIDTH_STEP - 1), "b" * (WIDTH_STEP + 1)
    before = len(upper._by_shapes)
    upper.run(None, {"x": np.array(["", "z"], dtype=object)})
    upper.run(None, {"x": np.array([short, "z"], dtype=object)})
    assert len(upper._by_shapes) <= before + 1
    [y] = upper.run(None, {"x": np.array([longer, short], dtype=object)})
    assert y.tolist() == [longer.upper(), short.upper()]
    assert any(exe.inputs[0].dtype == f"U{2 * WIDTH_STEP}" for exe in upper._by_shapes.values())


@pytest.mark.parametrize(
    ("feed", "message"),
    [
        (np.array([1.0, 2.0], np.float32), r"expected strings \(tensor\(string\)\), got dtype"),
        (np.array(["a", 3], dtype=object), "expected strings, found int 3"),
        (np.array([b"\xff"], dtype=object), "'utf-8' codec can't decode"),
        (np.array(["a\0b"], dtype=object), "string '.*' holds the code point 0"),
    ],
)
def test_what_is_not_a_string_is_refused(
    upper: polyonnx.InferenceSession, feed: np.ndarray, message: str
) -> None:
    with pytest.raises(InputError, match=f"input 'x': {message}"):
        upper.run(None, {"x": feed})


def test_strings_where_numbers_are_expected_are_refused() -> None:
    sess = polyonnx.InferenceSession(relu())
    for feed in (np.full((2, 3), "a"), np.full((2, 3), "a", dtype=object)):
        with pytest.raises(InputError, match=r"input 'x': expected dtype float32"):
            sess.run(None, {"x": feed})


def test_string_views_keep_their_strings() -> None:
    """Reshape, Squeeze, Unsqueeze and Flatten move strings as they move numbers (scikit-learn's
    classifiers reshape their string labels)."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes"], ["s"]),
        helper.make_node("Flatten", ["s"], ["f"], axis=0),
        helper.make_node("StringNormalizer", ["f"], ["n"], case_change_action="UPPER"),
    ]
    m = model(
        nodes,
        [tensor("x", [6], S)],
        [tensor("u", [1, 3, 2], S), tensor("f", [1, 6], S), tensor("n", [1, 6], S)],
        opset=13,
        inits=[shape, axes],
    )
    x = np.array(["a", "bb", "", "dddd", "é", "f"], dtype=object)
    u, f, n = polyonnx.InferenceSession(m).run(None, {"x": x})
    assert u.tolist() == [x.reshape(3, 2).tolist()]
    assert f.tolist() == [x.tolist()]
    assert n.tolist() == [["A", "BB", "", "DDDD", "É", "F"]]
