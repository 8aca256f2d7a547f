"""Kernels that differ only in where they are in a buffer, made one kernel.

A kernel that writes a slice of a larger buffer (a value placed in its Concat's output,
:mod:`polyonnx.krnl.placement`) names the slice by constant offsets in its accesses:
DenseNet-121's dense layers each write ``concat__blk[n, cb + k, h, w, c]`` for their own
``k``, and are otherwise the same kernel. :func:`windowed` moves every access to a buffer
down by the smallest index it can touch along each axis, so those kernels become equal (one
signature, one schedule, one function: DenseNet-121's 58 Winograd convolutions are 4), and
says how far to move the buffer's pointer instead, which the caller adds when it calls the
kernel.

The buffer keeps its shape, so its strides, its size (which the strategies weigh) and its
dependences (a translation of every access to one buffer preserves them) are those of the
original kernel: the schedule and the loops are the same, and so is the code apart from the
base pointer.

Example:
    >>> from polyonnx.krnl.ir import Access, Buffer, Load, Loop, Stmt
    >>> i = Aff.var("i")
    >>> def write_at(k):
    ...     s = Stmt("S0", Access("y", (i + k,)), Load("x", (i,), "float32"))
    ...     return Kernel("k", (Buffer("x", "float32", (4,), "input"),
    ...                         Buffer("y", "float32", (12,), "output")), (Loop("i", 0, 4, (s,)),))
    >>> a, b = windowed(write_at(4)), windowed(write_at(8))
    >>> a.kernel == b.kernel, a.offsets, b.offsets
    (True, (0, 4), (0, 8))
    >>> print(a.kernel.body[0].body[0])
    S0: y[i] = x[i]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from polyonnx.krnl.ir import Aff, Kernel, Load, loop_box, move_buffers, walk
from polyonnx.krnl.memo import identity_memo


@dataclass(frozen=True, slots=True)
class Windowed:
    """``kernel`` with its accesses moved, and per buffer (in ``kernel.buffers`` order) the
    element offset to add to the buffer's pointer when calling it."""

    kernel: Kernel
    offsets: tuple[int, ...]


@identity_memo
def windowed(kernel: Kernel) -> Windowed:
    """``kernel`` with each buffer's accesses starting at the lowest index they can reach
    along the buffer's outermost axis of more than one element (counted on the box of the
    loop bounds; a buffer whose lowest index there is not positive, or with a computed index,
    stays as it is). Remembered per kernel object: the scheduler, the codegen symbols and
    the entry point each ask (:mod:`polyonnx.krnl.memo`)."""
    low: dict[str, list[int] | None] = {}
    for loops, stmt in kernel.statements():
        box = loop_box(loops)
        accesses: list[tuple[str, tuple]] = [(stmt.write.buffer, stmt.write.index)]
        accesses += [(e.buffer, e.index) for e in walk(stmt.body) if isinstance(e, Load)]
        for buffer, index in accesses:
            if buffer in low and low[buffer] is None:
                continue
            if not all(isinstance(i, Aff) for i in index):
                low[buffer] = None  # a gather's index: where it goes is known at run time only
                continue
            mins = [i.extremes(box)[0] for i in index]
            seen = low.get(buffer)
            low[buffer] = (
                mins if seen is None else [min(a, b) for a, b in zip(seen, mins, strict=True)]
            )
    moves: dict[str, tuple[str, tuple[int, ...]]] = {}
    offsets: list[int] = []
    for b in kernel.buffers:
        least = low.get(b.name)
        # Only along the outermost axis of more than one element: the window is then one
        # contiguous run of the buffer (a slice of a concatenation), and a zero-bordered
        # value's interior (its inner axes) stays where it is.
        axis = next((d for d, extent in enumerate(b.shape) if extent > 1), None)
        if not least or axis is None or least[axis] <= 0:
            offsets.append(0)
            continue
        moves[b.name] = (b.name, tuple(-least[axis] if d == axis else 0 for d in range(len(least))))
        offsets.append(least[axis] * math.prod(b.shape[axis + 1 :]))
    if not moves:
        return Windowed(kernel, tuple(offsets))
    return Windowed(replace(kernel, body=move_buffers(kernel.body, moves)), tuple(offsets))
