"""StringSplit, compiled: against ``onnx.reference`` (``str.split``) with and without a
delimiter and ``maxsplit``, the data-dependent extent of Y, a constant input, and the refusal
of Y as another node's input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import polyonnx
from polyonnx import pipeline
from polyonnx.errors import InputError, UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

S, I64 = TensorProto.STRING, TensorProto.INT64
TEXTS = [
    "",
    "a",
    "hello world",
    "  lead and trail  ",
    "a--b----c--",
    "--",
    "aaaaa",
    "x\u3000y\u00a0z\tw\nv",  # Unicode whitespace: ideographic, no-break space
    "été-à--",
    "😀 😁-😂",
]


def _split(shape: list[int | None], **attrs: object) -> onnx.ModelProto:
    node = helper.make_node("StringSplit", ["x"], ["y", "z"], name="ss", **attrs)
    outs = [tensor("y", [None] * (len(shape) + 1), S), tensor("z", [None] * len(shape), I64)]
    return model([node], [tensor("x", shape, S)], outs, opset=20)


def _check(texts: np.ndarray, **attrs: object) -> list[np.ndarray]:
    m = _split([None] * texts.ndim, **attrs)
    got = polyonnx.InferenceSession(m).run(None, {"x": texts})
    ref = onnx_reference_outputs(m, {"x": texts})
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape and (g.dtype == object) == (r.dtype == object)
        np.testing.assert_array_equal(g, r)
    return got


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"delimiter": ""},
        {"delimiter": "-"},
        {"delimiter": "--"},
        {"delimiter": "aa"},  # non-overlapping, left to right
        {"delimiter": " "},
        {"maxsplit": 0},
        {"maxsplit": 1},
        {"delimiter": "-", "maxsplit": 2},
        {"delimiter": "--", "maxsplit": 0},
        {"delimiter": "longer than any string"},
    ],
)
def test_matches_the_reference(attrs: dict[str, object]) -> None:
    _check(np.array(TEXTS, dtype=object), **attrs)


def test_the_extent_is_the_most_substrings() -> None:
    y, z = _check(np.array([["a b", "c"], ["d e f", ""]], dtype=object))
    assert y.shape == (2, 2, 3) and z.tolist() == [[2, 1], [3, 0]]
    y, z = _check(np.array(["", "  "], dtype=object))  # no substring anywhere
    assert y.shape == (2, 0) and z.tolist() == [0, 0]


def test_empty_and_scalar_inputs() -> None:
    _check(np.zeros((0,), dtype=object), delimiter=",")
    # (onnx.reference fails on a scalar: compared with str.split.)
    m = _split([], delimiter=",")
    y, z = polyonnx.InferenceSession(m).run(None, {"x": np.array("a,,b", dtype=object)})
    assert y.tolist() == ["a", "", "b"] and z.shape == () and int(z) == 3


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="ab- \u3000é", max_size=8), min_size=6, max_size=6))
def test_random_strings_split_as_python_does(texts: list[str]) -> None:
    # (6 strings of at most 8 code points: one compiled program per attribute set.)
    for attrs in ({"delimiter": "-b"}, {"maxsplit": 1}):
        key = str(attrs)
        if key not in _sessions:
            _sessions[key] = polyonnx.InferenceSession(_split([6], **attrs))
        y, z = _sessions[key].run(None, {"x": np.array(texts, dtype=object)})
        sep, most = attrs.get("delimiter"), attrs.get("maxsplit", -1)
        want = [t.split(sep, most) for t in texts]  # type: ignore[arg-type]
        assert z.tolist() == [len(w) for w in want]
        width = max(map(len, want))
        assert y.tolist() == [w + [""] * (width - len(w)) for w in want]


_sessions: dict[str, polyonnx.InferenceSession] = {}


def test_a_constant_input_gives_a_static_extent() -> None:
    value = helper.make_tensor("v", S, [2], [b"a.b.c", b"d"])
    c = helper.make_node("Constant", [], ["c"], value=value)
    node = helper.make_node("StringSplit", ["c"], ["y", "z"], name="ss", delimiter=".")
    m = model([c, node], [], [tensor("y", [None, None], S), tensor("z", [None], I64)], opset=20)
    graph = pipeline.to_graph(m)
    assert [str(v) for v in graph.outputs] == ["y: U5[2, 3]", "z: int64[2]"]
    y, z = polyonnx.InferenceSession(m).run(None, {})
    assert y.tolist() == [["a", "b", "c"], ["d", "", ""]] and z.tolist() == [3, 1]


def test_a_constant_scalar_input_is_split_at_run_time() -> None:
    value = helper.make_tensor("v", S, [], [b"a,b"])
    c = helper.make_node("Constant", [], ["c"], value=value)
    node = helper.make_node("StringSplit", ["c"], ["y", "z"], name="ss", delimiter=",")
    m = model([c, node], [], [tensor("y", [None], S), tensor("z", [], I64)], opset=20)
    y, z = polyonnx.InferenceSession(m).run(None, {})
    assert y.tolist() == ["a", "b"] and int(z) == 2


def test_the_counts_feed_other_nodes() -> None:
    node = helper.make_node("StringSplit", ["x"], ["y", "z"], name="ss")
    cast = helper.make_node("Cast", ["z"], ["f"], to=TensorProto.FLOAT)
    outs = [tensor("y", [2, None], S), tensor("f", [2])]
    m = model([node, cast], [tensor("x", [2], S)], outs, opset=20)
    y, f = polyonnx.InferenceSession(m).run(None, {"x": np.array(["a b c", "d"], dtype=object)})
    assert y.shape == (2, 3) and f.tolist() == [3.0, 1.0]


def test_substrings_read_by_another_node_are_refused() -> None:
    node = helper.make_node("StringSplit", ["x"], ["y", "z"], name="ss")
    cat = helper.make_node("StringConcat", ["y", "y"], ["w"], name="cat")
    outs = [tensor("w", [2, None], S), tensor("z", [2], I64)]
    m = model([node, cat], [tensor("x", [2], S)], outs, opset=20)
    with pytest.raises((UnsupportedOpError, InputError), match="data-dependent extent") as e:
        polyonnx.InferenceSession(m).run(None, {"x": np.array(["a b", "c"], dtype=object)})
    err = e.value if isinstance(e.value, UnsupportedOpError) else e.value.__cause__
    assert isinstance(err, UnsupportedOpError) and "'y'" in str(err)
