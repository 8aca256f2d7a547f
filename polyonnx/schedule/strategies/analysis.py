"""What the general strategy reads from a kernel's polyhedral model: which loops of a nest carry
a dependence, and how each access moves along each loop.

* :class:`NestDependences` — the exact dependence distances among the instances of one nest
  (isl), in the values of the loops around it and of its perfectly nested loops: a loop
  carries a dependence *with given loops outside it* when some dependence is 0 on those and
  not on it. A loop that carries none with every other loop of its band outside may be
  vectorised innermost (or run in parallel) wherever the band puts it.
* :func:`stride` — the element stride of an access along a loop iterator (row-major
  buffer), None for an index computed at run time: 1 is a contiguous vector load or store,
  0 a broadcast, anything else a gather.

These only predict: every schedule the strategies make is proved legal by
:meth:`~polyonnx.schedule.schedule.Schedule.verify` before it is used.

Example:
    >>> from polyonnx.krnl.ir import Aff
    >>> i, j = Aff.var("i"), Aff.var("j")
    >>> stride((i, j + 1), (4, 8), "i"), stride((i, j + 1), (4, 8), "j"), stride((i,), (4,), "j")
    (8, 1, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import islpy as isl

from polyonnx.krnl.ir import Aff, Index
from polyonnx.schedule.legality import dependence_distances
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.tree import Band, Path, bands_on_path, get, instances, stmts


def stride(index: Sequence[Index], shape: Sequence[int], iterator: str) -> int | None:
    """The element distance between the elements ``index`` names for consecutive values of
    ``iterator`` (row-major ``shape``), or None when an index is computed at run time and
    moves with it (or may: a computed index is opaque)."""
    out, step = 0, 1
    for ix, size in zip(reversed(index), reversed(shape), strict=False):
        if not isinstance(ix, Aff):
            return None
        out += ix.coeff(iterator) * step
        step *= size
    return out


class NestDependences:
    """The dependence distances among the instances below the band at ``path`` of ``s``'s
    tree, in the values of the ``enclosing`` loops around it (kept equal: they run outside)
    and of the ``depth`` loops perfectly nested from it (the nest's band)."""

    def __init__(self, s: Schedule, path: Path, depth: int) -> None:
        node = get(s.tree, path)
        assert isinstance(node, Band)
        enclosing = bands_on_path(s.tree, path, inclusive=False)
        band = [node]
        while len(band) < depth and isinstance(band[-1].child, Band):
            band.append(band[-1].child)
        self.enclosing = len(enclosing)
        self.depth = len(band)
        below = instances(s.poly, stmts(node))
        columns = [b.sched for b in (*enclosing, *band)]
        self._decided, distances = dependence_distances(s.dependences, below, columns)
        self._distances = (
            isl.Set.from_union_set(distances) if self._decided and distances is not None else None
        )

    def carried(self, loop: int, outside: Iterable[int] = ()) -> bool:
        """Whether band loop ``loop`` (0: the band's outermost) carries a dependence when the
        band loops ``outside`` (and the enclosing loops) run outside it."""
        return self._some([*outside], [loop])

    def free(self, loop: int) -> bool:
        """Whether band loop ``loop`` carries no dependence with all the others outside it:
        it may be vectorised innermost (or run in parallel) wherever the band puts it."""
        return not self.carried(loop, [k for k in range(self.depth) if k != loop])

    def _some(self, equal: Sequence[int], differ: Iterable[int]) -> bool:
        """Whether a dependence joins two instances that agree on the enclosing loops and the
        band loops ``equal`` and differ on some band loop of ``differ``."""
        if not self._decided:
            return True  # (distances not one set: assume the worst)
        if self._distances is None:
            return False
        dims = [f"x{k}" for k in range(self._distances.dim(isl.dim_type.set))]
        zero = [*range(self.enclosing), *(self.enclosing + k for k in equal)]
        same = [f"{dims[z]} = 0" for z in zero] or ["true"]
        moved = " or ".join(f"{dims[self.enclosing + k]} != 0" for k in differ) or "false"
        test = isl.Set(f"{{ [{', '.join(dims)}] : {' and '.join(same)} and ({moved}) }}")
        return not self._distances.intersect(test).is_empty()
