"""Verbs that move statements between loop nests: ``fuse``, ``distribute``, ``compute_at``,
``reverse_compute_at``.

The before/after loop nests are for ``C[i, j] += A[i, k] * B[k, j]`` with ``i, j, k`` in
``[0, 16)`` (init statement omitted), as in :mod:`polyonnx.schedule.verbs`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.tree import (
    Band,
    Leaf,
    Node,
    Path,
    Sequence,
    bands_above,
    bands_on_path,
    children,
    find,
    fresh,
    get,
    prefix_map,
    put,
    sequence,
    stmts,
    universe,
    values_map,
    walk,
)
from polyonnx.schedule.verbs.base import (
    Directive,
    _band,
    _check_factor,
    _rebuild,
    _taken,
    _unmarked,
)

# --------------------------------------------------------------------------- fuse / distribute


def _siblings(tree: Node, first: Path, second: Path, verb: str) -> Path:
    """The path of the sequence holding ``first`` and ``second`` as children."""
    if (
        not first
        or not second
        or first[:-1] != second[:-1]
        or not isinstance(get(tree, first[:-1]), Sequence)
    ):
        raise ScheduleError(f"{verb}: the two are not siblings in one sequence of loops")
    return first[:-1]


@dataclass(frozen=True)
class Fuse(Directive):
    """Fuse ``second`` into ``first`` (adjacent sibling loops): one loop over both bodies, the
    body of ``first`` before that of ``second`` in each iteration. Repeat ``depth`` levels down
    (the loops directly inside each are fused next).

    Before / after ``fuse(i, i_1, 2)`` on ``C = A * 2; D = C + 1``::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for j in [0, 16):
            S0: C[i, j] = ...              S0: C[i, j] = ...
        for i_1 in [0, 16):                S1: D[i, j] = ...
          for j_1 in [0, 16):
            S1: D[i, j] = ...
    """

    verb: ClassVar[str] = "fuse"
    first: str
    second: str
    depth: int = 1


def check_fuse(tree: Node, poly: PolyKernel, d: Fuse) -> None:
    _check_factor(str(d), d.depth)
    first, second = find(tree, d.first, str(d)), find(tree, d.second, str(d))
    _siblings(tree, first, second, str(d))
    if second[-1] != first[-1] + 1:
        raise ScheduleError(f"{d}: {d.second} must come right after {d.first}")


def _fuse_pair(a: Band, b: Band, depth: int, verb: str) -> Band:
    _unmarked(a, verb)
    _unmarked(b, verb)
    body = sequence([a.child, b.child])
    if depth > 1:
        if not isinstance(a.child, Band) or not isinstance(b.child, Band):
            raise ScheduleError(
                f"{verb}: {a.name} and {b.name} are not both perfect nests {depth} deep"
            )
        body = _fuse_pair(a.child, b.child, depth - 1, verb)
    return replace(a, sched=a.sched.union_add(b.sched), child=body)


def apply_fuse(tree: Node, poly: PolyKernel, d: Fuse) -> Node:
    first, second = find(tree, d.first, str(d)), find(tree, d.second, str(d))
    seq = get(tree, first[:-1])
    assert isinstance(seq, Sequence)
    a, b = get(tree, first), get(tree, second)
    assert isinstance(a, Band) and isinstance(b, Band)
    kids = list(seq.children)
    kids[first[-1] : second[-1] + 1] = [_fuse_pair(a, b, d.depth, str(d))]
    return put(tree, first[:-1], sequence(kids))


@dataclass(frozen=True)
class Distribute(Directive):
    """Split ``loop`` (and the loops perfectly nested in it) over the statements or loop nests
    of its body: one copy per child, in order. Copies after the first get fresh names.

    Before / after ``distribute(j)``::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for j in [0, 16):
            S0: C[i, j] = 0                S0: C[i, j] = 0
            for k in [0, 16):            for j_1 in [0, 16):
              S1                           for k in [0, 16):
                                             S1
    """

    verb: ClassVar[str] = "distribute"
    loop: str


def _nest_to_sequence(band: Band, verb: str) -> tuple[list[Band], Sequence]:
    bands = [band]
    while isinstance(bands[-1].child, Band):
        bands.append(bands[-1].child)
    body = bands[-1].child
    if not isinstance(body, Sequence):
        raise ScheduleError(
            f"{verb}: loop {band.name} holds a single statement; nothing to distribute"
        )
    return bands, body


def check_distribute(tree: Node, poly: PolyKernel, d: Distribute) -> None:
    _nest_to_sequence(_band(tree, d.loop, str(d))[1], str(d))


def apply_distribute(tree: Node, poly: PolyKernel, d: Distribute) -> Node:
    path, band = _band(tree, d.loop, str(d))
    bands, body = _nest_to_sequence(band, str(d))
    taken = _taken(tree)
    copies: list[Node] = []
    for k, part in enumerate(body.children):
        only = universe(poly, stmts(part))
        copies.append(
            _rebuild(
                [
                    replace(
                        b,
                        name=b.name if k == 0 else fresh(b.name, taken),
                        sched=b.sched.intersect_domain(only),
                    )
                    for b in bands
                ],
                part,
            )
        )
    new = sequence(copies)
    if path and isinstance(get(tree, path[:-1]), Sequence):
        parent = get(tree, path[:-1])
        assert isinstance(parent, Sequence)
        kids = list(parent.children)
        kids[path[-1] : path[-1] + 1] = list(children(new))
        return put(tree, path[:-1], sequence(kids))
    return put(tree, path, new)


# --------------------------------------------------------------------------- compute_at


@dataclass(frozen=True)
class ComputeAt(Directive):
    """Move ``block`` (a loop nest or a statement, before the loop's nest in the same sequence)
    into loop ``loop`` of a later nest: each instance of ``block`` runs in the first iteration
    of ``loop`` (and its outer loops) that reads what it writes, before that iteration's body.
    This is how a producer is computed inside a consumer's tile.

    Before / after ``compute_at(i, i_1)`` on ``T = A + 1; D = T * 2``::

        for i in [0, 16):              for i_1 in [0, 16):
          S0: T[i] = A[i] + 1            S0: T[i] = A[i] + 1
        for i_1 in [0, 16):              S1: D[i] = T[i] * 2
          S1: D[i] = T[i] * 2

    (``i`` survives as a one-iteration loop inside ``i_1``.)
    """

    verb: ClassVar[str] = "compute_at"
    block: str
    loop: str


@dataclass(frozen=True)
class ReverseComputeAt(Directive):
    """Move ``block`` (a consumer nest or statement after the loop's nest) into loop ``loop``
    of an earlier nest: each instance runs in the last iteration of ``loop`` (and its outer
    loops) that writes a value it reads, after that iteration's body. Inside a reduction's
    loop that is the reduction's last iteration (an epilogue fused into a conv's last chunk
    of input channels).

    Before / after ``reverse_compute_at(i_1, i)`` on ``T = A + 1; D = T * 2``::

        for i in [0, 16):              for i in [0, 16):
          S0: T[i] = A[i] + 1            S0: T[i] = A[i] + 1
        for i_1 in [0, 16):              for i_1 in [0, 1):  # = i
          S1: D[i] = T[i] * 2              S1: D[i] = T[i] * 2
    """

    verb: ClassVar[str] = "reverse_compute_at"
    block: str
    loop: str


def _block_path(tree: Node, block: str, verb: str) -> Path:
    for path, node in walk(tree):
        if (isinstance(node, Band) and node.name == block) or (
            isinstance(node, Leaf) and node.stmt == block
        ):
            return path
    raise ScheduleError(f"{verb}: no loop or statement named {block!r}")


def _check_move(tree: Node, block: str, loop: str, verb: str, before: bool) -> None:
    moved = _block_path(tree, block, verb)
    at = find(tree, loop, verb)
    if (
        not moved
        or not isinstance(get(tree, moved[:-1]), Sequence)
        or at[: len(moved) - 1] != moved[:-1]
        or at[len(moved) - 1] == moved[-1]
    ):
        raise ScheduleError(
            f"{verb}: {block} and the nest of {loop} are not siblings in one sequence"
        )
    if (at[len(moved) - 1] > moved[-1]) != before:
        raise ScheduleError(
            f"{verb}: {block} must come {'before' if before else 'after'} the nest of {loop}"
        )
    for depth in range(len(moved), len(at) + 1):
        node = get(tree, at[:depth])
        if isinstance(node, Band) and node.mark == "vector":
            raise ScheduleError(f"{verb}: {loop} is or is inside the vector loop {node.name}")


def _move(tree: Node, poly: PolyKernel, block: str, loop: str, verb: str, producer: bool) -> Node:
    moved_path = _block_path(tree, block, verb)
    at = find(tree, loop, verb)
    moved = get(tree, moved_path)
    moved_stmts = stmts(moved)
    target_stmts = stmts(get(tree, at))
    m_univ, t_univ = universe(poly, moved_stmts), universe(poly, target_stmts)
    if producer:  # moved writes what the target reads
        rel = poly.writes.intersect_domain(m_univ).apply_range(
            poly.reads.intersect_domain(t_univ).reverse()
        )
    else:  # moved reads what the target writes
        rel = poly.reads.intersect_domain(m_univ).apply_range(
            poly.writes.intersect_domain(t_univ).reverse()
        )
    # A producer runs before the first iteration that reads it, a consumer after the last
    # that writes what it reads.
    place = rel.apply_range(prefix_map(tree, at, poly))
    place = place.lexmin() if producer else place.lexmax()
    moved_instances = poly.domain.intersect(m_univ)
    orphans = moved_instances.subtract(place.domain())
    if not orphans.is_empty():
        sample = orphans.get_set_list().get_at(0).sample_point()
        relation = (
            f"writes nothing the statements under {loop} read"
            if producer
            else f"reads nothing the statements under {loop} write"
        )
        raise ScheduleError(f"{verb}: instance {sample} of {block} {relation}")
    columns = _own_expressions(tree, at, rel.lexmin() if producer else rel.lexmax(), place)
    # Rebuild: drop the moved block, extend each band on the way to ``loop``, insert it there.
    seq_path, index = moved_path[:-1], moved_path[-1]
    parent = get(tree, seq_path)
    assert isinstance(parent, Sequence)
    kids = list(parent.children)
    del kids[index]
    rel_at = at[len(seq_path) :]
    if rel_at[0] > index:
        rel_at = (rel_at[0] - 1,) + rel_at[1:]

    def extend(node: Node, rest: Path, k: int) -> Node:
        if isinstance(node, Band):
            sched = node.sched.union_add(columns[k])
            if not rest:
                body = [moved, node.child] if producer else [node.child, moved]
                return replace(node, sched=sched, child=sequence(body))
            return replace(node, sched=sched, child=extend(node.child, rest[1:], k + 1))
        assert isinstance(node, Sequence)
        inner = list(node.children)
        inner[rest[0]] = extend(inner[rest[0]], rest[1:], k)
        return Sequence(tuple(inner))

    kids[rel_at[0]] = extend(kids[rel_at[0]], rel_at[1:], bands_above(tree, seq_path))
    return put(tree, seq_path, sequence(kids))


def _own_expressions(
    tree: Node, at: Path, extreme: isl.UnionMap, place: isl.UnionMap
) -> list[isl.UnionPwAff]:
    """The values of the loops down to ``at`` for each moved instance at its ``place``: the
    loops' own expressions of a target instance ``extreme`` picks (the first or the last of
    one target statement, in instance order) when they give that place, else ``place`` as
    isl's lexmin wrote it (``-1 + ob + (1 + ob) mod 2`` for the tile loop ``ob - ob mod 2``:
    the same values, but AST generation then reconciles two spellings, twice as slowly)."""
    bands = [band.sched for band in bands_on_path(tree, at)]
    pieces: list[isl.Map] = []
    extreme.foreach_map(pieces.append)
    by_target: dict[str, isl.UnionMap] = {}
    for m in pieces:
        name = m.get_tuple_name(isl.dim_type.out)
        one = isl.UnionMap.from_map(m)
        by_target[name] = by_target[name].union(one) if name in by_target else one
    for chosen in by_target.values():
        if not chosen.domain().is_equal(place.domain()):
            continue
        instance = isl.UnionPwMultiAff.from_union_map(chosen)
        own = [sched.pullback_union_pw_multi_aff(instance) for sched in bands]
        if values_map(place.domain(), own).is_equal(place):
            return own
    dims = isl.MultiUnionPwAff.from_union_pw_multi_aff(isl.UnionPwMultiAff.from_union_map(place))
    return [dims.get_at(k) for k in range(dims.dim(isl.dim_type.set))]


def check_compute_at(tree: Node, poly: PolyKernel, d: ComputeAt) -> None:
    _check_move(tree, d.block, d.loop, str(d), before=True)


def apply_compute_at(tree: Node, poly: PolyKernel, d: ComputeAt) -> Node:
    return _move(tree, poly, d.block, d.loop, str(d), producer=True)


def check_reverse_compute_at(tree: Node, poly: PolyKernel, d: ReverseComputeAt) -> None:
    _check_move(tree, d.block, d.loop, str(d), before=False)


def apply_reverse_compute_at(tree: Node, poly: PolyKernel, d: ReverseComputeAt) -> Node:
    return _move(tree, poly, d.block, d.loop, str(d), producer=False)
