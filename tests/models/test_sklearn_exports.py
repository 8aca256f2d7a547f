"""scikit-learn models as skl2onnx exports them (ONNX-ML opsets 1 and 3, with and without the
ZipMap at the end), against onnxruntime: linear models, SVMs, trees, forests, boosting, MLPs,
k-NN (a Scan), preprocessing pipelines, integer and string class labels."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import polyonnx
from polyonnx.testing import onnxruntime_outputs

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler  # noqa: E402
from sklearn.svm import SVC, SVR, LinearSVC  # noqa: E402
from sklearn.tree import DecisionTreeRegressor  # noqa: E402

THREE, _y3 = make_classification(120, 6, n_informative=4, n_classes=3, random_state=0)
TWO, _y2 = make_classification(120, 6, random_state=1)
REG, _yr = make_regression(120, 6, random_state=0)
THREE, TWO, REG = (a.astype(np.float32) for a in (THREE, TWO, REG))
WORDS = np.array(["ant", "bee", "cicada"])

CASES: dict[str, tuple[Callable[[], object], np.ndarray, np.ndarray]] = {
    "scaled_logistic": (
        lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
        THREE,
        _y3,
    ),
    "binary_logistic_strings": (lambda: LogisticRegression(), TWO, WORDS[_y2]),
    "linear_svc": (lambda: LinearSVC(), THREE, _y3),
    "sgd": (lambda: SGDClassifier(loss="log_loss", random_state=0), TWO, _y2),
    "svc_probabilities": (lambda: SVC(probability=True, random_state=0), THREE, _y3),
    "binary_svc": (lambda: SVC(), TWO, _y2),
    "forest_strings": (
        lambda: RandomForestClassifier(8, max_depth=4, random_state=0),
        THREE,
        WORDS[_y3],
    ),
    "boosting": (lambda: GradientBoostingClassifier(n_estimators=8), TWO, _y2),
    "mlp_strings": (
        lambda: make_pipeline(MinMaxScaler(), MLPClassifier(max_iter=200, random_state=0)),
        THREE,
        WORDS[_y3],
    ),
    "knn": (lambda: KNeighborsClassifier(), THREE, _y3),
    "linear_regression": (lambda: make_pipeline(Normalizer(), LinearRegression()), REG, _yr),
    "svr": (lambda: SVR(), REG, _yr),
    "tree_regressor": (lambda: DecisionTreeRegressor(max_depth=5), REG, _yr),
    "forest_regressor": (lambda: RandomForestRegressor(8, max_depth=4, random_state=0), REG, _yr),
    "boosting_regressor": (lambda: GradientBoostingRegressor(n_estimators=8), REG, _yr),
}


def _close(got: object, want: object) -> None:
    if isinstance(want, list):  # a ZipMap's dicts
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert list(g) == list(w)
            np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-4, atol=1e-5)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if want.dtype.kind in "iuUO":
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("ml_opset", [1, 3])
@pytest.mark.parametrize("name", CASES)
def test_sklearn_export_matches_onnxruntime(name: str, ml_opset: int) -> None:
    make, x, y = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (convergence and deprecation warnings of the fits)
        model = make().fit(x, y)
    # (skl2onnx offers the zipmap option to the classifiers with probabilities)
    classifier = hasattr(model, "predict_proba")
    for zipmap in (True, False) if classifier else (True,):
        options = None if zipmap else {id(model): {"zipmap": False}}
        onx = skl2onnx.to_onnx(
            model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": ml_opset}
        )
        feeds = {"X": x[:24]}
        want = onnxruntime_outputs(onx, feeds)
        got = polyonnx.InferenceSession(onx).run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w)
