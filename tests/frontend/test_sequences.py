"""Sequences known at compile time: built, edited and read, compared with the ONNX reference;
a position known only at run time is refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor

I64 = TensorProto.INT64


def _i64(name: str, value: int | list[int]) -> object:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def test_build_edit_and_read():
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "c", "minus_one"], ["s2"]),  # a, c, b
        helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),  # c, b
        helper.make_node("SequenceAt", ["s3", "zero"], ["first"]),
        helper.make_node("SequenceLength", ["s2"], ["length"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SplitToSequence", ["a", "two"], ["parts"], axis=1),
        helper.make_node("ConcatFromSequence", ["parts"], ["rejoined"], axis=1),
        helper.make_node("SplitToSequence", ["b"], ["rows"], axis=0, keepdims=0),
        helper.make_node("SequenceAt", ["rows", "minus_one"], ["last_row"]),
    ]
    m = model(
        nodes,
        [tensor("a", [2, 3]), tensor("b", [2, 3]), tensor("c", [2, 3])],
        [
            tensor("first", [2, 3]),
            tensor("length", [], I64),
            tensor("stacked", [2, 3, 3]),
            tensor("rejoined", [2, 3]),
            tensor("last_row", [3]),
        ],
        [_i64("minus_one", -1), _i64("zero", 0), _i64("two", 2)],
    )
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((2, 3)).astype(np.float32) for k in "abc"}
    got = polyonnx.InferenceSession(m).run(None, feeds)
    ref = onnx_reference_outputs(m, feeds)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)


def test_position_known_only_at_run_time_is_refused():
    m = model(
        [
            helper.make_node("SequenceConstruct", ["a", "a"], ["s"]),
            helper.make_node("SequenceAt", ["s", "i"], ["y"]),
        ],
        [tensor("a", [2]), tensor("i", [], I64)],
        [tensor("y", [2])],
    )
    with pytest.raises(UnsupportedOpError, match="run time"):
        polyonnx.InferenceSession(m)


def test_sequence_map_through_its_function_body():
    # SequenceMap's ONNX function is a Loop over SequenceAt / SequenceInsert: unrolled.
    body = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "body",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m = model(
        [
            helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
            helper.make_node("SequenceMap", ["s"], ["t"], body=body),
            helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=0),
        ],
        [tensor("a", [2]), tensor("b", [2])],
        [tensor("y", [4])],
    )
    feeds = {"a": np.array([1, 2], np.float32), "b": np.array([3, 4], np.float32)}
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_array_equal(got, [-1, -2, -3, -4])


def test_split_known_only_at_run_time_is_refused():
    m = model(
        [
            helper.make_node("SplitToSequence", ["a", "k"], ["s"]),
            helper.make_node("SequenceAt", ["s", "zero"], ["y"]),
        ],
        [tensor("a", [4]), tensor("k", [], I64)],
        [tensor("y", [None])],
        [_i64("zero", 0)],
    )
    with pytest.raises(UnsupportedOpError, match="run time"):
        polyonnx.InferenceSession(m)


def test_optional_of_a_tensor():
    m = model(
        [
            helper.make_node("Optional", ["a"], ["o"]),
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("OptionalGetElement", ["o"], ["y"]),
            helper.make_node("OptionalHasElement", [], ["none"]),
        ],
        [tensor("a", [2])],
        [
            tensor("has", [], TensorProto.BOOL),
            tensor("y", [2]),
            tensor("none", [], TensorProto.BOOL),
        ],
        opset=18,
    )
    has, y, none = polyonnx.InferenceSession(m).run(None, {"a": np.array([1, 2], np.float32)})
    assert bool(has) and not bool(none)
    np.testing.assert_array_equal(y, [1, 2])
