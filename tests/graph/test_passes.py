"""Graph passes on tiny models; numerics checked against onnxruntime on the original model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend import import_model
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes import (
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    optimize,
    remove_identities,
    verify,
)
from polyonnx.graph.passes.fold import to_attribute
from polyonnx.testing import onnxruntime_outputs

ONNX_DTYPE = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}


def _model(nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    """inputs/outputs: (name, shape) float32 (or (name, shape, elem_type)); inits: name→array."""

    def vi(spec):
        name, shape, *t = spec
        return helper.make_tensor_value_info(name, t[0] if t else TensorProto.FLOAT, shape)

    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()]
    g = helper.make_graph(nodes, "t", [vi(s) for s in inputs], [vi(s) for s in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _to_onnx(g: Graph) -> onnx.ModelProto:
    """Write a Graph back as ONNX so onnxruntime can run what the passes produced."""

    def vi(v: Value):
        return helper.make_tensor_value_info(v.name, ONNX_DTYPE[v.dtype], list(v.shape))

    nodes = []
    for n in g.nodes:
        p = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name)
        p.attribute.extend(to_attribute(k, v) for k, v in n.attrs)
        nodes.append(p)
    inits = [numpy_helper.from_array(np.asarray(a), k) for k, a in g.constants.items()]
    graph = helper.make_graph(
        nodes, g.name, [vi(v) for v in g.inputs], [vi(v) for v in g.outputs], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.opset)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs for the graph as written (its own optimizations off)."""
    return onnxruntime_outputs(model, feeds, optimize=False)


def _check_same(
    model: onnx.ModelProto,
    g: Graph,
    feeds: dict[str, np.ndarray],
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> None:
    verify(g)
    for want, got in zip(_run(model, feeds), _run(_to_onnx(g), feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _ops(g: Graph) -> list[str]:
    return [n.op_type for n in g.nodes]


RNG = np.random.default_rng(0)


# --------------------------------------------------------------------------- fold


def test_fold_shape_arithmetic_and_constant_of_shape():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "axes"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["r"]),
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node(
            "ConstantOfShape",
            ["wshape"],
            ["w"],
            value=numpy_helper.from_array(np.array([0.5], np.float32)),
        ),
        helper.make_node("Mul", ["r", "w"], ["m"]),
        helper.make_node("Add", ["m", "nf"], ["y"]),
    ]
    m = _model(
        nodes,
        [("x", [2, 3, 4])],
        [("y", [2, 12])],
        {
            "zero": np.array(0),
            "axes": np.array([0]),
            "minus1": np.array([-1]),
            "wshape": np.array([2, 12]),
        },
    )
    g = eliminate_dead_code(fold_constants(import_model(m)))
    assert _ops(g) == ["Reshape", "Mul", "Add"]
    np.testing.assert_array_equal(g.constants["newshape"], [2, -1])
    np.testing.assert_array_equal(g.constants["w"], np.full((2, 12), 0.5, np.float32))
    assert g.constants["nf"] == 24.0 and g.constants["nf"].dtype == np.float32
    _check_same(m, g, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)})


def test_fold_general_op_through_reference_and_batchnorm_numpy():
    c = RNG.standard_normal((1, 3, 2, 2)).astype(np.float32)
    p = {k: RNG.uniform(0.5, 1.5, 3).astype(np.float32) for k in ("s", "b", "mu", "var")}
    nodes = [
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 1, 3, 2]),
        helper.make_node("BatchNormalization", ["ct", "s", "b", "mu", "var"], ["bn"], epsilon=1e-3),
        helper.make_node("Add", ["x", "bn"], ["y"]),
    ]
    m = _model(nodes, [("x", [1, 3, 2, 2])], [("y", [1, 3, 2, 2])], {"c": c, **p}, opset=9)
    g = eliminate_dead_code(fold_constants(import_model(m)))
    assert _ops(g) == ["Add"]
    _check_same(m, g, {"x": RNG.standard_normal((1, 3, 2, 2)).astype(np.float32)})


def test_fold_size_cap_spares_constant_of_shape_only():
    nodes = [
        helper.make_node("Tile", ["c", "reps"], ["t"]),
        helper.make_node("ConstantOfShape", ["shape"], ["z"]),
        helper.make_node("Add", ["t", "z"], ["u"]),
        helper.make_node("Add", ["x", "u"], ["y"]),
    ]
    m = _model(
        nodes,
        [("x", [64, 64])],
        [("y", [64, 64])],
        {"c": np.ones((1, 64), np.float32), "reps": np.array([64, 1]), "shape": np.array([64, 64])},
    )
    g = fold_constants(import_model(m), max_bytes=1024)
    assert _ops(g) == ["Tile", "Add", "Add"] and "z" in g.constants
    assert _ops(fold_constants(import_model(m))) == ["Add"]


def test_fold_leaves_random_ops():
    nodes = [
        helper.make_node("RandomUniform", [], ["r"], shape=[2], dtype=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    g = fold_constants(import_model(_model(nodes, [("x", [2])], [("y", [2])])))
    assert _ops(g) == ["RandomUniform", "Add"]


def test_to_attribute_round_trips_importer_values():
    assert to_attribute("pads", ()).type == onnx.AttributeProto.INTS
    assert to_attribute("mode", "constant").s == b"constant"
    assert numpy_helper.to_array(to_attribute("value", np.array([2.0])).t)[0] == 2.0


# --------------------------------------------------------------------------- simplify


def test_identity_and_dropout_removed_and_output_names_kept():
    nodes = [
        helper.make_node("Identity", ["x"], ["i1"]),
        helper.make_node("Relu", ["i1"], ["r"]),
        helper.make_node("Dropout", ["r", "ratio"], ["d", "mask"]),
        helper.make_node("Identity", ["d"], ["y"]),
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["y", "maskf"], ["z"]),
    ]
    m = _model(
        nodes, [("x", [2, 3])], [("y", [2, 3]), ("z", [2, 3])], {"ratio": np.array(0.5, np.float32)}
    )
    g = eliminate_dead_code(fold_constants(remove_identities(import_model(m))))
    assert _ops(g) == ["Relu", "Mul"]
    assert g.nodes[0].inputs == ("x",) and g.nodes[0].outputs == ("y",)
    assert [v.name for v in g.outputs] == ["y", "z"]
    _check_same(m, g, {"x": RNG.standard_normal((2, 3)).astype(np.float32)})


def test_identity_of_graph_input_or_constant_is_kept():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["c"], ["z"])]
    m = _model(nodes, [("x", [2])], [("y", [2]), ("z", [2])], {"c": np.ones(2, np.float32)})
    g = remove_identities(import_model(m))
    assert _ops(g) == ["Identity", "Identity"]
    _check_same(m, g, {"x": np.ones(2, np.float32)})


def test_identity_to_two_graph_outputs():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("Identity", ["r"], ["z"]),
    ]
    m = _model(nodes, [("x", [2])], [("y", [2]), ("z", [2])])
    g = remove_identities(import_model(m))
    assert [str(n).split(": ", 1)[1] for n in g.nodes] == ["y = Relu(x)", "z = Identity(y)"]
    _check_same(m, g, {"x": np.array([-1.0, 2.0], np.float32)})


def test_training_dropout_is_refused():
    # Its random mask cannot follow the reference's generator: refused, never the identity.
    nodes = [helper.make_node("Dropout", ["x", "", "train"], ["y"])]
    m = _model(nodes, [("x", [2])], [("y", [2])], {"train": np.array(True)})
    with pytest.raises(UnsupportedOpError, match="training mode"):
        remove_identities(import_model(m))


def test_training_dropout_with_ratio_zero_is_the_identity():
    nodes = [helper.make_node("Dropout", ["x", "r", "train"], ["y", "mask"])]
    m = _model(
        nodes,
        [("x", [2])],
        [("y", [2])],
        {"train": np.array(True), "r": np.array(0.0, np.float32)},
    )
    assert _ops(remove_identities(import_model(m))) == ["Identity"]  # x is a graph input


# --------------------------------------------------------------------------- bn_fold


def _bn_inits(
    weights: tuple[int, ...], cout: int, bias: bool
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Random weights ``w`` of shape ``weights`` (and bias ``b``) and BatchNormalization
    parameters ``s, beta, mu, var`` for ``cout`` channels; the convolution's input names."""
    inits = {
        "w": RNG.standard_normal(weights),
        "s": RNG.uniform(0.5, 2, cout),
        "beta": RNG.standard_normal(cout),
        "mu": RNG.standard_normal(cout),
        "var": RNG.uniform(0.1, 2, cout),
    }
    inits = {k: np.asarray(v, np.float32) for k, v in inits.items()}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = RNG.standard_normal(cout).astype(np.float32)
        inputs.append("b")
    return inits, inputs


def _conv_bn_model(group: int = 1, bias: bool = True, extra_use: bool = False):
    cin, cout = 4, 6
    inits, conv_in = _bn_inits((cout, cin // group, 3, 3), cout, bias)
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=group),
        helper.make_node(
            "BatchNormalization", ["c", "s", "beta", "mu", "var"], ["bn"], epsilon=1e-4
        ),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    outputs = [("y", [1, cout, 5, 5])]
    if extra_use:
        nodes.append(helper.make_node("Neg", ["c"], ["z"]))
        outputs.append(("z", [1, cout, 5, 5]))
    return _model(nodes, [("x", [1, cin, 5, 5])], outputs, inits, opset=9)


@pytest.mark.parametrize("group,bias", [(1, True), (2, False), (1, False)])
def test_bn_folds_into_conv(group, bias):
    m = _conv_bn_model(group, bias)
    g = eliminate_dead_code(fold_batchnorm(import_model(m)))
    assert _ops(g) == ["Conv", "Relu"]
    assert g.nodes[0].outputs == ("bn",) and "c" not in g.values
    _check_same(m, g, {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)}, 1e-4, 1e-4)


@pytest.mark.parametrize("group,bias", [(1, True), (2, False), (3, True)])
def test_bn_folds_into_conv_transpose(group, bias):
    """A ConvTranspose's weights are [C, M/group, k...]: output channel g * M/group + m of
    group g is column m of that group's input channels."""
    cin, cout = 6, 12
    inits, inputs = _bn_inits((cin, cout // group, 3, 3), cout, bias)
    nodes = [
        helper.make_node("ConvTranspose", inputs, ["c"], strides=[2, 2], group=group),
        helper.make_node("BatchNormalization", ["c", "s", "beta", "mu", "var"], ["y"]),
    ]
    m = _model(nodes, [("x", [1, cin, 4, 4])], [("y", [1, cout, 9, 9])], inits)
    g = eliminate_dead_code(fold_batchnorm(import_model(m)))
    assert _ops(g) == ["ConvTranspose"]
    _check_same(m, g, {"x": RNG.standard_normal((1, cin, 4, 4)).astype(np.float32)}, 1e-4, 1e-4)


def test_bn_not_folded_when_conv_output_is_shared():
    g = fold_batchnorm(import_model(_conv_bn_model(extra_use=True)))
    assert "BatchNormalization" in _ops(g)


def test_bn_fold_with_shared_weights_gives_each_conv_its_own():
    w = RNG.standard_normal((2, 2, 1, 1)).astype(np.float32)
    p = {k: RNG.uniform(0.5, 2, 2).astype(np.float32) for k in ("s", "beta", "mu", "var")}
    nodes = []
    for k in ("1", "2"):
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c" + k]))
        nodes.append(
            helper.make_node("BatchNormalization", ["c" + k, "s", "beta", "mu", "var"], ["y" + k])
        )
    m = _model(
        nodes, [("x", [1, 2, 3, 3])], [("y1", [1, 2, 3, 3]), ("y2", [1, 2, 3, 3])], {"w": w, **p}
    )
    g = eliminate_dead_code(fold_batchnorm(import_model(m)))
    assert _ops(g) == ["Conv", "Conv"]
    assert g.nodes[0].inputs[1] != g.nodes[1].inputs[1] and "w" not in g.constants
    _check_same(m, g, {"x": RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)}, 1e-4, 1e-4)


# --------------------------------------------------------------------------- dce


def test_dce_drops_dead_nodes_and_constants_keeps_inputs():
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("Add", ["unused_in", "c"], ["dead"]),
    ]
    m = _model(
        nodes,
        [("x", [2]), ("unused_in", [2])],
        [("y", [2])],
        {"c": np.ones(2, np.float32), "never": np.zeros(1, np.float32)},
    )
    g = eliminate_dead_code(import_model(m))
    assert _ops(g) == ["Relu"] and not g.constants
    assert [v.name for v in g.inputs] == ["x", "unused_in"] and "dead" not in g.values
    verify(g)


# --------------------------------------------------------------------------- optimize


def test_optimize_matches_onnxruntime():
    m = _conv_bn_model()
    g = optimize(import_model(m))
    assert _ops(g) == ["Conv", "Relu"]
    _check_same(m, g, {"x": RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)}, 1e-4, 1e-4)


def test_verify_catches_use_before_definition():
    x, y = Value("x", "float32", (2,)), Value("y", "float32", (2,))
    t = Value("t", "float32", (2,))
    nodes = (Node("b", "Neg", ("t",), ("y",)), Node("a", "Relu", ("x",), ("t",)))
    g = Graph("g", (x,), (y,), nodes, {"x": x, "y": y, "t": t})
    with pytest.raises(ModelError, match="before it is defined"):
        verify(g)
