"""The channel-blocked layout's element-wise side: ops with broadcast operands (per-channel
constants, PRelu's slope, scalars, a squeeze-excitation gate) and global pools follow blocked
values; checked through the krnl interpreter against onnxruntime, blocks of 2."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from polyonnx.graph.passes.layout import blocked_layout
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import graph_from_model, rand, run_krnl

BLOCK = 2
C = 4
F = onnx.TensorProto.FLOAT


def _model(
    nodes: list[onnx.NodeProto],
    weights: dict[str, np.ndarray],
    inputs: dict[str, list[int]] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model over ``x: [1, C, 5, 5]`` (and ``inputs``) with output ``y``."""
    inputs = {"x": [1, C, 5, 5], **(inputs or {})}
    graph = helper.make_graph(
        nodes,
        "layout",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(a, n) for n, a in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[onnx.NodeProto]:
    """The blocked graph's nodes, after checking its outputs against onnxruntime's."""
    graph = blocked_layout(graph_from_model(model), BLOCK)
    got = run_krnl(graph, feeds)
    np.testing.assert_allclose(got["y"], onnxruntime_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
    return list(graph.nodes)


def _conv(x: str, w: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], pads=[1, 1, 1, 1])


def _ops(nodes) -> list[str]:
    return [n.op_type for n in nodes]


def test_per_channel_constants_scalars_and_prelu_stay_blocked() -> None:
    # conv -> * scale[C,1,1] -> PRelu(slope[1,C,1,1]) -> + 0.5 -> - bias[C,1,1] -> conv
    nodes = [
        _conv("x", "w1", "c"),
        helper.make_node("Mul", ["c", "scale"], ["m"]),
        helper.make_node("PRelu", ["m", "slope"], ["p"]),
        helper.make_node("Add", ["p", "half"], ["a"]),
        helper.make_node("Sub", ["a", "bias"], ["s"]),
        _conv("s", "w2", "y"),
    ]
    weights = {
        "w1": rand(C, C, 3, 3, seed=1),
        "w2": rand(C, C, 3, 3, seed=2),
        "scale": rand(C, 1, 1, seed=3),
        "slope": rand(1, C, 1, 1, seed=4),
        "half": np.array(0.5, np.float32),
        "bias": rand(C, 1, 1, seed=5),
    }
    out = _check(_model(nodes, weights), {"x": rand(1, C, 5, 5)})
    assert _ops(out) == ["ToBlocked", "ConvBlocked", "Mul", "PRelu", "Add", "Sub"] + [
        "ConvBlocked",
        "FromBlocked",
    ]
    # The per-channel constants were repacked to [1, C/b, 1, 1, b]; the scalar is read as is.
    mul, prelu, add = out[2], out[3], out[4]
    assert mul.inputs[1] == "scale__blocked2" and prelu.inputs[1] == "slope__blocked2"
    assert add.inputs[1] == "half"


def test_a_full_size_plain_operand_keeps_the_op_plain() -> None:
    # z is NCHW and as large as the output: blocking it would be a layout change of its own.
    nodes = [_conv("x", "w1", "c"), helper.make_node("Mul", ["c", "z"], ["y"])]
    model = _model(nodes, {"w1": rand(C, C, 3, 3, seed=1)}, {"z": [1, C, 5, 5]})
    out = _check(model, {"x": rand(1, C, 5, 5), "z": rand(1, C, 5, 5, seed=2)})
    assert _ops(out)[-2:] == ["FromBlocked", "Mul"]


@pytest.mark.parametrize("opset", [17, 18])
def test_squeeze_excitation_stays_blocked(opset: int) -> None:
    # conv -> relu -> GAP -> 1x1 conv -> relu -> 1x1 conv -> sigmoid -> * relu -> conv: the
    # pool reduces the blocked value, the gate is blocked, the Mul reads both blocked.
    nodes = [
        _conv("x", "w1", "c"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Conv", ["p", "fc1"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["f1r"]),
        helper.make_node("Conv", ["f1r", "fc2"], ["f2"]),
        helper.make_node("Sigmoid", ["f2"], ["g"]),
        helper.make_node("Mul", ["g", "r"], ["s"]),
        _conv("s", "w2", "y"),
    ]
    weights = {
        "w1": rand(C, C, 3, 3, seed=1),
        "fc1": rand(2, C, 1, 1, seed=2),
        "fc2": rand(C, 2, 1, 1, seed=3),
        "w2": rand(C, C, 3, 3, seed=4),
    }
    out = _check(_model(nodes, weights, opset=opset), {"x": rand(1, C, 5, 5)})
    assert _ops(out) == [
        "ToBlocked",
        "ConvBlocked",
        "Relu",
        "ReduceMean",
        "ConvBlocked",
        "Relu",
        "ConvBlocked",
        "Sigmoid",
        "Mul",
        "ConvBlocked",
        "FromBlocked",
    ]


def test_a_computed_per_channel_gate_enters_the_blocked_domain() -> None:
    # The gate is a graph input [1, C, 1, 1]: a small ToBlocked, not a FromBlocked of c.
    nodes = [_conv("x", "w1", "c"), helper.make_node("Mul", ["c", "g"], ["m"])]
    nodes.append(helper.make_node("GlobalMaxPool", ["m"], ["y"]))
    model = _model(nodes, {"w1": rand(C, C, 3, 3, seed=1)}, {"g": [1, C, 1, 1]})
    out = _check(model, {"x": rand(1, C, 5, 5), "g": rand(1, C, 1, 1, seed=2)})
    assert _ops(out) == ["ToBlocked", "ConvBlocked", "ToBlocked", "Mul", "ReduceMax"] + [
        "FromBlocked"
    ]
    assert out[2].inputs == ("g",)
