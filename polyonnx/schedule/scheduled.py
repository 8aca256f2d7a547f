"""``ScheduledKernel``: what the schedule stage hands to codegen for one kernel.

Example:
    >>> from polyonnx.schedule.astgen import build_ast
    >>> from polyonnx.testing.examples import matmul
    >>> sk = own_loop_order(matmul(2, 3, 4))
    >>> print(build_ast(sk.schedule).to_C_str())
    for (int c0 = 0; c0 <= 1; c0 += 1)
      for (int c1 = 0; c1 <= 2; c1 += 1) {
        S0(c0, c1);
        for (int c2 = 0; c2 <= 3; c2 += 1)
          S1(c0, c1, c2);
      }
    <BLANKLINE>
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.poly import PolyKernel, initial_schedule
from polyonnx.schedule.trace import Trace


@dataclass(frozen=True, slots=True)
class ScheduledKernel:
    """A kernel with its polyhedral model and the schedule tree codegen will follow."""

    kernel: Kernel
    poly: PolyKernel
    schedule: isl.Schedule
    trace: Trace | None = None
    """The verbs that made ``schedule`` from the kernel's own loops (None: not made by verbs)."""


def own_loop_order(kernel: Kernel) -> ScheduledKernel:
    """The kernel's loops as written, with no analysis at all (always legal: the fallback)."""
    poly = PolyKernel.build(kernel)
    return ScheduledKernel(kernel, poly, initial_schedule(poly))
