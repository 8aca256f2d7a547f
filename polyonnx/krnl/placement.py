"""Concatenations in place: each input of a Concat computed where the result will be.

``C = Concat(A, B)`` copies every element of ``A`` and ``B`` once more. When ``A`` and ``B``
are computed by kernels of the program, the kernels can write them straight into their slices
of ``C``'s memory: ``A[i]`` lives at ``C[i + offset_A]``, every access to ``A`` (the write of
its producer, the reads of its other consumers) moves there, and the Concat makes no kernel.
A chain of concatenations (DenseNet's block: each layer's output concatenated to all before
it) composes: a value placed in ``C``, itself placed in ``E``, lives in ``E`` at the sum of the
offsets, so a whole dense block is one buffer written slice by slice.

A Concat is done in place when every input qualifies: computed by a kernel, static, not a
graph input, output or constant, not zero-bordered, not read by a view op (whose flat reads
a slice would break), each used once in one in-place Concat, and the Concat unguarded with an
output that is not a graph output or bordered either. The values placed and their roots keep
their own memory (no kernel's output takes theirs, :mod:`polyonnx.krnl.residual`).

Example: DenseNet-121's first dense layer writes its 32 new channels into
``concat__blk[n, cb + 2, h, w, c]`` (``[1, 8, 56, 56, 32]``, the block's last concatenation)
and the max pool before it writes the first 64 into ``cb + 0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, replace

from polyonnx.graph.ir import Graph, Node
from polyonnx.krnl import ir

#: Ops that may read a value through its flat memory (a Reshape's view; Compress and Unique
#: without an axis read their input as one flat axis).
_FLAT_READERS = frozenset(
    {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Compress", "Unique"}
)


@dataclass(frozen=True, slots=True)
class Placement:
    """Value ``value`` stored inside ``root`` (shaped ``shape``): element ``i`` at
    ``i + offset``."""

    value: str
    root: str
    offset: tuple[int, ...]
    shape: tuple[int, ...]


def concat_placements(
    graph: Graph, computed: Set[str], borders: Set[str]
) -> tuple[dict[str, Placement], frozenset[str]]:
    """The placements of the values of in-place Concats (see the module docstring), composed
    through chains, and the names of those Concat nodes."""
    outputs = {v.name for v in graph.outputs}
    consumers = graph.consumers()
    parent: dict[str, tuple[str, tuple[int, ...]]] = {}
    done: set[str] = set()
    for n in graph.nodes:
        slots = _slots(n, graph, computed, borders | outputs, consumers)
        if slots is None or any(v in parent for v, _ in slots):
            continue
        parent.update({v: (n.outputs[0], offset) for v, offset in slots})
        done.add(n.name)
    placements = {}
    for value in parent:
        root, offset = value, tuple(0 for _ in graph.value(value).dims)
        while root in parent:
            root, step = parent[root]
            offset = tuple(a + b for a, b in zip(offset, step, strict=True))
        placements[value] = Placement(value, root, offset, graph.value(root).dims)
    return placements, frozenset(done)


def _slots(
    n: Node,
    graph: Graph,
    computed: Set[str],
    excluded: Set[str],
    consumers: Mapping[str, list[Node]],
) -> list[tuple[str, tuple[int, ...]]] | None:
    """Each input of Concat ``n`` with its offset in the output, when ``n`` can be done in
    place; else None."""
    if n.op_type != "Concat" or n.domain or n.guard or len(n.outputs) != 1:
        return None
    out = graph.value(n.outputs[0])
    if out.name in excluded or not out.is_static or len(set(n.inputs)) != len(n.inputs):
        return None
    axis = int(n.attr("axis", 0)) % len(out.dims)
    slots, start = [], 0
    for v in n.inputs:
        value = graph.value(v)
        if (
            v not in computed
            or v in excluded
            or not value.is_static
            or value.dtype != out.dtype
            or any(c.op_type in _FLAT_READERS or c.guard for c in consumers.get(v, []))
            or sum(c.op_type == "Concat" for c in consumers.get(v, [])) != 1
        ):
            return None
        offset = [0] * len(out.dims)
        offset[axis] = start
        slots.append((v, tuple(offset)))
        start += value.dims[axis]
    return slots


def store_placed(kernel: ir.Kernel, placements: Mapping[str, Placement]) -> ir.Kernel:
    """``kernel`` with every access to a placed value moved into its root, which takes the
    value's place in the argument list (one declaration per root: written there, an output)."""
    moved = {b.name: placements[b.name] for b in kernel.buffers if b.name in placements}
    if not moved:
        return kernel
    body = ir.move_buffers(kernel.body, {v: (p.root, p.offset) for v, p in moved.items()})
    written = {s.write.buffer for _, s in replace(kernel, body=body).statements()}
    buffers: dict[str, ir.Buffer] = {}
    for b in kernel.buffers:
        place = moved.get(b.name)
        name, shape = (place.root, place.shape) if place else (b.name, b.shape)
        kind = "output" if name in written else buffers.get(name, b).kind
        buffers[name] = replace(b, name=name, shape=shape, kind=kind)
    return replace(kernel, buffers=tuple(buffers.values()), body=body)
