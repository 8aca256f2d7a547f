"""StringNormalizer, StringConcat and Equal of strings, compiled: against onnx.reference where
it follows the spec (ASCII) and against the spec written out in Python (``_normalized``) where
it does not (it strips accents; polyonnx, like onnxruntime, does not)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx import pipeline
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

S = TensorProto.STRING
DAYS = ["Monday", "tuesday", "monday", "WEDNESDAY", "", "thursday"]


def _normalizer(shape: tuple[int | None, ...] = (None,), **attrs: object) -> onnx.ModelProto:
    node = helper.make_node("StringNormalizer", ["x"], ["y"], name="sn", **attrs)
    return model([node], [tensor("x", shape, S)], [tensor("y", [None] * len(shape), S)], opset=13)


def _run(m: onnx.ModelProto, **feeds: np.ndarray) -> list[np.ndarray]:
    return polyonnx.InferenceSession(m).run(None, feeds)


def _changed(s: str, action: str) -> str:
    """The case change of the spec, one code point at a time (one-to-one mappings only)."""
    if action == "NONE":
        return s
    change = str.lower if action == "LOWER" else str.upper
    return "".join(c if len(change(c)) != 1 or ord(c) > 0xFFFF else change(c) for c in s)


def _normalized(
    xs: list[str], action: str = "NONE", stopwords: tuple[str, ...] = (), sensitive: int = 0
) -> list[str]:
    """The spec: stopwords removed (compared as they are, or both lower-cased), the rest
    case-changed, and one empty string when nothing is left."""
    fold = (lambda s: s) if sensitive else (lambda s: _changed(s, "LOWER"))
    stops = {fold(w) for w in stopwords}
    kept = [_changed(x, action) for x in xs if fold(x) not in stops]
    return kept or [""]


@pytest.mark.parametrize("action", ["NONE", "LOWER", "UPPER"])
@pytest.mark.parametrize("sensitive", [0, 1])
def test_modes_match_the_reference(action: str, sensitive: int) -> None:
    m = _normalizer(case_change_action=action, is_case_sensitive=sensitive, stopwords=["monday"])
    x = np.array(DAYS, dtype=object)
    [got] = _run(m, x=x)
    [ref] = onnx_reference_outputs(m, {"x": x})
    assert got.dtype == object
    np.testing.assert_array_equal(got, _normalized(DAYS, action, ("monday",), sensitive))
    if action != "NONE" or sensitive:  # (onnx.reference compares "Monday" as it is then)
        # (onnx.reference drops empty strings, which the spec keeps: compare the others.)
        np.testing.assert_array_equal(got[got != ""], ref)


def test_without_stopwords_the_shape_is_static() -> None:
    m = _normalizer((4,), case_change_action="UPPER")
    graph = pipeline.to_graph(m, string_widths={"x": 3})
    assert str(graph.outputs[0]) == "y: U3[4]"
    [got] = _run(m, x=np.array(["ab", "Cd", "", "e"], dtype=object))
    np.testing.assert_array_equal(got, ["AB", "CD", "", "E"])


def test_every_string_removed_gives_one_empty_string() -> None:
    m = _normalizer(stopwords=["monday"], case_change_action="UPPER")
    [got] = _run(m, x=np.array(["monday", "MONDAY", "Monday"], dtype=object))
    assert got.shape == (1,) and got[0] == ""
    [got] = _run(m, x=np.array([], dtype=object))  # nothing to remove, nothing left
    np.testing.assert_array_equal(got, [""])


def test_two_dimensional_input() -> None:
    m = _normalizer((1, None), stopwords=["monday"], case_change_action="LOWER")
    x = np.array([DAYS], dtype=object)
    [got] = _run(m, x=x)
    [ref] = onnx_reference_outputs(m, {"x": x})
    assert got.shape == (1, 4)
    np.testing.assert_array_equal(got, [_normalized(DAYS, "LOWER", ("monday",))])
    np.testing.assert_array_equal(got[got != ""].reshape(1, -1), ref)
    [empty] = _run(m, x=np.array([["Monday", "monday"]], dtype=object))
    np.testing.assert_array_equal(empty, [[""]])


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_non_ascii_strings(action: str) -> None:
    xs = ["École", "straße", "ǅemal", "İstanbul", "Ωμέγα", "𝔘nicode", "日本"]
    m = _normalizer(case_change_action=action, stopwords=["ΩΜΈΓΑ"], is_case_sensitive=0)
    [got] = _run(m, x=np.array(xs, dtype=object))
    np.testing.assert_array_equal(got, _normalized(xs, action, ("ΩΜΈΓΑ",)))
    assert "Ωμέγα".upper() not in got and ("STRASSE" not in got)  # no one-to-many mapping


def test_stopwords_case_sensitive_or_not() -> None:
    xs = ["Straße", "straße", "STRASSE", "ÉCOLE", "école"]
    stops = ("straße", "École", "a-stopword-longer-than-any-input")
    for sensitive in (0, 1):
        m = _normalizer(stopwords=list(stops), is_case_sensitive=sensitive)
        [got] = _run(m, x=np.array(xs, dtype=object))
        np.testing.assert_array_equal(got, _normalized(xs, "NONE", stops, sensitive))
    assert list(got) == ["Straße", "STRASSE", "ÉCOLE", "école"]


def test_case_table_is_a_weight_and_the_loops_read_code_points() -> None:
    m = _normalizer((3,), case_change_action="UPPER", stopwords=["a"])
    program = pipeline.lower(pipeline.to_graph(m, string_widths={"x": 5}))
    [kernel] = program.kernels
    buffers = {b.name: (b.dtype, b.shape, b.kind) for b in kernel.buffers}
    assert buffers["x"] == ("uint32", (3, 5), "input")
    assert buffers["y"] == ("uint32", (3, 5), "output")
    assert buffers["sn__upper"] == ("uint32", (65536,), "input")
    assert buffers["sn__stopwords"] == ("uint32", (1, 5), "input")


def test_a_constant_input_runs_in_the_loops() -> None:
    # (Not folded by onnx.reference, which would strip the accent.)
    node = helper.make_node(
        "Constant", [], ["c"], value=helper.make_tensor("v", S, [2], [b"\xc3\xa9t\xc3\xa9", b"a"])
    )
    sn = helper.make_node("StringNormalizer", ["c"], ["y"], case_change_action="UPPER")
    [got] = _run(model([node, sn], [], [tensor("y", [None], S)], opset=13))
    np.testing.assert_array_equal(got, ["ÉTÉ", "A"])


def _binary(op: str, a: list, b: list, opset: int = 20) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("y", TensorProto.BOOL if op == "Equal" else S, None)
    node = helper.make_node(op, ["a", "b"], ["y"], name="op")
    ins = [tensor("a", [None] * np.ndim(a), S), tensor("b", [None] * np.ndim(b), S)]
    return model([node], ins, [out], opset=opset)


@pytest.mark.parametrize("op", ["Equal", "StringConcat"])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (["abc", "", "ab", "é"], ["abc", "", "abcdefghij", "e"]),
        ([["x", "xy"], ["", "xyz"]], ["xy"]),
        ("à", ["", "à", "àà"]),
    ],
)
def test_equal_and_concat_match_the_reference(op: str, a: list, b: list) -> None:
    m = _binary(op, a, b)
    feeds = {"a": np.array(a, dtype=object), "b": np.array(b, dtype=object)}
    [got] = _run(m, **feeds)
    [ref] = onnx_reference_outputs(m, feeds)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_other_ops_on_strings_are_refused() -> None:
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat")
    m = model([node], [tensor("a", [2], S), tensor("b", [2], S)], [tensor("y", [4], S)])
    with pytest.raises(polyonnx.errors.InputError, match="op Concat .*: string tensors") as e:
        _run(m, a=np.array(["a", "b"], dtype=object), b=np.array(["c", "d"], dtype=object))
    assert isinstance(e.value.__cause__, polyonnx.errors.UnsupportedOpError)
