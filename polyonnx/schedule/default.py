"""Default schedules: what the compiler does to a kernel when the user gives no schedule."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.poly import PolyKernel, initial_schedule


@dataclass(frozen=True)
class ScheduledKernel:
    """A kernel with its polyhedral model and the schedule tree codegen will follow."""

    kernel: Kernel
    poly: PolyKernel
    schedule: isl.Schedule


def default_schedule(kernel: Kernel) -> ScheduledKernel:
    """The kernel's own loop structure as an isl schedule tree."""
    poly = PolyKernel.build(kernel)
    return ScheduledKernel(kernel, poly, initial_schedule(poly))
