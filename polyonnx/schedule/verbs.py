"""Schedule verbs: a frozen directive record, ``check_<verb>`` and ``apply_<verb>`` each.

``check_<verb>(tree, poly, d)`` validates the directive against the current tree (the loops exist,
are nested as the verb needs, factors are positive) and raises :class:`ScheduleError` otherwise.
``apply_<verb>(tree, poly, d)`` returns the rewritten tree. Neither decides legality:
:meth:`Schedule.apply <polyonnx.schedule.schedule.Schedule.apply>` checks the rewritten tree
against the kernel's exact dependences (:mod:`polyonnx.schedule.legality`) before accepting it.

The loop nests below are for ``C[i, j] += A[i, k] * B[k, j]`` with ``i, j, k`` in ``[0, 16)``
(init statement omitted); ``docs/schedule.md`` shows every verb on real kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, ClassVar, cast

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.staging import Layout, stage
from polyonnx.schedule.tree import (
    Band,
    Leaf,
    Node,
    Path,
    Sequence,
    band_paths,
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
    value_range,
    values_map,
    walk,
)

MAX_UNROLL = 64
"""Longest loop ``unroll`` unrolls completely (a longer one needs a factor)."""

OPTIONAL = {"optional": True}
"""Field metadata: left out of a trace step when it has its default value (so traces written
before the field existed read the same and stay the same)."""


def _flag() -> bool:
    return field(default=False, metadata=OPTIONAL)


class Directive:
    """Base of the directive records; ``verb`` is the name in traces and messages."""

    verb: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every directive is a dataclass

    def __str__(self) -> str:
        args = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("optional"):
                if v != f.default:
                    text = f"({', '.join(map(str, v))})" if isinstance(v, tuple) else str(v)
                    args.append(f"{f.name}={text}")
                continue
            args.append(
                ", ".join(map(str, v)) if isinstance(v, tuple) and f.name == "loops" else str(v)
            )
        return f"{self.verb}({', '.join(args)})"


# --------------------------------------------------------------------------- helpers


def _band(tree: Node, loop: str, verb: str) -> tuple[Path, Band]:
    path = find(tree, loop, verb)
    node = get(tree, path)
    assert isinstance(node, Band)
    return path, node


def _unmarked(band: Band, verb: str) -> None:
    if band.mark or band.unroll or band.isolate or band.grouped:
        what = band.mark or ("unrolled" if band.unroll else "isolated")
        raise ScheduleError(
            f"{verb}: loop {band.name} is already {what}; restructure loops before marking them"
        )


def _chain(tree: Node, loops: tuple[str, ...], verb: str) -> tuple[Path, list[Band]]:
    """The bands from the outermost to the innermost of ``loops`` when they form one perfect
    nest (each band's body is the next band): (path of the outermost, bands)."""
    if len(set(loops)) != len(loops):
        raise ScheduleError(f"{verb}: a loop is named twice in {', '.join(loops)}")
    paths = {name: find(tree, name, verb) for name in loops}
    top = min(paths.values(), key=len)
    bottom = max(paths.values(), key=len)
    if bottom[: len(top)] != top:
        raise ScheduleError(f"{verb}: loops {', '.join(loops)} are not nested in one another")
    bands = [get(tree, bottom[:d]) for d in range(len(top), len(bottom) + 1)]
    for outer, inner in zip(bands, bands[1:], strict=False):
        if not isinstance(outer, Band) or not isinstance(inner, Band):
            raise ScheduleError(
                f"{verb}: loops {', '.join(loops)} are not perfectly nested "
                f"(statements sit between them); distribute first"
            )
    names = {b.name for b in bands if isinstance(b, Band)}
    if any(name not in names for name in loops):
        raise ScheduleError(f"{verb}: loops {', '.join(loops)} are not nested in one another")
    return top, [b for b in bands if isinstance(b, Band)]


def _rebuild(bands: list[Band], child: Node) -> Node:
    """Nest ``bands`` (outermost first) around ``child``."""
    for b in reversed(bands):
        child = replace(b, child=child)
    return child


def _check_factor(verb: str, factor: int) -> None:
    if not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"{verb}: factor must be a positive integer, got {factor!r}")


def _split_bands(band: Band, factor: int, outer: str, inner: str) -> tuple[Band, Band]:
    f = isl.Val(factor)
    return (
        Band(outer, band.sched.scale_down_val(f).floor(), band.child),
        Band(inner, band.sched.mod_val(f), band.child),
    )


def _taken(tree: Node) -> set[str]:
    return set(band_paths(tree))


# --------------------------------------------------------------------------- split


@dataclass(frozen=True)
class Split(Directive):
    """Strip-mine ``loop`` into ``{loop}_o`` (``floor(loop / factor)``) and ``{loop}_i``
    (``loop mod factor``). Always legal: the order is unchanged.

    With ``floor``, the loops keep the values of ``loop`` instead (isl's AST then has a
    stride-``factor`` outer loop and an inner loop from it to ``+ factor - 1``, with no
    ``mod``): ``{loop}_o`` is ``factor * floor(loop / factor)`` (the tile's first value) and
    ``{loop}_i`` is ``loop``. The default strategies tile this way; only floor-split loops can
    be named as tiles of :class:`Isolate`.

    Before / after ``split(j, 4)`` and ``split(j, 4, floor=True)``::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for j_o in [0, 4):  # = floor(j/4)
            for k in [0, 16):              for j_i in [0, 4):  # = j mod 4
              S1                             for k in [0, 16):
                                               S1

                                       for i in [0, 16):
                                         for j_o in [0, 13):  # = 4*floor(j/4)  (0, 4, 8, 12)
                                           for j_i in [0, 16):  # = j  (j_o .. j_o + 3)
                                             for k in [0, 16):
                                               S1
    """

    verb: ClassVar[str] = "split"
    loop: str
    factor: int
    floor: bool = _flag()


def check_split(tree: Node, poly: PolyKernel, d: Split) -> None:
    _check_factor(str(d), d.factor)
    _unmarked(_band(tree, d.loop, str(d))[1], str(d))


def apply_split(tree: Node, poly: PolyKernel, d: Split) -> Node:
    path, band = _band(tree, d.loop, str(d))
    taken = _taken(tree)
    if d.floor:
        f = isl.Val(d.factor)
        _, hi = value_range(band, poly)
        outer = Band(
            fresh(f"{d.loop}_o", taken),
            band.sched.scale_down_val(f).floor().scale_val(f),
            band.child,
            tile=(d.factor, hi + 1),
        )
        inner = Band(fresh(f"{d.loop}_i", taken), band.sched, band.child)
        return put(tree, path, replace(outer, child=inner))
    outer, inner = _split_bands(
        band, d.factor, fresh(f"{d.loop}_o", taken), fresh(f"{d.loop}_i", taken)
    )
    return put(tree, path, replace(outer, child=inner))


# --------------------------------------------------------------------------- tile


@dataclass(frozen=True)
class Tile(Directive):
    """Tile the perfectly nested, adjacent ``loops`` with one tile size per loop per level
    (outermost level first). One level names the loops ``{l}_o`` / ``{l}_i``; ``n`` levels name
    them ``{l}_0`` (outermost) ... ``{l}_n``.

    Before / after ``tile((i, j), ((8, 4),))``::

        for i in [0, 16):              for i_o in [0, 2):  # = floor(i/8)
          for j in [0, 16):              for j_o in [0, 4):  # = floor(j/4)
            for k in [0, 16):              for i_i in [0, 8):  # = i mod 8
              S1                             for j_i in [0, 4):  # = j mod 4
                                               for k in [0, 16):
                                                 S1
    """

    verb: ClassVar[str] = "tile"
    loops: tuple[str, ...]
    sizes: tuple[tuple[int, ...], ...]


def check_tile(tree: Node, poly: PolyKernel, d: Tile) -> None:
    if not d.loops or not d.sizes:
        raise ScheduleError(f"{d}: give at least one loop and one level of tile sizes")
    for level in d.sizes:
        if len(level) != len(d.loops):
            raise ScheduleError(f"{d}: each level needs one size per loop ({len(d.loops)})")
        for s in level:
            _check_factor(str(d), s)
    _, bands = _chain(tree, d.loops, str(d))
    if len(bands) != len(d.loops):
        raise ScheduleError(
            f"{d}: the tiled loops must be adjacent; "
            f"{', '.join(b.name for b in bands if b.name not in d.loops)} "
            "sit between them"
        )
    for b in bands:
        _unmarked(b, str(d))


def apply_tile(tree: Node, poly: PolyKernel, d: Tile) -> Node:
    path, bands = _chain(tree, d.loops, str(d))
    by_name = {b.name: b for b in bands}
    taken = _taken(tree)
    levels = len(d.sizes)
    suffixes = ("o", "i") if levels == 1 else tuple(str(k) for k in range(levels + 1))
    grid: list[list[Band]] = [[] for _ in range(levels + 1)]
    for li, loop in enumerate(d.loops):
        rest = by_name[loop]
        for level in range(levels):
            outer, rest = _split_bands(
                rest,
                d.sizes[level][li],
                fresh(f"{loop}_{suffixes[level]}", taken),
                f"{loop}_{suffixes[level + 1]}",
            )
            grid[level].append(outer)
        grid[levels].append(replace(rest, name=fresh(rest.name, taken)))
    return put(tree, path, _rebuild([b for row in grid for b in row], bands[-1].child))


# --------------------------------------------------------------------------- reorder


@dataclass(frozen=True)
class Reorder(Directive):
    """Put the named loops of one perfect nest in the given order (outermost first); the loops
    between them that are not named keep their places. ``interchange(a, b)`` is the two-loop
    case.

    Before / after ``reorder(k, j)`` (an interchange)::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for k in [0, 16):
            for k in [0, 16):              for j in [0, 16):
              S1                             S1
    """

    verb: ClassVar[str] = "reorder"
    loops: tuple[str, ...]


def check_reorder(tree: Node, poly: PolyKernel, d: Reorder) -> None:
    if len(d.loops) < 2:
        raise ScheduleError(f"{d}: name at least two loops")
    _chain(tree, d.loops, str(d))


def apply_reorder(tree: Node, poly: PolyKernel, d: Reorder) -> Node:
    path, bands = _chain(tree, d.loops, str(d))
    order = iter(d.loops)
    by_name = {b.name: b for b in bands}
    new = [by_name[next(order)] if b.name in d.loops else b for b in bands]
    return put(tree, path, _rebuild(new, bands[-1].child))


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


# --------------------------------------------------------------------------- marks and unroll


@dataclass(frozen=True)
class Parallel(Directive):
    """Run the iterations of ``loop`` in parallel (an isl ``parallel`` mark above the loop;
    codegen outlines it to the thread pool). Refused if the loop carries a dependence.

    With ``named`` (``loop`` and/or loops perfectly nested in it), the mark names those loops
    instead: ``parallel c1 c3``, their AST iterators (``c<schedule depth>``). Codegen runs in
    parallel the first loop under the mark that isl generates, if it is named (a loop of one
    iteration is left out of the isl tree and named by no mark). Each named
    loop is refused if it carries a dependence once the loops outside it are fixed. This is
    the form the default strategies use.

    Before / after ``parallel(i)`` and ``parallel(t, named=(i,))``::

        for i in [0, 16):              for i in [0, 16):  # parallel
          for j in [0, 16):              for j in [0, 16):
            ...                            ...

        for t in [0, 4):               for t in [0, 4):  # parallel (i)   (mark: parallel c1)
          for i in [0, 16):              for i in [0, 16):
            ...                            ...
    """

    verb: ClassVar[str] = "parallel"
    loop: str
    named: tuple[str, ...] = field(default=(), metadata=OPTIONAL)


def _perfect_chain(band: Band) -> list[str]:
    """``band`` and the loops perfectly nested in it, outermost first."""
    out = [band.name]
    while isinstance(band.child, Band):
        band = band.child
        out.append(band.name)
    return out


def check_parallel(tree: Node, poly: PolyKernel, d: Parallel) -> None:
    path, band = _band(tree, d.loop, str(d))
    if band.isolate and not (band.mark or band.grouped):
        pass  # a mark above an isolated band is fine
    else:
        _unmarked(band, str(d))
    if not isinstance(d.named, tuple) or not all(isinstance(n, str) for n in d.named):
        raise ScheduleError(f"{d}: named is a list of loop names")
    chain = _perfect_chain(band)
    for name in d.named:
        if name not in chain:
            raise ScheduleError(
                f"{d}: {name} is not {d.loop} or a loop perfectly nested in it ({', '.join(chain)})"
            )
    for p, node in walk(tree):
        if (
            isinstance(node, Band)
            and node.mark == "parallel"
            and (p[: len(path)] == path or path[: len(p)] == p)
        ):
            raise ScheduleError(
                f"{d}: loop {node.name} is already parallel and nested with {d.loop}"
            )


def apply_parallel(tree: Node, poly: PolyKernel, d: Parallel) -> Node:
    path, band = _band(tree, d.loop, str(d))
    return put(tree, path, replace(band, mark="parallel", named=d.named))


@dataclass(frozen=True)
class Vectorize(Directive):
    """Run the innermost ``loop`` in vector lanes of ``width`` (8 for float32 on AVX2): split
    it by the width, isolate the full tiles (their vector loop has exactly ``width``
    iterations; the remainder stays scalar) and mark the inner loop ``vector``. A loop of exactly
    ``width`` iterations is marked directly. Refused if the loop carries a dependence.

    With ``mark`` (width 0), only the ``vector`` mark is put on the loop, whatever its trip
    count: codegen runs it in vectors of the target's width, full vectors straight-line when
    the trip count is constant, with a scalar remainder. The default strategies vectorize this
    way.

    Before / after ``vectorize(j, 8)`` and ``vectorize(j, 0, mark=True)``::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for j_o in [0, 2):  # = floor(j/8), isolate full tiles
            S                              for j_i in [0, 8):  # = j mod 8, vector
                                             S

                                       for i in [0, 16):
                                         for j in [0, 16):  # vector
                                           S
    """

    verb: ClassVar[str] = "vectorize"
    loop: str
    width: int
    mark: bool = _flag()


def check_vectorize(tree: Node, poly: PolyKernel, d: Vectorize) -> None:
    if d.mark and d.width != 0:
        raise ScheduleError(f"{d}: a vector mark leaves the width to codegen; give width 0")
    if not d.mark and (not isinstance(d.width, int) or d.width < 2):
        raise ScheduleError(f"{d}: the vector width must be an integer >= 2")
    _, band = _band(tree, d.loop, str(d))
    _unmarked(band, str(d))
    if any(isinstance(n, Band) for _, n in walk(band.child)):
        raise ScheduleError(f"{d}: only an innermost loop can be vectorized; {d.loop} holds loops")
    if d.mark:
        return
    lo, hi = value_range(band, poly)
    if hi - lo + 1 < d.width:
        raise ScheduleError(
            f"{d}: loop {d.loop} has {hi - lo + 1} iterations, fewer than the "
            f"vector width {d.width}"
        )


def apply_vectorize(tree: Node, poly: PolyKernel, d: Vectorize) -> Node:
    path, band = _band(tree, d.loop, str(d))
    if d.mark:
        return put(tree, path, replace(band, mark="vector"))
    lo, hi = value_range(band, poly)
    if hi - lo + 1 == d.width:
        tree = put(tree, path, replace(band, mark="vector"))
        parent = get(tree, path[:-1]) if path else None
        if isinstance(parent, Band) and not parent.isolate:
            tree = put(tree, path[:-1], replace(parent, isolate=True))
        return tree
    taken = _taken(tree)
    outer, inner = _split_bands(
        band, d.width, fresh(f"{d.loop}_o", taken), fresh(f"{d.loop}_i", taken)
    )
    return put(tree, path, replace(outer, isolate=True, child=replace(inner, mark="vector")))


@dataclass(frozen=True)
class Unroll(Directive):
    """Unroll ``loop`` completely (``factor`` 0: isl's AST generator emits one copy per
    iteration; at most ``MAX_UNROLL`` iterations), or by ``factor``: split it and unroll the
    inner loop.

    With ``mark`` (factor 0), the loop gets codegen's ``unroll`` mark instead of isl's unroll
    loop type: isl generates an ordinary loop (much faster than unrolling it in the AST) and
    codegen emits its body once per iteration wherever its trip count is constant (the full
    tiles of a register tile), else the loop. The default strategies unroll this way.

    Before / after ``unroll(k, 4)`` and ``unroll(k_i, mark=True)``::

        for k in [0, 16):              for k_o in [0, 4):  # = floor(k/4)
          S1                             for k_i in [0, 4):  # = k mod 4, unroll
                                           S1

                                       for k_o in [0, 4):  # = floor(k/4)
                                         for k_i in [0, 4):  # = k mod 4, unroll (mark)
                                           S1
    """

    verb: ClassVar[str] = "unroll"
    loop: str
    factor: int = 0
    mark: bool = _flag()


def check_unroll(tree: Node, poly: PolyKernel, d: Unroll) -> None:
    if not isinstance(d.factor, int) or d.factor < 0:
        raise ScheduleError(f"{d}: factor must be 0 (full) or a positive integer")
    if d.mark and d.factor:
        raise ScheduleError(f"{d}: an unroll mark unrolls the whole loop; split it first")
    _, band = _band(tree, d.loop, str(d))
    _unmarked(band, str(d))
    if d.mark:
        return  # codegen unrolls only constant trip counts up to its own limit
    lo, hi = value_range(band, poly)
    trips = min(hi - lo + 1, d.factor or hi - lo + 1)
    if trips > MAX_UNROLL:
        raise ScheduleError(
            f"{d}: unrolling {trips} iterations (more than {MAX_UNROLL}); give a smaller factor"
        )


def apply_unroll(tree: Node, poly: PolyKernel, d: Unroll) -> Node:
    path, band = _band(tree, d.loop, str(d))
    if d.mark:
        return put(tree, path, replace(band, mark="unroll"))
    if not d.factor:
        return put(tree, path, replace(band, unroll=True))
    taken = _taken(tree)
    outer, inner = _split_bands(
        band, d.factor, fresh(f"{d.loop}_o", taken), fresh(f"{d.loop}_i", taken)
    )
    return put(tree, path, replace(outer, child=replace(inner, unroll=True)))


# --------------------------------------------------------------------------- skew and isolate


@dataclass(frozen=True)
class Skew(Directive):
    """Add ``factor`` times the value of loop ``outer`` to the enclosed loop ``inner``
    (``inner' = inner + factor * outer``), e.g. to make a stencil's loops interchangeable.

    Before / after ``skew(t, i, 1)``::

        for t in [1, 4):               for t in [1, 4):
          for i in [0, 8):               for i in [1, 11):  # = t + i
            S0                             S0
    """

    verb: ClassVar[str] = "skew"
    outer: str
    inner: str
    factor: int


def check_skew(tree: Node, poly: PolyKernel, d: Skew) -> None:
    if not isinstance(d.factor, int) or d.factor == 0:
        raise ScheduleError(f"{d}: factor must be a non-zero integer")
    outer, inner = find(tree, d.outer, str(d)), find(tree, d.inner, str(d))
    if len(inner) <= len(outer) or inner[: len(outer)] != outer:
        raise ScheduleError(f"{d}: loop {d.inner} is not inside loop {d.outer}")
    _unmarked(cast(Band, get(tree, inner)), str(d))  # find() found a loop


def apply_skew(tree: Node, poly: PolyKernel, d: Skew) -> Node:
    _, outer = _band(tree, d.outer, str(d))
    path, inner = _band(tree, d.inner, str(d))
    shifted = inner.sched.add(outer.sched.scale_val(isl.Val(d.factor)))
    return put(tree, path, replace(inner, sched=shifted))


@dataclass(frozen=True)
class Reverse(Directive):
    """Run ``loop`` backwards (``loop' = -loop``); legal only when it carries no dependence.

    Before / after ``reverse(j)``::

        for i in [0, 16):              for i in [0, 16):
          for j in [0, 16):              for j in [-15, 1):  # = -j
            S                              S
    """

    verb: ClassVar[str] = "reverse"
    loop: str


def check_reverse(tree: Node, poly: PolyKernel, d: Reverse) -> None:
    _unmarked(_band(tree, d.loop, str(d))[1], str(d))


def apply_reverse(tree: Node, poly: PolyKernel, d: Reverse) -> Node:
    path, band = _band(tree, d.loop, str(d))
    return put(tree, path, replace(band, sched=band.sched.neg()))


@dataclass(frozen=True)
class Isolate(Directive):
    """Generate the iterations of ``loop`` in which the loop directly inside it runs its full
    trip count (full tiles) separately from the rest, so that loop has constant bounds there.

    Before / after ``isolate(j_o)`` (``j`` in ``[0, 20)`` split by 8)::

        for j_o in [0, 3):             for j_o in [0, 3):  # isolate full tiles
          for j_i in [0, 8):             for j_i in [0, 8):
            S                              S
        (isl AST: one loop j_o < 2 with j_i in [0, 8), then j_i in [0, 4) for j_o = 2)

    With ``through``, the loops from ``loop`` down to ``through`` (a perfect nest) become one
    isl band, and its full tiles are isolated: the iterations in which each loop of ``tiles``
    (loops of that band made by ``split(..., floor=True)``) starts a tile that lies wholly in
    its loop's range. isl then generates the full tiles of all of them together (the inner
    loops have constant trip counts there) and the edge tiles apart. The default register
    tiles are isolated this way.

    ``isolate(ow_o, through=oc_o, tiles=(oc_o, ow_o))`` after floor splits of ``ow`` by 4 and
    ``oc`` by 16 and a reorder (``ow`` in [0, 14), ``oc`` in [0, 40))::

        for ow_o in [0, 13):  # = 4*floor(ow/4), isolate full tiles of this and 1 loops inside
          for oc_o in [0, 33):  # = 16*floor(oc/16)
            for ow_i in [0, 14):  # = ow
              for oc_i in [0, 40):  # = oc
        (isl AST: ow_o <= 10 and oc_o <= 24 first, the partial tiles after)
    """

    verb: ClassVar[str] = "isolate"
    loop: str
    through: str = field(default="", metadata=OPTIONAL)
    tiles: tuple[str, ...] = field(default=(), metadata=OPTIONAL)


def _isolated_band(tree: Node, d: Isolate) -> tuple[Path, list[Band]]:
    path, bands = _chain(tree, (d.loop, d.through), str(d))
    if bands[0].name != d.loop:
        raise ScheduleError(f"{d}: {d.through} must be inside {d.loop}")
    return path, bands


def check_isolate(tree: Node, poly: PolyKernel, d: Isolate) -> None:
    _, band = _band(tree, d.loop, str(d))
    if not d.through:
        if d.tiles:
            raise ScheduleError(f"{d}: name the band's innermost loop (through) with tiles")
        if not isinstance(band.child, Band):
            raise ScheduleError(f"{d}: loop {d.loop} has no loop directly inside it")
        return
    if not d.tiles or not isinstance(d.tiles, tuple):
        raise ScheduleError(f"{d}: name the tile loops whose full tiles are isolated")
    _, bands = _isolated_band(tree, d)
    for b in bands:
        _unmarked(b, str(d))
    names = {b.name: b for b in bands}
    for t in d.tiles:
        if t not in names:
            raise ScheduleError(f"{d}: {t} is not one of {', '.join(names)}")
        if not names[t].tile:
            raise ScheduleError(f"{d}: {t} is not a tile loop (made by split(..., floor=True))")


def apply_isolate(tree: Node, poly: PolyKernel, d: Isolate) -> Node:
    path, band = _band(tree, d.loop, str(d))
    if not d.through:
        return put(tree, path, replace(band, isolate=True))
    path, bands = _isolated_band(tree, d)
    index = {b.name: k for k, b in enumerate(bands)}
    full = tuple((index[t], bands[index[t]].tile[1] - bands[index[t]].tile[0]) for t in d.tiles)
    new = [
        replace(bands[0], isolate=True, members=len(bands), full=full),
        *(replace(b, grouped=True) for b in bands[1:]),
    ]
    return put(tree, path, _rebuild(new, bands[-1].child))


# --------------------------------------------------------------------------- staging


@dataclass(frozen=True)
class CacheRead(Directive):
    """Stage the part of ``buffer`` the statements under ``loop`` read in a new temp buffer: a
    copy statement fills it at the start of each iteration of ``loop``, and the reads under
    ``loop`` read the temp (indices relative to the tile). Changes the kernel (see
    :mod:`polyonnx.schedule.staging`); refused if ``buffer`` is written under ``loop``.

    Before / after ``cache_read(B, k_o)`` (after ``tile((k, j), (4, 16))``)::

        for i in [0, 16):              for i in [0, 16):
          for k_o in [0, 4):             for k_o in [0, 4):
            for j_o in [0, 1):             S2: B_cache[t0, t1] = B[4*k_o + t0, t1]
              for k_i in [0, 4):           for j_o in [0, 1):
                for j_i in [0, 16):          for k_i in [0, 4):
                  S1: ... B[k, j]              for j_i in [0, 16):
                                                 S1: ... B_cache[k - 4*k_o, j]
    """

    verb: ClassVar[str] = "cache_read"
    buffer: str
    loop: str


@dataclass(frozen=True)
class CacheWrite(Directive):
    """The statements under ``loop`` write (and read back) a temp tile instead of ``buffer``;
    a copy statement after the loop's body writes the tile back. Refused if a read under
    ``loop`` needs a value of ``buffer`` the same iteration did not write.

    Before / after ``cache_write(C, j_o)`` (after ``split(j, 4)``)::

        for i in [0, 16):              for i in [0, 16):
          for j_o in [0, 4):             for j_o in [0, 4):
            for j_i in [0, 4):             for j_i in [0, 4):
              S0: C[i, j] = 0.0              S0: C_cache[0, j - 4*j_o] = 0.0
              for k in [0, 16):              for k in [0, 16):
                S1: C[i, j] += ...             S1: C_cache[0, j - 4*j_o] += ...
                                           S2: C[i + t0, 4*j_o + t1] = C_cache[t0, t1]
    """

    verb: ClassVar[str] = "cache_write"
    buffer: str
    loop: str


@dataclass(frozen=True)
class Pack(Directive):
    """``cache_read`` with a chosen layout of the temp: ``factors[d] > 1`` splits tile
    dimension ``d`` into (outer, inner of ``factors[d]``), then ``order`` permutes the
    dimensions. The BLIS B panel of a ``kc x nc`` tile of ``B[k, j]`` is
    ``pack(B, k_o, order=(1, 0, 2), factors=(0, nr))``: ``B_pack[j / nr, k, j % nr]``.

    Before / after ``pack(B, k_o, (1, 0, 2), (0, 8))``::

        for k_o in [0, 4):             for k_o in [0, 4):
          ...                            S2: B_pack[t0, t1, t2] = B[4*k_o + t1, 8*t0 + t2]
            S1: ... B[k, j]              ...
                                           S1: ... B_pack[u1, k - 4*k_o, j - 8*u1]
    """

    verb: ClassVar[str] = "pack"
    buffer: str
    loop: str
    order: tuple[int, ...] = ()
    factors: tuple[int, ...] = ()


def _check_stage(tree: Node, d: CacheRead | CacheWrite | Pack) -> None:
    if not isinstance(d.buffer, str) or not isinstance(d.loop, str):
        raise ScheduleError(f"{d}: give a buffer name and a loop name")
    find(tree, d.loop, str(d))


def check_cache_read(tree: Node, poly: PolyKernel, d: CacheRead) -> None:
    _check_stage(tree, d)


def apply_cache_read(tree: Node, poly: PolyKernel, d: CacheRead) -> tuple[Kernel, Node]:
    return stage(tree, poly, d.buffer, d.loop, str(d), write=False)


def check_cache_write(tree: Node, poly: PolyKernel, d: CacheWrite) -> None:
    _check_stage(tree, d)


def apply_cache_write(tree: Node, poly: PolyKernel, d: CacheWrite) -> tuple[Kernel, Node]:
    return stage(tree, poly, d.buffer, d.loop, str(d), write=True)


def check_pack(tree: Node, poly: PolyKernel, d: Pack) -> None:
    _check_stage(tree, d)
    if not all(isinstance(x, int) for x in d.order + d.factors):
        raise ScheduleError(f"{d}: order and factors are integers")


def apply_pack(tree: Node, poly: PolyKernel, d: Pack) -> tuple[Kernel, Node]:
    return stage(
        tree, poly, d.buffer, d.loop, str(d), write=False, layout=Layout(d.factors, d.order)
    )


# --------------------------------------------------------------------------- registry


Check = Callable[[Node, PolyKernel, Directive], None]
Apply = Callable[[Node, PolyKernel, Directive], Node | tuple[Kernel, Node]]
"""An apply returns the new tree, or (for the staging verbs) the new kernel and tree."""

VERBS: dict[str, tuple[type[Directive], Check, Apply]] = {
    # Each check/apply takes its own directive class: the table pairs them, mypy cannot.
    cls.verb: (cls, check, apply)  # type: ignore[misc]
    for cls, check, apply in (
        (Split, check_split, apply_split),
        (Tile, check_tile, apply_tile),
        (Reorder, check_reorder, apply_reorder),
        (Fuse, check_fuse, apply_fuse),
        (Distribute, check_distribute, apply_distribute),
        (ComputeAt, check_compute_at, apply_compute_at),
        (ReverseComputeAt, check_reverse_compute_at, apply_reverse_compute_at),
        (Parallel, check_parallel, apply_parallel),
        (Vectorize, check_vectorize, apply_vectorize),
        (Unroll, check_unroll, apply_unroll),
        (Skew, check_skew, apply_skew),
        (Reverse, check_reverse, apply_reverse),
        (Isolate, check_isolate, apply_isolate),
        (CacheRead, check_cache_read, apply_cache_read),
        (CacheWrite, check_cache_write, apply_cache_write),
        (Pack, check_pack, apply_pack),
    )
}
"""verb name -> (directive record, check_<verb>, apply_<verb>)."""
