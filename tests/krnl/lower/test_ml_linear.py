"""LinearClassifier and LinearRegressor compiled, against onnxruntime (and onnx.reference where
the two agree): multi-class and binary, each post_transform, int64 and string labels, ties,
integer and double inputs, bad attributes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError, PolyonnxError, UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs

ML = "ai.onnx.ml"
FEATURES = 4
COEF3 = [0.5, -0.25, 1.0, 0.0, -1.0, 0.5, 0.25, 0.75, 0.125, 0.0, -0.5, 0.25]
LABELS = {
    "int": {"classlabels_ints": [7, 3, 11]},
    "string": {"classlabels_strings": ["a", "bb", "c"]},
}


def _model(
    op: str, outputs: list[tuple[str, int]], x_type: int = TensorProto.FLOAT, **attrs: object
) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], [n for n, _ in outputs], "lin", domain=ML, **attrs)
    x = helper.make_tensor_value_info("x", x_type, [None, FEATURES])
    g = helper.make_graph(
        [node], "linear", [x], [helper.make_tensor_value_info(n, e, None) for n, e in outputs]
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )


def _classifier(labels: str, x_type: int = TensorProto.FLOAT, **attrs: object) -> onnx.ModelProto:
    kind = TensorProto.INT64 if labels == "int" else TensorProto.STRING
    return _model(
        "LinearClassifier", [("label", kind), ("scores", TensorProto.FLOAT)], x_type, **attrs
    )


def _inputs(seed: int, rows: int = 16, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(rows, FEATURES)) * scale).astype(np.float32)


def _same(got: list[np.ndarray], want: list[np.ndarray], atol: float = 1e-6) -> None:
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=atol)


@pytest.mark.parametrize("labels", ["int", "string"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
def test_multiclass_matches_onnxruntime(labels: str, transform: str) -> None:
    m = _classifier(
        labels,
        coefficients=COEF3,
        intercepts=[0.1, 0.0, -0.1],
        post_transform=transform,
        **LABELS[labels],
    )
    # (PROBIT reads scores in (0, 1): small inputs around 0.5)
    x = _inputs(1, scale=0.1) + (0.5 if transform == "PROBIT" else 0.0)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same(got, onnxruntime_outputs(m, {"x": x}), atol=1e-4 if transform == "PROBIT" else 1e-6)
    if transform != "PROBIT":
        _same(got, onnx_reference_outputs(m, {"x": x}))


@pytest.mark.parametrize("labels", ["int", "string"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_binary_one_row_matches_onnxruntime(labels: str, transform: str) -> None:
    # One coefficient row, two labels (what a binary model may carry): onnxruntime labels by
    # s > 0 and writes [1 - s, s] (LOGISTIC: [logistic(-s), logistic(s)]).
    names = {"int": {"classlabels_ints": [0, 1]}, "string": {"classlabels_strings": ["no", "yes"]}}
    m = _classifier(
        labels,
        coefficients=[0.5, -0.5, 0.25, 0.0],
        intercepts=[0.0],
        post_transform=transform,
        **names[labels],
    )
    x = _inputs(2)
    x[:3] = [[1, 1, 0, 5], [0, 0, 0, 0], [1, 2, 1, 0]]  # s = 0 (ties go to the first), s < 0
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same(got, onnxruntime_outputs(m, {"x": x}))
    assert got[0][0] == got[0][1] == names[labels][next(iter(names[labels]))][0]


def test_label_ties_take_the_first_highest_score() -> None:
    # Classes 0 and 1 have the same coefficients: every row ties between them.
    coef = [1.0, 0.5, 0.0, 0.0] * 2 + [0.0, 0.0, 1.0, -1.0]
    m = _classifier(
        "int",
        coefficients=coef,
        intercepts=[0.0, 0.0, 0.5],
        classlabels_ints=[5, 9, 7],
        post_transform="SOFTMAX",
    )
    x = _inputs(3)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same(got, onnxruntime_outputs(m, {"x": x}))
    assert set(got[0].tolist()) <= {5, 7}


def test_labels_come_from_the_scores_before_the_transform() -> None:
    # Scores 40 and 41 both give logistic 1.0 in float32: the label is still the higher one.
    m = _classifier(
        "int",
        coefficients=[1.0, 0, 0, 0, 1.0, 0, 0, 0],
        intercepts=[0.0, 1.0],
        classlabels_ints=[1, 2],
        post_transform="LOGISTIC",
    )
    x = np.full((2, FEATURES), 40.0, np.float32)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same(got, onnxruntime_outputs(m, {"x": x}))
    assert got[0].tolist() == [2, 2]


@pytest.mark.parametrize(
    ("x_type", "dtype"),
    [
        (TensorProto.DOUBLE, np.float64),
        (TensorProto.INT64, np.int64),
        (TensorProto.INT32, np.int32),
    ],
)
def test_classifier_inputs_of_other_types(x_type: int, dtype: type) -> None:
    m = _classifier("int", x_type, coefficients=COEF3, intercepts=[0.1, 0.0, -0.1], **LABELS["int"])
    x = np.round(_inputs(4) * 3).astype(dtype)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})
    _same(got, onnxruntime_outputs(m, {"x": x}))


@pytest.mark.parametrize("targets", [1, 2])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
def test_regressor_matches_onnxruntime(targets: int, transform: str) -> None:
    # (One target: onnxruntime applies PROBIT only.)
    m = _model(
        "LinearRegressor",
        [("y", TensorProto.FLOAT)],
        coefficients=COEF3[: FEATURES * targets],
        intercepts=[0.5, -0.25][:targets],
        targets=targets,
        post_transform=transform,
    )
    x = _inputs(5, scale=0.1)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    want = onnxruntime_outputs(m, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 if transform == "PROBIT" else 1e-6)
    if transform == "NONE":
        np.testing.assert_allclose(got, onnx_reference_outputs(m, {"x": x})[0], rtol=1e-5)


@pytest.mark.parametrize(
    ("x_type", "dtype"), [(TensorProto.DOUBLE, np.float64), (TensorProto.INT64, np.int64)]
)
def test_regressor_inputs_of_other_types(x_type: int, dtype: type) -> None:
    # (onnxruntime runs float only: the expected values are computed here.)
    m = _model(
        "LinearRegressor",
        [("y", TensorProto.FLOAT)],
        x_type,
        coefficients=COEF3[:8],
        intercepts=[0.5, -0.25],
        targets=2,
    )
    x = np.round(_inputs(6) * 3).astype(dtype)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    want = x.astype(np.float64) @ np.array(COEF3[:8]).reshape(2, FEATURES).T + [0.5, -0.25]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _refused(m: onnx.ModelProto, x: np.ndarray, kind: type, pattern: str) -> None:
    """Running ``m`` raises ``kind`` (or an InputError caused by one) matching ``pattern``."""
    with pytest.raises(PolyonnxError, match=pattern) as info:
        polyonnx.InferenceSession(m).run(None, {"x": x})
    assert isinstance(info.value, kind) or isinstance(info.value.__cause__, kind)


def test_bad_attributes_are_named() -> None:
    x = _inputs(0, 2)
    m = _classifier(
        "int",
        coefficients=COEF3,
        intercepts=[0.0] * 3,
        classlabels_ints=[1, 2, 3],
        post_transform="CUBE",
    )
    _refused(m, x, UnsupportedOpError, r"LinearClassifier.*'lin'.*post_transform")
    m = _classifier("int", coefficients=COEF3[:5], intercepts=[0.0], classlabels_ints=[1, 2, 3])
    _refused(m, x, ModelError, r"'lin'.*'coefficients'.*multiple of 4")
    m = _classifier("int", coefficients=COEF3, intercepts=[0.0] * 3, classlabels_ints=[1, 2])
    _refused(m, x, ModelError, r"'coefficients'.*3 row\(s\).*2 class labels")
    m = _classifier(
        "int",
        coefficients=COEF3[:4],
        intercepts=[0.0],
        classlabels_ints=[0, 1],
        post_transform="PROBIT",
    )
    _refused(m, x, UnsupportedOpError, r"PROBIT.*one coefficient row")
    m = _model(
        "LinearRegressor", [("y", TensorProto.FLOAT)], coefficients=COEF3[:4], intercepts=[1, 2.0]
    )
    _refused(m, x, ModelError, r"'intercepts' has 2 values for 1 rows")
    m = _classifier("int", coefficients=COEF3, classlabels_ints=[1, 2, 3])
    _refused(m, x, ModelError, r"'intercepts' is required")
