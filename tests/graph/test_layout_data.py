"""The channel-blocked layout's data movement: Concat and Split along the channels in whole
blocks and Resize of the spatial axes run on blocked twins (YOLO's C2f and neck); checked
through the krnl interpreter against onnxruntime, blocks of 2."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.graph.test_layout_elementwise import _check, _conv, _model, _ops
from tests.krnl.harness import rand

C = 4


def _c2f(opset: int) -> list[onnx.NodeProto]:
    """conv -> Split(2, 2) -> conv on the second part -> Concat(first, second, conv) -> conv."""
    split = helper.make_node("Split", ["c", "sizes"], ["a", "b"], axis=1)
    if opset < 13:
        split = helper.make_node("Split", ["c"], ["a", "b"], axis=1, split=[2, 2])
    return [
        _conv("x", "w1", "c"),
        split,
        helper.make_node("Conv", ["b", "w2"], ["m"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b", "m"], ["cat"], axis=-3),
        helper.make_node("Conv", ["cat", "w3"], ["y"]),
    ]


@pytest.mark.parametrize("opset", [11, 17])
def test_split_and_concat_of_whole_blocks_stay_blocked(opset: int) -> None:
    weights = {
        "w1": rand(C, C, 3, 3, seed=1),
        "w2": rand(2, 2, 3, 3, seed=2),
        "w3": rand(2, 6, 1, 1, seed=3),
    }
    if opset >= 13:
        weights["sizes"] = np.array([2, 2], np.int64)
    out = _check(_model(_c2f(opset), weights, opset=opset), {"x": rand(1, C, 5, 5)})
    assert _ops(out) == ["ToBlocked", "ConvBlocked", "Split", "ConvBlocked", "Concat"] + [
        "ConvBlocked",
        "FromBlocked",
    ]


def test_a_concat_blocks_its_plain_inputs_and_a_ragged_split_stays_plain() -> None:
    # z is a plain input of whole blocks: it enters the blocked Concat; a Split into 3 + 5
    # channels is no whole blocks and runs on the plain value.
    nodes = [
        _conv("x", "w1", "c"),
        helper.make_node("Concat", ["c", "z"], ["cat"], axis=1),
        helper.make_node("Split", ["cat", "sizes"], ["p", "q"], axis=1),
        helper.make_node("Add", ["p", "p"], ["y"]),
    ]
    weights = {"w1": rand(C, C, 3, 3, seed=1), "sizes": np.array([3, 5], np.int64)}
    model = _model(nodes, weights, {"z": [1, C, 5, 5]})
    out = _check(model, {"x": rand(1, C, 5, 5), "z": rand(1, C, 5, 5, seed=2)})
    assert _ops(out) == ["ToBlocked", "ConvBlocked", "ToBlocked", "Concat", "FromBlocked"] + [
        "Split",
        "Add",
    ]


@pytest.mark.parametrize(
    "how",
    [
        {"scales": [1, 1, 2, 2], "mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
        {"scales": [1, 1, 1.5, 2], "mode": "linear"},
        {"sizes": [1, C, 7, 9], "mode": "nearest"},
    ],
    ids=["nearest_2x", "linear", "sizes"],
)
def test_a_resize_of_the_spatial_axes_stays_blocked(how: dict) -> None:
    how = dict(how)
    weights = {"w1": rand(C, C, 3, 3, seed=1), "w2": rand(C, C, 1, 1, seed=2)}
    inputs = ["c", ""]
    if "scales" in how:
        weights["scales"] = np.array(how.pop("scales"), np.float32)
        inputs.append("scales")
    else:
        weights["sizes"] = np.array(how.pop("sizes"), np.int64)
        inputs += ["", "sizes"]
    nodes = [
        _conv("x", "w1", "c"),
        helper.make_node("Resize", inputs, ["r"], **how),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    out = _check(_model(nodes, weights), {"x": rand(1, C, 5, 5)})
    assert _ops(out) == ["ToBlocked", "ConvBlocked", "Resize", "ConvBlocked", "FromBlocked"]


def test_a_resize_of_the_channels_stays_plain() -> None:
    nodes = [
        _conv("x", "w1", "c"),
        helper.make_node("Resize", ["c", "", "scales"], ["y"], mode="nearest"),
    ]
    weights = {"w1": rand(C, C, 3, 3, seed=1), "scales": np.array([1, 2, 1, 1], np.float32)}
    out = _check(_model(nodes, weights), {"x": rand(1, C, 5, 5)})
    assert _ops(out)[-2:] == ["FromBlocked", "Resize"]
