"""The pipeline's printed stages: ``emit(model, "krnl", after=PASS)`` shows the kernels after
each krnl pass."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from polyonnx import pipeline
from polyonnx.codegen.target import vector_bits, vector_registers
from polyonnx.errors import PolyonnxError
from polyonnx.krnl.passes import AFTER, PASSES
from polyonnx.options import Options
from polyonnx.schedule_driver import target_tiling
from polyonnx.testing.examples import conv_model

F = TensorProto.FLOAT


def _matmul_add_relu() -> onnx.ModelProto:
    """``y = relu(x @ w + r)``: a reduction and two point-wise nodes in one fusion group."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["t"]),
            helper.make_node("Add", ["t", "r"], ["u"]),
            helper.make_node("Relu", ["u"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info(name, F, shape)
            for name, shape in (("x", [4, 5]), ("w", [5, 6]), ("r", [4, 6]))
        ],
        [helper.make_tensor_value_info("y", F, [4, 6])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _buffers(text: str) -> str:
    return text.splitlines()[0]


def test_lower_shows_one_nest_per_node_and_their_temps() -> None:
    text = pipeline.emit(_matmul_add_relu(), "krnl", after="lower")
    assert "tmp t: float32[4, 6]" in _buffers(text) and "tmp u: float32[4, 6]" in _buffers(text)
    assert text.count("for i0 in [0, 4):") == 2  # (the Add's and the Relu's nests)


def test_each_pass_shows_its_step() -> None:
    texts = {after: pipeline.emit(_matmul_add_relu(), "krnl", after=after) for after in AFTER}
    assert "tmp u" not in _buffers(texts["inline_pointwise"])  # (Add and Relu in one nest)
    assert "tmp t" in _buffers(texts["inline_pointwise"])
    assert "tmp t" not in _buffers(texts["accumulate_in_place"])
    # The statements keep the lowerings' placeholder names until the last pass numbers them.
    assert "S: y[i0, i1]" in texts["store_bordered"]
    assert "S2: y[i0, i1] = max((y[i0, i1] + r[i0, i1]), 0.0)" in texts["renumber_statements"]


def test_the_last_pass_shows_the_kernels_compile_uses() -> None:
    model = _matmul_add_relu()
    assert pipeline.emit(model, "krnl", after=PASSES[-1].name) == pipeline.emit(model, "krnl")


@pytest.mark.parametrize("stage, after", [("krnl", "fuse"), ("ast", "lower")])
def test_after_needs_krnl_and_a_pass_name(stage: str, after: str) -> None:
    passes = "lower, distribute_finishes, inline_pointwise"
    with pytest.raises(PolyonnxError, match=f"after='{after}' .* one of {passes}"):
        pipeline.emit(_matmul_add_relu(), stage, after=after)


@pytest.mark.parametrize("target", ["aarch64-linux-gnu", "riscv64-linux-gnu"])
def test_the_layout_and_the_scheduler_read_the_targets_tiling(target: str) -> None:
    """32 vector registers of 4 lanes: tiles hold two blocks of 8 channels side by side, so
    the layout pass may block a conv's 12 channels by 4 (the scheduler plans with the same
    tiling)."""
    options = Options(target=target)
    tiling = target_tiling(options)
    assert (tiling.lanes, tiling.registers) == (vector_bits(options) // 32, 32)
    assert tiling.registers == vector_registers(options)
    assert pipeline.channel_blocks(tiling) == (8, 4)
    graph = pipeline.to_graph(conv_model(12), None, options)
    assert "ConvBlocked" in {n.op_type for n in graph.nodes}
