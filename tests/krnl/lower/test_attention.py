"""Attention vs the ONNX reference implementation (onnxruntime lags the newer opsets)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from polyonnx.testing import onnx_reference_outputs
from tests.krnl.harness import graph_from_model, make_model, rand, run_krnl


def _check(
    inputs: list[tuple[str, np.ndarray | None]],
    attrs: dict[str, Any],
    n_outputs: int = 1,
    opset: int = 23,
) -> None:
    model = make_model("Attention", inputs, attrs, opset=opset, n_outputs=n_outputs)
    feeds = {n: a for n, a in inputs if n and a is not None}
    want = onnx_reference_outputs(model, feeds)
    got = run_krnl(graph_from_model(model), feeds)
    for out, w in zip(model.graph.output, want, strict=True):
        np.testing.assert_allclose(got[out.name], w, rtol=1e-4, atol=1e-5, err_msg=out.name)


B, S, D = 2, 3, 4


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.1}, {"softcap": 2.0}], ids=str)
def test_attention_4d(attrs: dict) -> None:
    _check(
        [("q", rand(B, 2, S, D)), ("k", rand(B, 2, 5, D, seed=1)), ("v", rand(B, 2, 5, 3, seed=2))],
        attrs,
    )


def test_attention_3d_gqa_bool_mask() -> None:
    mask = np.array(
        [[True, False, True, True], [False, False, False, False], [True, True, True, False]]
    )
    _check(
        [
            ("q", rand(B, S, 4 * D)),
            ("k", rand(B, 4, 2 * D, seed=1)),
            ("v", rand(B, 4, 2 * 3, seed=2)),
            ("m", mask),
        ],
        {"q_num_heads": 4, "kv_num_heads": 2},
    )


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_past_float_mask_qk_output(mode: int) -> None:
    _check(
        [
            ("q", rand(B, 2, S, D)),
            ("k", rand(B, 2, 2, D, seed=1)),
            ("v", rand(B, 2, 2, D, seed=2)),
            ("m", rand(S, 5, seed=3)),
            ("pk", rand(B, 2, 3, D, seed=4)),
            ("pv", rand(B, 2, 3, D, seed=5)),
        ],
        {"qk_matmul_output_mode": mode, "is_causal": 1, "softcap": 3.0},
        n_outputs=4,
    )


def test_attention_window_and_nonpad() -> None:
    _check(
        [
            ("q", rand(B, 2, S, D)),
            ("k", rand(B, 2, 6, D, seed=1)),
            ("v", rand(B, 2, 6, D, seed=2)),
            ("", None),
            ("", None),
            ("", None),
            ("n", np.array([4, 6], np.int64)),
        ],
        {"is_causal": 1, "left_window_size": 1},
        opset=25,
    )
