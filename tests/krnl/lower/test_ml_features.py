"""ONNX-ML feature transforms and encoders compiled, against onnxruntime and onnx.reference:
each op and its attribute variants on a tiny model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import PolyonnxError, UnsupportedOpError
from polyonnx.frontend import import_model
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs

ML = "ai.onnx.ml"
F, I64, S = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING


def _model(
    op: str, inputs: list[tuple[str, int, list]], out: int, outputs: int = 1, **attrs: object
) -> onnx.ModelProto:
    names = ["y", "z"][:outputs]
    node = helper.make_node(op, [n for n, _, _ in inputs], names, "n", domain=ML, **attrs)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
        [helper.make_tensor_value_info(n, out, None) for n in names],
    )
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 2)]
    )


def _check(
    m: onnx.ModelProto, feeds: dict[str, np.ndarray], ort: bool = True, reference: bool = True
) -> None:
    got = polyonnx.InferenceSession(m).run(None, feeds)
    refs = ([onnx_reference_outputs(m, feeds)] if reference else []) + (
        [onnxruntime_outputs(m, feeds)] if ort else []
    )
    for ref in refs:
        for g, r in zip(got, ref, strict=True):
            if g.dtype == object:
                np.testing.assert_array_equal(g, np.asarray(r, dtype=object))
            else:
                np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)


X = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, np.nan], [2.0, 2.0, 1.0]], np.float32)


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_binarizer(threshold: float) -> None:
    m = _model("Binarizer", [("x", F, [3, 3])], F, threshold=threshold)
    _check(m, {"x": np.nan_to_num(X)})
    _check(m, {"x": X}, ort=False)  # (onnxruntime refuses NaN; the reference gives 0)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm: str) -> None:
    # (MAX divides by the largest |x| as onnx.reference and scikit-learn do; onnxruntime
    # divides by the largest x.)
    x = np.nan_to_num(X)
    _check(_model("Normalizer", [("x", F, [3, 3])], F, norm=norm), {"x": x}, ort=norm != "MAX")


@pytest.mark.parametrize("per_column", [False, True])
def test_scaler(per_column: bool) -> None:
    attrs = {"offset": [0.5, 1.0, -1.0], "scale": [2.0, 0.5, 3.0]}
    if not per_column:
        attrs = {"offset": [0.5], "scale": [2.0]}
    _check(_model("Scaler", [("x", F, [3, 3])], F, **attrs), {"x": X})


@pytest.mark.parametrize("replaced", [float("nan"), 2.0])
def test_imputer_floats(replaced: float) -> None:
    m = _model(
        "Imputer",
        [("x", F, [3, 3])],
        F,
        imputed_value_floats=[9.0, 8.0, 7.0],
        replaced_value_float=replaced,
    )
    _check(m, {"x": X})


def test_imputer_int64s() -> None:
    m = _model(
        "Imputer", [("x", I64, [2, 2])], I64, imputed_value_int64s=[5], replaced_value_int64=-1
    )
    _check(m, {"x": np.array([[-1, 2], [3, -1]], np.int64)}, ort=False)


def test_array_feature_extractor_with_constant_and_fed_indices() -> None:
    m = _model("ArrayFeatureExtractor", [("x", F, [3, 3]), ("i", I64, [2])], F)
    _check(m, {"x": X, "i": np.array([2, 0], np.int64)})
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([1, 1, 0], np.int64), "i"))
    del m.graph.input[1]
    _check(m, {"x": X})


def test_array_feature_extractor_index_out_of_range_is_an_error() -> None:
    m = _model("ArrayFeatureExtractor", [("x", F, [3, 3]), ("i", I64, [1])], F)
    with pytest.raises(PolyonnxError, match="out of range"):
        polyonnx.InferenceSession(m).run(None, {"x": X, "i": np.array([3], np.int64)})


def test_feature_vectorizer_cuts_and_pads() -> None:
    m = _model(
        "FeatureVectorizer",
        [("a", F, [3, 3]), ("b", I64, [3, 1])],
        F,
        inputdimensions=[2, 3],
    )
    b = np.array([[4], [5], [6]], np.int64)
    got = polyonnx.InferenceSession(m).run(None, {"a": X, "b": b})[0]
    np.testing.assert_array_equal(got, onnx_reference_outputs(m, {"a": X, "b": b})[0])


STRINGS = np.array(["b", "zz", "a", "ccc", ""], dtype=object)


@pytest.mark.parametrize(
    "attrs, out",
    [
        ({"keys_strings": ["a", "b", "ccc"], "values_int64s": [1, 2, 3]}, I64),
        ({"keys_strings": ["a", "ccc"], "values_floats": [0.5, 1.5], "default_float": 9.0}, F),
        ({"keys_strings": ["a", "b"], "values_strings": ["x", "long value"]}, S),
        (
            {"keys_strings": ["a", "b"], "values_strings": ["x", "y"], "default_string": "?"},
            S,
        ),
    ],
)
def test_label_encoder_of_strings(attrs: dict, out: int) -> None:
    _check(_model("LabelEncoder", [("x", S, [5])], out, **attrs), {"x": STRINGS})


def test_label_encoder_of_numbers_with_a_nan_key() -> None:
    m = _model(
        "LabelEncoder",
        [("x", F, [4])],
        S,
        keys_floats=[1.0, float("nan"), 2.5],
        values_strings=["one", "none", "two and a half"],
    )
    x = np.array([2.5, np.nan, 7.0, 1.0], np.float32)
    got = polyonnx.InferenceSession(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, ["two and a half", "none", "_Unused", "one"])


def test_label_encoder_int_to_int() -> None:
    m = _model(
        "LabelEncoder", [("x", I64, [2, 3])], I64, keys_int64s=[3, 1], values_int64s=[30, 10]
    )
    _check(m, {"x": np.array([[1, 2, 3], [3, 3, 0]], np.int64)})


CATEGORIES = {"cats_strings": ["a", "zz", "ccc"], "cats_int64s": [5, -7, 9]}


@pytest.mark.parametrize("default", [{}, {"default_int64": -3}])
def test_category_mapper_strings_to_ints(default: dict) -> None:
    m = _model("CategoryMapper", [("x", S, [5])], I64, **CATEGORIES, **default)
    _check(m, {"x": STRINGS}, reference=False)  # (onnx.reference has no CategoryMapper)


@pytest.mark.parametrize("default", [{}, {"default_string": "?"}, {"default_string": "longest"}])
def test_category_mapper_ints_to_strings(default: dict) -> None:
    m = _model("CategoryMapper", [("x", I64, [2, 3])], S, **CATEGORIES, **default)
    _check(m, {"x": np.array([[5, 0, 9], [-7, 9, 6]], np.int64)}, reference=False)


def test_category_mapper_with_unpaired_categories_is_refused() -> None:
    m = _model("CategoryMapper", [("x", S, [5])], I64, cats_strings=["a"], cats_int64s=[1, 2])
    with pytest.raises(PolyonnxError, match="cats_int64s.*2 categories for 1 strings"):
        polyonnx.InferenceSession(m).run(None, {"x": STRINGS})


@pytest.mark.parametrize("strings", [False, True])
def test_one_hot_encoder(strings: bool) -> None:
    if strings:
        m = _model("OneHotEncoder", [("x", S, [5])], F, cats_strings=["a", "ccc", "zzz"])
        _check(m, {"x": STRINGS})
    else:
        m = _model("OneHotEncoder", [("x", I64, [2, 2])], F, cats_int64s=[4, 2, 9])
        _check(m, {"x": np.array([[2, 9], [5, 4]], np.int64)})


def test_one_hot_encoder_without_zeros_refuses_an_unknown_category_at_run_time() -> None:
    m = _model("OneHotEncoder", [("x", I64, [3])], F, cats_int64s=[4, 2], zeros=0)
    session = polyonnx.InferenceSession(m)
    np.testing.assert_array_equal(
        session.run(None, {"x": np.array([2, 4, 2], np.int64)})[0], [[0, 1], [1, 0], [0, 1]]
    )
    with pytest.raises(PolyonnxError, match="'n'|OneHotEncoder|n"):
        session.run(None, {"x": np.array([2, 5, 4], np.int64)})


def test_an_ml_op_without_lowering_is_refused_by_name() -> None:
    m = _model("DictVectorizer", [("x", F, [3])], F, int64_vocabulary=[1, 2])
    with pytest.raises(UnsupportedOpError, match=r"ai\.onnx\.ml\.DictVectorizer"):
        import_model(m)
