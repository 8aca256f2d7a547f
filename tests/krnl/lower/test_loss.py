"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.krnl.harness import check, check_op, make_model, rand


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction: str, weighted: bool) -> None:
    target = np.array([[0, 2], [1, 1], [2, 0]], np.int64)
    inputs = [("x", rand(3, 3, 2)), ("t", target)]
    if weighted:
        inputs.append(("w", np.array([0.2, 0.5, 0.3], np.float32)))
    check_op("NegativeLogLikelihoodLoss", inputs, {"reduction": reduction}, opset=13)


def test_nll_loss_ignore_index() -> None:
    target = np.array([[0, -1], [1, 1], [-1, 0]], np.int64)
    check_op(
        "NegativeLogLikelihoodLoss",
        [("x", rand(3, 3, 2)), ("t", target)],
        {"ignore_index": -1},
        opset=13,
    )


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_softmax_cross_entropy_with_log_prob(reduction: str) -> None:
    x, target = rand(3, 4), np.array([1, 0, 3], np.int64)
    model = make_model(
        "SoftmaxCrossEntropyLoss",
        [("x", x), ("t", target)],
        {"reduction": reduction},
        opset=13,
        n_outputs=2,
    )
    check(model, {"x": x, "t": target})


def test_softmax_cross_entropy_weighted_ignore_index() -> None:
    target = np.array([[1, 2], [0, 2], [3, 1]], np.int64)
    check_op(
        "SoftmaxCrossEntropyLoss",
        [("x", rand(3, 4, 2)), ("t", target), ("w", np.array([1.0, 0.5, 2.0, 0.1], np.float32))],
        {"ignore_index": 2},
        opset=13,
    )
