"""Residuals in place: an epilogue's dying residual becomes the reduction's starting value, and
the output takes the residual's memory."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from polyonnx import pipeline
from polyonnx.krnl.in_place import accumulate_in_place
from polyonnx.krnl.ir import Access, Aff, Kernel, Load, Loop, Stmt, maximum
from polyonnx.krnl.memory import plan_memory
from polyonnx.krnl.residual import residual_in_place

from .harness import CHANNELS as C
from .harness import conv_input_model, matvec_relu, run_against_onnxruntime
from .interp import interpret

F32 = "float32"
I = Aff.var("i")


def _with_epilogue(kernel: Kernel, body: object) -> Kernel:
    """``kernel`` (reduction into y, then an epilogue nest) with the epilogue's body replaced."""
    epilogue = Stmt("S2", Access("y", (I,)), body)  # type: ignore[arg-type]
    return Kernel(
        kernel.name,
        kernel.buffers,
        (kernel.body[0], Loop("i", 0, 4, (epilogue,)), *kernel.body[2:]),
    )


def _relu_residual() -> Kernel:
    """``y = relu(b + W x + r)``, the reduction accumulating into ``y``."""
    return accumulate_in_place(matvec_relu(residual=True))


def _run(kernel: Kernel, y_on_entry: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal(5, np.float32),
        "w": rng.standard_normal((4, 5), np.float32),
        "b": rng.standard_normal(4, np.float32),
        "r": rng.standard_normal(4, np.float32),
    }
    if y_on_entry is not None:  # y takes r's memory: it holds the residual when the kernel runs
        arrays["y"] = arrays["r"].copy()
    interpret(kernel, arrays)
    return arrays["y"]


def test_the_residual_starts_the_sums_and_the_output_takes_its_memory() -> None:
    before = _relu_residual()
    after, shared = residual_in_place(before, {"r"})
    assert shared == {"y": "r"}
    assert "r" not in {b.name for b in after.buffers}
    text = str(after)
    assert "S0: y[i] = (b[i] + y[i])" in text
    assert "S2: y[i] = max(y[i], 0.0)" in text
    np.testing.assert_allclose(_run(after, y_on_entry=np.ones(1)), _run(before), rtol=1e-5)


def test_an_epilogue_that_only_adds_disappears() -> None:
    k = _relu_residual()
    k = _with_epilogue(k, Load("y", (I,), F32) + Load("r", (I,), F32))
    after, shared = residual_in_place(k, {"r"})
    assert shared == {"y": "r"} and len(after.body) == 1
    np.testing.assert_allclose(_run(after, y_on_entry=np.ones(1)), _run(k), rtol=1e-5)


@pytest.mark.parametrize(
    "why, kernel, dying, fixed",
    [
        ("the residual is read later", _relu_residual(), set(), set()),
        ("the output keeps its own memory", _relu_residual(), {"r"}, {"y"}),
        (
            "the residual is read twice",
            _with_epilogue(
                _relu_residual(),
                maximum(Load("y", (I,), F32) + Load("r", (I,), F32), 0.0) * Load("r", (I,), F32),
            ),
            {"r"},
            set(),
        ),
        (
            "the residual is read at another point",
            _with_epilogue(_relu_residual(), Load("y", (I,), F32) + Load("r", (3 - I,), F32)),
            {"r"},
            set(),
        ),
        (
            "the residual is not added to the sum",
            _with_epilogue(_relu_residual(), Load("y", (I,), F32) * Load("r", (I,), F32)),
            {"r"},
            set(),
        ),
        (
            "another statement reads the output",
            Kernel(
                "k",
                _relu_residual().buffers,
                (
                    *_relu_residual().body,
                    Loop("i", 0, 4, (Stmt("S3", Access("z", (I,)), Load("y", (I,), F32)),)),
                ),
            ),
            {"r"},
            set(),
        ),
    ],
)
def test_other_uses_keep_the_residual(
    why: str, kernel: Kernel, dying: set[str], fixed: set[str]
) -> None:
    assert residual_in_place(kernel, dying, fixed) == (kernel, {}), why


# ------------------------------------------------------------------- whole models

WEIGHTS = {w: (C, C, 1, 1) for w in ("wa", "wb", "wc")}


def _model(nodes: list[onnx.NodeProto], outputs: list[str]) -> onnx.ModelProto:
    """Over ``x: [1, C, 9, 9]``; 1x1 conv weights ``wa``, ``wb``, ``wc``."""
    return conv_input_model(nodes, outputs, weights=WEIGHTS)


def _block(tail: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``y = relu(conv_b(x) + conv_a(x))`` (the shortcut ``a``), then ``tail``."""
    return [
        helper.make_node("Conv", ["x", "wa"], ["a"]),
        helper.make_node("Conv", ["x", "wb"], ["b"]),
        helper.make_node("Add", ["b", "a"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
        *tail,
    ]


def _shares(model: onnx.ModelProto) -> dict[str, str]:
    program = pipeline.lower(pipeline.to_graph(model))
    return {b: r for b, r in program.storage.items() if b.startswith("y") and r.startswith("a")}


def _matches_onnxruntime(model: onnx.ModelProto) -> None:
    for threads in (1, 2):  # (two runs each: the residual's memory is rewritten every run)
        run_against_onnxruntime(model, threads)


def test_a_dying_shortcut_holds_the_blocks_output() -> None:
    model = _model(_block([helper.make_node("Conv", ["y", "wc"], ["out"])]), ["out"])
    program = pipeline.lower(pipeline.to_graph(model))
    [(y, a)] = _shares(model).items()
    plan = plan_memory(program)
    assert plan.slot(program, y) == plan.slot(program, a)
    [kernel] = [
        k
        for k in program.kernels
        if y in {b.name for b in k.buffers} and k.buffer(y).kind == "output"
    ]
    assert a not in {b.name for b in kernel.buffers}
    _matches_onnxruntime(model)


@pytest.mark.parametrize(
    "why, tail, outputs",
    [
        (
            "the shortcut is read later",
            [
                helper.make_node("Conv", ["y", "wc"], ["c"]),
                helper.make_node("Add", ["c", "a"], ["out"]),
            ],
            ["out"],
        ),
        (
            "the shortcut is a graph output too",
            [helper.make_node("Conv", ["y", "wc"], ["out"])],
            ["out", "a"],
        ),
    ],
)
def test_a_shortcut_that_lives_on_keeps_its_memory(
    why: str, tail: list[onnx.NodeProto], outputs: list[str]
) -> None:
    model = _model(_block(tail), outputs)
    assert not _shares(model), why
    _matches_onnxruntime(model)


def test_a_residual_the_reduction_also_reads_stays() -> None:
    # y = relu(conv(r) + r): the init would overwrite r[p] before the sums read it.
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"]),
        helper.make_node("Conv", ["a", "wb"], ["b"]),
        helper.make_node("Add", ["b", "a"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
        helper.make_node("Conv", ["y", "wc"], ["out"]),
    ]
    model = _model(nodes, ["out"])
    assert not _shares(model)
    _matches_onnxruntime(model)


def test_consecutive_blocks_update_one_buffer() -> None:
    # z = relu(conv_a(conv_c(y)) + y) after y = relu(conv_b(x) + a): y took a's memory, and
    # z takes it again (a is dead once y is computed, y once z is).
    model = _model(
        _block(
            [
                helper.make_node("Conv", ["y", "wc"], ["c"]),
                helper.make_node("Conv", ["c", "wa"], ["d"]),
                helper.make_node("Add", ["d", "y"], ["t"]),
                helper.make_node("Relu", ["t"], ["z"]),
                helper.make_node("Conv", ["z", "wb"], ["out"]),
            ]
        ),
        ["out"],
    )
    program = pipeline.lower(pipeline.to_graph(model))
    roots = {b: program.root(b) for b in ("y__blk", "z__blk")}
    assert roots == {"y__blk": "a__blk", "z__blk": "a__blk"}
    _matches_onnxruntime(model)
