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
    >>> from polyonnx.testing.examples import stencil
    >>> poly = PolyKernel.build(stencil())  # A[t, i] = A[t-1, i] + A[t-1, i+1]
    >>> swapped = isl.Schedule.from_domain(poly.domain).insert_partial_schedule(
    ...     isl.MultiUnionPwAff("[{ S0[t, i] -> [(i)] }, { S0[t, i] -> [(t)] }]"))
    >>> check_order("interchange(t, i)", poly, poly.dependences(), swapped)
    Traceback (most recent call last):
    polyonnx.errors.ScheduleError: interchange(t, i): the RAW dependence S0[t=1, i=7] -> S0[t=2, i=6] on A[1, 7] (distance (1, -1) in (t, i)) would no longer run its source before its sink
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Iterable, Sequence

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import loads
from polyonnx.schedule.poly import Dependences, PolyKernel
from polyonnx.schedule.tree import values_map


def check_order(verb: str, poly: PolyKernel, deps: Dependences, schedule: isl.Schedule) -> None:
    """Refuse ``schedule`` unless it orders the source of every dependence before its sink."""
    order = schedule.get_map()
    if _runs_before(deps.to_keep(schedule), order):
        return  # (one test for all kinds; the kinds are told apart only for the message)
    before = order.lex_lt_union_map(order)
    for kind, rel in _kinds(deps):
        bad = rel.subtract(before)
        if not bad.is_empty():
            raise ScheduleError(
                f"{verb}: the {describe(kind, bad, poly)} would no longer run "
                "its source before its sink"
            )


def check_not_carried(
    verb: str,
    loop: str,
    poly: PolyKernel,
    deps: Dependences,
    outer: isl.UnionMap,
    band: isl.UnionMap,
) -> None:
    """Refuse unless loop ``loop`` (values ``band``, outer loop values ``outer``; both on the
    instances below the loop) carries no dependence."""
    below = band.domain()
    same_outer = outer.apply_range(outer.reverse())
    same_loop = band.apply_range(band.reverse())
    for kind, rel in _kinds(deps):
        carried = (
            rel.intersect_domain(below)
            .intersect_range(below)
            .intersect(same_outer)
            .subtract(same_loop)
        )
        if carried.is_empty():
            continue
        text = describe(kind, carried, poly)
        reduction = _reduction(carried, poly)
        why = (
            f"; {loop} is a reduction loop of {reduction}: its iterations accumulate into "
            "the same element one after the other, so they cannot run at the same time "
            "(choose a loop that does not carry the reduction)"
            if reduction
            else ""
        )
        raise ScheduleError(f"{verb}: loop {loop} carries the {text}{why}")


def _runs_before(deps: isl.UnionMap, order: isl.UnionMap) -> bool:
    """Whether the schedule map ``order`` runs the source of every dependence before its sink:
    ``deps ⊆ order⁻¹ ∘ (<ₗₑₓ) ∘ order``, decided on the dependences mapped to their (source
    time, sink time) instead of on that relation between all pairs of instances, which isl
    builds slowly for tiled schedules. The two agree as a schedule map is a function of the
    instances it covers, into one time space."""
    if deps.is_empty():
        return True
    times = order.range()
    if times.n_set() != 1 or not deps.domain().union(deps.range()).is_subset(order.domain()):
        return False  # (not a schedule map of them: the caller's exact test decides)
    lex_lt = isl.Map.lex_lt(isl.Set.from_union_set(times).get_space())
    return deps.apply_domain(order).apply_range(order).is_subset(isl.UnionMap.from_map(lex_lt))


def loops_that_may_carry(
    deps: Dependences, below: isl.UnionSet, columns: Sequence[isl.UnionPwAff], depths: Iterable[int]
) -> set[int]:
    """Which of the loops at ``depths`` (0: outermost) of ``columns`` (the schedules of the
    loops on the way to the instances ``below``, outermost first) may carry a dependence. A
    loop left out carries none, exactly as :func:`check_not_carried` decides it; one returned
    is then checked (and refused in words) by it. One distance computation serves every loop
    of a nest, none is needed for instances without dependences among them, and the
    distances of a nest are remembered (``deps.carried_memo``) for any prefix of its loops
    (whether a loop carries a dependence depends only on it and the loops outside it)."""
    key = (id(below), *map(id, columns))
    hit = deps.carried_memo.get(key)
    if hit is None:
        hit = next(
            (v for k, v in deps.carried_memo.items() if k[0] == key[0] and k[: len(key)] == key),
            None,
        )
    if hit is None:
        # (below and columns are kept alive with the entry: the key holds their ids)
        hit = deps.carried_memo[key] = (
            below,
            tuple(columns),
            dependence_distances(deps, below, columns),
            {},
        )
    _, _, (decided, distances), carried = hit
    if not decided:
        return set(depths)
    if distances is None:
        return set()
    dims = [f"x{k}" for k in range(isl.Set.from_union_set(distances).dim(isl.dim_type.set))]
    for d in depths:
        if d not in carried:
            cond = " and ".join([*(f"{x} = 0" for x in dims[:d]), f"{dims[d]} != 0"])
            carried[d] = not distances.intersect(
                isl.UnionSet(f"{{ [{', '.join(dims)}] : {cond} }}")
            ).is_empty()
    return {d for d in depths if carried[d]}


def dependence_distances(
    deps: Dependences, below: isl.UnionSet, columns: Sequence[isl.UnionPwAff]
) -> tuple[bool, isl.UnionSet | None]:
    """(decided, the distances of the dependences among ``below`` in the values of
    ``columns``, as one set, or None when there are none); not decided when the shortcut
    does not apply, and every loop may carry."""
    rel = deps.among(below)
    if rel.is_empty():
        return True, None
    values = values_map(below, list(columns))
    if not below.is_subset(values.domain()):
        return False, None  # (not a function of every instance: the exact test decides)
    # A loop carries a dependence when source and sink agree on the loops outside it but not
    # on it: their distance is 0 on those loops and not on it (the loops are functions of the
    # instances, into one space).
    distances = rel.apply_domain(values).apply_range(values).deltas()
    return distances.n_set() == 1, distances


def _kinds(deps: Dependences) -> tuple[tuple[str, isl.UnionMap], ...]:
    return (("RAW", deps.raw), ("WAR", deps.war), ("WAW", deps.waw))


def _point(name: str, coords: list[int]) -> str:
    return f"{name}[{', '.join(map(str, coords))}]"


def _witness(rel: isl.UnionMap) -> tuple[str, list[int], str, list[int]]:
    """One (source, sink) pair of ``rel``: names and coordinates."""
    m = rel.get_map_list().get_at(0)
    pt = m.wrap().sample_point()
    n_in = m.dim(isl.dim_type.in_)
    coords = [
        int(pt.get_coordinate_val(isl.dim_type.set, k).to_python())
        for k in range(n_in + m.dim(isl.dim_type.out))
    ]
    return (
        m.get_tuple_name(isl.dim_type.in_),
        coords[:n_in],
        m.get_tuple_name(isl.dim_type.out),
        coords[n_in:],
    )


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
    first, second = {
        "RAW": (poly.writes, poly.reads),
        "WAR": (poly.reads, poly.writes),
        "WAW": (poly.writes, poly.writes),
    }[kind]
    shared = first.intersect_domain(a).range().intersect(second.intersect_domain(b).range())
    where = ""
    if not shared.is_empty():
        elem = isl.Set.from_union_set(shared).sample_point()
        space = elem.get_space()
        buffer_id = space.get_tuple_name(isl.dim_type.set)
        names = {v: k for k, v in poly.buffer_ids.items()}
        idx = [
            int(elem.get_coordinate_val(isl.dim_type.set, k).to_python())
            for k in range(space.dim(isl.dim_type.set))
        ]
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
    if any(
        ld.buffer == stmt.write.buffer and ld.index == stmt.write.index for ld in loads(stmt.body)
    ):
        return f"{src} (into {stmt.write.buffer})"
    return ""


def dependences_in(poly: PolyKernel, schedule: isl.Schedule) -> Dependences:
    """RAW, WAR and WAW dependences of ``poly`` with its statements run in ``schedule`` (the
    meaning of a kernel changed by a staging verb is the schedule that verb produced)."""
    return Dependences(poly.reads, poly.writes, schedule)
