"""Zero-bordered storage: which values get a border, how kernels address it, where the memory
plan puts it, and that the compiled model still matches onnxruntime run after run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from polyonnx import pipeline
from polyonnx.krnl.memory import plan_memory
from tests.krnl.harness import CHANNELS as C
from tests.krnl.harness import conv_input_model, run_against_onnxruntime

F = TensorProto.FLOAT


def _conv(x: str, w: str, y: str, **attrs: object) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], **attrs)


def _bottleneck(
    x: str, tag: str, pads: list[int], strides: list[int] | None = None
) -> tuple[list[onnx.NodeProto], dict[str, tuple[int, ...]]]:
    """``x`` -> 1x1 conv -> relu -> 3x3 conv (pads, strides) -> relu: ``r2{tag}``."""
    nodes = [
        _conv(x, f"w1{tag}", f"c1{tag}"),
        helper.make_node("Relu", [f"c1{tag}"], [f"r1{tag}"]),
        _conv(f"r1{tag}", f"w2{tag}", f"c2{tag}", pads=pads, strides=strides or [1, 1]),
        helper.make_node("Relu", [f"c2{tag}"], [f"r2{tag}"]),
    ]
    return nodes, {f"w1{tag}": (C, C, 1, 1), f"w2{tag}": (C, C, 3, 3)}


def _program(model: onnx.ModelProto) -> pipeline.Program:
    return pipeline.lower(pipeline.to_graph(model))


def test_a_padded_convs_input_is_written_into_its_border_by_the_producer() -> None:
    nodes, weights = _bottleneck("x", "", [1, 1, 1, 1])
    program = _program(conv_input_model(nodes, ["r2"], weights=weights))
    [(name, border)] = program.borders.items()
    assert name == "r1__blk__bordered" and border.value == "r1__blk"
    assert border.begin == border.end == (0, 0, 1, 1, 0)
    [producer, conv] = [k for k in program.kernels if name in {b.name for b in k.buffers}]
    assert producer.buffer(name).kind == "output" and producer.buffer(name).shape[2:4] == (11, 11)
    assert f"{name}[n, ob, oh + 1, ow + 1, o] = " in str(producer)
    assert conv.buffer(name).kind == "input"
    assert f"{name}[n, ib, kh + oh, kw + ow, i]" in str(conv)
    assert not [b for k in program.kernels for b in k.buffers if b.name.endswith("__pad")]


def test_a_border_is_as_wide_as_the_widest_padding_read() -> None:
    nodes = [
        _conv("x", "w1", "c1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        _conv("r1", "w2", "ya", pads=[1, 0, 1, 2]),
        _conv("r1", "w2", "yb", pads=[2, 1, 0, 0]),
    ]
    program = _program(
        conv_input_model(nodes, ["ya", "yb"], weights={"w1": (C, C, 1, 1), "w2": (C, C, 3, 3)})
    )
    [border] = program.borders.values()
    assert (border.begin, border.end) == ((0, 0, 2, 1, 0), (0, 0, 1, 2, 0))


@pytest.mark.parametrize("case", ["residual_read", "graph_output", "graph_input", "unpadded"])
def test_values_read_otherwise_keep_their_own_buffers(case: str) -> None:
    conv3 = _conv("r1", "w2", "y", pads=[1, 1, 1, 1])
    nodes = [_conv("x", "w1", "c1"), helper.make_node("Relu", ["c1"], ["r1"]), conv3]
    outputs = ["y"]
    if case == "residual_read":
        nodes.append(helper.make_node("Add", ["y", "r1"], ["s"]))
        outputs = ["s"]
    elif case == "graph_output":
        outputs.append("r1")
    elif case == "graph_input":  # (an image's 3 channels: the conv reads x unblocked)
        nodes = [_conv("x", "w3", "y", pads=[1, 1, 1, 1])]
    else:
        nodes[-1] = _conv("r1", "w1", "y")
    program = _program(
        conv_input_model(
            nodes,
            outputs,
            3 if case == "graph_input" else C,
            {"w1": (C, C, 1, 1), "w2": (C, C, 3, 3), "w3": (C, 3, 3, 3)},
        )
    )
    assert not program.borders


def test_a_layout_change_writes_the_border_of_a_blocked_input() -> None:
    program = _program(
        conv_input_model(
            [_conv("x", "w", "y", pads=[1, 1, 1, 1])], ["y"], weights={"w": (C, C, 3, 3)}
        )
    )
    [border] = program.borders.values()
    assert border.value == "x__blk"
    assert not [b for k in program.kernels for b in k.buffers if b.name.endswith("__pad")]


def test_the_plan_keeps_borders_apart_from_every_other_buffer() -> None:
    first, w1 = _bottleneck("x", "a", [1, 1, 1, 1])
    second, w2 = _bottleneck("r2a", "b", [1, 1, 1, 1])
    program = _program(conv_input_model(first + second, ["r2b"], weights={**w1, **w2}))
    plan = plan_memory(program)
    assert len(program.borders) == 2 and plan.zeroed_size > 0
    bordered = {plan.slots[name].where for name in program.borders}
    # One shape and border, never live at once: the two share their bytes.
    assert bordered == {0}
    others = [
        s.where
        for name, s in plan.slots.items()
        if s.region == "workspace" and name not in program.borders
    ]
    assert others and min(others) >= plan.zeroed_size


@pytest.mark.parametrize("threads", [1, 2])
def test_bordered_models_match_onnxruntime_run_after_run(threads: int) -> None:
    first, w1 = _bottleneck("x", "a", [1, 1, 1, 1])
    second, w2 = _bottleneck("r2a", "b", [0, 2, 1, 1], strides=[2, 1])
    run_against_onnxruntime(
        conv_input_model(first + second, ["r2b"], weights={**w1, **w2}), threads
    )


def _random_chain(seed: int) -> onnx.ModelProto:
    """Two to four convolutions over ``C`` channels with random kernels, pads, strides and
    dilations, each followed by a ReLU, a residual Add (when the shape allows) or nothing:
    values that padded convs read, sometimes also read otherwise."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    weights: dict[str, tuple[int, ...]] = {}
    value, size = "x", 9
    for k in range(int(rng.integers(2, 5))):
        kernel, stride, dilation = (
            int(rng.choice([1, 3])),
            int(rng.integers(1, 3)),
            int(rng.integers(1, 3)),
        )
        begin, end = (int(p) for p in rng.integers(0, kernel, 2))
        pads = [begin, begin, end, end]  # (square outputs)
        if size + pads[0] + pads[2] < (kernel - 1) * dilation + 1:
            kernel, pads = 1, [0] * 4  # (the window would not fit)
        weights[f"w{k}"] = (C, C, kernel, kernel)
        nodes.append(
            _conv(
                value,
                f"w{k}",
                f"c{k}",
                pads=pads,
                strides=[stride, stride],
                dilations=[dilation, dilation],
            )
        )
        new = (size + pads[0] + pads[2] - (kernel - 1) * dilation - 1) // stride + 1
        after = str(rng.choice(["Relu", "Add", "none"]))
        if after == "Relu":
            nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        elif after == "Add" and new == size:
            nodes.append(helper.make_node("Add", [f"c{k}", value], [f"r{k}"]))
        value, size = nodes[-1].output[0], new
    return conv_input_model(nodes, [value], weights=weights)


@pytest.mark.parametrize("seed", range(6))
def test_random_conv_chains_match_onnxruntime(seed: int) -> None:
    model = _random_chain(seed)
    run_against_onnxruntime(model, threads=1 + seed % 2, runs=2)
