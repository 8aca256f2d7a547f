"""Vectorised nests: every nest that is not a register-tiled reduction gets its innermost
loop under a ``vector`` mark; a transpose is tiled first so its strided loads reuse lines.

:func:`plan_pointwise` decides (a :class:`VectorPlan` or a :class:`TransposePlan`),
:func:`apply_pointwise` applies the plan with the schedule verbs.

Example:
    >>> from polyonnx.testing.examples import chain
    >>> kernel = chain(64, 64)
    >>> s = Schedule.from_kernel(kernel)
    >>> plan = plan_pointwise(kernel.body[0], ["i", "j"], s.poly)
    >>> print(plan)
    vectorize j of (i, j)
    >>> s, bands = apply_pointwise(s, plan)
    >>> bands, s.verify().loops[:2]
    ([('i',)], ('i', 'j'))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from polyonnx.krnl.ir import Aff, Loop, Stmt, loads
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.nests import chain, extent, offsets
from polyonnx.schedule.verbs import Reorder, Split, Vectorize

TRANSPOSE_WIDTH = 16
"""Lanes of a transpose tile: the strided loads of one tile touch that many cache lines,
which the loop run inside the tile then reads along."""


@dataclass(frozen=True, slots=True)
class VectorPlan:
    """Vectorise the innermost of the nest's ``loops`` (outermost first)."""

    loops: tuple[str, ...]

    def __str__(self) -> str:
        return f"vectorize {self.loops[-1]} of ({', '.join(self.loops)})"


@dataclass(frozen=True, slots=True)
class TransposePlan:
    """A transpose: lanes run along the innermost of ``loops`` but a load is contiguous along
    ``across``. The innermost loop is cut into tiles of ``width`` and ``across`` runs inside a
    tile, so the lines the strided loads touch are reused by the next values of ``across``."""

    loops: tuple[str, ...]
    across: str
    width: int = TRANSPOSE_WIDTH

    def __str__(self) -> str:
        return (
            f"transpose ({', '.join(self.loops)}): {self.loops[-1]} in tiles of "
            f"{self.width} with {self.across} inside, vectorized"
        )


def plan_pointwise(
    nest: Loop, loops: Sequence[str], poly: PolyKernel
) -> VectorPlan | TransposePlan | None:
    """The plan for a perfect nest of one statement (its loops in the schedule: ``loops``)
    whose write is contiguous along its innermost loop; None if the nest is not one."""
    nested, body = chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt):
        return None
    stmt = body[0]
    its = list(poly.stmts[stmt.name].iterators)
    if stmt.write.index and offsets(stmt.write.index[-1:], its) is None:
        return None
    transposed = _transposing_loop(stmt, its, nested)
    if transposed is not None:
        return TransposePlan(tuple(loops), loops[its.index(transposed)])
    return VectorPlan(tuple(loops))


def apply_pointwise(
    s: Schedule, plan: VectorPlan | TransposePlan
) -> tuple[Schedule, list[tuple[str, ...]]]:
    """``plan`` applied to ``s`` (unverified), and the nest's outer band (the candidates for
    ``parallel``)."""
    loops = list(plan.loops)
    if isinstance(plan, VectorPlan):
        return s.apply_unverified(Vectorize(loops[-1], 0, mark=True)), [tuple(loops[:-1])]
    s = s.apply_unverified(Split(loops[-1], plan.width, floor=True))
    tile, point = s.created
    outer = [n for n in loops[:-1] if n != plan.across] + [tile]
    if [*outer, plan.across, point] != [*loops[:-1], tile, point]:
        s = s.apply_unverified(Reorder((*outer, plan.across, point)))
    return s.apply_unverified(Vectorize(point, 0, mark=True)), [tuple(outer)]


def _transposing_loop(stmt: Stmt, its: list[str], loops: list[Loop]) -> str | None:
    """The loop along which some load of ``stmt`` is contiguous, when that is not the innermost
    loop (and the innermost loop moves that load with a stride)."""
    inner = its[-1]
    for ld in loads(stmt.body):
        last = ld.index[-1] if ld.index else None
        if not isinstance(last, Aff) or last.coeff(inner) or len(last.terms) != 1:
            continue
        name = last.terms[0][0]
        if (
            last.terms[0][1] == 1
            and name in its[:-1]
            and any(isinstance(i, Aff) and i.coeff(inner) for i in ld.index)
            and extent(loops, name) >= 8
        ):
            return name
    return None
