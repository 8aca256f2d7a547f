"""Verbs that reshape a nest's loops: ``split``, ``tile``, ``reorder``, ``skew``, ``reverse``,
``isolate``.

The before/after loop nests are for ``C[i, j] += A[i, k] * B[k, j]`` with ``i, j, k`` in
``[0, 16)`` (init statement omitted), as in :mod:`polyonnx.schedule.verbs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, cast

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.tree import (
    Band,
    Node,
    Path,
    find,
    fresh,
    get,
    put,
    value_range,
)
from polyonnx.schedule.verbs.base import (
    OPTIONAL,
    Directive,
    _band,
    _chain,
    _check_factor,
    _flag,
    _rebuild,
    _split_bands,
    _taken,
    _unmarked,
)

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
