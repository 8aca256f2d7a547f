"""Legality of a schedule against a kernel's exact dependences, with witnesses.

Two checks, both exact (isl decides them on the dependence relations, no approximation):

* :func:`check_order` — the new schedule runs every dependence's source before its sink:
  ``deps ⊆ S⁻¹ ∘ (<ₗₑₓ) ∘ S`` for the schedule map ``S`` (all verbs).
* :func:`check_not_carried` — no dependence links two instances that share every outer loop value
  but differ in one loop (``parallel`` and ``vectorize``). A carried self-dependence through a
  read-modify-write of the same element is reported as the reduction it is.

A violation raises :class:`ScheduleError` naming the verb, the dependence kind, the two statement
instances (iterator = value), the buffer element and the distance.

Example:
    >>> check_order("interchange(t, i)", poly, deps, new_isl_schedule)   # doctest: +SKIP
    ScheduleError: interchange(t, i): the RAW dependence S0[t=1, i=1] -> S0[t=2, i=0] on A[1, 1]
    (distance (1, -1) in (t, i)) would no longer run its source before its sink
"""

from __future__ import annotations

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import loads
from polyonnx.schedule.poly import Dependences, PolyKernel


def check_order(verb: str, poly: PolyKernel, deps: Dependences, schedule: isl.Schedule) -> None:
    """Refuse ``schedule`` unless it orders the source of every dependence before its sink."""
    order = schedule.get_map()
    before = order.lex_lt_union_map(order)
    if _all(deps).is_subset(before):
        return  # (one test for all kinds; the kinds are told apart only for the message)
    for kind, rel in _kinds(deps):
        bad = rel.subtract(before)
        if not bad.is_empty():
            raise ScheduleError(f"{verb}: the {describe(kind, bad, poly)} would no longer run "
                                "its source before its sink")


def check_not_carried(verb: str, loop: str, poly: PolyKernel, deps: Dependences,
                      outer: isl.UnionMap, band: isl.UnionMap) -> None:
    """Refuse unless loop ``loop`` (values ``band``, outer loop values ``outer``; both on the
    instances below the loop) carries no dependence."""
    below = band.domain()
    same_outer = outer.apply_range(outer.reverse())
    same_loop = band.apply_range(band.reverse())
    for kind, rel in _kinds(deps):
        carried = (rel.intersect_domain(below).intersect_range(below)
                   .intersect(same_outer).subtract(same_loop))
        if carried.is_empty():
            continue
        text = describe(kind, carried, poly)
        reduction = _reduction(carried, poly)
        why = (f"; {loop} is a reduction loop of {reduction}: its iterations accumulate into "
               "the same element one after the other, so they cannot run at the same time "
               "(choose a loop that does not carry the reduction)" if reduction else "")
        raise ScheduleError(f"{verb}: loop {loop} carries the {text}{why}")


def _all(deps: Dependences) -> isl.UnionMap:
    """``deps.all``, computed once per Dependences (the checks of one schedule share it)."""
    cached = deps.__dict__.get("_all_cached")
    if cached is None:
        cached = deps.all.coalesce()
        object.__setattr__(deps, "_all_cached", cached)
    return cached


def _kinds(deps: Dependences) -> tuple[tuple[str, isl.UnionMap], ...]:
    return (("RAW", deps.raw), ("WAR", deps.war), ("WAW", deps.waw))


def _point(name: str, coords: list[int]) -> str:
    return f"{name}[{', '.join(map(str, coords))}]"


def _witness(rel: isl.UnionMap) -> tuple[str, list[int], str, list[int]]:
    """One (source, sink) pair of ``rel``: names and coordinates."""
    m = rel.get_map_list().get_at(0)
    pt = m.wrap().sample_point()
    n_in = m.dim(isl.dim_type.in_)
    coords = [int(pt.get_coordinate_val(isl.dim_type.set, k).to_python())
              for k in range(n_in + m.dim(isl.dim_type.out))]
    return (m.get_tuple_name(isl.dim_type.in_), coords[:n_in],
            m.get_tuple_name(isl.dim_type.out), coords[n_in:])


def describe(kind: str, rel: isl.UnionMap, poly: PolyKernel) -> str:
    """``RAW dependence S0[t=1, i=1] -> S0[t=2, i=0] on A[1, 1] (distance (1, -1) in
    (t, i))`` for one
    witness pair of ``rel``."""
    src, sc, dst, dc = _witness(rel)

    def named(stmt: str, coords: list[int]) -> str:
        its = poly.stmts[stmt].iterators
        return f"{stmt}[{', '.join(f'{i}={v}' for i, v in zip(its, coords, strict=True))}]"

    a = isl.UnionSet(f"{{ {_point(src, sc)} }}")
    b = isl.UnionSet(f"{{ {_point(dst, dc)} }}")
    first, second = {"RAW": (poly.writes, poly.reads), "WAR": (poly.reads, poly.writes),
                     "WAW": (poly.writes, poly.writes)}[kind]
    shared = first.intersect_domain(a).range().intersect(second.intersect_domain(b).range())
    where = ""
    if not shared.is_empty():
        elem = isl.Set.from_union_set(shared).sample_point()
        space = elem.get_space()
        buffer_id = space.get_tuple_name(isl.dim_type.set)
        names = {v: k for k, v in poly.buffer_ids.items()}
        idx = [int(elem.get_coordinate_val(isl.dim_type.set, k).to_python())
               for k in range(space.dim(isl.dim_type.set))]
        where = f" on {_point(names.get(buffer_id, buffer_id), idx)}"
    distance = ""
    if src == dst:
        its = poly.stmts[src].iterators
        steps = ", ".join(str(y - x) for x, y in zip(sc, dc, strict=True))
        distance = f" (distance ({steps}) in ({', '.join(its)}))"
    return f"{kind} dependence {named(src, sc)} -> {named(dst, dc)}{where}{distance}"


def _reduction(carried: isl.UnionMap, poly: PolyKernel) -> str:
    """The statement of a carried self-dependence that is a read-modify-write, or ``""``."""
    src, _, dst, _ = _witness(carried)
    if src != dst:
        return ""
    stmt = poly.stmts[src].stmt
    if any(ld.buffer == stmt.write.buffer and ld.index == stmt.write.index
           for ld in loads(stmt.body)):
        return f"{src} (into {stmt.write.buffer})"
    return ""


def dependences_in(poly: PolyKernel, schedule: isl.Schedule) -> Dependences:
    """RAW, WAR and WAW dependences of ``poly`` with its statements run in ``schedule`` (the
    meaning of a kernel changed by a staging verb is the schedule that verb produced)."""
    def flow(sink: isl.UnionMap, source: isl.UnionMap, must: bool) -> isl.UnionMap:
        info = isl.UnionAccessInfo.from_sink(sink)
        info = info.set_must_source(source) if must else info.set_may_source(source)
        return info.set_schedule(schedule).compute_flow().get_may_dependence().coalesce()

    return Dependences(flow(poly.reads, poly.writes, True), flow(poly.writes, poly.reads, False),
                       flow(poly.writes, poly.writes, True))
