"""The optimizer steps of the training domain (Adagrad, Adam, Momentum) compiled, against
onnx.reference (onnxruntime's standard build has none of them): one tensor and several, the
first step (T = 0) and later ones, each mode and attribute that changes the formula."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.graph.ir import TRAINING_DOMAIN
from polyonnx.testing import onnx_reference_outputs

#: Inputs per tensor optimised: X, G and the states.
STATES = {"Adagrad": ("H",), "Momentum": ("V",), "Adam": ("V", "H")}


def _model(
    op: str,
    shapes: list[tuple[int, ...]],
    dtype: int = TensorProto.FLOAT,
    outputs: list[str] | None = None,
    default_domain: bool = False,
    **attrs: object,
) -> onnx.ModelProto:
    """One ``op`` node over tensors of ``shapes``: inputs R, T, X1.., G1.., states...;
    outputs X1_new.., then the new states."""
    groups = ("X", "G", *STATES[op])
    tensors = [f"{g}{k}" for g in groups for k in range(len(shapes))]
    new = [f"{g}{k}_new" for g in ("X", *STATES[op]) for k in range(len(shapes))]
    node = helper.make_node(
        op, ["R", "T", *tensors], outputs or new, "step", domain=TRAINING_DOMAIN, **attrs
    )
    typed = [
        helper.make_tensor_value_info(f"{g}{k}", dtype, list(s))
        for g in groups
        for k, s in enumerate(shapes)
    ]
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("R", dtype, []),
            helper.make_tensor_value_info("T", TensorProto.INT64, []),
            *typed,
        ],
        [helper.make_tensor_value_info(o, dtype, None) for o in (outputs or new) if o],
    )
    imports = [helper.make_opsetid(TRAINING_DOMAIN, 1)]
    if default_domain:
        imports.append(helper.make_opsetid("", 17))
    return helper.make_model(graph, opset_imports=imports)


def _feeds(
    op: str, shapes: list[tuple[int, ...]], t: int, dtype: str = "float32", seed: int = 0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"R": np.array(0.1, dtype), "T": np.array(t, np.int64)}
    for g in ("X", "G", *STATES[op]):
        for k, s in enumerate(shapes):
            a = rng.standard_normal(s)
            feeds[f"{g}{k}"] = (np.abs(a) if g == "H" else a).astype(dtype)  # (H: squares)
    return feeds


def _check(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-6
) -> list[np.ndarray]:
    got = polyonnx.InferenceSession(model).run(None, feeds)
    want = onnx_reference_outputs(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.asarray(feeds["X0"]).dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


SHAPES = [[(3,)], [(1,), (2, 3)], [(2, 2, 2), (5,), ()]]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize(
    "attrs",
    [{}, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}],
    ids=["defaults", "all"],
)
def test_adagrad(shapes: list[tuple[int, ...]], t: int, attrs: dict) -> None:
    _check(_model("Adagrad", shapes, **attrs), _feeds("Adagrad", shapes, t))


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("t", [0, 1, 7])
@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"alpha": 0.95, "beta": 0.85, "epsilon": 1e-2, "norm_coefficient": 1e-3},
        {"norm_coefficient_post": 0.1, "alpha": 0.5},
    ],
    ids=["defaults", "norm", "post"],
)
def test_adam(shapes: list[tuple[int, ...]], t: int, attrs: dict) -> None:
    _check(_model("Adam", shapes, **attrs), _feeds("Adam", shapes, t))


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("t", [0, 2])
@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum(shapes: list[tuple[int, ...]], t: int, mode: str) -> None:
    model = _model("Momentum", shapes, alpha=0.9, beta=0.5, mode=mode, norm_coefficient=0.02)
    _check(model, _feeds("Momentum", shapes, t))


@pytest.mark.parametrize("op", sorted(STATES))
def test_float64_and_a_default_domain(op: str) -> None:
    # (onnx.reference rounds Adam's outputs to float32 when it optimises several tensors.)
    shapes = [(4,)] if op == "Adam" else [(4,), (2, 3)]
    attrs = {"alpha": 0.9, "beta": 1.0, "mode": "standard", "norm_coefficient": 0.0}
    model = _model(
        op,
        shapes,
        TensorProto.DOUBLE,
        default_domain=True,
        **(attrs if op == "Momentum" else {}),
    )
    _check(model, _feeds(op, shapes, 5, "float64"), rtol=1e-12, atol=0)


def test_unnamed_state_output_goes_to_a_temp() -> None:
    # Adam's new X reads the new V and H: with V' unnamed it is still computed.
    model = _model("Adam", [(3,)], outputs=["X0_new", "", "H0_new"], alpha=0.8)
    feeds = _feeds("Adam", [(3,)], 2)
    got = polyonnx.InferenceSession(model).run(None, feeds)
    full = _model("Adam", [(3,)], alpha=0.8)
    want = onnx_reference_outputs(full, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[2], rtol=1e-5)


def test_unknown_momentum_mode_is_a_model_error() -> None:
    model = _model("Momentum", [(3,)], alpha=0.9, beta=1.0, mode="heavy", norm_coefficient=0.0)
    with pytest.raises(ModelError, match="'mode'"):
        polyonnx.InferenceSession(model)


def test_a_gradient_alone_in_the_training_domain_compiles() -> None:
    # (d x / d x: ones. The model imports no default domain either.)
    node = helper.make_node("Gradient", ["x"], ["dx"], domain=TRAINING_DOMAIN, xs=["x"], y="x")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("dx", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(TRAINING_DOMAIN, 1)])
    [dx] = polyonnx.InferenceSession(model).run(None, {"x": np.array([3.0, -1.0], np.float32)})
    np.testing.assert_array_equal(dx, [1.0, 1.0])


def test_a_model_of_another_domain_alone_is_still_refused() -> None:
    node = helper.make_node("Foo", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError, match="not the default ONNX domain"):
        polyonnx.InferenceSession(model)
