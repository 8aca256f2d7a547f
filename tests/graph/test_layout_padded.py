"""Padded channel blocks: convs whose channels are not whole blocks (6 in blocks of 4, as 72
in blocks of 32) run blocked with a zero-padded last block; the ops between them follow only
when the number their padding holds is known and finite. Checked through the krnl
interpreter against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from polyonnx.graph.passes.layout import MAX_PAD_WASTE, blocked_layout
from polyonnx.testing import onnxruntime_outputs
from tests.graph.test_layout_elementwise import _model as layout_model
from tests.krnl.harness import graph_from_model, rand, run_krnl

BLOCK = 4
C = 6  # two blocks of 4, the second half padding: 8 / 6 <= MAX_PAD_WASTE


def _model(
    nodes: list[onnx.NodeProto], weights: dict[str, np.ndarray], inputs: dict | None = None
) -> onnx.ModelProto:
    """A model over ``x: [1, 8, 5, 5]`` (and ``inputs``) with output ``y``."""
    return layout_model(nodes, weights, {"x": [1, 8, 5, 5], **(inputs or {})})


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[str]:
    """The blocked graph's op types, after checking its output against onnxruntime's."""
    graph = blocked_layout(graph_from_model(model), BLOCK)
    got = run_krnl(graph, feeds)
    np.testing.assert_allclose(got["y"], onnxruntime_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
    return [n.op_type for n in graph.nodes]


def _weights() -> dict[str, np.ndarray]:
    return {
        "w1": rand(C, 8, 1, 1, seed=1),
        "b1": rand(C, seed=2),
        "dw": rand(C, 1, 3, 3, seed=3),
        "w2": rand(8, C, 3, 3, seed=4),
    }


def test_a_padded_chain_stays_blocked() -> None:
    # conv 8->6 -> Sigmoid (padding 0.5) -> depthwise 3x3 -> HardSwish -> + residual -> conv 6->8
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Conv", ["s1", "dw"], ["d"], group=C, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["d"], ["h"]),
        helper.make_node("Add", ["h", "s1"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    ops = _check(_model(nodes, _weights()), {"x": rand(1, 8, 5, 5)})
    assert ops == [
        "ToBlocked",
        "ConvBlocked",
        "Sigmoid",
        "ConvBlocked",
        "HardSwish",
        "Add",
        "ConvBlocked",
        "FromBlocked",
    ]


def test_squeeze_excitation_on_padded_blocks() -> None:
    # The gate's padding is HardSigmoid(0) = 0.5; the gated value's is 0.
    weights = {
        **_weights(),
        "f1": rand(4, C, 1, 1, seed=5),
        "f2": rand(C, 4, 1, 1, seed=6),
        "fb": rand(C, seed=7),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"]),
        helper.make_node("Conv", ["p", "f1"], ["q"]),
        helper.make_node("Relu", ["q"], ["qr"]),
        helper.make_node("Conv", ["qr", "f2", "fb"], ["g"]),
        helper.make_node("HardSigmoid", ["g"], ["gs"]),
        helper.make_node("Mul", ["r1", "gs"], ["m"]),
        helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    ops = _check(_model(nodes, weights), {"x": rand(1, 8, 5, 5)})
    assert ops.count("FromBlocked") == 1 and ops.count("ConvBlocked") == 4


def test_a_computed_gate_is_converted_with_zero_padding() -> None:
    # Mul by Sigmoid(g), g a graph input [1, 6, 1, 1]: a ToBlocked of 6 channels into 8.
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Sigmoid", ["g"], ["gs"]),
        helper.make_node("Mul", ["c1", "gs"], ["m"]),
        helper.make_node("Conv", ["m", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = _model(nodes, _weights(), {"g": [1, C, 1, 1]})
    ops = _check(model, {"x": rand(1, 8, 5, 5), "g": rand(1, C, 1, 1, seed=9)})
    assert ops.count("ToBlocked") == 2 and ops.count("FromBlocked") == 1


@pytest.mark.parametrize(
    "why, node, extra",
    [
        ("Log(0) is -inf", helper.make_node("Log", ["c1"], ["e"]), {}),
        (
            "a per-channel divisor's padding is 0",
            helper.make_node("Div", ["c1", "d"], ["e"]),
            {"d": rand(C, 1, 1, seed=8) + 3},
        ),
        ("a scalar computed at run time", helper.make_node("Mul", ["c1", "s"], ["e"]), {}),
        (
            # 0 ** 0 is 1 but 0 ** -1 is inf: the padding takes the constant's own values.
            "a constant shared by all channels puts its values in the padding",
            helper.make_node("Pow", ["c1", "k"], ["e"]),
            {"k": -np.ones((1, 1, 5, 5), np.float32)},
        ),
    ],
)
def test_ops_whose_padding_is_not_finite_or_known_stay_plain(
    why: str, node: onnx.NodeProto, extra: dict
) -> None:
    weights = {**_weights(), **extra}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        node,
        helper.make_node("Conv", ["e", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    x = np.abs(rand(1, 8, 5, 5)) + 1
    weights["w1"] = np.abs(weights["w1"])
    weights["b1"] = np.abs(weights["b1"])  # (Log of positive sums)
    model = _model(nodes, weights, {"s": [1]} if "s" in node.input else None)
    feeds = {"x": x, "s": np.array([1.5], np.float32)} if "s" in node.input else {"x": x}
    ops = _check(model, feeds)
    assert ops[ops.index(node.op_type) - 1] == "FromBlocked", why


def test_padding_beyond_the_waste_limit_stays_nchw() -> None:
    # 5 channels in blocks of 4: 8 / 5 > MAX_PAD_WASTE.
    assert MAX_PAD_WASTE < 8 / 5
    x, w = rand(1, 8, 5, 5), rand(5, 8, 1, 1, seed=1)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"])], {"w": w})
    assert "ConvBlocked" not in _check(model, {"x": x})
