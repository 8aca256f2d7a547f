"""Transposes sunk below the ops that read them and cancelled (tf2onnx's NHWC wrappers)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import pipeline
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes import sink_transposes
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs

RNG = np.random.default_rng(11)
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
SHAPE = (1, 6, 5, 7)  # N, C, H, W


def _model(
    body: list[onnx.NodeProto],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 18,
    inputs: tuple[str, ...] = ("x",),
    output_type: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """``x`` (NCHW) transposed to ``t`` (NHWC), then ``body``."""
    nodes = [helper.make_node("Transpose", [i], [f"{i}_t"], perm=NHWC) for i in inputs]
    graph = helper.make_graph(
        nodes + body,
        "g",
        [helper.make_tensor_value_info(i, TensorProto.FLOAT, SHAPE) for i in inputs],
        [helper.make_tensor_value_info(o, output_type, None) for o in outputs],
        [numpy_helper.from_array(c, n) for n, c in (constants or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _back(name: str, out: str = "y") -> onnx.NodeProto:
    return helper.make_node("Transpose", [name], [out], perm=NCHW)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    # Keras' bias + hard-swish between two convolutions: both Transposes cancel.
    "elementwise": (
        [
            helper.make_node("Add", ["x_t", "bias"], ["a"]),
            helper.make_node("HardSwish", ["a"], ["h"]),
            helper.make_node("Mul", ["h", "half"], ["m"]),
            _back("m"),
        ],
        ["y"],
        {"bias": _f32(6), "half": np.array(0.5, np.float32)},
        0,
    ),
    # Squeeze-excitation: a mean over H and W, kept, multiplied back in.
    "squeeze_excitation": (
        [
            helper.make_node("ReduceMean", ["x_t", "axes"], ["r"], keepdims=1),
            helper.make_node("Mul", ["r", "scale"], ["s"]),
            helper.make_node("Sigmoid", ["s"], ["g"]),
            helper.make_node("Mul", ["x_t", "g"], ["m"]),
            _back("m"),
        ],
        ["y"],
        {"axes": np.array([1, 2], np.int64), "scale": _f32(1, 1, 1, 6)},
        0,
    ),
    # A global pool without keepdims: (N, C) in either layout, no Transpose left at all.
    "reduce_dropping_axes": (
        [helper.make_node("ReduceMean", ["x_t", "axes"], ["y"], keepdims=0)],
        ["y"],
        {"axes": np.array([1, 2], np.int64)},
        0,
    ),
    "reduce_attribute_axes": (
        [
            helper.make_node("ReduceMax", ["x_t"], ["r"], axes=[-1], keepdims=1),
            _back("r"),
        ],  # opset 13
        ["y"],
        {},
        0,
    ),
    "argmax_dropping_axis": (
        [helper.make_node("ArgMax", ["x_t"], ["y"], axis=3, keepdims=0)],
        ["y"],
        {},
        0,  # the kept axes N, H, W are in the same order in either layout
    ),
    "softmax": (
        [helper.make_node("Softmax", ["x_t"], ["s"], axis=-1), _back("s")],
        ["y"],
        {},
        0,
    ),
    "concat_with_constant": (
        [
            helper.make_node("Relu", ["x_t"], ["r"]),
            helper.make_node("Concat", ["x_t", "r", "extra"], ["c"], axis=-1),
            _back("c"),
        ],
        ["y"],
        {"extra": _f32(1, 5, 7, 2)},
        0,
    ),
    "pad_with_axes": (
        [
            helper.make_node("Pad", ["x_t", "pads", "", "axes"], ["p"], mode="reflect"),
            _back("p"),
        ],
        ["y"],
        {"pads": np.array([1, 2, 0, 3], np.int64), "axes": np.array([1, 2], np.int64)},
        0,
    ),
    "slice_with_steps": (
        [
            helper.make_node("Slice", ["x_t", "starts", "ends", "axes", "steps"], ["s"]),
            _back("s"),
        ],
        ["y"],
        {
            "starts": np.array([1, 4], np.int64),
            "ends": np.array([5, 0], np.int64),
            "axes": np.array([1, -1], np.int64),
            "steps": np.array([2, -1], np.int64),
        },
        0,
    ),
    "where": (
        [
            helper.make_node("Where", ["mask", "x_t", "zero"], ["w"]),
            _back("w"),
        ],
        ["y"],
        {"mask": RNG.random((5, 7, 6)) > 0.5, "zero": np.zeros((), np.float32)},
        0,
    ),
    # Two Transposes in a row that are not inverse become one.
    "composed": (
        [helper.make_node("Transpose", ["x_t"], ["y"], perm=NHWC)],
        ["y"],
        {},
        1,
    ),
    # The NHWC value is also a graph output: its Transpose stays, the inverse pair goes.
    "transposed_value_is_an_output": (
        [helper.make_node("Neg", ["x_t"], ["n"]), _back("n")],
        ["y", "x_t"],
        {},
        1,
    ),
    # Two NHWC inputs added: one Transpose of the sum instead of two.
    "two_transposed_operands": (
        [helper.make_node("Add", ["x_t", "z_t"], ["y"])],
        ["y"],
        {},
        1,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_transposes_cancel_and_values_match(case: str) -> None:
    body, outputs, constants, transposes_left = CASES[case]
    inputs = ("x", "z") if case == "two_transposed_operands" else ("x",)
    output_type = TensorProto.INT64 if case.startswith("argmax") else TensorProto.FLOAT
    opset = 13 if case == "reduce_attribute_axes" else 18
    model = _model(body, outputs, constants, opset, inputs, output_type)
    graph = pipeline.to_graph(model, None, Options())
    assert [n.op_type for n in graph.nodes].count("Transpose") == transposes_left, str(graph)
    feeds = {i: _f32(*SHAPE) for i in inputs}
    got = polyonnx.InferenceSession(model).run(None, feeds)
    # (onnxruntime's own transpose optimiser fails on the Pad with axes: compared unoptimised)
    for a, b in zip(got, onnxruntime_outputs(model, feeds, optimize=False), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_transpose_that_would_move_more_elements_stays() -> None:
    """Sunk below a Pad that grows the tensor, the Transpose would move more: kept above."""
    v = {n: Value(n, "float32", s) for n, s in [("x", (1, 2, 3, 4)), ("t", (1, 3, 4, 2))]}
    v |= {"y": Value("y", "float32", (1, 13, 14, 2)), "pads": Value("pads", "int64", (8,))}
    g = Graph(
        "g",
        (v["x"],),
        (v["y"],),
        (
            Node("t", "Transpose", ("x",), ("t",), {"perm": tuple(NHWC)}),
            Node("pad", "Pad", ("t", "pads"), ("y",)),
        ),
        v,
        {"pads": np.array([0, 5, 5, 0, 0, 5, 5, 0])},
    )
    assert sink_transposes(g) is g


@pytest.mark.parametrize(
    ("op", "operand"),
    [("Add", "runtime"), ("Add", "other_perm"), ("Softmax", "opset11")],
)
def test_not_pushed_where_the_permutation_does_not_carry(op: str, operand: str) -> None:
    """A runtime operand in the other layout, a Transpose by another permutation, or an
    opset-11 Softmax (which flattens the axes from ``axis`` on) keep the Transposes."""
    if op == "Softmax":
        body = [helper.make_node("Softmax", ["x_t"], ["s"], axis=2), _back("s")]
        model, inputs = _model(body, ["y"], opset=11), ("x",)
    else:
        other = (
            helper.make_node("Transpose", ["z"], ["z_t"], perm=[0, 1, 3, 2])
            if operand == "other_perm"
            else helper.make_node("Relu", ["z"], ["z_t"])
        )
        body = [helper.make_node(op, ["x_t", "z_t"], ["a"]), _back("a")]
        graph = helper.make_graph(
            [helper.make_node("Transpose", ["x"], ["x_t"], perm=NHWC), other, *body],
            "g",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 5, 5, 5)),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 5, 5, 5)),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        inputs = ("x", "z")
    before = [n.op_type for n in model.graph.node].count("Transpose")
    graph_ir = pipeline.to_graph(model, None, Options())
    assert [n.op_type for n in graph_ir.nodes].count("Transpose") == before
    shape = (1, 6, 5, 7) if op == "Softmax" else (1, 5, 5, 5)
    feeds = {i: _f32(*shape) for i in inputs}
    got = polyonnx.InferenceSession(model).run(None, feeds)
    want = onnxruntime_outputs(model, feeds, optimize=False)[0]
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


def _random_case(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A Transpose by a random permutation, one op the pass moves it through (random axes,
    keepdims, pads, slices, broadcast constants), and a Transpose by another random
    permutation: whatever the pass makes of it must give onnxruntime's answer."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 6))
    shape = [int(d) for d in rng.integers(2, 5, rank)]
    perm = [int(p) for p in rng.permutation(rank)]
    t_shape = [shape[p] for p in perm]
    axes = sorted(int(a) for a in rng.choice(rank, int(rng.integers(1, rank + 1)), replace=False))
    signed = [a - rank if rng.random() < 0.5 else a for a in axes]
    op = ["Add", "ReduceSum", "ArgMax", "Softmax", "Concat", "Pad", "Slice", "Where"][seed % 8]
    consts: dict[str, np.ndarray] = {}
    out_rank = rank
    if op == "Add":
        c_rank = int(rng.integers(0, rank + 1))
        c_shape = [d if rng.random() < 0.7 else 1 for d in t_shape[rank - c_rank :]]
        consts["c"] = rng.standard_normal(c_shape).astype(np.float32)
        node = helper.make_node("Add", ["c", "t"] if seed % 3 else ["t", "c"], ["o"])
    elif op == "ReduceSum":
        keep = int(rng.integers(0, 2))
        consts["axes"] = np.array(signed, np.int64)
        node = helper.make_node("ReduceSum", ["t", "axes"], ["o"], keepdims=keep)
        out_rank = rank if keep else rank - len(axes)
    elif op == "ArgMax":
        keep = int(rng.integers(0, 2))
        node = helper.make_node("ArgMax", ["t"], ["o"], axis=signed[0], keepdims=keep)
        out_rank = rank if keep else rank - 1
    elif op == "Softmax":
        node = helper.make_node("Softmax", ["t"], ["o"], axis=signed[0])
    elif op == "Concat":
        c_shape = list(t_shape)
        c_shape[axes[0]] = int(rng.integers(1, 3))
        consts["c"] = rng.standard_normal(c_shape).astype(np.float32)
        node = helper.make_node("Concat", ["t", "c", "t"], ["o"], axis=signed[0])
    elif op == "Pad":
        consts["pads"] = rng.integers(0, 3, 2 * len(axes)).astype(np.int64)
        consts["axes"] = np.array(signed, np.int64)
        node = helper.make_node("Pad", ["t", "pads", "", "axes"], ["o"], mode="edge")
    elif op == "Slice":
        consts["starts"] = np.array([int(rng.integers(0, t_shape[a])) for a in axes], np.int64)
        consts["ends"] = np.array([t_shape[a] for a in axes], np.int64)
        consts["axes"] = np.array(signed, np.int64)
        node = helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["o"])
    else:
        consts["m"] = rng.random(t_shape[1:]) > 0.5
        node = helper.make_node("Where", ["m", "t", "t2"], ["o"])
    back = [int(p) for p in rng.permutation(out_rank)]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=perm),
        helper.make_node("Neg", ["t"], ["t2"]),
        node,
        helper.make_node("Transpose", ["o"], ["y"], perm=back)
        if out_rank
        else helper.make_node("Identity", ["o"], ["y"]),
    ]
    out_type = TensorProto.INT64 if op == "ArgMax" else TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(c, n) for n, c in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("seed", range(32))
def test_random_permutations_give_onnxruntimes_answer(seed: int) -> None:
    model, feeds = _random_case(seed)
    graph = pipeline.to_graph(model, None, Options())
    assert [n.op_type for n in graph.nodes].count("Transpose") <= 1, str(graph)
    got = polyonnx.InferenceSession(model).run(None, feeds)[0]
    want = onnxruntime_outputs(model, feeds, optimize=False)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
