"""TopK (constant K) vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.krnl.harness import check, make_model, rand


@pytest.mark.parametrize("axis,largest", [(-1, 1), (0, 1), (1, 0), (-1, 0)])
def test_top_k(axis: int, largest: int) -> None:
    x = rand(3, 5)
    x[1, 1] = x[1, 3]  # a tie: the lower index comes first
    k = np.array([2], np.int64)
    model = make_model(
        "TopK",
        [("x", x), ("k", k)],
        {"axis": axis, "largest": largest},
        opset=11,
        constants={"k": k},
        n_outputs=2,
    )
    check(model, {"x": x})


def test_top_k_opset1() -> None:
    x = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.float32)
    model = make_model("TopK", [("x", x)], {"k": 3}, opset=9, n_outputs=2)
    check(model, {"x": x})
