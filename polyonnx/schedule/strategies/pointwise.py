"""Vectorised nests: a perfect nest of statements that is not a register-tiled reduction gets
its best loop under a ``vector`` mark, moved innermost when it is not; a transpose is tiled
first so its strided loads reuse lines.

The vector loop is the innermost loop along which every statement writes contiguously
(:func:`.analysis.stride` is 1) and which carries no dependence with the others outside it
(a scan along it keeps its loops). A load contiguous along another loop instead (a
transpose) makes a :class:`TransposePlan`.

:func:`plan_pointwise` decides (a :class:`VectorPlan` or a :class:`TransposePlan`),
:func:`apply_pointwise` applies the plan with the schedule verbs.

Example:
    >>> from polyonnx.testing.examples import chain
    >>> kernel = chain(64, 64)
    >>> s = Schedule.from_kernel(kernel)
    >>> plan = plan_pointwise(s, kernel.body[0], ["i", "j"])
    >>> print(plan)
    vectorize j of (i, j)
    >>> s, bands = apply_pointwise(s, plan)
    >>> bands, s.verify().loops[:2]
    ([('i',)], ('i', 'j'))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl

from polyonnx.krnl.ir import Aff, Loop, Stmt, loads
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.analysis import NestDependences, stride
from polyonnx.schedule.strategies.nests import chain, extent
from polyonnx.schedule.tree import band_paths
from polyonnx.schedule.verbs import Reorder, Split, Vectorize

TRANSPOSE_WIDTH = 16
"""Lanes of a transpose tile: the strided loads of one tile touch that many cache lines,
which the loop run inside the tile then reads along."""


@dataclass(frozen=True, slots=True)
class VectorPlan:
    """Vectorise loop ``lane`` (position; None: the innermost) of the nest's ``loops``
    (outermost first), moved innermost."""

    loops: tuple[str, ...]
    lane: int | None = None

    @property
    def lane_at(self) -> int:
        return len(self.loops) - 1 if self.lane is None else self.lane

    def __str__(self) -> str:
        moved = ", moved innermost" if self.lane_at != len(self.loops) - 1 else ""
        return f"vectorize {self.loops[self.lane_at]} of ({', '.join(self.loops)}){moved}"


@dataclass(frozen=True, slots=True)
class TransposePlan:
    """A transpose: lanes run along loop ``lane`` (None: the innermost) of ``loops`` but a
    load is contiguous along ``across``. The lanes' loop is cut into tiles of ``width`` and
    ``across`` runs inside a tile, so the lines the strided loads touch are reused by the
    next values of ``across``."""

    loops: tuple[str, ...]
    across: str
    width: int = TRANSPOSE_WIDTH
    lane: int | None = None

    @property
    def lane_at(self) -> int:
        return len(self.loops) - 1 if self.lane is None else self.lane

    def __str__(self) -> str:
        return (
            f"transpose ({', '.join(self.loops)}): {self.loops[self.lane_at]} in tiles of "
            f"{self.width} with {self.across} inside, vectorized"
        )


def plan_pointwise(
    s: Schedule, nest: Loop, loops: Sequence[str]
) -> VectorPlan | TransposePlan | None:
    """The plan for a perfect nest of statements (its loops in the schedule: ``loops``); None
    if no loop has every write contiguous along it and carries no dependence."""
    nested, body = chain(nest)
    if not body or not all(isinstance(b, Stmt) for b in body):
        return None
    its = [lp.iterator for lp in nested]
    shapes = {b.name: b.shape for b in s.kernel.buffers}
    lanes = [
        k
        for k, it in enumerate(its)
        if all(stride(st.write.index, shapes[st.write.buffer], it) == 1 for st in body)
        or all(not st.write.index for st in body)
        and k == len(its) - 1
    ]
    if not lanes:
        return None
    lane = lanes[-1]
    if not _free(s, body, loops, lane):
        return None
    lane_pos = None if lane == len(its) - 1 else lane
    if len(body) == 1:
        across = _transposing_loop(body[0], its, lane, nested, shapes)
        if across is not None:
            return TransposePlan(tuple(loops), loops[its.index(across)], lane=lane_pos)
    return VectorPlan(tuple(loops), lane_pos)


def apply_pointwise(
    s: Schedule, plan: VectorPlan | TransposePlan
) -> tuple[Schedule, list[tuple[str, ...]]]:
    """``plan`` applied to ``s`` (unverified), and the nest's outer band (the candidates for
    ``parallel``)."""
    loops = list(plan.loops)
    lane = loops[plan.lane_at]
    others = [n for n in loops if n != lane]
    if isinstance(plan, VectorPlan):
        if plan.lane_at != len(loops) - 1:
            s = s.apply_unverified(Reorder((*others, lane)))
        return s.apply_unverified(Vectorize(lane, 0, mark=True)), [tuple(others)]
    s = s.apply_unverified(Split(lane, plan.width, floor=True))
    tile, point = s.created
    current = [*loops[: plan.lane_at], tile, point, *loops[plan.lane_at + 1 :]]
    outer = [n for n in current if n not in (plan.across, point)]
    if [*outer, plan.across, point] != current:
        s = s.apply_unverified(Reorder((*outer, plan.across, point)))
    return s.apply_unverified(Vectorize(point, 0, mark=True)), [tuple(outer)]


def _free(s: Schedule, body: Sequence[Stmt], loops: Sequence[str], lane: int) -> bool:
    """Whether the nest's loop ``lane`` carries no dependence with its other loops outside.
    A statement alone whose write is one-to-one and that reads what it writes only where it
    writes it carries none in any loop; otherwise isl's distances decide."""
    if len(body) == 1:
        stmt = body[0]
        own = [ld for ld in loads(stmt.body) if ld.buffer == stmt.write.buffer]
        if all(ld.index == stmt.write.index for ld in own) and _one_to_one(s, stmt):
            return True
    path = band_paths(s.tree)[loops[0]]
    return NestDependences(s, path, len(loops)).free(lane)


def _one_to_one(s: Schedule, stmt: Stmt) -> bool:
    """Whether the statement writes each element at most once."""
    if not all(isinstance(i, Aff) for i in stmt.write.index):
        return False
    space = isl.UnionSet(f"{{ {stmt.name}[{', '.join(s.poly.stmts[stmt.name].iterators)}] }}")
    writes = s.poly.writes.intersect_domain(space)
    return bool(writes.is_injective())


def _transposing_loop(
    stmt: Stmt, its: list[str], lane: int, loops: list[Loop], shapes: dict
) -> str | None:
    """The loop along which some load of ``stmt`` is contiguous, when that is not the lanes'
    loop (which moves that load with a stride)."""
    inner = its[lane]
    for ld in loads(stmt.body):
        shape = shapes[ld.buffer]
        along = stride(ld.index, shape, inner)
        if along in (0, 1, None):
            continue
        for name in its:
            if name != inner and stride(ld.index, shape, name) == 1 and extent(loops, name) >= 8:
                return name
    return None
