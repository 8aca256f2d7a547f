"""A reduction's finish moves into a nest of its own, where that is legal."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from polyonnx.krnl.distribute import distribute_finishes
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt

from .interp import interpret

F32 = "float32"
I, C, R = Aff.var("i"), Aff.var("c"), Aff.var("r")


def _mean(finish: Stmt | None = None, acc_kind: str = "temp") -> Kernel:
    """``y[i, 0, c] = mean over r of x[r, i, c]`` as one nest (a blocked global pool)."""
    acc = Load("acc", (I, C), F32)
    init = Stmt("S0", Access("acc", (I, C)), Load("b", (C,), F32))
    fold = Stmt("S1", Access("acc", (I, C)), acc + Load("x", (R, I, C), F32))
    finish = finish or Stmt("S2", Access("y", (I, Aff.lift(0), C)), acc / 8.0)
    buffers = (
        Buffer("x", F32, (8, 3, 4), "input"),
        Buffer("b", F32, (4,), "input"),
        Buffer("acc", F32, (3, 4), acc_kind),
        Buffer("y", F32, (3, 1, 4), "output"),
    )
    body = Loop("i", 0, 3, (Loop("c", 0, 4, (init, Loop("r", 0, 8, (fold,)), finish)),))
    return Kernel("k", buffers, (body,))


def _run(kernel: Kernel) -> np.ndarray:
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((8, 3, 4), F32), "b": rng.standard_normal(4, F32)}
    interpret(kernel, arrays)
    return arrays["y"]


def test_the_finish_becomes_its_own_nest() -> None:
    before = _mean()
    after = distribute_finishes(before)
    assert str(after).splitlines()[1:] == [
        "  for i in [0, 3):",
        "    for c in [0, 4):",
        "      S0: acc[i, c] = b[c]",
        "      for r in [0, 8):",
        "        S1: acc[i, c] = (acc[i, c] + x[r, i, c])",
        "  for i in [0, 3):",
        "    for c in [0, 4):",
        "      S2: y[i, 0, c] = (acc[i, c] / 8.0)",
        "}",
    ]
    np.testing.assert_allclose(_run(after), _run(before), rtol=1e-6)


@pytest.mark.parametrize("why", ["reads another point", "writes what the fold reads", "output"])
def test_finishes_that_depend_on_the_nest_stay(why: str) -> None:
    if why == "reads another point":  # acc[i, 0] is only complete for c = 0 there
        kernel = _mean(Stmt("S2", Access("y", (I, Aff.lift(0), C)), Load("acc", (I, C * 0), F32)))
    elif why == "writes what the fold reads":
        kernel = _mean(Stmt("S2", Access("b", (C,)), Load("acc", (I, C), F32)))
    else:  # an accumulator in an output buffer is the pooling's own business
        kernel = _mean(acc_kind="output")
    assert distribute_finishes(kernel) == kernel


def test_nests_of_other_shapes_are_left_alone() -> None:
    kernel = _mean()
    loop = kernel.body[0]
    extra = replace(
        kernel,
        body=(loop, Loop("i", 0, 3, (Stmt("S9", Access("acc", (I, I)), Load("b", (I,), F32)),))),
    )
    assert distribute_finishes(extra).body[2:] == extra.body[1:]
