"""``ScheduledKernel``: what the schedule stage hands to codegen for one kernel.

Example:
    >>> sk = own_loop_order(kernel)                       # doctest: +SKIP
    >>> print(build_ast(sk.schedule).to_C_str())          # doctest: +SKIP
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
