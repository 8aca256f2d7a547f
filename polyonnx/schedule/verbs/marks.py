"""Verbs that mark loops for code generation: ``parallel``, ``vectorize``, ``unroll``.

The before/after loop nests are for ``C[i, j] += A[i, k] * B[k, j]`` with ``i, j, k`` in
``[0, 16)`` (init statement omitted), as in :mod:`polyonnx.schedule.verbs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from polyonnx.errors import ScheduleError
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.tree import (
    Band,
    Node,
    fresh,
    get,
    put,
    value_range,
    walk,
)
from polyonnx.schedule.verbs.base import (
    OPTIONAL,
    Directive,
    _band,
    _flag,
    _split_bands,
    _taken,
    _unmarked,
)

MAX_UNROLL = 64
"""Longest loop ``unroll`` unrolls completely (a longer one needs a factor)."""


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
