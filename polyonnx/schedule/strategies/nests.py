"""The shapes of krnl loop nests and of their schedule trees that the strategies look for.

Example:
    >>> from polyonnx.krnl.ir import Access, Aff, Const, Loop, Stmt
    >>> i, j = Aff.var("i"), Aff.var("j")
    >>> nest = Loop("i", 0, 4, (Loop("j", 0, 8, (Stmt("S0", Access("y", (i, j + 1)),
    ...                                               Const(0.0, "float32")),)),))
    >>> loops, body = chain(nest)
    >>> [lp.iterator for lp in loops], extent(loops, "j")
    (['i', 'j'], 8)
    >>> offsets(body[0].write.index, ["i", "j"])
    (0, 1)
"""

from __future__ import annotations

from collections.abc import Sequence

from polyonnx.krnl.ir import Aff, Index, Loop
from polyonnx.schedule.tree import Band
from polyonnx.schedule.tree import Sequence as TreeSequence


def chain(node: Loop) -> tuple[list[Loop], tuple]:
    """The perfectly nested loops from ``node`` down, and the body below them."""
    loops = [node]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    return loops, loops[-1].body


def band_chain(node: object) -> list[str]:
    """The schedule-tree loops perfectly nested from ``node`` down (empty for a statement),
    then, below a statement followed by a loop (a reduction's init and update), that loop's
    chain."""
    out = []
    while isinstance(node, Band):
        out.append(node.name)
        node = node.child
    if (
        isinstance(node, TreeSequence)
        and len(node.children) == 2
        and isinstance(node.children[1], Band)
    ):
        out += band_chain(node.children[1])
    return out


def offsets(index: Sequence[Index], names: Sequence[str]) -> tuple[int, ...] | None:
    """The constants ``c`` with ``index == (m + c[0], ..., n + c[-1])`` for the last loops
    ``m ... n`` of ``names`` (a point of the nest, or its place in a zero-bordered buffer), or
    None when ``index`` is not such a translate."""
    if len(index) > len(names):
        return None
    out = []
    for i, n in zip(index, names[len(names) - len(index) :], strict=True):
        shift = i - Aff.var(n) if isinstance(i, Aff) else None
        if shift is None or not shift.is_const:
            return None
        out.append(shift.const)
    return tuple(out)


def extent(loops: Sequence[Loop], name: str) -> int:
    """The trip count of the loop ``name`` of ``loops`` (constant bounds)."""
    for lp in loops:
        if lp.iterator == name:
            return lp.upper.const - lp.lower.const
    raise KeyError(name)
