"""RNN, GRU, LSTM vs onnxruntime: directions, layouts, initial states, biases, peepholes,
linear_before_reset, sequence_lens, activations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import check, graph_from_model, make_model, rand, run_krnl

T, B, I, H = 3, 2, 3, 4  # noqa: E741


def _run(
    op: str,
    gates: int,
    *,
    direction: str = "forward",
    layout: int = 0,
    bias: bool = True,
    h0: bool = False,
    c0: bool = False,
    peep: bool = False,
    lens: np.ndarray | None = None,
    attrs: dict[str, Any] | None = None,
    outputs: int = 2,
) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    x = rand(T, B, I) if layout == 0 else rand(B, T, I)
    state = (dirs, B, H) if layout == 0 else (B, dirs, H)
    inputs: list[tuple[str, np.ndarray | None]] = [
        ("x", x),
        ("w", rand(dirs, gates * H, I, seed=1) * 0.5),
        ("r", rand(dirs, gates * H, H, seed=2) * 0.5),
        ("b" if bias else "", rand(dirs, 2 * gates * H, seed=3) if bias else None),
        ("l" if lens is not None else "", lens),
        ("h0" if h0 else "", rand(*state, seed=4) if h0 else None),
    ]
    if op == "LSTM":
        inputs += [
            ("c0" if c0 else "", rand(*state, seed=5) if c0 else None),
            ("p" if peep else "", rand(dirs, 3 * H, seed=6) if peep else None),
        ]
    while inputs and not inputs[-1][0]:
        inputs.pop()
    a = {"hidden_size": H, "direction": direction} | ({"layout": layout} if layout else {})
    model = make_model(op, inputs, a | (attrs or {}), opset=14, n_outputs=outputs)
    feeds = {n: v for n, v in inputs if n and v is not None}
    if layout == 0:
        check(model, feeds, rtol=1e-4, atol=1e-5)
        return
    # onnxruntime has no batch-major layout: compare with its layout-0 result, transposed.
    to0 = {"x": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}
    inputs0 = [(n, v.transpose(to0[n]) if n in to0 and v is not None else v) for n, v in inputs]
    a0 = {k: v for k, v in a.items() if k != "layout"}
    model0 = make_model(op, inputs0, a0 | (attrs or {}), opset=14, n_outputs=outputs)
    feeds0 = {n: v for n, v in inputs0 if n and v is not None}
    want = onnxruntime_outputs(model0, feeds0)
    got = run_krnl(graph_from_model(model), feeds)
    back = [(2, 0, 1, 3), (1, 0, 2), (1, 0, 2)]
    for k, out in enumerate(model.graph.output):
        np.testing.assert_allclose(
            got[out.name], want[k].transpose(back[k]), rtol=1e-4, atol=1e-5, err_msg=out.name
        )


CASES = [
    {},
    {"direction": "reverse"},
    {"direction": "bidirectional", "h0": True},
    {"layout": 1, "h0": True},
    {"layout": 1, "direction": "bidirectional"},
    {"bias": False},
    {"lens": np.array([3, 1], np.int32), "h0": True},
    {"lens": np.array([2, 3], np.int32), "direction": "reverse", "h0": True},
    {"lens": np.array([1, 3], np.int32), "direction": "bidirectional"},
    {"attrs": {"clip": 0.5}},
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rnn(case: dict) -> None:
    _run("RNN", 1, **case)


def test_rnn_activations() -> None:
    _run("RNN", 1, attrs={"activations": ["Relu"]})
    _run(
        "RNN",
        1,
        direction="bidirectional",
        attrs={
            "activations": ["LeakyRelu", "HardSigmoid"],
            "activation_alpha": [0.2, 0.3],
            "activation_beta": [0.0, 0.4],
        },
    )


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("lbr", [0, 1])
def test_gru(case: dict, lbr: int) -> None:
    case = dict(case)
    case["attrs"] = {**case.get("attrs", {}), "linear_before_reset": lbr}
    _run("GRU", 3, **case)


@pytest.mark.parametrize(
    "case",
    CASES
    + [
        {"peep": True, "c0": True, "h0": True},
        {"peep": True, "direction": "bidirectional"},
        {"attrs": {"input_forget": 1}, "c0": True},
    ],
    ids=str,
)
def test_lstm(case: dict) -> None:
    _run("LSTM", 4, outputs=3, **case)


def test_lstm_only_y_h() -> None:
    from onnx import helper

    x = rand(T, B, I)
    model = make_model(
        "LSTM",
        [("x", x), ("w", rand(1, 4 * H, I, seed=1)), ("r", rand(1, 4 * H, H, seed=2))],
        {"hidden_size": H},
        n_outputs=2,
    )
    # Drop Y: the node keeps only Y_h.
    node = model.graph.node[0]
    node.output[0] = ""
    del model.graph.output[0]
    model.graph.node[0].CopyFrom(
        helper.make_node("LSTM", list(node.input), list(node.output), name=node.name, hidden_size=H)
    )
    check(model, {"x": x, "w": rand(1, 4 * H, I, seed=1), "r": rand(1, 4 * H, H, seed=2)})
