"""Loops whose trip count or condition is known only at run time, run by the entry point
(polyonnx.frontend.control.run_time_loop), vs onnxruntime. Every loop here ends after a few
iterations: trip counts and limits are small."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.control import UNROLL_LIMIT
from polyonnx.graph.loops import LOOP_ENTER
from polyonnx.pipeline import to_graph
from polyonnx.testing import onnxruntime_outputs

RNG = np.random.default_rng(20)
W = (RNG.standard_normal((4, 4)) * 0.5).astype(np.float32)
K = (RNG.standard_normal((2, 2, 3, 3)) * 0.3).astype(np.float32)


def _info(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


def _body(nodes, carried, extra_outputs=(), inits=()) -> onnx.GraphProto:
    """A Loop body taking (i, cond, *carried) and returning (cond_out, *carried + "_out")."""
    ins = [_info("i", T.INT64, []), _info("cond", T.BOOL, [])]
    ins += [_info(name, elem, shape) for name, elem, shape in carried]
    outs = [_info("cond_out", T.BOOL, [])]
    outs += [_info(f"{name}_out", elem, shape) for name, elem, shape in carried]
    outs += list(extra_outputs)
    return oh.make_graph(nodes, "body", ins, outs, list(inits))


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _check(m: onnx.ModelProto, feeds_list, sess=None) -> None:
    sess = sess or polyonnx.InferenceSession(m)
    for feeds in feeds_list:
        got = sess.run(None, feeds)
        for g, r in zip(got, onnxruntime_outputs(m, feeds), strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)


def _runs_as_a_loop(m: onnx.ModelProto) -> bool:
    return any(n.op_type == LOOP_ENTER for n in to_graph(m).nodes)


# --------------------------------------------------------------------- trip count, condition


def _accumulating_body() -> onnx.GraphProto:
    """``acc = acc * 0.5 + x * i`` (x: an outer-scope input), the condition passed through."""
    return _body(
        [
            oh.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            oh.make_node("Mul", ["x", "fi"], ["xi"]),
            oh.make_node("Mul", ["acc", "half"], ["h"]),
            oh.make_node("Add", ["h", "xi"], ["acc_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
        inits=[nh.from_array(np.array(0.5, np.float32), "half")],
    )


def test_a_trip_count_from_a_graph_input():
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=_accumulating_body(), name="lp")],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [3])],
    )
    assert _runs_as_a_loop(m)
    x, a0 = np.array([1, -2, 3], np.float32), np.array([4, 0, -1], np.float32)
    _check(m, [{"x": x, "a0": a0, "n": np.array(n, np.int64)} for n in (0, 1, 5, -2)])


def _counting_body() -> onnx.GraphProto:
    """``k += 1; acc = acc * 2 + x``; the condition ``k < limit`` (an outer-scope input)."""
    return _body(
        [
            oh.make_node("Add", ["k", "one"], ["k_out"]),
            oh.make_node("Mul", ["acc", "two"], ["twice"]),
            oh.make_node("Add", ["twice", "x"], ["acc_out"]),
            oh.make_node("Less", ["k_out", "limit"], ["cond_out"]),
        ],
        [("k", T.INT64, []), ("acc", T.FLOAT, [2, 3])],
        inits=[
            nh.from_array(np.array(1, np.int64), "one"),
            nh.from_array(np.array(2, np.float32), "two"),
        ],
    )


def _counting_model(trip: str, cond: str) -> onnx.ModelProto:
    inputs = [_info("x", T.FLOAT, [2, 3]), _info("limit", T.INT64, [])]
    inputs += [_info(trip, T.INT64, [])] if trip else []
    inputs += [_info(cond, T.BOOL, [])] if cond else []
    return _model(
        [oh.make_node("Loop", [trip, cond, "k0", "acc0"], ["k", "acc"], body=_counting_body())],
        inputs,
        [_info("k", T.INT64, []), _info("acc", T.FLOAT, [2, 3])],
        [
            nh.from_array(np.array(0, np.int64), "k0"),
            nh.from_array(np.zeros((2, 3), np.float32), "acc0"),
        ],
    )


def test_a_while_loop_whose_condition_the_body_computes():
    # No trip count, no condition input: a do-while (its first iteration is unrolled).
    m = _counting_model("", "")
    assert _runs_as_a_loop(m)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    _check(m, [{"x": x, "limit": np.array(lim, np.int64)} for lim in (-1, 1, 2, 7)])


def test_a_trip_count_and_a_condition_both_known_at_run_time():
    m = _counting_model("n", "go")
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    feeds = [
        {"x": x, "limit": np.array(lim, np.int64), "n": np.array(n, np.int64), "go": np.array(go)}
        for lim, n, go in ((4, 9, True), (9, 4, True), (5, 0, True), (5, 3, False), (0, 3, True))
    ]
    _check(m, feeds)


def test_a_known_trip_count_beyond_the_unrolling_limit_runs_as_a_loop():
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=_accumulating_body())],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3])],
        [_info("a", T.FLOAT, [3])],
        [nh.from_array(np.array(UNROLL_LIMIT + 44, np.int64), "n")],
    )
    graph = to_graph(m)
    assert sum(n.op_type == "Add" for n in graph.nodes) == 1  # the body, once
    x = np.array([1e-3, -2e-3, 0], np.float32)
    _check(m, [{"x": x, "a0": np.array([4, 0, -1], np.float32)}])


@pytest.mark.parametrize(("trip", "looped"), [(5, False), (100, True)])
def test_a_known_trip_count_unrolls_a_small_loop_only(trip: int, looped: bool):
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=_accumulating_body())],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3])],
        [_info("a", T.FLOAT, [3])],
        [nh.from_array(np.array(trip, np.int64), "n")],
    )
    assert _runs_as_a_loop(m) == looped
    x = np.array([1e-2, -2e-2, 0], np.float32)
    _check(m, [{"x": x, "a0": np.array([4, 0, -1], np.float32)}])


def test_scan_outputs_keep_a_longer_known_loop_unrolled():
    body = _body(
        [
            oh.make_node("Add", ["acc", "one"], ["acc_out"]),
            oh.make_node("Identity", ["acc_out"], ["scan"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [2])],
        [_info("scan", T.FLOAT, [2])],
        [nh.from_array(np.array(1, np.float32), "one")],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a", "s"], body=body)],
        [_info("a0", T.FLOAT, [2])],
        [_info("a", T.FLOAT, [2]), _info("s", T.FLOAT, [100, 2])],
        [nh.from_array(np.array(100, np.int64), "n")],
    )
    assert not _runs_as_a_loop(m)
    _check(m, [{"a0": np.array([0, -1], np.float32)}])


# --------------------------------------------------------------------- what the body does


def test_a_state_updated_by_a_matmul_reading_outer_values():
    # h = tanh(h @ W + y) with y = Relu(x) computed before the loop and read only by the
    # body's first kernel: its memory must stay live through every iteration.
    body = _body(
        [
            oh.make_node("MatMul", ["h", "w"], ["hw"]),
            oh.make_node("Add", ["hw", "y"], ["pre"]),
            oh.make_node("Tanh", ["pre"], ["t"]),
            oh.make_node("Exp", ["t"], ["e"]),
            oh.make_node("Softmax", ["e"], ["s"], axis=-1),
            oh.make_node("Sub", ["t", "s"], ["h_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("h", T.FLOAT, [2, 4])],
    )
    m = _model(
        [
            oh.make_node("Relu", ["x"], ["y"]),
            oh.make_node("Loop", ["n", "", "h0"], ["h"], body=body),
            oh.make_node("Neg", ["h"], ["z"]),
        ],
        [_info("x", T.FLOAT, [2, 4]), _info("h0", T.FLOAT, [2, 4]), _info("n", T.INT64, [])],
        [_info("z", T.FLOAT, [2, 4])],
        [nh.from_array(W, "w")],
    )
    x, h0 = (RNG.standard_normal((2, 4)).astype(np.float32) for _ in range(2))
    _check(m, [{"x": x, "h0": h0, "n": np.array(n, np.int64)} for n in (0, 1, 4)])


def test_a_state_updated_by_a_convolution():
    body = _body(
        [
            oh.make_node("Conv", ["f", "k"], ["c"], pads=[1, 1, 1, 1]),
            oh.make_node("Relu", ["c"], ["r"]),
            oh.make_node("Add", ["r", "f"], ["f_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("f", T.FLOAT, [1, 2, 5, 5])],
        inits=[nh.from_array(K, "k")],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "f0"], ["f"], body=body)],
        [_info("f0", T.FLOAT, [1, 2, 5, 5]), _info("n", T.INT64, [])],
        [_info("f", T.FLOAT, [1, 2, 5, 5])],
    )
    f0 = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    _check(m, [{"f0": f0, "n": np.array(n, np.int64)} for n in (0, 3)])


def test_nodes_outside_the_loop_are_not_scheduled_inside_it():
    # z = y + Neg(x) joins y's group (Neg(x) is an output too), so the body's ReduceSum(y)
    # waits for Neg, which comes after the Loop in the model: the kernels of Neg and of y
    # must still not run between the body's first kernel (ReduceSum(acc)) and its others.
    body = _body(
        [
            oh.make_node("ReduceSum", ["acc"], ["sa"], keepdims=1),
            oh.make_node("ReduceSum", ["y"], ["sy"], keepdims=1),
            oh.make_node("Add", ["acc", "sa"], ["u"]),
            oh.make_node("Add", ["u", "sy"], ["acc_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
    )
    m = _model(
        [
            oh.make_node("Relu", ["x"], ["y"]),
            oh.make_node("Loop", ["n", "", "a0"], ["a"], body=body),
            oh.make_node("Neg", ["x"], ["w"]),
            oh.make_node("Add", ["y", "w"], ["z"]),
        ],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [3]), _info("z", T.FLOAT, [3]), _info("w", T.FLOAT, [3])],
    )
    x, a0 = np.array([0.5, -1, 0.25], np.float32), np.array([1, 0, -1], np.float32)
    _check(m, [{"x": x, "a0": a0, "n": np.array(n, np.int64)} for n in (0, 3)])


def test_an_if_inside_the_body_on_the_iteration_number():
    then = oh.make_graph(
        [oh.make_node("Add", ["acc", "x"], ["p"])], "then", [], [_info("p", T.FLOAT, [3])]
    )
    other = oh.make_graph(
        [oh.make_node("Mul", ["acc", "x"], ["q"])], "else", [], [_info("q", T.FLOAT, [3])]
    )
    body = _body(
        [
            oh.make_node("Mod", ["i", "two"], ["odd"]),
            oh.make_node("Equal", ["odd", "zero"], ["even"]),
            oh.make_node("If", ["even"], ["acc_out"], then_branch=then, else_branch=other),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
        inits=[
            nh.from_array(np.array(2, np.int64), "two"),
            nh.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=body)],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [3])],
    )
    x, a0 = np.array([1.5, -1, 0.5], np.float32), np.array([1, 2, 3], np.float32)
    _check(m, [{"x": x, "a0": a0, "n": np.array(n, np.int64)} for n in (0, 1, 2, 5)])


def test_loop_carried_values_that_swap():
    # (a, b) -> (b, a + b): the copy into a must not be read back for b.
    body = _body(
        [
            oh.make_node("Add", ["a", "b"], ["s"]),
            oh.make_node("Identity", ["b"], ["a_out"]),
            oh.make_node("Identity", ["s"], ["b_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("a", T.FLOAT, [2]), ("b", T.FLOAT, [2])],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0", "b0"], ["a", "b"], body=body)],
        [_info("a0", T.FLOAT, [2]), _info("b0", T.FLOAT, [2]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [2]), _info("b", T.FLOAT, [2])],
    )
    a0, b0 = np.array([0, 1], np.float32), np.array([1, 1], np.float32)
    _check(m, [{"a0": a0, "b0": b0, "n": np.array(n, np.int64)} for n in (0, 1, 6)])


def test_a_loop_output_given_twice():
    # c = Identity(a) is a second output of a's buffer: its copy goes after the whole loop.
    body = _body(
        [
            oh.make_node("Add", ["a", "b"], ["a_out"]),
            oh.make_node("Mul", ["b", "b"], ["b_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("a", T.FLOAT, [2]), ("b", T.FLOAT, [2])],
    )
    m = _model(
        [
            oh.make_node("Loop", ["n", "", "a0", "b0"], ["a", "b"], body=body),
            oh.make_node("Identity", ["a"], ["c"]),
        ],
        [_info("a0", T.FLOAT, [2]), _info("b0", T.FLOAT, [2]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [2]), _info("c", T.FLOAT, [2]), _info("b", T.FLOAT, [2])],
    )
    a0, b0 = np.array([0, 1], np.float32), np.array([1, 1.1], np.float32)
    _check(m, [{"a0": a0, "b0": b0, "n": np.array(n, np.int64)} for n in (0, 1, 3)])


def test_a_run_time_loop_in_a_branch_of_a_run_time_if():
    loop = oh.make_node("Loop", ["n", "", "a0"], ["looped"], body=_accumulating_body())
    then = oh.make_graph([loop], "then", [], [_info("looped", T.FLOAT, [3])])
    other = oh.make_graph(
        [oh.make_node("Neg", ["a0"], ["negated"])], "else", [], [_info("negated", T.FLOAT, [3])]
    )
    m = _model(
        [oh.make_node("If", ["go"], ["a"], then_branch=then, else_branch=other)],
        [
            _info("x", T.FLOAT, [3]),
            _info("a0", T.FLOAT, [3]),
            _info("n", T.INT64, []),
            _info("go", T.BOOL, []),
        ],
        [_info("a", T.FLOAT, [3])],
    )
    x, a0 = np.array([1, -2, 3], np.float32), np.array([4, 0, -1], np.float32)
    feeds = [
        {"x": x, "a0": a0, "n": np.array(n, np.int64), "go": np.array(go)}
        for n, go in ((3, True), (3, False), (0, True))
    ]
    _check(m, feeds)


def test_a_run_time_loop_inside_a_run_time_loop():
    inner = _body(
        [
            oh.make_node("Add", ["acc", "x"], ["acc_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
    )
    outer = _body(
        [
            oh.make_node("Loop", ["i", "", "acc"], ["inner"], body=inner),
            oh.make_node("Mul", ["inner", "half"], ["acc_out"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
        inits=[nh.from_array(np.array(0.5, np.float32), "half")],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=outer)],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [3])],
    )
    x, a0 = np.array([1, -2, 3], np.float32), np.array([4, 0, -1], np.float32)
    _check(m, [{"x": x, "a0": a0, "n": np.array(n, np.int64)} for n in (0, 1, 4)])


def test_a_run_time_loop_in_a_shared_library(tmp_path):
    m = _counting_model("n", "")
    path = write_library(polyonnx.compile(m), tmp_path / "loop.so")
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    feeds = [
        {"x": x, "limit": np.array(lim, np.int64), "n": np.array(n, np.int64)}
        for lim, n in ((3, 8), (8, 3), (2, 0))
    ]
    _check(m, feeds, polyonnx.InferenceSession(path))


# --------------------------------------------------------------------- refusals


def test_a_loop_carried_value_whose_shape_changes_is_refused():
    body = _body(
        [
            oh.make_node("Concat", ["v", "v"], ["v_out"], axis=0),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("v", T.FLOAT, [None])],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "v0"], ["v"], body=body, name="grow")],
        [_info("v0", T.FLOAT, [2]), _info("n", T.INT64, [])],
        [_info("v", T.FLOAT, [None])],
    )
    with pytest.raises(UnsupportedOpError, match=r"'grow'.*'v' is float32\[2\] before .*\[4\]"):
        polyonnx.InferenceSession(m)


def test_scan_outputs_of_a_run_time_loop_are_refused():
    body = _body(
        [
            oh.make_node("Add", ["acc", "acc"], ["acc_out"]),
            oh.make_node("Identity", ["acc_out"], ["scan"]),
            oh.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
        [_info("scan", T.FLOAT, [3])],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a", "s"], body=body, name="lp")],
        [_info("a0", T.FLOAT, [3]), _info("n", T.INT64, [])],
        [_info("a", T.FLOAT, [3]), _info("s", T.FLOAT, [None, 3])],
    )
    with pytest.raises(UnsupportedOpError, match=r"'lp'.*scan outputs \['s'\].*run time"):
        polyonnx.InferenceSession(m)


def test_a_trip_count_that_is_not_int64_is_refused():
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a"], body=_accumulating_body(), name="lp")],
        [_info("x", T.FLOAT, [3]), _info("a0", T.FLOAT, [3]), _info("n", T.INT64, [2])],
        [_info("a", T.FLOAT, [3])],
    )
    with pytest.raises(ModelError, match=r"'lp'.*trip count 'n' must be a one-element int64"):
        polyonnx.InferenceSession(m)


def test_scan_outputs_of_a_loop_ended_by_a_run_time_condition_are_refused():
    # A known trip count: unrolled, each iteration under the running condition, but the
    # scan outputs' length would depend on it.
    body = _body(
        [
            oh.make_node("Add", ["acc", "acc"], ["acc_out"]),
            oh.make_node("Identity", ["acc_out"], ["scan"]),
            oh.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            oh.make_node("Less", ["total", "limit"], ["cond_out"]),
        ],
        [("acc", T.FLOAT, [3])],
        [_info("scan", T.FLOAT, [3])],
    )
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a", "s"], body=body, name="lp")],
        [_info("a0", T.FLOAT, [3]), _info("limit", T.FLOAT, [])],
        [_info("a", T.FLOAT, [3]), _info("s", T.FLOAT, [None, 3])],
        [nh.from_array(np.array(4, np.int64), "n")],
    )
    with pytest.raises(UnsupportedOpError, match=r"'lp'.*known only at run time.*scan outputs"):
        polyonnx.InferenceSession(m)
