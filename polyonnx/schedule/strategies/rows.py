"""Rows reduced side by side: a band of independent rows around nests that reduce each row in
order (a softmax row's max and sum, a normalisation's mean and variance).

A sum along a row is one chain of dependent adds (sums are never reassociated), so it runs
at one add per FP latency however wide the vectors are. Rows are independent, though: the
row loop is cut into groups of :attr:`RowsPlan.rows`, each nest inside gets its own copy of
the group loop, and in the nests that reduce, the group's rows run innermost, unrolled — as
many independent chains side by side as the FP units can overlap. The nests that write along
the row (the exponentials, the normalised outputs) are vectorised along it instead.

:func:`plan_rows` decides from the nests' accesses (a :class:`RowsPlan`, or None when the
band has no such shape); :func:`apply_rows` applies the plan with the schedule verbs.

Example:
    >>> from polyonnx.testing.examples import softmax_rows
    >>> s = Schedule.from_kernel(softmax_rows(64, 128))
    >>> plan = plan_rows(s, s.kernel.body[0], band_chain(s.tree)[:1], Tiling())
    >>> print(plan)
    rows (i) in groups of 4: r: reduce; r_1: vector, reduce; r_2: vector
    >>> s, bands = apply_rows(s, plan)
    >>> bands, s.verify().verified
    ([('i_o',)], True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from polyonnx.krnl.ir import Loop, Stmt
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.analysis import NestDependences, stride
from polyonnx.schedule.strategies.nests import band_chain, chain
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.tree import Band, band_paths, get
from polyonnx.schedule.verbs import Distribute, Reorder, Split, Unroll, Vectorize

Role = Literal["reduce", "vector"]


@dataclass(frozen=True, slots=True)
class RowNest:
    """One loop inside the rows' band, with the role of each of its statements in order: a
    ``reduce`` statement accumulates along the loop, a ``vector`` one writes along it."""

    loop: str
    roles: tuple[Role, ...]

    def __str__(self) -> str:
        return f"{self.loop}: {', '.join(self.roles)}"


@dataclass(frozen=True, slots=True)
class RowsPlan:
    """The band ``loops`` (outermost first; the innermost is the row loop, which carries no
    dependence) cut into groups of ``rows`` rows, around the inner loops ``nests``; with
    ``parallel`` the band's outer loops are the candidates for a ``parallel`` mark."""

    loops: tuple[str, ...]
    rows: int
    parallel: bool
    nests: tuple[RowNest, ...]

    def __str__(self) -> str:
        inner = "; ".join(str(n) for n in self.nests)
        return f"rows ({', '.join(self.loops)}) in groups of {self.rows}: {inner}"


def plan_rows(s: Schedule, nest: Loop, loops: Sequence[str], tiling: Tiling) -> RowsPlan | None:
    """The plan for the band ``loops`` (schedule names) of ``nest`` when its body is statements
    and one-loop nests of statements, each statement either reducing along its loop or writing
    contiguously along it, and at least one reducing; None otherwise (or when the row loop is
    shorter than two groups)."""
    outer, body = chain(nest)
    if len(loops) != len(outer) or not outer[-1].upper.is_const or not outer[-1].lower.is_const:
        return None
    rows_extent = outer[-1].upper.const - outer[-1].lower.const
    shapes = {b.name: b.shape for b in s.kernel.buffers}
    paths = band_paths(s.tree)
    tree = get(s.tree, paths[loops[-1]])
    assert isinstance(tree, Band)
    children = getattr(tree.child, "children", ())
    if len(children) != len(body):
        return None
    nests: list[RowNest] = []
    for node, child in zip(body, children, strict=True):
        if isinstance(node, Stmt):
            if node.guards:
                return None
            continue
        inner, stmts = chain(node)
        names = band_chain(child)
        if len(inner) != 1 or len(names) != 1 or not all(isinstance(st, Stmt) for st in stmts):
            return None
        roles = [_role(st, inner[0].iterator, shapes) for st in stmts]
        if any(r is None for r in roles):
            return None
        nests.append(RowNest(names[0], tuple(r for r in roles if r is not None)))
    if not any("reduce" in n.roles for n in nests):
        return None
    rows = tiling.rows(rows_extent)
    deps = NestDependences(s, paths[loops[0]], len(loops))
    if rows_extent < 2 * rows or not deps.free(len(loops) - 1):
        return None
    return RowsPlan(tuple(loops), rows, not deps.carried(0), tuple(nests))


def _role(stmt: Stmt, loop: str, shapes: dict[str, tuple[int, ...]]) -> Role | None:
    if stmt.guards:
        return None
    along = stride(stmt.write.index, shapes[stmt.write.buffer], loop)
    return "reduce" if along == 0 else "vector" if along == 1 else None


def apply_rows(s: Schedule, plan: RowsPlan) -> tuple[Schedule, list[tuple[str, ...]]]:
    """``plan`` applied to ``s`` (unverified), and the band left outside the groups (the
    candidates for ``parallel``)."""
    roles: dict[str, Role] = {}
    for nest in plan.nests:
        names = [nest.loop]
        if len(nest.roles) > 1:  # one loop per statement, each with its own role
            s = s.apply_unverified(Distribute(nest.loop))
            names += s.created
        roles.update(zip(names, nest.roles, strict=True))
    row = plan.loops[-1]
    s = s.apply_unverified(Split(row, plan.rows, floor=True))
    group, point = s.created
    s = s.apply_unverified(Distribute(point))
    for copy in (point, *s.created):
        child = get(s.tree, band_paths(s.tree)[copy])
        assert isinstance(child, Band)
        inner = child.child.name if isinstance(child.child, Band) else None
        if inner is None or inner not in roles:
            continue  # a statement per row (an init, a finish): the group loop as it is
        if roles[inner] == "reduce":
            s = s.apply_unverified(Reorder((inner, copy)))
            s = s.apply_unverified(Unroll(copy, 0, mark=True))
        else:
            s = s.apply_unverified(Vectorize(inner, 0, mark=True))
    return s, [(*plan.loops[:-1], group)] if plan.parallel else []
