"""Default schedules: what the compiler does to a kernel when the user gives no schedule.

Each nest of a kernel gets a strategy from what its polyhedral model says (access strides
and isl's dependence distances: :mod:`~polyonnx.schedule.strategies.analysis`) and the
target, each a module:

* :mod:`~polyonnx.schedule.strategies.reduction` — a reduction nest (Conv, MatMul, Gemm,
  pooling, any ``init; for ...: update``) is register-tiled along the loop its output is
  contiguous in, with the element-wise nests that read its output fused into its tiles,
  long reductions cut into cache chunks, an operand read once streamed in chunks of rows;
* :mod:`~polyonnx.schedule.strategies.pointwise` — a perfect nest of statements gets its
  innermost loop with contiguous writes and no carried dependence vectorised (a transpose
  is tiled first);
* :mod:`~polyonnx.schedule.strategies.recurrent` — nests fed back through a step loop are
  planned inside it; any other band around several nests (:class:`BandPlan`: a softmax row)
  keeps its loops and its nests are planned alike;
* :mod:`~polyonnx.schedule.strategies.rows` — a band of independent rows around nests that
  reduce along each row (softmax, normalisations): groups of rows reduced side by side, the
  writes along the row vectorised;
* :mod:`~polyonnx.schedule.strategies.parallel` — then the outer loop of each nest with
  enough work per run is marked ``parallel``.

Each strategy makes a *plan*, a small frozen record of its knobs computed from the kernel's
model and the target's :class:`~polyonnx.schedule.strategies.tiling.Tiling`, and applies it
with the schedule verbs (:meth:`~polyonnx.schedule.schedule.Schedule.apply_unverified`); the
result is proved legal once (:meth:`~polyonnx.schedule.schedule.Schedule.verify`) against
the kernel's exact dependences, and its trace (``ScheduledKernel.trace``) replays it. When
the whole plan is not legal, each nest's plan is kept where it is (a nest refused keeps its
own loop order, which always is legal).

Example:
    >>> from polyonnx.testing.examples import matmul
    >>> s = Schedule.from_kernel(matmul(64, 64, 1024))
    >>> plan = plan_kernel(s, Tiling.for_vector_bits(512))
    >>> print(plan)
    reduction (i, j) over (k): tile i 8 rows x j 32 lanes, vector tiles outermost; chunks: k by 128 after 1 tile loop
    parallel outer loops
    >>> apply_kernel_plan(s, plan).verify().verified
    True
"""  # noqa: E501

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel, Loop, Stmt
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.scheduled import ScheduledKernel
from polyonnx.schedule.strategies.analysis import NestDependences
from polyonnx.schedule.strategies.nests import band_chain, chain
from polyonnx.schedule.strategies.parallel import apply_parallel_plan, plan_parallel
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
from polyonnx.schedule.strategies.rows import RowsPlan, apply_rows, plan_rows
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.tree import Band, band_paths
from polyonnx.schedule.tree import Sequence as TreeSequence


@dataclass(frozen=True, slots=True)
class OwnLoops:
    """A nest no strategy fits: it keeps its own loops; ``loop``, the outermost, may still be
    marked parallel."""

    loop: str

    def __str__(self) -> str:
        return f"own loops from {self.loop}"


@dataclass(frozen=True, slots=True)
class BandPlan:
    """The perfectly nested ``loops`` around a sequence of nests, which keep their order, and
    the plans of the nests inside (each its own: a softmax row's reductions and point-wise
    loops, an RNN's nests inside its time loop). With ``parallel`` (the outermost loop
    carries no dependence) the band is the candidate for a ``parallel`` mark; else the nests
    inside are."""

    loops: tuple[str, ...]
    parallel: bool
    nests: tuple[NestPlan, ...]

    def __str__(self) -> str:
        how = "rows in parallel" if self.parallel else "in order"
        inner = "".join("\n" + textwrap.indent(str(n), "  ") for n in self.nests)
        return f"band ({', '.join(self.loops)}) {how}, around:{inner or ' no nests to plan'}"


NestPlan = (
    ReductionPlan | VectorPlan | TransposePlan | RecurrentPlan | RowsPlan | OwnLoops | BandPlan
)


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
    """The plan of each nest of ``s`` (the kernel's own loops): a reduction nest is
    register-tiled (with the following nests that read its output point for point), a
    perfect nest of statements vectorised, a band of loops around several nests left in
    place with the nests inside planned alike, where they fit."""
    return KernelPlan(_plan_nodes(s, s.kernel.body, _children(s.tree), tiling), parallel)


def _children(node: object) -> tuple:
    return node.children if isinstance(node, TreeSequence) else (node,)


def _plan_nodes(s: Schedule, nodes: tuple, trees: tuple, tiling: Tiling) -> tuple[NestPlan, ...]:
    """The plans of the krnl ``nodes`` of one body, whose schedule-tree nodes are ``trees``
    (the initial tree has one node per krnl node; verbs keep loop names)."""
    plans: list[NestPlan] = []
    i = 0
    while i < len(nodes):
        nest = nodes[i]
        if not isinstance(nest, Loop):
            i += 1
            continue
        names = band_chain(trees[i])
        red = reduction_nest(nest)
        if red is not None:
            end = i + 1
            while end < len(nodes) and is_epilogue(nodes[end], red):
                end += 1
            epilogues = [band_chain(t) for t in trees[i + 1 : end]]
            plan = plan_reduction(red, names, epilogues, s.kernel, tiling)
            plans.append(plan or OwnLoops(names[0]))
            # (the epilogues the plan does not fuse are planned as nests of their own)
            i += 1 + (len(plan.epilogues) if plan is not None else 0)
            continue
        plans.append(
            plan_pointwise(s, nest, names[: len(chain(nest)[0])])
            or plan_recurrent(nest, trees[i], s, tiling)
            or _band(s, nest, trees[i], tiling)
        )
        i += 1
    return tuple(plans)


def _band(s: Schedule, nest: Loop, tree: object, tiling: Tiling) -> RowsPlan | BandPlan | OwnLoops:
    """A nest that is no reduction and no perfect nest of statements: rows reduced side by
    side (:mod:`.rows`) where they fit, else its band of loops around the nests inside,
    planned each; a nest of statements keeps its own loops."""
    loops, body = chain(nest)
    if all(isinstance(b, Stmt) for b in body):
        return OwnLoops(band_chain(tree)[0])
    bands: list[str] = []
    node = tree
    while isinstance(node, Band) and len(bands) < len(loops):
        bands.append(node.name)
        node = node.child
    rows = plan_rows(s, nest, bands, tiling) if len(bands) == len(loops) else None
    if rows is not None:
        return rows
    free = not NestDependences(s, band_paths(s.tree)[bands[0]], len(bands)).carried(0)
    return BandPlan(tuple(bands), free, _plan_nodes(s, body, _children(node), tiling))


def _own_loops(s: Schedule, plan: OwnLoops) -> tuple[Schedule, list[tuple[str, ...]]]:
    return s, [(plan.loop,)]


def _apply_band(s: Schedule, plan: BandPlan) -> tuple[Schedule, list[tuple[str, ...]]]:
    inner: list[tuple[str, ...]] = []
    for nest in plan.nests:
        s, outer = _APPLY[type(nest)](s, nest)
        inner.extend(outer)
    # The nests inside a parallel band run on its threads.
    return s, [plan.loops] if plan.parallel else inner


_APPLY: dict[type, Callable[[Schedule, Any], tuple[Schedule, list[tuple[str, ...]]]]] = {
    ReductionPlan: apply_reduction,
    VectorPlan: apply_pointwise,
    TransposePlan: apply_pointwise,
    RecurrentPlan: apply_recurrent,
    RowsPlan: apply_rows,
    OwnLoops: _own_loops,
    BandPlan: _apply_band,
}


def apply_nest_plan(s: Schedule, plan: NestPlan) -> tuple[Schedule, list[tuple[str, ...]]]:
    """One nest's ``plan`` applied to ``s`` (unverified), and the outer bands it leaves (the
    candidates for ``parallel``)."""
    return _APPLY[type(plan)](s, plan)


def apply_kernel_plan(s: Schedule, plan: KernelPlan) -> Schedule:
    """``plan`` applied to ``s`` (the kernel's own loops), not yet verified."""
    bands: list[tuple[str, ...]] = []
    for nest in plan.nests:
        s, outer = apply_nest_plan(s, nest)
        bands.extend(outer)
    if plan.parallel:
        s = apply_parallel_plan(s, plan_parallel(s, bands))
    return s


def default_schedule(
    kernel: Kernel, tiling: Tiling | None = None, parallel: bool = True
) -> ScheduledKernel:
    """The kernel's schedule: the strategies' plans applied when legal, else its own loops.

    With ``parallel``, the outermost loop of each nest with enough work is marked ``parallel``
    (naming the loops of its band that carry no dependence). When the whole plan is not
    legal, each nest's plan is tried in turn and kept if the schedule stays legal (a nest
    whose plan is refused keeps its own loops).
    """
    start = Schedule.from_kernel(kernel)
    plan = plan_kernel(start, tiling or Tiling(), parallel)
    try:
        s = apply_kernel_plan(start, plan)
        return _verified(s).scheduled()
    except ScheduleError:
        pass
    return _nest_by_nest(start, plan).scheduled()


def _verified(s: Schedule) -> Schedule:
    return s.verify("default schedule: " + "; ".join(str(d) for d in s.directives))


def _nest_by_nest(start: Schedule, plan: KernelPlan) -> Schedule:
    """Each nest's plan applied and kept when the result is legal (else the nest keeps its
    own loops), then each parallel mark kept when legal."""

    def apply(s: Schedule, nests: tuple[NestPlan, ...]) -> tuple[Schedule, list]:
        bands: list[tuple[str, ...]] = []
        for nest in nests:
            if isinstance(nest, BandPlan):
                s, inner = apply(s, nest.nests)
                bands += [nest.loops] if nest.parallel else inner
                continue
            try:
                s_new, outer = apply_nest_plan(s, nest)
                s = _verified(s_new)
            except ScheduleError:
                outer = [(_first_loop(nest),)]
                if isinstance(nest, ReductionPlan):
                    outer += [(e[0],) for e in nest.epilogues]
            bands += outer
        return s, bands

    s, bands = apply(start, plan.nests)
    if plan.parallel:
        for mark in plan_parallel(s, bands).marks:
            try:
                s = _verified(s.apply_unverified(mark))
            except ScheduleError:
                continue
    return s


def _first_loop(plan: NestPlan) -> str:
    if isinstance(plan, OwnLoops):
        return plan.loop
    return plan.outer[0] if isinstance(plan, ReductionPlan) else plan.loops[0]
