"""Common-subexpression elimination: repeats (and chains of repeats) merged, graph outputs,
random ops and guarded readers handled, results unchanged."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import polyonnx
from polyonnx import pipeline
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes import eliminate_common_subexpressions
from polyonnx.testing import onnxruntime_outputs


def _graph(nodes: list[Node], outputs: tuple[str, ...]) -> Graph:
    names = {i for n in nodes for i in (*n.inputs, *n.outputs)} | {"x"}
    v = {name: Value(name, "float32", (3,)) for name in names}
    v["c"] = Value("c", "bool", ())
    return Graph("g", (v["x"],), tuple(v[o] for o in outputs), tuple(nodes), v)


def _ops(g: Graph) -> list[str]:
    return [str(n) for n in eliminate_common_subexpressions(g).nodes]


def test_chains_of_repeats_collapse() -> None:
    g = _graph(
        [
            Node("a1", "Relu", ["x"], ["a"]),
            Node("b1", "Neg", ["a"], ["b"]),
            Node("a2", "Relu", ["x"], ["a_"]),
            Node("b2", "Neg", ["a_"], ["b_"]),
            Node("y", "Add", ["b", "b_"], ["y"]),
        ],
        ("y",),
    )
    assert _ops(g) == ["a1: a = Relu(x)", "b1: b = Neg(a)", "y: y = Add(b, b)"]


def test_attributes_outputs_and_random_ops_keep_nodes_apart() -> None:
    g = _graph(
        [
            Node("l1", "LeakyRelu", ["x"], ["a"], {"alpha": 0.1}),
            Node("l2", "LeakyRelu", ["x"], ["b"], {"alpha": 0.2}),
            Node("r1", "RandomUniformLike", ["x"], ["r"]),
            Node("r2", "RandomUniformLike", ["x"], ["s"]),
            Node("n1", "Neg", ["x"], ["n"]),
            Node("n2", "Neg", ["x"], ["y"]),  # a graph output: stays
        ],
        ("a", "b", "r", "s", "n", "y"),
    )
    assert len(eliminate_common_subexpressions(g).nodes) == 6


def test_guards_read_the_surviving_value() -> None:
    g = _graph(
        [
            Node("c1", "IsNaN", ["x"], ["m"]),
            Node("c2", "IsNaN", ["x"], ["m_"]),
            Node("any", "ReduceMax", ["m_"], ["c"]),
            Node("y", "Neg", ["x"], ["y"], guard=[("m_", True)]),
        ],
        ("y",),
    )
    assert _ops(g)[1:] == ["any: c = ReduceMax(m)", "y: y = Neg(x) if m"]


def test_a_model_with_repeated_branches_still_matches_onnxruntime() -> None:
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], [f"c{k}"], pads=[1, 1, 1, 1]) for k in range(3)]
    nodes += [
        helper.make_node("Sigmoid", ["c0"], ["s"]),
        helper.make_node("Sum", ["c1", "c2", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "repeats",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    assert len(pipeline.compile(model).program.kernels) == 1  # one Conv, its epilogue fused
    np.testing.assert_allclose(
        polyonnx.InferenceSession(model).run(None, x)[0],
        onnxruntime_outputs(model, x)[0],
        rtol=1e-5,
        atol=1e-5,
    )


def test_equal_constants_are_one_so_their_readers_merge() -> None:
    g = _graph(
        [
            Node("m1", "Mul", ["x", "k1"], ["a"]),
            Node("m2", "Mul", ["x", "k2"], ["b"]),
            Node("m3", "Mul", ["x", "k3"], ["c"]),
            Node("y", "Sum", ["a", "b", "c"], ["y"]),
        ],
        ("y",),
    )
    consts = {"k1": np.float32([1, 2, 3]), "k2": np.float32([1, 2, 3]), "k3": np.float32([1, 2, 4])}
    g = Graph(g.name, g.inputs, g.outputs, g.nodes, g.values, consts)
    merged = eliminate_common_subexpressions(g)
    assert [str(n) for n in merged.nodes][-1] == "y: y = Sum(a, a, c)"
    assert set(merged.constants) == {"k1", "k3"}


def test_constants_merge_only_when_their_bytes_are_identical() -> None:
    big = np.arange(100_000, dtype=np.float32)
    differs_between_samples = big.copy()
    differs_between_samples[1] = -1.0  # the fingerprint reads every 1562nd element only
    consts = {
        "big": big,
        "big_again": big.copy(),
        "big_changed": differs_between_samples,
        "zero": np.float32([0.0]),
        "minus_zero": np.float32([-0.0]),  # equal as numbers, not the same constant
        "nan": np.float32([np.nan]),
        "nan_again": np.float32([np.nan]),
        "transposed": np.arange(12.0).reshape(3, 4).T,
        "contiguous": np.ascontiguousarray(np.arange(12.0).reshape(3, 4).T),
        "words": np.array(["a", "b"], dtype=object),
        "words_again": np.array(["a", "b"], dtype=object),
        "scalar": np.int64(0),  # a 0-d index is not the 1-d one of the same bytes
        "vector": np.int64([0]),
    }
    g = _graph([Node("y", "Relu", ["x"], ["y"])], ("y",))
    g = Graph(g.name, g.inputs, g.outputs, g.nodes, g.values, consts)
    assert set(eliminate_common_subexpressions(g).constants) == {
        "big",
        "big_changed",
        "zero",
        "minus_zero",
        "nan",
        "transposed",
        "words",
        "scalar",
        "vector",
    }
