"""The ONNX node suite through polyonnx.backend: every case in expected_pass.txt must pass.

The whole suite (with pass/fail/unsupported counts and ``--update`` of the list) is
``python -m tests.backend.run_suite``; its last full run is read here only to warn about cases
that pass but are not listed.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from polyonnx import backend
from polyonnx.errors import UnsupportedOpError

from . import suite

EXPECTED = suite.read_expected()


@pytest.mark.parametrize("name", EXPECTED)
def test_node_case(name: str) -> None:
    suite.run_case(name)


def test_expected_list_is_sorted_and_known() -> None:
    assert sorted(set(EXPECTED)) == EXPECTED, "expected_pass.txt must be sorted, no repeats"
    unknown = [n for n in EXPECTED if n not in suite.all_cases()]
    assert not unknown, f"not in this onnx version's node suite: {unknown[:10]}"


def test_portable_cases_are_expected_to_pass_and_portable() -> None:
    portable = suite.read_portable()
    assert portable == sorted(set(portable)) and len(portable) >= 200
    assert set(portable) <= set(EXPECTED), "not in expected_pass.txt"
    cases = suite.load_cases()
    assert [n for n in portable if not suite.is_portable(cases[n])] == []


def test_unlisted_passes() -> None:
    """Warn (never fail) about cases the last full ``run_suite`` saw pass but the list lacks."""
    if not suite.LAST_RUN_FILE.exists():
        pytest.skip("no last_run.json: run `python -m tests.backend.run_suite`")
    results = json.loads(suite.LAST_RUN_FILE.read_text())
    listed = set(EXPECTED)
    new = sorted(n for n, r in results.items() if r["status"] == "pass" and n not in listed)
    if new:
        warnings.warn(
            f"{len(new)} node case(s) pass but are not in expected_pass.txt "
            f"(run `python -m tests.backend.run_suite --update`): {new[:20]}",
            stacklevel=1,
        )


# --------------------------------------------------------------------------- the backend API


def _add_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "add", [x], [y], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_prepare_run_positional_skips_initializers() -> None:
    rep = backend.prepare(_add_model(), "CPU")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = rep.run([x])
    np.testing.assert_array_equal(y, x + np.array([1, 2, 3], np.float32))
    assert rep.run({"x": x}).y.shape == (2, 3)


def test_prepare_is_cached_by_model_bytes() -> None:
    m = _add_model()
    assert backend.prepare(m).session is backend.prepare(m).session


def test_run_model_and_supports_device() -> None:
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(backend.run_model(_add_model(), [x])[0], x + [1, 2, 3])
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")


def test_run_node() -> None:
    node = helper.make_node("Mul", ["a", "b"], ["c"])
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2.0, np.float32)
    (c,) = backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a * b)


def test_unsupported_op_is_reported_at_prepare() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Bernoulli", ["x"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="Bernoulli"):
        backend.prepare(m)


def test_shape_determining_inputs_are_bound_per_value() -> None:
    """ReduceSum's axes as a graph input: compiled once per axes value, fed like any input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], "rs", [x, axes], [y]
    )
    rep = backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    for axis in (0, 1, 0):
        (out,) = rep.run([data, np.array([axis], np.int64)])
        np.testing.assert_array_equal(out, data.sum(axis=axis))
    assert len(rep._by_value) == 2


def test_sequence_inputs_and_outputs_travel_as_lists() -> None:
    # y = the input sequence with t inserted at the front; n = its length.
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(
        [
            helper.make_node("SequenceInsert", ["s", "t", "zero"], ["y"]),
            helper.make_node("SequenceLength", ["y"], ["n"]),
        ],
        "g",
        [seq, helper.make_tensor_value_info("t", TensorProto.FLOAT, ["k"])],
        [out, helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    rep = backend.prepare(helper.make_model(g), "CPU")
    a, b, t = (np.full(k, float(k), np.float32) for k in (2, 3, 4))
    y, n = rep.run([[a, b], t])
    assert [list(e) for e in y] == [list(t), list(a), list(b)] and n == 3
    y, n = rep.run([[], t])  # another length: compiled again
    assert [list(e) for e in y] == [list(t)] and n == 1


def test_optional_tensor_input_present_or_absent() -> None:
    opt = helper.make_value_info(
        "o",
        helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3])),
    )
    g = helper.make_graph(
        [helper.make_node("OptionalHasElement", ["o"], ["has"])],
        "g",
        [opt],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
    )
    rep = backend.prepare(helper.make_model(g), "CPU")
    assert bool(rep.run([np.zeros(3, np.float32)])[0])
    assert not bool(rep.run([None])[0])


def _optional_sequence(name: str) -> onnx.ValueInfoProto:
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    return helper.make_value_info(name, helper.make_optional_type_proto(seq))


def test_optional_sequence_inputs_and_outputs_are_none_or_lists() -> None:
    # y = the optional as it is; n = the length of its sequence, 0 when it is empty.
    g = helper.make_graph(
        [
            helper.make_node("Identity", ["o"], ["y"]),
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
        ],
        "g",
        [_optional_sequence("o")],
        [_optional_sequence("y"), helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
    )
    rep = backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]))
    a, b = np.ones(2, np.float32), np.arange(2, dtype=np.float32)
    y, has = rep.run([[a, b]])
    assert [list(e) for e in y] == [list(a), list(b)] and bool(has)
    y, has = rep.run([[]])  # present, but an empty sequence
    assert y == [] and bool(has)
    y, has = rep.run([None])  # empty
    assert y is None and not bool(has)


def test_an_optional_tensor_output_is_its_tensor_or_none() -> None:
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Optional", ["r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_value_info("y", opt)],
    )
    x = np.array([-1, 0, 2], np.float32)
    [y] = backend.run_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), [x])
    np.testing.assert_array_equal(y, [0, 0, 2])
