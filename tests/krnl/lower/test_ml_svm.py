"""SVMClassifier and SVMRegressor compiled, against onnxruntime (and onnx.reference where the
two agree): each kernel, one-vs-one votes with and without Platt probabilities, two and more
classes, the liblinear form, vote ties, other input types, bad attributes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError, PolyonnxError, UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs

ML = "ai.onnx.ml"
FEATURES = 3
PARAMS = [0.3, 0.5, 2.0]  # gamma, coef0, degree
KERNELS = ["LINEAR", "POLY", "RBF", "SIGMOID"]


def _model(
    op: str, outputs: list[tuple[str, int]], x_type: int = TensorProto.FLOAT, **attrs: object
) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], [n for n, _ in outputs], "svm", domain=ML, **attrs)
    x = helper.make_tensor_value_info("x", x_type, [None, FEATURES])
    g = helper.make_graph(
        [node], "svm", [x], [helper.make_tensor_value_info(n, e, None) for n, e in outputs]
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )


def _svc(
    classes: int,
    seed: int,
    labels: str = "int",
    x_type: int = TensorProto.FLOAT,
    prob: bool = False,
    **attrs: object,
) -> onnx.ModelProto:
    """A one-vs-one SVC of ``classes`` classes with 1 to 3 random support vectors each."""
    rng = np.random.default_rng(seed)
    per_class = rng.integers(1, 4, size=classes).tolist()
    count, pairs = sum(per_class), classes * (classes - 1) // 2
    attrs = {
        "vectors_per_class": per_class,
        "support_vectors": rng.normal(size=count * FEATURES).round(2).tolist(),
        "coefficients": rng.normal(size=(classes - 1) * count).round(2).tolist(),
        "rho": rng.normal(size=pairs).round(2).tolist(),
        "kernel_params": PARAMS,
        **attrs,
    }
    if prob:
        attrs["prob_a"] = (-rng.uniform(0.5, 3, size=pairs)).round(2).tolist()
        attrs["prob_b"] = rng.normal(scale=0.2, size=pairs).round(2).tolist()
    return _classifier(classes, labels, x_type, **attrs)


def _classifier(classes: int, labels: str, x_type: int, **attrs: object) -> onnx.ModelProto:
    if labels == "int":
        names: dict[str, object] = {"classlabels_ints": [10 + 3 * k for k in range(classes)]}
    else:
        names = {"classlabels_strings": ["cat", "dog", "emu", "fox", "gnu"][:classes]}
    kind = TensorProto.INT64 if labels == "int" else TensorProto.STRING
    return _model(
        "SVMClassifier", [("label", kind), ("scores", TensorProto.FLOAT)], x_type, **names, **attrs
    )


def _inputs(seed: int, rows: int = 12) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)


def _check(m: onnx.ModelProto, x: np.ndarray, reference: bool = False) -> list[np.ndarray]:
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    wants = [onnxruntime_outputs(m, {"x": x})]
    if reference:
        wants.append(onnx_reference_outputs(m, {"x": x}))
    for want in wants:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    return got


@pytest.mark.parametrize("prob", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
def test_multiclass_svc_each_kernel(kernel: str, prob: bool) -> None:
    # (onnx.reference agrees on the decision values; its probability coupling differs.)
    _check(_svc(3, 1, kernel_type=kernel, prob=prob), _inputs(2), reference=not prob)


@pytest.mark.parametrize("prob", [False, True])
@pytest.mark.parametrize("transform", ["LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_four_classes_post_transform(transform: str, prob: bool) -> None:
    # Four classes: six classifiers (the scores without probabilities), string labels.
    m = _svc(4, 3, "string", kernel_type="RBF", post_transform=transform, prob=prob)
    _check(m, _inputs(4), reference=not prob)


@pytest.mark.parametrize("prob", [False, True])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("labels", ["int", "string"])
def test_binary_svc(labels: str, transform: str, prob: bool) -> None:
    # One classifier: [-d, d] (NONE), [logistic(-d), logistic(d)], [1 - d, d] (SOFTMAX, which
    # onnxruntime does not apply there); with probabilities, two transformed columns.
    m = _svc(2, 5, labels, kernel_type="POLY", post_transform=transform, prob=prob)
    _check(m, _inputs(6))


def test_vote_ties_take_the_first_class() -> None:
    # Zero coefficients: the decisions are rho, 0 beats 1, 2 beats 0, 1 beats 2: one vote each.
    m = _svc(
        3,
        7,
        vectors_per_class=[2, 1, 1],
        support_vectors=[0.5] * 4 * FEATURES,
        coefficients=[0.0] * 8,
        rho=[1.0, -1.0, 1.0],
    )
    got = _check(m, _inputs(8), reference=True)
    assert (got[0] == 10).all()


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_liblinear_form(classes: int, transform: str) -> None:
    # No support vectors: scores are X coefficients^T + rho[0]; two classes follow
    # onnxruntime's rule (the second class when the top score is above 0).
    rng = np.random.default_rng(classes)
    m = _classifier(
        classes,
        "int",
        TensorProto.FLOAT,
        coefficients=rng.normal(size=classes * FEATURES).tolist(),
        rho=[0.2],
        kernel_params=PARAMS,
        post_transform=transform,
    )
    _check(m, _inputs(9, 24))


def test_liblinear_two_classes_all_positive_weights() -> None:
    # Every coefficient >= 0: the second class once the top score reaches 0.5.
    m = _classifier(
        2,
        "string",
        TensorProto.FLOAT,
        coefficients=[0.5, 0.25, 0.0, 0.25, 0.0, 0.5],
        rho=[-0.25],
        kernel_params=PARAMS,
    )
    x = _inputs(10, 24)
    x[:3] = [[1.5, 0, 0], [0, 0, 0], [1, 1, 1]]
    _check(m, x)


@pytest.mark.parametrize(
    ("x_type", "dtype"), [(TensorProto.DOUBLE, np.float64), (TensorProto.INT64, np.int64)]
)
def test_classifier_inputs_of_other_types(x_type: int, dtype: type) -> None:
    m = _svc(3, 11, x_type=x_type, kernel_type="RBF", prob=True)
    _check(m, np.round(_inputs(12) * 2).astype(dtype))


def _regressor(**attrs: object) -> onnx.ModelProto:
    return _model("SVMRegressor", [("y", TensorProto.FLOAT)], kernel_params=PARAMS, **attrs)


@pytest.mark.parametrize("one_class", [0, 1])
@pytest.mark.parametrize("kernel", KERNELS)
def test_regressor_each_kernel(kernel: str, one_class: int) -> None:
    rng = np.random.default_rng(13)
    m = _regressor(
        kernel_type=kernel,
        n_supports=4,
        support_vectors=rng.normal(size=4 * FEATURES).round(2).tolist(),
        coefficients=rng.normal(size=4).round(2).tolist(),
        rho=[0.25],
        one_class=one_class,
    )
    x = _inputs(14)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    for want in (onnxruntime_outputs(m, {"x": x})[0], onnx_reference_outputs(m, {"x": x})[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_regressor_liblinear_form() -> None:
    m = _regressor(coefficients=[0.5, -1.0, 0.25], rho=[0.125])
    x = _inputs(15)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_allclose(got, onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def _refused(m: onnx.ModelProto, kind: type, pattern: str) -> None:
    """Running ``m`` raises ``kind`` (or an InputError caused by one) matching ``pattern``."""
    with pytest.raises(PolyonnxError, match=pattern) as info:
        polyonnx.InferenceSession(m).run(None, {"x": _inputs(0, 2)})
    assert isinstance(info.value, kind) or isinstance(info.value.__cause__, kind)


def test_bad_attributes_are_named() -> None:
    _refused(_svc(3, 1, kernel_type="CUBIC"), ModelError, r"'svm'.*'kernel_type'.*CUBIC")
    _refused(
        _svc(3, 1, vectors_per_class=[1, 1]), ModelError, r"'vectors_per_class'.*per class \(3\)"
    )
    _refused(_svc(3, 1, rho=[0.0]), ModelError, r"'rho' has 1 values for 3 classifiers")
    _refused(_svc(2, 1, post_transform="PROBIT"), UnsupportedOpError, r"PROBIT.*two classes")
    _refused(
        _regressor(coefficients=[1.0, 2.0, 3.0], rho=[0.0], post_transform="LOGISTIC"),
        UnsupportedOpError,
        r"SVMRegressor.*'svm'.*post_transform",
    )
    _refused(
        _regressor(n_supports=2, support_vectors=[0.0] * 5, coefficients=[1, 2.0], rho=[0.0]),
        ModelError,
        r"'support_vectors' has 5 values for 2 vectors of 3 features",
    )
