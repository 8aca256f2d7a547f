"""TfIdfVectorizer compiled, against onnx.reference (and onnxruntime, which counts alike):
the three modes, weights, skips, n-gram lengths, [C] and [N, C] inputs of int32, int64 and
strings, an empty level of the pool, duplicate n-grams, and the attributes refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs

ELEM = {"int32": TensorProto.INT32, "int64": TensorProto.INT64, "str": TensorProto.STRING}

# Unigrams 2, 3, 5, 4; bigrams (5, 6), (7, 8), (6, 7); trigrams (1, 3, 3), (8, 6, 7).
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 1, 3, 3, 8, 6, 7]
COUNTS = [0, 4, 10]


def _model(shape: list[int], elem: int, **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], "tfidf", **attrs)
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])


def _attrs(**over: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "mode": "TF",
        "min_gram_length": 1,
        "max_gram_length": 3,
        "max_skip_count": 0,
        "ngram_counts": COUNTS,
        "ngram_indexes": list(range(9)),
        "pool_int64s": POOL,
    }
    attrs.update(over)
    return attrs


def _check(x: np.ndarray, ort: bool = True, **attrs: Any) -> np.ndarray:
    attrs = _attrs(**attrs)
    elem = ELEM["str" if x.dtype == object else x.dtype.name]
    m = _model(list(x.shape), elem, **attrs)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    refs = [onnxruntime_outputs(m, {"x": x})] if ort else []
    # (onnx.reference fails on IDF and TFIDF without weights: it takes len() of None.)
    if attrs["mode"] == "TF" or attrs.get("weights"):
        refs.append(onnx_reference_outputs(m, {"x": x}))
    for (ref,) in refs:
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    return got


def _tokens(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    # Tokens from a small alphabet, so that the pool's n-grams occur, skipped ones too.
    return np.random.default_rng(seed).integers(1, 9, shape).astype(dtype)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weighted", [False, True])
def test_modes_and_weights(mode: str, weighted: bool) -> None:
    weights = [0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 0.75, 4.0, 0.1] if weighted else None
    got = _check(_tokens((3, 12), "int64"), mode=mode, max_skip_count=2, weights=weights)
    assert got.any()


@pytest.mark.parametrize(("low", "high"), [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3), (1, 3)])
@pytest.mark.parametrize("skips", [0, 1, 5])
def test_gram_lengths_and_skips(low: int, high: int, skips: int) -> None:
    # A unigram is counted once, however many skips; longer n-grams once per skip distance.
    x = _tokens((2, 10), "int64", seed=low + 3 * high + 7 * skips)
    _check(x, min_gram_length=low, max_gram_length=high, max_skip_count=skips)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape", [(11,), (4, 7), (1, 3), (2, 1)])
def test_input_types_and_shapes(dtype: str, shape: tuple[int, ...]) -> None:
    _check(_tokens(shape, dtype, seed=len(shape)), mode="TFIDF", max_skip_count=3)


def test_suite_case_counts() -> None:
    # onnx's test_tfidfvectorizer_tf_batch_uniandbigrams_skip5.
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
    got = _check(
        x,
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=5,
        ngram_counts=[0, 4],
        ngram_indexes=list(range(7)),
        pool_int64s=POOL[:10],
    )
    np.testing.assert_array_equal(got, [[0, 3, 0, 0, 0, 0, 0], [0, 0, 1, 0, 1, 1, 1]])


@pytest.mark.parametrize("mode", ["TF", "TFIDF"])
def test_empty_level_and_sparse_columns(mode: str) -> None:
    # No unigrams (an empty first level); columns 0 and 2 hold no n-gram; a weight is the
    # weight of an output column, as in onnx.reference (onnxruntime wants one weight per
    # n-gram, and refuses five for three n-grams).
    _check(
        _tokens((2, 9), "int64", seed=4),
        ort=mode == "TF",
        mode=mode,
        weights=[1.0, 2.0, 3.0, 4.0, 5.0] if mode == "TFIDF" else None,
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=1,
        ngram_counts=[0, 0],
        ngram_indexes=[1, 3, 4],
        pool_int64s=[5, 6, 7, 8, 6, 7],
    )


def test_shared_columns_and_duplicates() -> None:
    # Two n-grams in one column, an n-gram listed twice (it counts at its last place only),
    # and a pool value beyond int32 against an int32 input.
    _check(
        _tokens((3, 8), "int32", seed=5),
        ort=False,
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=1,
        ngram_counts=[0, 4],
        ngram_indexes=[0, 0, 1, 2, 3, 1, 4],
        pool_int64s=[2, 3, 2, 1 << 40, 5, 6, 7, 8, 5, 6],
    )


def test_strings() -> None:
    words = np.array(["a", "bb", "ccc", "d", "bbb", ""], dtype=object)
    x = words[np.random.default_rng(6).integers(0, len(words), (3, 10))]
    pool = ["bb", "d", "ccccc", "", "a", "bb", "ccc", "d", "bb", "ccc", "a"]
    for shaped in (x, x[0]):
        _check(
            shaped,
            mode="TFIDF",
            min_gram_length=1,
            max_gram_length=3,
            max_skip_count=2,
            ngram_counts=[0, 4, 8],
            ngram_indexes=list(range(9)),
            weights=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
            pool_int64s=None,
            pool_strings=pool,
        )


def test_nothing_to_count() -> None:
    # Lengths with no n-gram in the pool (an empty level; a level beyond the pool, which
    # onnxruntime refuses): every row is zeros.
    x = _tokens((2, 5), "int64")
    got = _check(x, min_gram_length=3, max_gram_length=3, ngram_counts=[0, 4, 16])
    assert got.shape == (2, 9) and not got.any()
    got = _check(x, ort=False, min_gram_length=4, max_gram_length=4)
    assert got.shape == (2, 9) and not got.any()


@pytest.mark.parametrize(
    ("attrs", "error"),
    [
        ({"min_gram_length": 0}, ModelError),
        ({"max_gram_length": 0}, ModelError),
        ({"mode": "BM25"}, ModelError),
        ({"ngram_counts": [0, 20]}, ModelError),
        ({"ngram_indexes": [0, 1]}, ModelError),
        ({"pool_int64s": None, "pool_strings": ["a", "b"]}, UnsupportedOpError),
    ],
)
def test_refused(attrs: dict[str, Any], error: type[Exception]) -> None:
    m = _model([2, 4], TensorProto.INT64, **_attrs(**attrs))
    with pytest.raises(error):
        polyonnx.InferenceSession(m)
