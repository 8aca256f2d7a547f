"""Default schedules: what the compiler does to a kernel when the user gives no schedule.

Each top-level loop nest of a kernel gets a strategy by its shape, each a module:

* :mod:`~polyonnx.schedule.strategies.reduction` — a reduction nest (Conv, MatMul, Gemm,
  pooling) is register-tiled, with the element-wise nests that read its output fused into
  its tiles and long reductions cut into cache chunks;
* :mod:`~polyonnx.schedule.strategies.pointwise` — any other nest gets its innermost loop
  vectorised (a transpose is tiled first);
* :mod:`~polyonnx.schedule.strategies.parallel` — then the outer loop of each nest with
  enough work is marked ``parallel``.

Each strategy makes a *plan*, a small frozen record of its knobs computed from the kernel's
model and the target's :class:`~polyonnx.schedule.strategies.tiling.Tiling`, and applies it
with the schedule verbs (:meth:`~polyonnx.schedule.schedule.Schedule.apply_unverified`); the
result is proved legal once (:meth:`~polyonnx.schedule.schedule.Schedule.verify`) against
the kernel's exact dependences, and its trace (``ScheduledKernel.trace``) replays it. A
kernel whose schedule is not legal keeps its own loop order, which always is.

Example:
    >>> s = Schedule.from_kernel(kernel)                      # doctest: +SKIP
    >>> plan = plan_kernel(s, Tiling.for_vector_bits(512))    # doctest: +SKIP
    >>> print(plan)                                           # doctest: +SKIP
    reduction (n, oc, oh, ow) over (ic, kh, kw): tile ow 7 x oc 2 x i 32 lanes ...
    >>> s = apply_kernel_plan(s, plan).verify()               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel, Loop
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.scheduled import ScheduledKernel, own_loop_order
from polyonnx.schedule.strategies.nests import band_chain
from polyonnx.schedule.strategies.parallel import apply_parallel, plan_parallel
from polyonnx.schedule.strategies.pointwise import (
    TransposePlan,
    VectorPlan,
    apply_pointwise,
    plan_pointwise,
)
from polyonnx.schedule.strategies.recurrent import (
    RecurrentPlan,
    apply_recurrent,
    plan_recurrent,
)
from polyonnx.schedule.strategies.reduction import (
    ReductionPlan,
    apply_reduction,
    is_epilogue,
    plan_reduction,
    reduction_nest,
)
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.tree import Sequence as TreeSequence


@dataclass(frozen=True, slots=True)
class OwnLoops:
    """A nest no strategy fits: it keeps its own loops; ``loop``, the outermost, may still be
    marked parallel."""

    loop: str

    def __str__(self) -> str:
        return f"own loops from {self.loop}"


NestPlan = ReductionPlan | VectorPlan | TransposePlan | RecurrentPlan | OwnLoops


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """The plan of each top-level nest of a kernel, in order (a reduction plan also covers
    the epilogue nests it fuses), and whether the outer loops get ``parallel`` marks (planned
    on the loops the nest plans make: :func:`~.parallel.plan_parallel`)."""

    nests: tuple[NestPlan, ...]
    parallel: bool = True

    def __str__(self) -> str:
        return "\n".join(
            [
                *(str(n) for n in self.nests),
                "parallel outer loops" if self.parallel else "one thread",
            ]
        )


def plan_kernel(s: Schedule, tiling: Tiling, parallel: bool = True) -> KernelPlan:
    """The plan of each top-level nest of ``s`` (the kernel's own loops): a reduction nest
    is register-tiled (with the following nests that read its output point for point), any
    other nest vectorised, where they fit."""
    nests = s.kernel.body
    # The initial tree has one top-level node per kernel body node; verbs keep loop names.
    top = s.tree.children if isinstance(s.tree, TreeSequence) else (s.tree,)
    names = [band_chain(t) for t in top]
    plans: list[NestPlan] = []
    i = 0
    while i < len(nests):
        nest = nests[i]
        if not isinstance(nest, Loop):
            i += 1
            continue
        red = reduction_nest(nest)
        if red is not None:
            end = i + 1
            while end < len(nests) and is_epilogue(nests[end], red):
                end += 1
            plan = plan_reduction(red, names[i], names[i + 1 : end], s.kernel, tiling)
            if plan is not None:
                plans.append(plan)
                i = end
                continue
            plans.append(OwnLoops(names[i][0]))
        else:
            plans.append(
                plan_pointwise(nest, names[i], s.poly)
                or plan_recurrent(nest, top[i], s, tiling)
                or OwnLoops(names[i][0])
            )
        i += 1
    return KernelPlan(tuple(plans), parallel)


def _own_loops(s: Schedule, plan: OwnLoops) -> tuple[Schedule, list[tuple[str, ...]]]:
    return s, [(plan.loop,)]


_APPLY: dict[type, Callable[[Schedule, Any], tuple[Schedule, list[tuple[str, ...]]]]] = {
    ReductionPlan: apply_reduction,
    VectorPlan: apply_pointwise,
    TransposePlan: apply_pointwise,
    RecurrentPlan: apply_recurrent,
    OwnLoops: _own_loops,
}


def apply_kernel_plan(s: Schedule, plan: KernelPlan) -> Schedule:
    """``plan`` applied to ``s`` (the kernel's own loops), not yet verified."""
    bands: list[tuple[str, ...]] = []
    for nest in plan.nests:
        s, outer = _APPLY[type(nest)](s, nest)
        bands.extend(outer)
    if plan.parallel:
        s = apply_parallel(s, plan_parallel(s, bands))
    return s


def default_schedule(
    kernel: Kernel, tiling: Tiling | None = None, parallel: bool = True
) -> ScheduledKernel:
    """The kernel's schedule: the strategies' plans applied when legal, else its own loops.

    With ``parallel``, the outermost loop of each nest with enough work is marked ``parallel``
    (naming the loops of its band that carry no dependence).
    """
    start = Schedule.from_kernel(kernel)
    try:
        s = apply_kernel_plan(start, plan_kernel(start, tiling or Tiling(), parallel))
        s = s.verify("default schedule: " + "; ".join(str(d) for d in s.directives))
    except ScheduleError:
        return own_loop_order(kernel)
    return s.scheduled()
