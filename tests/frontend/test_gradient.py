"""The training op Gradient, expanded at import into reverse-mode differentiation nodes
(polyonnx/frontend/gradient.py): each rule against central finite differences of the forward
graph (onnxruntime, float64), an MLP against its closed-form backward pass, refusals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.frontend import import_model
from polyonnx.frontend.gradient import RULES, TRAINING_DOMAIN, expand_gradients
from polyonnx.graph.ir import Graph, Node, Value
from tests.backend import suite

D = TensorProto.DOUBLE


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int]],
    xs: Sequence[str],
    y: str,
    *,
    zs: Sequence[str] = (),
    grad_inputs: Sequence[str] | None = None,
    elem: int = D,
    opset: int = 17,
    inits: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    """The forward ``nodes`` plus a Gradient node; outputs ``y`` and ``d_<x>`` per x."""
    grad = helper.make_node(
        "Gradient",
        list(grad_inputs or [*xs, *zs]),
        [f"d_{x}" for x in xs],
        name="grad",
        domain=TRAINING_DOMAIN,
        xs=list(xs),
        y=y,
        **({"zs": list(zs)} if zs else {}),
    )
    graph = helper.make_graph(
        [*nodes, grad],
        "g",
        [helper.make_tensor_value_info(k, elem, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, elem, None) for o in (y, *(f"d_{x}" for x in xs))],
        list(inits),
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(TRAINING_DOMAIN, 1)],
    )


def _forward(model: onnx.ModelProto, y: str) -> ort.InferenceSession:
    """The model without its Gradient node, computing ``y``, in onnxruntime (onnx.reference
    gives opset-12 Softmax opset 13's meaning)."""
    g = onnx.GraphProto()
    g.CopyFrom(model.graph)
    keep = [n for n in g.node if n.op_type != "Gradient"]
    del g.node[:]
    g.node.extend(keep)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(y, D, None))
    m = helper.make_model(g, opset_imports=[o for o in model.opset_import if not o.domain])
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _finite_differences(
    model: onnx.ModelProto, y: str, feeds: dict[str, np.ndarray], x: str, eps: float = 1e-6
) -> np.ndarray:
    """d sum(y) / d x by central differences."""
    ref = _forward(model, y)
    out = np.zeros_like(feeds[x])
    for k in np.ndindex(feeds[x].shape):
        up, down = dict(feeds), dict(feeds)
        up[x], down[x] = feeds[x].copy(), feeds[x].copy()
        up[x][k] += eps
        down[x][k] -= eps
        out[k] = (ref.run(None, up)[0].sum() - ref.run(None, down)[0].sum()) / (2 * eps)
    return out


def _feeds(inputs: Mapping[str, Sequence[int]], positive: Sequence[str] = ()) -> dict:
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(tuple(s)) for k, s in inputs.items()}
    for k in positive:  # (Log, Sqrt, Pow's base, a divisor: away from 0)
        feeds[k] = rng.uniform(0.5, 2.0, tuple(inputs[k]))
    return feeds


def _check(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int]],
    xs: Sequence[str],
    y: str = "y",
    *,
    positive: Sequence[str] = (),
    opset: int = 17,
    inits: Sequence[onnx.TensorProto] = (),
) -> None:
    """polyonnx's gradients of sum(y) equal finite differences; y itself is right too."""
    m = _model(nodes, inputs, xs, y, opset=opset, inits=inits)
    feeds = _feeds(inputs, positive)
    got = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(got[0], _forward(m, y).run(None, feeds)[0], rtol=1e-9)
    for x, d in zip(xs, got[1:], strict=True):
        assert d.shape == feeds[x].shape and d.dtype == np.float64
        want = _finite_differences(m, y, feeds, x)
        np.testing.assert_allclose(d, want, rtol=1e-5, atol=1e-6, err_msg=f"d sum({y}) / d {x}")


def _n(op: str, ins: Sequence[str], out: str = "y", **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, list(ins), [out], **attrs)


# --------------------------------------------------------------------------- the ONNX suite


@pytest.mark.parametrize("name", ["test_gradient_of_add", "test_gradient_of_add_and_mul"])
def test_the_onnx_suite_models_give_their_stored_outputs(name: str) -> None:
    suite.run_case(name)


# --------------------------------------------------------------------------- broadcasting ops


@pytest.mark.parametrize(
    "op, a, b",
    [
        ("Add", (2, 3), (3,)),
        ("Add", (2, 1, 3), (4, 1)),
        ("Sub", (2, 3), (2, 1)),
        ("Sub", (1,), (2, 3)),
        ("Mul", (3, 1), (1, 4)),
        ("Mul", (2, 3), (2, 3)),
        ("Div", (2, 3), (3,)),
        ("Div", (1, 3), (2, 1)),
        ("Pow", (2, 3), (3,)),
    ],
)
def test_binary_ops_undo_broadcasting(op: str, a: tuple, b: tuple) -> None:
    _check([_n(op, ["a", "b"])], {"a": a, "b": b}, ["a", "b"], positive=["a", "b"])


def test_pow_with_a_constant_exponent_of_another_type() -> None:
    two = onnx.numpy_helper.from_array(np.array(3, np.int64), "e")
    _check([_n("Pow", ["a", "e"])], {"a": (2, 3)}, ["a"], inits=[two])


def test_sum_of_three_broadcast_operands() -> None:
    shapes = {"a": (2, 3), "b": (3,), "c": (2, 1)}
    _check([_n("Sum", ["a", "b", "c"])], shapes, ["a", "b", "c"])


def test_where_routes_the_gradient_by_its_condition() -> None:
    nodes = [
        _n("Greater", ["a", "b"], "c"),
        _n("Where", ["c", "a", "b"]),
    ]
    _check(nodes, {"a": (2, 3), "b": (3,)}, ["a", "b"])


# --------------------------------------------------------------------------- elementwise ops


@pytest.mark.parametrize(
    "op, attrs, positive",
    [
        ("Neg", {}, False),
        ("Identity", {}, False),
        ("Relu", {}, False),
        ("LeakyRelu", {"alpha": 0.2}, False),
        ("Sigmoid", {}, False),
        ("Tanh", {}, False),
        ("Exp", {}, False),
        ("Log", {}, True),
        ("Sqrt", {}, True),
        ("Abs", {}, False),
        ("Reciprocal", {}, True),
    ],
)
def test_unary_ops(op: str, attrs: dict, positive: bool) -> None:
    _check([_n(op, ["x"], **attrs)], {"x": (3, 4)}, ["x"], positive=["x"] if positive else [])


def test_cast_between_float_types() -> None:
    nodes = [
        _n("Cast", ["x"], "f", to=TensorProto.FLOAT),
        _n("Mul", ["f", "f"], "s"),
        _n("Cast", ["s"], "y", to=TensorProto.DOUBLE),
    ]
    m = _model(nodes, {"x": (2, 3)}, ["x"], "y")
    feeds = _feeds({"x": (2, 3)})
    (_, dx) = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(dx, 2 * feeds["x"], rtol=1e-6)


@pytest.mark.parametrize("op, attrs", [("Softmax", {"axis": 1}), ("LogSoftmax", {"axis": -1})])
def test_softmax_ops(op: str, attrs: dict) -> None:
    # (times w: the gradient of the plain sum of a softmax is zero)
    nodes = [_n(op, ["x"], "s", **attrs), _n("Mul", ["s", "w"])]
    _check(nodes, {"x": (2, 4), "w": (2, 4)}, ["x"])


def test_softmax_before_opset_13_normalises_the_trailing_axes() -> None:
    nodes = [_n("Softmax", ["x"], "s", axis=1), _n("Mul", ["s", "w"])]
    _check(nodes, {"x": (2, 3, 2), "w": (2, 3, 2)}, ["x"], opset=12)


# --------------------------------------------------------------------------- linear algebra


@pytest.mark.parametrize(
    "a, b",
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (3, 4, 2)),
        ((4,), (4, 5)),
        ((2, 3, 4), (4,)),
        ((4,), (4,)),
    ],
)
def test_matmul_2d_batched_and_vectors(a: tuple, b: tuple) -> None:
    _check([_n("MatMul", ["a", "b"])], {"a": a, "b": b}, ["a", "b"])


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_transpositions_alpha_beta(trans_a: int, trans_b: int) -> None:
    m, k, n = 2, 3, 4
    shapes = {"a": (k, m) if trans_a else (m, k), "b": (n, k) if trans_b else (k, n), "c": (n,)}
    node = _n("Gemm", ["a", "b", "c"], alpha=0.5, beta=2.0, transA=trans_a, transB=trans_b)
    _check([node], shapes, ["a", "b", "c"])


# --------------------------------------------------------------------------- reductions, views


@pytest.mark.parametrize(
    "op, axes, keepdims, opset",
    [
        ("ReduceSum", [1], 0, 17),
        ("ReduceSum", [-1, 0], 1, 17),
        ("ReduceSum", None, 0, 17),
        ("ReduceMean", [1], 1, 17),
        ("ReduceMean", [0, 2], 0, 18),
        ("ReduceMean", None, 1, 18),
    ],
)
def test_reductions_with_axes_as_attribute_or_input(
    op: str, axes: list | None, keepdims: int, opset: int
) -> None:
    as_input = op == "ReduceSum" or opset >= 18
    nodes, inits = [], []
    if axes is not None and as_input:
        inits = [onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")]
        nodes = [_n(op, ["x", "axes"], "r", keepdims=keepdims)]
    else:
        attrs = {"axes": axes} if axes is not None else {}
        nodes = [_n(op, ["x"], "r", keepdims=keepdims, **attrs)]
    # (times itself: the gradient of a plain sum would be ones whatever the axes)
    nodes.append(_n("Mul", ["r", "r"]))
    _check(nodes, {"x": (2, 3, 4)}, ["x"], opset=opset, inits=inits)


def test_views_reshape_transpose_flatten_squeeze_unsqueeze() -> None:
    shape = onnx.numpy_helper.from_array(np.array([4, 6], np.int64), "shape")
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [
        _n("Transpose", ["x"], "t", perm=[2, 0, 1]),
        _n("Reshape", ["t", "shape"], "r"),
        _n("Mul", ["r", "w"], "m"),
        _n("Unsqueeze", ["m", "axes"], "u"),
        _n("Flatten", ["u"], "f", axis=1),
        _n("Squeeze", ["f", "axes"], "s"),
        _n("Mul", ["s", "s"]),
    ]
    _check(nodes, {"x": (2, 3, 4), "w": (4, 6)}, ["x", "w"], inits=[shape, axes])


# --------------------------------------------------------------------------- whole graphs


def test_a_value_reached_by_several_paths_sums_its_gradients() -> None:
    # y = a a + exp(a) b - a: a reaches y by four paths
    nodes = [
        _n("Mul", ["a", "a"], "aa"),
        _n("Exp", ["a"], "ea"),
        _n("Mul", ["ea", "b"], "eb"),
        _n("Add", ["aa", "eb"], "s"),
        _n("Sub", ["s", "a"]),
    ]
    _check(nodes, {"a": (2, 3), "b": (3,)}, ["a", "b"])


@pytest.mark.parametrize("activation", ["Relu", "Sigmoid"])
def test_two_layer_mlp_matches_its_closed_form_backward_pass(activation: str) -> None:
    """loss = ReduceSum(act(act(x W1 + b1) W2 + b2)), gradients with respect to the weights
    (x a z: not differentiated), float32, against NumPy's hand-written backward pass."""
    f = TensorProto.FLOAT
    nodes = [
        _n("MatMul", ["x", "w1"], "m1"),
        _n("Add", ["m1", "b1"], "z1"),
        _n(activation, ["z1"], "h"),
        _n("MatMul", ["h", "w2"], "m2"),
        _n("Add", ["m2", "b2"], "z2"),
        _n(activation, ["z2"], "o"),
        _n("ReduceSum", ["o"], "loss", keepdims=0),
    ]
    shapes = {"x": (4, 3), "w1": (3, 5), "b1": (5,), "w2": (5, 2), "b2": (2,)}
    m = _model(nodes, shapes, ["w1", "b1", "w2", "b2"], "loss", zs=["x"], elem=f)
    feeds = {k: v.astype(np.float32) for k, v in _feeds(shapes).items()}
    loss, dw1, db1, dw2, db2 = polyonnx.InferenceSession(m).run(None, feeds)

    def act(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # value, derivative
        if activation == "Relu":
            return np.maximum(z, 0), (z > 0).astype(z.dtype)
        s = 1 / (1 + np.exp(-z))
        return s, s * (1 - s)

    x, w1, b1, w2, b2 = (feeds[k] for k in shapes)
    h, dh_dz1 = act(x @ w1 + b1)
    o, do_dz2 = act(h @ w2 + b2)
    dz2 = do_dz2  # d loss / d o = 1
    dz1 = (dz2 @ w2.T) * dh_dz1
    np.testing.assert_allclose(loss, o.sum(), rtol=1e-5)
    for got, want in [(dw2, h.T @ dz2), (db2, dz2.sum(0)), (dw1, x.T @ dz1), (db1, dz1.sum(0))]:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_x_that_y_does_not_depend_on_gets_zeros() -> None:
    m = _model([_n("Relu", ["a"])], {"a": (2, 3), "b": (4,)}, ["a", "b"], "y")
    feeds = _feeds({"a": (2, 3), "b": (4,)})
    _, da, db = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_array_equal(da, (feeds["a"] > 0).astype(np.float64))
    np.testing.assert_array_equal(db, np.zeros(4))


def test_gradient_outputs_feed_other_nodes() -> None:
    # (ONNX has no shape inference for Gradient: polyonnx types its outputs like its inputs)
    grad = helper.make_node(
        "Gradient", ["a", "b"], ["da", "db"], domain=TRAINING_DOMAIN, xs=["a", "b"], y="c"
    )
    g = helper.make_graph(
        [_n("Mul", ["a", "b"], "c"), grad, _n("Add", ["da", "db"], "y")],
        "g",
        [helper.make_tensor_value_info(k, D, [2, 3]) for k in "ab"],
        [helper.make_tensor_value_info("y", D, None)],
    )
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING_DOMAIN, 1)]
    )
    feeds = _feeds({"a": (2, 3), "b": (2, 3)})
    (y,) = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(y, feeds["a"] + feeds["b"])


def test_inputs_other_than_xs_differentiate_a_copy_of_the_forward_graph() -> None:
    # Gradient(xs=[a], zs=[b]) evaluated at (p, q): d(p * q + p)/dp = q + 1
    nodes = [_n("Mul", ["a", "b"], "c"), _n("Add", ["c", "a"])]
    shapes = {"a": (2, 3), "b": (2, 3), "p": (2, 3), "q": (2, 3)}
    m = _model(nodes, shapes, ["a"], "y", zs=["b"], grad_inputs=["p", "q"])
    feeds = _feeds(shapes)
    y, dp = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(y, feeds["a"] * feeds["b"] + feeds["a"])
    np.testing.assert_allclose(dp, feeds["q"] + 1)


def test_the_expansion_is_plain_nodes() -> None:
    m = _model([_n("MatMul", ["a", "b"], "c"), _n("Tanh", ["c"])], {"a": (2, 3), "b": (3, 4)},
               ["a", "b"], "y")  # fmt: skip
    g = import_model(m)
    assert all(not n.domain for n in g.nodes)
    assert {"MatMul", "Transpose"} <= {n.op_type for n in g.nodes}


# --------------------------------------------------------------------------- refusals


def test_an_op_without_a_rule_on_the_path_is_refused_naming_it() -> None:
    assert "Sin" not in RULES
    m = _model([_n("Sin", ["a"], "s", name="sine"), _n("Relu", ["s"])], {"a": (3,)}, ["a"], "y")
    with pytest.raises(UnsupportedOpError, match="no derivative rule") as e:
        import_model(m)
    assert e.value.op == "Sin" and e.value.node == "sine" and "'grad'" in str(e.value)


def test_an_op_without_a_rule_off_the_path_is_fine() -> None:
    # (Sin reads a but y does not depend on it; Shape's output is an integer)
    nodes = [
        _n("Sin", ["a"], "s"),
        _n("Shape", ["a"], "shape"),
        _n("Reshape", ["a", "shape"], "r"),
        _n("Exp", ["r"]),
    ]
    m = _model(nodes, {"a": (3,)}, ["a"], "y")
    feeds = _feeds({"a": (3,)})
    _, da = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_allclose(da, np.exp(feeds["a"]))


def test_an_integer_x_is_refused() -> None:
    m = _model([_n("Neg", ["a"])], {"a": (3,)}, ["a"], "y", elem=TensorProto.INT64)
    with pytest.raises(UnsupportedOpError, match="floating-point"):
        import_model(m)


def test_dependent_xs_are_refused() -> None:
    m = _model([_n("Exp", ["a"], "b"), _n("Mul", ["a", "b"])], {"a": (3,)}, ["a", "b"], "y")
    with pytest.raises(ModelError, match="depends on another x"):
        import_model(m)


def test_a_gradient_output_typed_unlike_its_x_is_refused() -> None:
    a, y, da = (
        Value("a", "float64", (3,)),
        Value("y", "float64", (3,)),
        Value("da", "float64", (4,)),
    )
    nodes = (
        Node("neg", "Neg", ("a",), ("y",)),
        Node("grad", "Gradient", ("a",), ("da",), {"xs": ("a",), "y": "y"}, TRAINING_DOMAIN),
    )
    g = Graph("g", (a,), (y, da), nodes, {"a": a, "y": y, "da": da}, opset=17)
    with pytest.raises(ShapeError, match="'da' is declared"):
        expand_gradients(g)


def test_wrong_arity_is_refused() -> None:
    m = _model([_n("Neg", ["a"])], {"a": (3,)}, ["a"], "y", grad_inputs=["a", "a"])
    with pytest.raises(ModelError, match="2 inputs"):
        import_model(m)


def test_xs_that_are_initializers() -> None:
    # (the weights are constants: the graph passes may fold the gradient at compile time)
    w = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    nodes = [_n("MatMul", ["x", "w"], "m"), _n("Tanh", ["m"], "t"), _n("ReduceSum", ["t"])]
    m = _model(
        nodes,
        {"x": (4, 3)},
        ["w"],
        "y",
        zs=["x"],
        elem=TensorProto.FLOAT,
        inits=[onnx.numpy_helper.from_array(w, "w")],
    )
    x = _feeds({"x": (4, 3)})["x"].astype(np.float32)
    _, dw = polyonnx.InferenceSession(m).run(None, {"x": x})
    t = np.tanh(x @ w)
    np.testing.assert_allclose(dw, x.T @ (1 - t * t), rtol=1e-5, atol=1e-6)
