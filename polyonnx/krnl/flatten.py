"""Element-wise kernels on contiguous values iterate them as one row-major run.

An element-wise op's nest follows its output's shape, so a ReLU of ``[1, 272, 14, 14]`` has
an innermost loop of 14: under AVX-512 a 16-lane vector never fills and each row runs as
scalars with its loop overhead (ShuffleNet's 53K-element ReLU took 34 us). When every value a
group of element-wise ops touches has the group's shape (or is a rank-0 constant), the order
of elements is the same in all of them, so the kernel may see each as a ``[rows, columns]``
view of the same memory: ``columns`` a divisor of the element count that is a whole number
of vectors (:func:`flat_shape`), ``rows`` the rest, split among threads.

Example:
    >>> flat_shape((1, 272, 14, 14))
    (14, 3808)
    >>> flat_shape((1, 64, 56, 56))
    (49, 4096)
    >>> flat_shape((1, 512, 7, 64)) is None   # rows of 64 floats are whole vectors already
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence, Set

from polyonnx.graph.ir import Graph, Node
from polyonnx.graph.passes.fuse import ELEMENTWISE

#: Lanes a row should hold whole (16 float32 lanes fill AVX-512; 4 and 8 divide it).
LANES = 16
#: The longest row of a view: long enough to amortise a loop, short enough to leave rows
#: to share among threads.
MAX_COLUMNS = 4096


def flat_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """``(rows, columns)`` for a value of ``shape``: ``columns`` the largest divisor of its
    size up to :data:`MAX_COLUMNS` that is a multiple of :data:`LANES`; None when there is
    none, or the innermost axis already is such a row."""
    size = math.prod(shape)
    if not shape or (shape[-1] % LANES == 0 and shape[-1] >= 4 * LANES):
        return None
    columns = next(
        (
            c
            for c in range(min(size, MAX_COLUMNS), LANES - 1, -1)
            if size % c == 0 and c % LANES == 0
        ),
        None,
    )
    return None if columns is None or columns <= shape[-1] else (size // columns, columns)


def flat_view(graph: Graph, group: Sequence[Node], keep: Set[str]) -> Graph | None:
    """``graph`` with the values of ``group`` shaped ``[rows, columns]``, when it is a group of
    element-wise ops over one shape that may be viewed so (:func:`flat_shape`); None otherwise.
    Values in ``keep`` (graph outputs, zero-bordered or placed values) are never reshaped."""
    if any(n.domain or n.op_type not in ELEMENTWISE or n.guard for n in group):
        return None
    names = {v for n in group for v in (*n.inputs, *n.outputs) if v}
    shape = graph.value(group[0].outputs[0]).shape
    if not all(isinstance(d, int) for d in shape) or names & keep:
        return None
    flat = flat_shape([int(d) for d in shape])
    if flat is None:
        return None
    for name in names:
        if name in graph.constants:
            if graph.constants[name].ndim != 0:
                return None
        elif graph.value(name).shape != shape:
            return None
    values = dict(graph.values)
    for name in names - set(graph.constants):
        values[name] = dataclasses.replace(values[name], shape=flat)
    return dataclasses.replace(graph, values=values)
