"""Fixtures for whole-model tests: the model builders."""

from __future__ import annotations

from collections.abc import Callable

import onnx
import pytest

from polyonnx.testing.zoo import light_model as build_light_model
from polyonnx.testing.zoo import mnist_model as build_mnist_model


@pytest.fixture
def mnist_model() -> onnx.ModelProto:
    """The mnist-8 architecture (opset 8, as in the model zoo) with random weights."""
    return build_mnist_model()


@pytest.fixture
def light_model() -> Callable[..., onnx.ModelProto]:
    """``light_model(name, seed=0, logits=False)``: a light model with random weights."""
    return build_light_model
