"""Fixtures for whole-model tests: model builders and the onnxruntime oracle."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from .builders import light_model as build_light_model
from .builders import mnist_model as build_mnist_model


@pytest.fixture
def mnist_model() -> onnx.ModelProto:
    """The mnist-8 architecture (opset 8, as in the model zoo) with random weights."""
    return build_mnist_model()


@pytest.fixture
def light_model() -> Callable[..., onnx.ModelProto]:
    """``light_model(name, seed=0, logits=False)``: a light model with random weights."""
    return build_light_model


@pytest.fixture
def onnxruntime_run() -> Callable[[onnx.ModelProto, Mapping[str, np.ndarray]],
                                  list[np.ndarray]]:
    """Run a model with onnxruntime (CPU, one thread): the oracle of these tests."""

    def run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        return sess.run(None, dict(feeds))

    return run


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (shapes must match)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = float(np.max(np.abs(want)))
    return float(np.max(np.abs(got.astype(np.float64) - want))) / (scale or 1.0)


def assert_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], names: Sequence[str],
                 tol: float = 1e-4) -> None:
    """Every output within ``tol`` relative error (and finite), naming the first that is not."""
    assert len(got) == len(want) == len(names)
    for name, a, b in zip(names, got, want, strict=True):
        assert np.all(np.isfinite(b)), f"{name}: the reference itself is not finite"
        err = rel_err(a, b)
        assert err <= tol, f"output {name}: relative error {err:.3g} > {tol:g}"
