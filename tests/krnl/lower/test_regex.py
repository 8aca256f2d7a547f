"""RegexFullMatch, compiled: against ``onnx.reference`` (``re.fullmatch``) on chosen and random
strings, the tables as the loops' constants, and the refusals."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import polyonnx
from polyonnx import pipeline
from polyonnx.errors import InputError, ModelError, UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

S = TensorProto.STRING
TEXTS = [
    "",
    "abc",
    "ab1",
    "a b",
    "x@gmail.com",
    " x@yahoo.com!",
    "été",
    "Ωmega\n",
    "\u0663\u0664",  # Arabic-Indic digits: \d in Unicode
    "a\u3000b",  # ideographic space: \s in Unicode
    "😀😁",
    "ABC",
]


def _regex(pattern: str, shape: list[int | None] | None = None) -> onnx.ModelProto:
    shape = [None] if shape is None else shape
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], name="rf", pattern=pattern)
    out = helper.make_tensor_value_info("y", TensorProto.BOOL, shape)
    return model([node], [tensor("x", shape, S)], [out], opset=20)


def _check(pattern: str, texts: np.ndarray) -> None:
    m = _regex(pattern, [None] * texts.ndim)
    [got] = polyonnx.InferenceSession(m).run(None, {"x": texts})
    [ref] = onnx_reference_outputs(m, {"x": texts})
    assert got.dtype == np.bool_ and got.shape == texts.shape
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a-c]+\d?",
        r"[^a-c]*",
        r"(ab|a)(c|bcd)?",
        r".{3}",
        r"\w+\s\w+",
        r"\d+",
        r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)",
        r"^é.é$",
        r"(?i)abc",
        r"\bab",
        r"[😀-😂]+",
        r"",
    ],
)
def test_matches_the_reference(pattern: str) -> None:
    _check(pattern, np.array(TEXTS, dtype=object))


def test_two_dimensional_and_scalar_inputs() -> None:
    _check(r"a.*", np.array([["ab", "ba"], ["a", ""]], dtype=object))
    _check(r"a.*", np.array("abc", dtype=object))


def test_empty_input() -> None:
    _check(r"a", np.zeros((2, 0), dtype=object))


@pytest.mark.parametrize("pattern", [r"(a|b)*a(b|c)?\d", r"[^\s]+( \w+)*", r"\b\w.\B"])
@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="abc1\u0663 é\n", max_size=8), min_size=8, max_size=8))
def test_random_strings_match_re_fullmatch(pattern: str, texts: list[str]) -> None:
    # (8 strings of at most 8 code points: one compiled program per pattern.)
    session = _sessions.setdefault(pattern, polyonnx.InferenceSession(_regex(pattern, [8])))
    [got] = session.run(None, {"x": np.array(texts, dtype=object)})
    assert got.tolist() == [bool(re.fullmatch(pattern, t)) for t in texts]


_sessions: dict[str, polyonnx.InferenceSession] = {}


def test_the_dfa_is_constant_tables_read_by_the_loops() -> None:
    program = pipeline.lower(pipeline.to_graph(_regex(r"[a-z]+\d", [3]), string_widths={"x": 4}))
    [kernel] = program.kernels
    buffers = {b.name: (b.dtype, b.shape, b.kind) for b in kernel.buffers}
    assert buffers["x"] == ("uint32", (3, 4), "input")
    assert buffers["rf__bounds"][0] == "uint32"
    assert buffers["rf__delta"][:2] == ("int32", (4, 4))  # start, letters, digit, dead
    assert buffers["rf__accept"][:2] == ("bool", (4,))


@pytest.mark.parametrize(
    ("pattern", "what"),
    [(r"(a)\1", "a backreference"), (r"a(?=b)", "a lookahead"), (r"(a|b)*a(a|b){14}", "DFA")],
)
def test_refuses_what_no_dfa_expresses(pattern: str, what: str) -> None:
    with pytest.raises(InputError, match=re.escape(what)) as e:
        polyonnx.InferenceSession(_regex(pattern)).run(None, {"x": np.array(["a"], dtype=object)})
    assert isinstance(e.value.__cause__, UnsupportedOpError)
    assert "RegexFullMatch" in str(e.value) and "'rf'" in str(e.value)


@pytest.mark.parametrize("pattern", ["(ab", None])
def test_a_bad_or_missing_pattern_is_a_model_error(pattern: str | None) -> None:
    m = _regex("a")
    if pattern is None:
        del m.graph.node[0].attribute[:]
    else:
        m.graph.node[0].attribute[0].s = pattern.encode()
    with pytest.raises((ModelError, InputError), match="pattern") as e:
        polyonnx.InferenceSession(m).run(None, {"x": np.array(["a"], dtype=object)})
    assert isinstance(e.value, ModelError) or isinstance(e.value.__cause__, ModelError)
