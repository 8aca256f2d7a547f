"""A budget on isl, so that compiling never hangs.

isl counts its elementary operations per context and, past a limit, fails the running call
(``maximal number of operations exceeded``); what a kernel costs is in docs/performance.md
(*Compile time*). :func:`isl_budget` runs a block under such a limit and turns isl's failure
into :class:`BudgetExceeded`; :func:`schedule_kernel` schedules a kernel and generates its AST
under ``Options.isl_max_operations``, falling back to the kernel's own loop order (no
dependence analysis, no transformation) when the strategy runs out, and says so on stderr
with ``Options.verbose``. If even the fallback runs out, the kernel is refused with a
:class:`~polyonnx.errors.ScheduleError`.

Example:
    >>> with isl_budget(1_000_000, "a lexmin"):
    ...     print(isl.Set("{ [i] : 3 <= i < 10 }").lexmin())
    { [i = 3] }
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.scheduled import ScheduledKernel, own_loop_order

#: How isl words the failure of a call that ran out of operations.
_QUOTA_MESSAGE = "maximal number of operations exceeded"

# The operation counter belongs to the context every polyonnx isl object lives in, so budgeted
# blocks run one at a time (islpy holds the GIL anyway); reentrant for nested budgets.
_LOCK = threading.RLock()


def _fresh_lock() -> None:
    """In a forked child: a lock the fork copied held (by a thread the child does not have, or
    by the forking thread, in a frame the child never returns to) would stay held forever."""
    global _LOCK
    _LOCK = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock)


@contextmanager
def isl_exclusive() -> Iterator[None]:
    """Run the block while no budgeted isl block of another thread runs (e.g. to fork a
    process that will use isl: the operation limit it inherits is then the unlimited one)."""
    with _LOCK:
        yield


class BudgetExceeded(ScheduleError):
    """isl ran out of its operation budget while doing ``what``."""

    def __init__(self, what: str, max_operations: int) -> None:
        self.what, self.max_operations = what, max_operations
        super().__init__(
            f"{what}: isl exceeded its budget of {max_operations} operations "
            "(Options.isl_max_operations)"
        )


@contextmanager
def isl_budget(max_operations: int, what: str) -> Iterator[None]:
    """Run the block with isl limited to ``max_operations``; :class:`BudgetExceeded` past it.

    The limit applies to isl objects of the default context (all of polyonnx's); it is lifted
    again when the block ends, however it ends.
    """
    ctx = isl.DEFAULT_CONTEXT
    with _LOCK:
        previous = ctx.get_max_operations()
        ctx.set_max_operations(max_operations)
        ctx.reset_operations()
        try:
            yield
        except isl.Error as e:
            if _QUOTA_MESSAGE in str(e) or _exhausted():
                raise BudgetExceeded(what, max_operations) from None
            raise
        finally:
            ctx.set_max_operations(previous)
            ctx.reset_operations()


def _exhausted() -> bool:
    """Whether the context has used up its operations. isl words that failure differently in
    places (its parser reports a syntax error), so a tiny computation is tried: past the limit,
    every counted operation fails."""
    try:
        isl.Set("{ [i] : 0 <= i <= 1 }").lexmin()
    except isl.Error:
        return True
    return False


def schedule_kernel(
    kernel: Kernel, strategy: Callable[[Kernel], ScheduledKernel], options: Options
) -> tuple[ScheduledKernel, isl.AstNode]:
    """``strategy(kernel)`` and its isl AST under the budget, else the kernel's own loop order.

    Example:
        >>> from polyonnx.schedule.strategies import default_schedule
        >>> from polyonnx.testing.examples import matmul
        >>> sk, ast = schedule_kernel(matmul(16, 16, 16), default_schedule, Options())
        >>> print(ast.to_C_str())  # the target's register tiles  # doctest: +ELLIPSIS
        for (int c0 = 0; c0 <= ...; c0 += 1) {
          // unroll
        ...
    """
    limit = options.isl_max_operations

    def attempt(make: Callable[[Kernel], ScheduledKernel]) -> tuple[ScheduledKernel, isl.AstNode]:
        with isl_budget(limit, f"kernel {kernel.name}"):
            scheduled = make(kernel)
            return scheduled, build_ast(scheduled.schedule)

    try:
        return attempt(strategy)
    except BudgetExceeded as e:
        if options.verbose:
            print(f"polyonnx: {e}; falling back to the kernel's own loop order", file=sys.stderr)
    try:
        return attempt(own_loop_order)
    except BudgetExceeded as e:
        raise ScheduleError(
            f"{e}, even for the kernel's own loop order (nodes "
            f"{', '.join(kernel.ops) or '-'}); raise the budget to compile "
            "this model"
        ) from None
