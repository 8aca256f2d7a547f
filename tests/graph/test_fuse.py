"""Fusion grouping: which nodes become one kernel (graph level; the kernels' numerics are
checked in tests/models/test_fused_activations.py)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from polyonnx.frontend import import_model
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes import fuse, optimize
from polyonnx.graph.passes.fuse import Group

RNG = np.random.default_rng(0)
X = (1, 8, 4, 4)  # the shape of a convolution's output in the graphs below
S = (1, 8, 1, 1)  # a per-channel value


def _graph(
    nodes: list[tuple[str, str, tuple[str, ...]]],
    outputs: tuple[str, ...],
    shapes: dict[str, tuple[int, ...]] | None = None,
    constants: tuple[str, ...] = (),
) -> Graph:
    """Nodes ``(output, op, inputs)`` (each named after its output) over input ``x``; every
    value has shape ``X`` unless ``shapes`` says otherwise; ``constants`` are filled with
    ones."""
    shapes = shapes or {}
    names = {"x", *constants, *(o for o, _, _ in nodes)}
    values = {n: Value(n, "float32", shapes.get(n, X)) for n in names}
    consts = {c: np.ones(values[c].shape, np.float32) for c in constants}
    return Graph(
        "g",
        (values["x"],),
        tuple(values[o] for o in outputs),
        tuple(Node(o, op, ins, (o,)) for o, op, ins in nodes),
        values,
        consts,
    )


def _names(groups: list[Group]) -> list[list[str]]:
    return [[n.name for n in grp.nodes] for grp in groups]


def _check_order(graph: Graph, groups: list[Group]) -> None:
    """Every node in one group, and each group's inputs made before it runs."""
    assert sorted(n.name for g in groups for n in g.nodes) == sorted(n.name for n in graph.nodes)
    ready = {v.name for v in graph.inputs} | set(graph.constants)
    for grp in groups:
        ins, outs = grp.boundary(graph)
        assert set(ins) <= ready, grp.name
        ready.update(outs)


CONV = ("c", "Conv", ("x", "w"))


def test_silu_after_a_conv_is_one_group() -> None:
    # y = c * sigmoid(c): c is read twice, both times inside the group.
    g = _graph(
        [CONV, ("s", "Sigmoid", ("c",)), ("y", "Mul", ("c", "s"))],
        ("y",),
        {"w": (8, 8, 1, 1)},
        ("w",),
    )
    groups = fuse(g)
    assert _names(groups) == [["c", "s", "y"]]
    assert groups[0].boundary(g) == (("x", "w"), ("y",))


def test_gelu_in_the_erf_form_is_one_group() -> None:
    # 0.5 * a * (1 + erf(a / sqrt 2)) after MatMul + bias: a diamond of five element-wise ops.
    shapes = {"x": (4, 8), "w": (8, 6), "b": (6,), "k": (), **{v: (4, 6) for v in "madefhy"}}
    nodes = [
        ("m", "MatMul", ("x", "w")),
        ("a", "Add", ("m", "b")),
        ("d", "Div", ("a", "k")),
        ("e", "Erf", ("d",)),
        ("f", "Add", ("e", "k")),
        ("h", "Mul", ("a", "k")),
        ("y", "Mul", ("h", "f")),
    ]
    g = _graph(nodes, ("y",), shapes, ("w", "b", "k"))
    assert _names(fuse(g)) == [["m", "a", "d", "e", "f", "h", "y"]]


@pytest.mark.parametrize(
    "nodes",
    [
        # x * HardSigmoid(x)
        [("h", "HardSigmoid", ("c",)), ("y", "Mul", ("c", "h"))],
        # x * Relu6(x + 3) / 6
        [
            ("p", "Add", ("c", "k")),
            ("r", "Clip", ("p", "zero", "k")),
            ("m", "Mul", ("c", "r")),
            ("y", "Div", ("m", "k")),
        ],
        # PRelu with a per-channel slope
        [("y", "PRelu", ("c", "slope"))],
    ],
    ids=["x_hardsigmoid", "x_relu6", "prelu"],
)
def test_hardswish_forms_and_prelu_join_the_conv(nodes: list) -> None:
    shapes = {"w": (8, 8, 1, 1), "k": (), "zero": (), "slope": (8, 1, 1)}
    g = _graph([CONV, *nodes], ("y",), shapes, ("w", "k", "zero", "slope"))
    assert _names(fuse(g)) == [["c", *(n[0] for n in nodes)]]


def test_values_used_outside_the_group_are_its_outputs() -> None:
    # s is a graph output and c is read by a second conv: both leave the kernel; y joins.
    nodes = [CONV, ("s", "Sigmoid", ("c",)), ("y", "Mul", ("c", "s")), ("z", "Conv", ("c", "w"))]
    g = _graph(nodes, ("y", "s", "z"), {"w": (8, 8, 1, 1)}, ("w",))
    groups = fuse(g)
    assert _names(groups) == [["c", "s", "y"], ["z"]]
    assert groups[0].boundary(g) == (("x", "w"), ("c", "s", "y"))
    _check_order(g, groups)


def test_a_join_prefers_the_group_whose_values_stay_inside() -> None:
    # a is also read by a later Relu; b only by the Add: the Add joins b's group, so b never
    # reaches memory (a does either way).
    nodes = [
        ("a", "Conv", ("x", "w")),
        ("b", "Conv", ("x", "w")),
        ("y", "Add", ("a", "b")),
        ("r", "Relu", ("a",)),
    ]
    g = _graph(nodes, ("y", "r"), {"w": (8, 8, 1, 1)}, ("w",))
    assert _names(fuse(g)) == [["a", "r"], ["b", "y"]]


def test_squeeze_excitation_mul_stays_apart_from_its_input() -> None:
    # The gate depends on the whole of c (GlobalAveragePool): the Mul joining c's group would
    # make the groups cyclic, and it is wider than the gate's group.
    shapes = {"w": (8, 8, 1, 1), "p": S, "f1": (1, 2, 1, 1), "r": (1, 2, 1, 1), "w1": (2, 8, 1, 1)}
    shapes |= {"w2": (8, 2, 1, 1), "f2": S, "gate": S}
    nodes = [
        CONV,
        ("s", "Sigmoid", ("c",)),
        ("act", "Mul", ("c", "s")),
        ("p", "GlobalAveragePool", ("act",)),
        ("f1", "Conv", ("p", "w1")),
        ("r", "Relu", ("f1",)),
        ("f2", "Conv", ("r", "w2")),
        ("gate", "Sigmoid", ("f2",)),
        ("y", "Mul", ("gate", "act")),
    ]
    g = _graph(nodes, ("y",), shapes, ("w", "w1", "w2"))
    groups = fuse(g)
    assert _names(groups) == [["c", "s", "act"], ["p"], ["f1", "r"], ["f2", "gate"], ["y"]]
    _check_order(g, groups)


def test_fusion_is_deterministic_and_in_order_on_random_dags() -> None:
    rng = np.random.default_rng(7)
    unary, binary = ("Relu", "Sigmoid", "Tanh", "Neg"), ("Add", "Mul", "Sub", "Max")
    for _ in range(30):
        nodes: list[tuple[str, str, tuple[str, ...]]] = [CONV]
        for k in range(int(rng.integers(3, 12))):
            earlier = [n[0] for n in nodes] + ["x"]
            if rng.random() < 0.15:
                nodes.append((f"v{k}", "Conv", (str(rng.choice(earlier)), "w")))
            elif rng.random() < 0.5:
                nodes.append((f"v{k}", str(rng.choice(unary)), (str(rng.choice(earlier)),)))
            else:
                a, b = (str(v) for v in rng.choice(earlier, 2))
                nodes.append((f"v{k}", str(rng.choice(binary)), (a, b)))
        used = {i for _, _, ins in nodes for i in ins}
        outputs = tuple(n[0] for n in nodes if n[0] not in used or rng.random() < 0.2)
        g = _graph(nodes, outputs, {"w": (8, 8, 1, 1)}, ("w",))
        groups = fuse(g)
        _check_order(g, groups)
        assert _names(fuse(g)) == _names(groups)


# --------------------------------------------------------------------------- ONNX models


def _model(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    def vi(spec):
        name, shape = spec
        return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)

    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()]
    graph = helper.make_graph(nodes, "t", [vi(s) for s in inputs], [vi(s) for s in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _fusion_graph() -> Graph:
    """x → convA → Add(·, convB(x)) → Relu → Reshape → Relu, plus a Sigmoid with two users."""
    w = RNG.standard_normal((2, 2, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="convA"),
        helper.make_node("Conv", ["x", "w2"], ["b"], name="convB"),  # (not a repeat of convA)
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
        helper.make_node("Relu", ["f"], ["y"], name="relu2"),
        helper.make_node("Sigmoid", ["x"], ["sg"], name="sig"),
        helper.make_node("Neg", ["sg"], ["z1"], name="neg"),
        helper.make_node("Mul", ["sg", "sg"], ["z2"], name="sq"),
        helper.make_node("Mul", ["z2", "big"], ["z3"], name="bcast"),
    ]
    m = _model(
        nodes,
        [("x", [1, 2, 3, 3])],
        [("y", [1, 18]), ("z1", [1, 2, 3, 3]), ("z3", [2, 1, 2, 3, 3])],
        {
            "w": w,
            "w2": -w,
            "shape": np.array([1, -1]),
            "big": np.ones((2, 1, 1, 1, 1), np.float32),
        },
    )
    return optimize(import_model(m))


def test_fuse_chains_and_views() -> None:
    # Views stand alone; the Sigmoid's two users join it; the broadcast Mul is wider.
    g = _fusion_graph()
    groups = fuse(g)
    assert _names(groups) == [
        ["convB"],
        ["convA", "add", "relu"],
        ["flat"],
        ["relu2"],
        ["sig", "neg", "sq"],
        ["bcast"],
    ]


def test_fuse_groups_execute_in_order_and_boundaries() -> None:
    g = _fusion_graph()
    groups = fuse(g)
    _check_order(g, groups)
    conv_a = next(grp for grp in groups if grp.name == "convA")
    assert conv_a.boundary(g) == (("x", "w", "b"), ("r",))
    sig = next(grp for grp in groups if grp.name == "sig")
    assert sig.boundary(g) == (("x",), ("z1", "z2"))


def test_fuse_light_squeezenet_groups_run_in_order() -> None:
    path = os.path.join(
        os.path.dirname(onnx.__file__), "backend/test/data/light", "light_squeezenet.onnx"
    )
    g = optimize(import_model(path))
    groups = fuse(g)
    _check_order(g, groups)
    assert {tuple(n.op_type for n in grp.nodes) for grp in groups} >= {("Conv", "Relu")}
