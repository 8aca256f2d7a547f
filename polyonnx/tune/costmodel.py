"""The learned cost model: predicts a candidate's speed-up from its features, trained on the
measurements as they come, so the search measures the candidates it expects to be fastest.

With xgboost installed (``pip install polyonnx[tune]``), gradient-boosted trees (what TVM's
Ansor and MetaSchedule use); without it, :class:`RidgeNeighbours`: a ridge regression blended
with a 3-nearest-neighbour average in standardised feature space, in numpy. A tuning run
measures tens of candidates per kernel, not thousands: at that size a ridge fit captures the
trends (more rows, wider tiles) and the neighbours the exceptions, and trees need more samples
to beat them. Targets are log speed-ups over the default schedule.

Example:
    >>> m = cost_model("ridge")
    >>> m.fit([[1.0, 0.0], [2.0, 0.0], [3.0, 1.0], [4.0, 1.0]], [0.1, 0.2, 0.3, 0.4])
    >>> [round(float(v), 2) for v in m.predict([[2.5, 0.5]])]
    [0.22]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

#: Samples below which a model predicts nothing (every candidate alike: the search samples).
MIN_SAMPLES = 3


class CostModel(Protocol):
    name: str

    def fit(self, x: Sequence[Sequence[float]], y: Sequence[float]) -> None: ...

    def predict(self, x: Sequence[Sequence[float]]) -> np.ndarray: ...


class RidgeNeighbours:
    """Ridge regression (``alpha``) and a ``k``-nearest-neighbour mean, averaged."""

    name = "ridge+knn"

    def __init__(self, alpha: float = 1.0, k: int = 3) -> None:
        self.alpha, self.k = alpha, k
        self._x: np.ndarray | None = None

    def fit(self, x: Sequence[Sequence[float]], y: Sequence[float]) -> None:
        xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if len(ys) < MIN_SAMPLES:
            self._x = None
            return
        self._mean, self._scale = xs.mean(0), xs.std(0) + 1e-9
        z = (xs - self._mean) / self._scale
        self._y_mean = ys.mean()
        a = z.T @ z + self.alpha * np.eye(z.shape[1])
        self._w = np.linalg.solve(a, z.T @ (ys - self._y_mean))
        self._x, self._y = z, ys

    def predict(self, x: Sequence[Sequence[float]]) -> np.ndarray:
        xs = np.asarray(x, np.float64)
        if self._x is None:
            return np.zeros(len(xs))
        z = (xs - self._mean) / self._scale
        ridge = z @ self._w + self._y_mean
        d = ((z[:, None, :] - self._x[None, :, :]) ** 2).sum(-1)
        nearest = np.argsort(d, axis=1)[:, : self.k]
        return 0.5 * ridge + 0.5 * self._y[nearest].mean(1)


class GradientBoosted:
    """xgboost's regressor, small (the training sets are small); the ridge model below
    ``min_samples``."""

    name = "xgboost"

    def __init__(self, min_samples: int = 8) -> None:
        import xgboost

        self._xgb = xgboost
        self.min_samples = min_samples
        self._fallback = RidgeNeighbours()
        self._model: Any = None  # (an xgboost Booster once trained)

    def fit(self, x: Sequence[Sequence[float]], y: Sequence[float]) -> None:
        self._fallback.fit(x, y)
        if len(y) < self.min_samples:
            self._model = None
            return
        data = self._xgb.DMatrix(np.asarray(x, np.float64), label=np.asarray(y, np.float64))
        params = {"max_depth": 4, "eta": 0.2, "subsample": 0.9, "nthread": 1, "verbosity": 0}
        self._model = self._xgb.train(params, data, num_boost_round=60)

    def predict(self, x: Sequence[Sequence[float]]) -> np.ndarray:
        if self._model is None:
            return self._fallback.predict(x)
        data = self._xgb.DMatrix(np.asarray(x, np.float64))
        return np.asarray(self._model.predict(data), np.float64)


def cost_model(kind: str = "auto") -> CostModel:
    """``"xgboost"``, ``"ridge"`` or ``"auto"`` (xgboost when it is installed)."""
    if kind not in ("auto", "xgboost", "ridge"):
        raise ValueError(f"cost model {kind!r}: choose auto, xgboost or ridge")
    if kind == "ridge":
        return RidgeNeighbours()
    try:
        return GradientBoosted()
    except ImportError:
        if kind == "xgboost":
            from polyonnx.errors import TuningError

            raise TuningError(
                "the xgboost cost model needs xgboost: pip install polyonnx[tune]"
            ) from None
        return RidgeNeighbours()
