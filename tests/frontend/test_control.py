"""If (guarded branches, control flow in the entry point), Loop and Scan (unrolled) vs ORT;
loops run at run time: test_run_time_loop.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper as nh

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.errors import InputError, UnsupportedOpError
from polyonnx.frontend import import_model
from polyonnx.testing import onnxruntime_outputs

RNG = np.random.default_rng(3)
W1 = RNG.standard_normal((8, 16)).astype(np.float32)
W2 = RNG.standard_normal((8, 16)).astype(np.float32)


def _branch(name: str, nodes, out: str, shape, inits=()) -> onnx.GraphProto:
    return oh.make_graph(nodes, name, [], [oh.make_tensor_value_info(out, T.FLOAT, shape)], inits)


def _network_model() -> onnx.ModelProto:
    """As a voice-activity model does: ``If(sr > 8000)`` picks one of two networks."""
    then = _branch(
        "then",
        [oh.make_node("MatMul", ["x", "w1"], ["m"]), oh.make_node("Relu", ["m"], ["r"])],
        "r",
        [2, 16],
        [nh.from_array(W1, "w1")],
    )
    other = _branch(
        "else",
        [oh.make_node("MatMul", ["x", "w2"], ["m2"]), oh.make_node("Neg", ["m2"], ["n"])],
        "n",
        [2, 16],
        [nh.from_array(W2, "w2")],
    )
    g = oh.make_graph(
        [
            oh.make_node("Greater", ["sr", "k"], ["c"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="pick"),
            oh.make_node("Sigmoid", ["y"], ["z"]),
        ],
        "vad",
        [
            oh.make_tensor_value_info("x", T.FLOAT, [2, 8]),
            oh.make_tensor_value_info("sr", T.INT64, []),
        ],
        [oh.make_tensor_value_info("z", T.FLOAT, [2, 16])],
        [nh.from_array(np.array(8000, np.int64), "k")],
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _feeds(sr: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal((2, 8)).astype(np.float32), "sr": np.array(sr, np.int64)}


def test_the_branches_become_guarded_nodes():
    g = import_model(_network_model())
    guards = {n.name: n.guard for n in g.nodes}
    assert guards["pick/then/MatMul_0"] == (("c", True),)
    assert guards["pick/else/Neg_1"] == (("c", False),)
    assert [n.op_type for n in g.nodes if not n.guard] == ["Greater", "Reshape", "Where", "Sigmoid"]


@pytest.mark.parametrize("sr", [16000, 8000])
def test_an_if_on_a_scalar_input_around_a_network(sr: int):
    m = _network_model()
    feeds = _feeds(sr)
    got = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(got[0], onnxruntime_outputs(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_the_branch_not_taken_does_not_run():
    # The else branch gathers at an index that is out of range: it fails when, and only when,
    # it runs.
    then = _branch("then", [oh.make_node("Relu", ["x"], ["r"])], "r", [4])
    other = _branch("else", [oh.make_node("Gather", ["x", "i"], ["gth"])], "gth", [4])
    g = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [
            oh.make_tensor_value_info("c", T.BOOL, []),
            oh.make_tensor_value_info("x", T.FLOAT, [4]),
            oh.make_tensor_value_info("i", T.INT64, [4]),
        ],
        [oh.make_tensor_value_info("y", T.FLOAT, [4])],
    )
    sess = polyonnx.InferenceSession(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]))
    x, bad = np.array([-1, 2, -3, 4], np.float32), np.array([0, 9, 1, 2], np.int64)
    (y,) = sess.run(None, {"c": np.array(True), "x": x, "i": bad})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(InputError, match="out of range"):
        sess.run(None, {"c": np.array(False), "x": x, "i": bad})


def test_a_condition_known_at_compile_time_inlines_one_branch():
    # The branch not taken would not even type-check (a Reshape to 5 elements).
    then = _branch("then", [oh.make_node("Neg", ["x"], ["n"])], "n", [2, 3])
    bad_shape = nh.from_array(np.array([5], np.int64), "five")
    other = _branch("else", [oh.make_node("Reshape", ["x", "five"], ["r"])], "r", [5], [bad_shape])
    g = oh.make_graph(
        [
            oh.make_node("Shape", ["x"], ["s"]),
            oh.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
            oh.make_node("Equal", ["p", "six"], ["c"]),
            oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
        ],
        "g",
        [oh.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [oh.make_tensor_value_info("y", T.FLOAT, [2, 3])],
        [nh.from_array(np.array(6, np.int64), "six")],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    assert not any(n.guard for n in import_model(m).nodes)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(polyonnx.InferenceSession(m).run(None, {"x": x})[0], -x)


def test_nested_ifs_read_values_of_the_enclosing_branch():
    inner_then = _branch("it", [oh.make_node("Add", ["t", "x"], ["a"])], "a", [3])
    inner_else = _branch("ie", [oh.make_node("Mul", ["t", "x"], ["b"])], "b", [3])
    then = _branch(
        "then",
        [
            oh.make_node("Exp", ["x"], ["t"]),
            oh.make_node("If", ["d"], ["u"], then_branch=inner_then, else_branch=inner_else),
        ],
        "u",
        [3],
    )
    other = _branch("else", [oh.make_node("Neg", ["x"], ["n"])], "n", [3])
    g = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [
            oh.make_tensor_value_info("c", T.BOOL, [1]),
            oh.make_tensor_value_info("d", T.BOOL, []),
            oh.make_tensor_value_info("x", T.FLOAT, [3]),
        ],
        [oh.make_tensor_value_info("y", T.FLOAT, [3])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    sess = polyonnx.InferenceSession(m)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for c in (True, False):
        for d in (True, False):
            feeds = {"c": np.array([c]), "d": np.array(d), "x": x}
            np.testing.assert_allclose(
                sess.run(None, feeds)[0], onnxruntime_outputs(m, feeds)[0], rtol=1e-6
            )


def test_branches_of_different_shapes_are_refused():
    then = _branch("then", [oh.make_node("Relu", ["x"], ["r"])], "r", [4])
    other = _branch("else", [oh.make_node("Concat", ["x", "x"], ["s"], axis=0)], "s", [8])
    g = oh.make_graph(
        [oh.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="pick")],
        "g",
        [oh.make_tensor_value_info("c", T.BOOL, []), oh.make_tensor_value_info("x", T.FLOAT, [4])],
        [oh.make_tensor_value_info("y", T.FLOAT, [None])],
    )
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match=r"'pick'.*float32\[4\] and float32\[8\]"):
        polyonnx.InferenceSession(m)


def test_an_if_in_a_shared_library(tmp_path):
    m = _network_model()
    path = write_library(polyonnx.compile(m), tmp_path / "vad.so")
    sess = polyonnx.InferenceSession(path)
    for sr in (16000, 8000):
        feeds = _feeds(sr)
        np.testing.assert_allclose(
            sess.run(None, feeds)[0], onnxruntime_outputs(m, feeds)[0], rtol=1e-5, atol=1e-6
        )


# --------------------------------------------------------------------------- Loop, Scan


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "g", inputs, outputs, list(inits))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _loop_body(cond_from_data: bool) -> onnx.GraphProto:
    """``acc = acc * 0.5 + x * i``; scan output ``acc``; condition ``sum(acc) < limit``."""
    nodes = [
        oh.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
        oh.make_node("Mul", ["x", "fi"], ["xi"]),
        oh.make_node("Mul", ["acc", "half"], ["h"]),
        oh.make_node("Add", ["h", "xi"], ["acc_out"]),
        oh.make_node("Identity", ["acc_out"], ["scan"]),
    ]
    if cond_from_data:
        nodes += [
            oh.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            oh.make_node("Less", ["total", "limit"], ["cond_out"]),
        ]
    else:
        nodes.append(oh.make_node("Identity", ["cond"], ["cond_out"]))
    outs = [
        oh.make_tensor_value_info("cond_out", T.BOOL, []),
        oh.make_tensor_value_info("acc_out", T.FLOAT, [3]),
    ]
    if not cond_from_data:
        outs.append(oh.make_tensor_value_info("scan", T.FLOAT, [3]))
    return oh.make_graph(
        nodes,
        "body",
        [
            oh.make_tensor_value_info("i", T.INT64, []),
            oh.make_tensor_value_info("cond", T.BOOL, []),
            oh.make_tensor_value_info("acc", T.FLOAT, [3]),
        ],
        outs,
        [nh.from_array(np.array(0.5, np.float32), "half")],
    )


def test_a_loop_with_a_constant_trip_count_and_scan_outputs():
    m = _model(
        [oh.make_node("Loop", ["n", "", "a0"], ["a", "s"], body=_loop_body(False))],
        [
            oh.make_tensor_value_info("x", T.FLOAT, [3]),
            oh.make_tensor_value_info("a0", T.FLOAT, [3]),
        ],
        [
            oh.make_tensor_value_info("a", T.FLOAT, [3]),
            oh.make_tensor_value_info("s", T.FLOAT, [5, 3]),
        ],
        [nh.from_array(np.array(5, np.int64), "n")],
    )
    feeds = {"x": np.array([1, -2, 3], np.float32), "a0": np.array([4, 0, -1], np.float32)}
    got = polyonnx.InferenceSession(m).run(None, feeds)
    for g, r in zip(got, onnxruntime_outputs(m, feeds), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-6)


@pytest.mark.parametrize("limit", [-100.0, 1.0, 8.0, 100.0])
def test_a_loop_ended_by_a_condition_computed_at_run_time(limit: float):
    # Iterations are guarded by the running condition; the result is the last one that ran.
    m = _model(
        [oh.make_node("Loop", ["n", "go", "a0"], ["a"], body=_loop_body(True))],
        [
            oh.make_tensor_value_info("x", T.FLOAT, [3]),
            oh.make_tensor_value_info("a0", T.FLOAT, [3]),
            oh.make_tensor_value_info("go", T.BOOL, []),
            oh.make_tensor_value_info("limit", T.FLOAT, []),
        ],
        [oh.make_tensor_value_info("a", T.FLOAT, [3])],
        [nh.from_array(np.array(6, np.int64), "n")],
    )
    sess = polyonnx.InferenceSession(m)
    for go in (True, False):
        feeds = {
            "x": np.array([1, 2, 3], np.float32),
            "a0": np.array([0.5, 0, 1], np.float32),
            "go": np.array(go),
            "limit": np.array(limit, np.float32),
        }
        np.testing.assert_allclose(
            sess.run(None, feeds)[0], onnxruntime_outputs(m, feeds)[0], rtol=1e-6
        )


def test_a_scan_forward_and_reversed():
    body = oh.make_graph(
        [
            oh.make_node("Add", ["s", "x"], ["s_out"]),
            oh.make_node("Mul", ["s_out", "r"], ["y"]),
        ],
        "body",
        [
            oh.make_tensor_value_info("s", T.FLOAT, [2]),
            oh.make_tensor_value_info("x", T.FLOAT, [2]),
            oh.make_tensor_value_info("r", T.FLOAT, [2]),
        ],
        [
            oh.make_tensor_value_info("s_out", T.FLOAT, [2]),
            oh.make_tensor_value_info("y", T.FLOAT, [2]),
        ],
    )
    scan = oh.make_node(
        "Scan",
        ["s0", "xs", "rs"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[0, 1],
        scan_input_directions=[0, 1],
        scan_output_axes=[1],
        scan_output_directions=[1],
    )
    m = _model(
        [scan],
        [
            oh.make_tensor_value_info("s0", T.FLOAT, [2]),
            oh.make_tensor_value_info("xs", T.FLOAT, [4, 2]),
            oh.make_tensor_value_info("rs", T.FLOAT, [2, 4]),
        ],
        [
            oh.make_tensor_value_info("s", T.FLOAT, [2]),
            oh.make_tensor_value_info("ys", T.FLOAT, [2, 4]),
        ],
    )
    feeds = {
        "s0": np.array([1, -1], np.float32),
        "xs": RNG.standard_normal((4, 2)).astype(np.float32),
        "rs": RNG.standard_normal((2, 4)).astype(np.float32),
    }
    got = polyonnx.InferenceSession(m).run(None, feeds)
    for g, r in zip(got, onnxruntime_outputs(m, feeds), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-6)


def _scan8_model(lens: bool) -> onnx.ModelProto:
    """Scan-8: batched states and scan inputs (batch 3, 4 steps), the second input reversed."""
    body = oh.make_graph(
        [
            oh.make_node("Mul", ["x", "r"], ["xr"]),
            oh.make_node("Add", ["s", "xr"], ["s_out"]),
            oh.make_node("Tanh", ["s_out"], ["y"]),
        ],
        "body",
        [oh.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s", "x", "r")],
        [oh.make_tensor_value_info(n, T.FLOAT, [2]) for n in ("s_out", "y")],
    )
    scan = oh.make_node(
        "Scan",
        ["lens" if lens else "", "s0", "xs", "rs"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=2,
        directions=[0, 1],
    )
    inputs = [oh.make_tensor_value_info("s0", T.FLOAT, [3, 2])]
    inputs += [oh.make_tensor_value_info(n, T.FLOAT, [3, 4, 2]) for n in ("xs", "rs")]
    if lens:
        inputs.append(oh.make_tensor_value_info("lens", T.INT32, [3]))
    outputs = [
        oh.make_tensor_value_info("s", T.FLOAT, [3, 2]),
        oh.make_tensor_value_info("ys", T.FLOAT, [3, 4, 2]),
    ]
    g = oh.make_graph([scan], "g", inputs, outputs)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 8)], ir_version=8)


def test_a_scan8_scans_each_batch_row():
    m = _scan8_model(lens=False)
    feeds = {
        "s0": RNG.standard_normal((3, 2)).astype(np.float32),
        "xs": RNG.standard_normal((3, 4, 2)).astype(np.float32),
        "rs": RNG.standard_normal((3, 4, 2)).astype(np.float32),
    }
    got = polyonnx.InferenceSession(m).run(None, feeds)
    for g, r in zip(got, onnxruntime_outputs(m, feeds), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-7)
    s = feeds["s0"].copy()  # every row on its own, the second input reversed
    for t in range(4):
        s = s + feeds["xs"][:, t] * feeds["rs"][:, 3 - t]
    np.testing.assert_allclose(got[0], s, rtol=1e-6)


def test_a_scan8_with_sequence_lengths_is_refused():
    with pytest.raises(UnsupportedOpError, match="sequence_lens"):
        polyonnx.InferenceSession(_scan8_model(lens=True))
