"""The cost model ranks candidates by what it learned from the measurements."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.tune.costmodel import MIN_SAMPLES, RidgeNeighbours, cost_model


def data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6))
    return x, 0.5 * x[:, 0] - 0.3 * x[:, 2] + 0.05 * rng.normal(size=n)


@pytest.mark.parametrize("kind", ["ridge", "xgboost"])
def test_the_model_ranks_unseen_candidates(kind: str) -> None:
    if kind == "xgboost":
        pytest.importorskip("xgboost", reason="xgboost is an optional extra: polyonnx[tune]")
    model = cost_model(kind)
    x, y = data(40, 0)
    model.fit(x.tolist(), y.tolist())
    xt, yt = data(40, 1)
    assert np.corrcoef(model.predict(xt.tolist()), yt)[0, 1] > 0.7


def test_too_few_samples_predict_nothing() -> None:
    model = RidgeNeighbours()
    x, y = data(MIN_SAMPLES - 1, 0)
    model.fit(x, y)
    assert not model.predict(x).any()


def test_auto_is_xgboost_when_installed() -> None:
    try:
        import xgboost  # noqa: F401

        assert cost_model().name == "xgboost"
    except ImportError:
        assert cost_model().name == "ridge+knn"


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="cost model 'forest'"):
        cost_model("forest")
