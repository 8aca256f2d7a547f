"""Compiling never hangs: isl runs under an operation budget, with a fallback schedule."""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

import polyonnx
from polyonnx.codegen import loopast as la
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.budget import BudgetExceeded, isl_budget, schedule_kernel
from polyonnx.schedule.scheduled import ScheduledKernel, own_loop_order
from polyonnx.schedule.strategies import default_schedule
from polyonnx.testing import onnxruntime_outputs
from polyonnx.testing.examples import matmul
from tests.reliability.models import conv_net


def _expensive(kernel: Kernel) -> ScheduledKernel:
    """A strategy that spends a great many isl operations before scheduling."""
    box = isl.Set("{ [i, j, k, l] : 0 <= i, j, k, l < 1000 and 3i + 5j - 7k + 11l >= 13 }")
    for _ in range(100_000):
        box.lexmin()
    return default_schedule(kernel)


def _ops_for(fn) -> int:
    """The smallest budget under which ``fn()`` completes (binary search)."""
    lo, hi = 1, 1 << 26
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            with isl_budget(mid, "probe"):
                fn()
            hi = mid
        except BudgetExceeded:
            lo = mid + 1
    return lo


def test_budget_turns_isl_exhaustion_into_budget_exceeded_and_is_lifted_after():
    s = isl.Set("{ [i, j] : 0 <= i, j < 100 and 3i - 7j >= 5 }")
    with (
        pytest.raises(BudgetExceeded, match="a lexmin: isl exceeded its budget of 5 "),
        isl_budget(5, "a lexmin"),
    ):
        s.lexmin()
    assert isl.DEFAULT_CONTEXT.get_max_operations() == 0
    assert str(s.lexmin()) == "{ [i = 2, j = 0] }"


def test_other_isl_errors_pass_through_unchanged():
    with pytest.raises(isl.Error) as info, isl_budget(1_000_000, "parsing"):
        isl.Set("{ [i] : this is not isl }")
    assert not isinstance(info.value, BudgetExceeded)


def test_nested_budgets_restore_the_outer_limit():
    with isl_budget(10_000_000, "outer"):
        with isl_budget(1_000, "inner"):
            pass
        assert isl.DEFAULT_CONTEXT.get_max_operations() == 10_000_000
    assert isl.DEFAULT_CONTEXT.get_max_operations() == 0


def test_a_strategy_over_budget_falls_back_to_the_kernels_own_loops(capsys):
    kernel = matmul(6, 7, 5)
    need = _ops_for(lambda: build_ast(own_loop_order(kernel).schedule))
    options = polyonnx.Options(isl_max_operations=need * 2, verbose=True)
    scheduled, ast = schedule_kernel(kernel, _expensive, options)
    err = capsys.readouterr().err
    assert "kernel matmul: isl exceeded its budget" in err
    assert "falling back to the kernel's own loop order" in err
    assert scheduled.schedule.plain_is_equal(own_loop_order(kernel).schedule)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    c = np.zeros((6, 7), np.float32)
    kernel_callable(kernel, la.from_isl(ast))({"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_the_fallback_is_silent_without_verbose(capsys):
    kernel = matmul(3, 3, 3)
    need = _ops_for(lambda: build_ast(own_loop_order(kernel).schedule))
    schedule_kernel(kernel, _expensive, polyonnx.Options(isl_max_operations=need * 2))
    assert capsys.readouterr().err == ""


def test_a_kernel_over_budget_even_for_its_own_loops_is_a_schedule_error():
    with pytest.raises(ScheduleError, match=r"kernel matmul: .*even for the kernel's own loop"):
        schedule_kernel(matmul(), default_schedule, polyonnx.Options(isl_max_operations=10))


def test_compile_with_a_small_budget_falls_back_and_stays_correct(capsys):
    m = conv_net()
    program = polyonnx.compile(m).program
    # Enough for every kernel's own loop order, too little for dependence analysis.
    need = max(_ops_for(lambda k=k: build_ast(own_loop_order(k).schedule)) for k in program.kernels)
    # The compile cache would hand back loops scheduled in an earlier run: schedule now.
    options = polyonnx.Options(isl_max_operations=need + need // 4, verbose=True, cache=False)
    sess = polyonnx.InferenceSession(m, options=options)
    assert "falling back to the kernel's own loop order" in capsys.readouterr().err
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        sess.run(None, {"x": x})[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-4, atol=1e-6
    )


def test_compile_with_a_tiny_budget_is_a_schedule_error_naming_the_kernel():
    with pytest.raises(ScheduleError, match=r"kernel k\d+_\w+: isl exceeded .* \(nodes conv"):
        polyonnx.compile(conv_net(), polyonnx.Options(isl_max_operations=100))
