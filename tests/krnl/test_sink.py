"""Point-wise readers of a temp written piece by piece are sunk into its writers."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt, maximum
from polyonnx.krnl.sink import sink_pointwise

from .interp import interpret

F32 = "float32"
T, P, I, J = (Aff.var(n) for n in ("t", "p", "i", "j"))
ONE = Const(1.0, F32)


def _tiles(reader: Stmt, extra: tuple[Stmt, ...] = (), temp_kind: str = "temp") -> Kernel:
    """``y`` [4, 2] written two columns at a time by S0 and S1 (rows 2t + p), then read."""
    writers = (
        Stmt("S0", Access("y", (T * 2 + P, 0)), Load("a", (T, P), F32) * 2.0),
        Stmt("S1", Access("y", (T * 2 + P, 1)), Load("a", (T, P), F32) * 3.0),
    )
    return Kernel(
        "k",
        (
            Buffer("a", F32, (2, 2), "input"),
            Buffer("b", F32, (4,), "input"),
            Buffer("y", F32, (4, 2), temp_kind),
            Buffer("z", F32, (4, 2), "output"),
        ),
        (
            Loop("t", 0, 2, (Loop("p", 0, 2, writers),)),
            *extra,
            Loop("i", 0, 4, (Loop("j", 0, 2, (reader,)),)),
        ),
    )


def _relu_plus_b(index=(I, J)) -> Stmt:
    return Stmt("S2", Access("z", (I, J)), maximum(Load("y", index, F32) + Load("b", (I,), F32), 0))


def _run(kernel: Kernel) -> np.ndarray:
    rng = np.random.default_rng(0)
    arrays = {
        "a": rng.standard_normal((2, 2)).astype(F32),
        "b": rng.standard_normal(4).astype(F32),
        "z": np.zeros((4, 2), F32),
    }
    if any(b.name == "y" for b in kernel.buffers):
        arrays["y"] = np.zeros((4, 2), F32)
    interpret(kernel, arrays)
    return arrays["z"]


def test_the_reader_moves_into_each_writer():
    before = _tiles(_relu_plus_b())
    after = sink_pointwise(before)
    assert [b.name for b in after.buffers] == ["a", "b", "z"]
    assert str(after).splitlines()[3:5] == [
        "      S0: z[p + 2*t, 0] = max(((a[t, p] * 2.0) + b[p + 2*t]), 0.0)",
        "      S1: z[p + 2*t, 1] = max(((a[t, p] * 3.0) + b[p + 2*t]), 0.0)",
    ]
    np.testing.assert_array_equal(_run(after), _run(before))


@pytest.mark.parametrize(
    "kernel",
    [
        _tiles(_relu_plus_b((J, I))),  # not at its own point
        _tiles(_relu_plus_b(), temp_kind="output"),  # not a temp
        # something between writes what the reader reads
        _tiles(
            _relu_plus_b(), (Loop("i", 0, 4, (Stmt("S9", Access("b", (I,)), Const(1.0, F32)),)),)
        ),
        # another statement reads the temp
        _tiles(_relu_plus_b(), (Stmt("S9", Access("b", (0,)), Load("y", (0, 0), F32)),)),
    ],
)
def test_readers_that_could_change_results_stay(kernel):
    assert sink_pointwise(kernel) == kernel
