"""The krnl passes in one list: each stop runs the passes up to it, and their order is what
turns ``conv -> add -> relu`` into one reduction updating the residual's memory."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from polyonnx.krnl.in_place import accumulate_in_place
from polyonnx.krnl.inline import inline_pointwise
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt, maximum
from polyonnx.krnl.passes import (
    AFTER,
    LOWERED,
    PASSES,
    KernelContext,
    renumber_statements,
    run_passes,
)

from .interp import interpret

F32 = "float32"
I, K = Aff.var("i"), Aff.var("k")


def _matvec_add_relu() -> Kernel:
    """As lowered, one nest per node: ``t = b + W x``, ``u = t + r``, ``y = relu(u)``; every
    statement named ``S0`` (lowerings leave placeholders)."""
    init = Stmt("S0", Access("t", (I,)), Load("b", (I,), F32))
    update = Stmt(
        "S0",
        Access("t", (I,)),
        Load("t", (I,), F32) + Load("w", (I, K), F32) * Load("x", (K,), F32),
    )
    add = Stmt("S0", Access("u", (I,)), Load("t", (I,), F32) + Load("r", (I,), F32))
    relu = Stmt("S0", Access("y", (I,)), maximum(Load("u", (I,), F32), 0.0))
    buffers = (
        Buffer("x", F32, (5,), "input"),
        Buffer("w", F32, (4, 5), "input"),
        Buffer("b", F32, (4,), "input"),
        Buffer("r", F32, (4,), "input"),
        Buffer("t", F32, (4,), "temp"),
        Buffer("u", F32, (4,), "temp"),
        Buffer("y", F32, (4,), "output"),
    )
    return Kernel(
        "k",
        buffers,
        (
            Loop("i", 0, 4, (init, Loop("k", 0, 5, (update,)))),
            Loop("i", 0, 4, (add,)),
            Loop("i", 0, 4, (relu,)),
        ),
    )


CONTEXT = KernelContext(live_out=frozenset({"y"}), dying=frozenset({"r"}))


def _y(kernel: Kernel, shared: dict[str, str]) -> np.ndarray:
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal(5, np.float32),
        "w": rng.standard_normal((4, 5), np.float32),
        "b": rng.standard_normal(4, np.float32),
        "r": rng.standard_normal(4, np.float32),
    }
    for out, value in shared.items():  # the output lives in the value's memory
        arrays[out] = arrays[value].copy()
    interpret(kernel, arrays)
    return arrays["y"]


def test_all_passes_make_one_reduction_that_starts_at_the_residual() -> None:
    before = _matvec_add_relu()
    after = run_passes(before, CONTEXT)
    assert after.shared == {"y": "r"}
    assert [b.name for b in after.kernel.buffers] == ["x", "w", "b", "y"]
    assert str(after.kernel).splitlines()[1:-1] == [
        "  for i in [0, 4):",
        "    S0: y[i] = (b[i] + y[i])",
        "    for k in [0, 5):",
        "      S1: y[i] = (y[i] + (w[i, k] * x[k]))",
        "  for i in [0, 4):",
        "    S2: y[i] = max(y[i], 0.0)",
    ]
    np.testing.assert_allclose(_y(after.kernel, dict(after.shared)), _y(before, {}), rtol=1e-5)


@pytest.mark.parametrize("stop", range(len(AFTER)))
def test_each_stop_runs_the_passes_before_it_in_order(stop: int) -> None:
    kernel = _matvec_add_relu()
    want = functools.reduce(lambda k, p: p.run(k, CONTEXT).kernel, PASSES[:stop], kernel)
    assert run_passes(kernel, CONTEXT, after=AFTER[stop]).kernel == want


def test_lowered_is_the_kernel_before_any_pass() -> None:
    kernel = _matvec_add_relu()
    assert run_passes(kernel, CONTEXT, after=LOWERED).kernel is kernel


def test_inlining_comes_first_so_that_the_reduction_accumulates_in_the_output() -> None:
    # The other way round the relu's output takes the add's temp u, the add then writes an
    # output (no temp to inline) and the reduction keeps its temp t.
    swapped = inline_pointwise(accumulate_in_place(_matvec_add_relu()))
    assert "t" in {b.name for b in swapped.buffers} and len(swapped.body) == 3
    ordered = accumulate_in_place(inline_pointwise(_matvec_add_relu()))
    assert {b.name for b in ordered.buffers} == {"x", "w", "b", "r", "y"}


def test_a_graph_output_keeps_its_memory() -> None:
    after = run_passes(
        _matvec_add_relu(), KernelContext(dying=frozenset({"r"}), fixed=frozenset({"y"}))
    )
    assert after.shared == {} and "r" in {b.name for b in after.kernel.buffers}


def test_an_unknown_stop_is_refused() -> None:
    with pytest.raises(ValueError, match="no krnl pass 'fuse'; choose one of lower, "):
        run_passes(_matvec_add_relu(), CONTEXT, after="fuse")


def test_statements_are_numbered_in_kernel_order() -> None:
    names = [s.name for _, s in renumber_statements(_matvec_add_relu()).statements()]
    assert names == ["S0", "S1", "S2", "S3"]
