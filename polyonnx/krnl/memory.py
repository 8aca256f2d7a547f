"""Memory planning: where every buffer of a :class:`Program` lives.

Feeds and outputs live in the caller's arrays, constants in one read-only weights blob, and every
intermediate in one workspace, packed by liveness (buffers whose kernel ranges do not overlap may
share bytes). Offsets are aligned to 64 bytes (a cache line; also what aligned vector loads want).

Zero-bordered buffers (:mod:`polyonnx.krnl.borders`) come first, in the workspace's
``zeroed_size`` bytes, which must be zero before the first run: no kernel writes a border, so
they stay zero as long as those bytes are shared only among buffers of one shape and border.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from polyonnx.krnl.program import Program

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a root buffer lives: ``region`` is input, output, weights or workspace; ``where``
    is the feed/output index or the byte offset."""

    region: str
    where: int


@dataclass(frozen=True)
class MemoryPlan:
    slots: dict[str, Slot]
    weights_size: int
    workspace_size: int
    zeroed_size: int = 0
    """The workspace's first bytes, holding the zero-bordered buffers: zero them before the
    first run (the runtime allocates zeroed workspaces) and keep the workspace for later runs."""

    def slot(self, program: Program, buffer: str) -> Slot:
        return self.slots[program.root(buffer)]

    def weights_blob(self, program: Program) -> np.ndarray:
        """The constants laid out at their offsets (64-byte aligned base), in small pages:
        huge pages made no model faster by more than noise (VGG19, AlexNet, ZFNet-512: within
        2%), while the kernel may compact memory to find them as the blob is first written
        (VGG19's 731 MB once took 3.8 s that way, then 0.07 s)."""
        blob = aligned_empty(self.weights_size, huge_pages=False)
        for name, value in program.constants.items():
            s = self.slots[name]
            if value.ndim == 2 and not value.flags.c_contiguous and value.flags.f_contiguous:
                # A transposed matrix (a constant Gemm's B^T): copied in place, by bands.
                at = blob[s.where : s.where + value.nbytes].view(value.dtype)
                transpose_into(at.reshape(value.shape), value.T)
                continue
            raw = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
            blob[s.where : s.where + raw.size] = raw
        return blob


#: Rows and columns of the square blocks :func:`transpose_into` copies one at a time.
_TRANSPOSE_BLOCK = 256


def transpose_into(out: np.ndarray, matrix: np.ndarray) -> None:
    """``out[...] = matrix.T``, one square block at a time: numpy's copy of a whole transposed
    view walks the source one column at a time, a cache miss per element, and bands of a few
    rows still write every row of ``out`` per band (VGG19's 25088x4096 fully-connected
    weights on an Emerald Rapids: whole 1.5 s, bands of 16 rows 1.2 s, 256x256 blocks 0.26 s).

    Example:
        >>> out = np.empty((3, 2), np.int64)
        >>> transpose_into(out, np.arange(6).reshape(2, 3))
        >>> out.tolist()
        [[0, 3], [1, 4], [2, 5]]
    """
    b = _TRANSPOSE_BLOCK
    rows, cols = matrix.shape
    for r in range(0, rows, b):
        for c in range(0, cols, b):
            out[c : c + b, r : r + b] = matrix[r : r + b, c : c + b].T


HUGE_PAGE = 2 << 20
"""From two of these on, :func:`aligned_empty` asks the kernel for transparent huge pages."""


def aligned_empty(nbytes: int, huge_pages: bool = True) -> np.ndarray:
    """A zeroed uint8 array of ``nbytes`` whose data pointer is 64-byte aligned.

    Without ``huge_pages``, from ``2 * HUGE_PAGE`` bytes on it is a mapping of its own whose
    small pages are all mapped up front (``MAP_POPULATE``, where the OS has it). With
    ``huge_pages``, from ``2 * HUGE_PAGE`` bytes on (a workspace) it starts on a huge-page
    boundary of its own mapping, advised ``MADV_HUGEPAGE`` where the OS has it: numpy's own
    arrays of that size did not always get huge pages, and kernels sweeping a workspace in
    small pages pay for the TLB misses (docs/performance.md, *Run-time overhead*)."""
    if huge_pages and nbytes >= 2 * HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        # Private (a shared mapping would get no huge pages, and forked workers would share
        # it) and anonymous: zeroed.
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(region, dtype=np.uint8)
        start = (-raw.ctypes.data) % HUGE_PAGE
        region.madvise(mmap.MADV_HUGEPAGE, start, nbytes - nbytes % HUGE_PAGE)
        return raw[start : start + nbytes]
    if nbytes >= 2 * HUGE_PAGE and hasattr(mmap, "MAP_POPULATE"):
        # Small pages, all mapped at once (the weights blob, filled right away): the kernel
        # maps them in one call, where faulting them in one by one as they are first written
        # cost 1.6-1.7 s for VGG19's 548 MB on this project's VMs (0.2 s populated).
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
        raw = np.frombuffer(mmap.mmap(-1, nbytes + ALIGN, flags=flags), dtype=np.uint8)
    else:
        raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start : start + nbytes]


def aligned_array(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` whose data is 64-byte aligned, as the workspace gives native code
    (numpy's own arrays are 16-byte aligned: a 64-byte vector load from them spans two cache
    lines, which can make a kernel timed on them markedly slower than in a model)."""
    values = np.asarray(values)
    out = aligned_empty(max(values.nbytes, 1))[: values.nbytes].view(values.dtype)
    out = out.reshape(values.shape)
    out[...] = values
    return out


def plan_memory(program: Program) -> MemoryPlan:
    slots: dict[str, Slot] = {}
    for i, v in enumerate(program.inputs):
        slots[v.name] = Slot("input", i)
    for j, name in enumerate(program.output_buffers):
        slots[program.root(name)] = Slot("output", j)
    # The extents of data-dependent outputs come back as extra outputs after the graph's.
    for k, name in enumerate(program.counts):
        slots[name] = Slot("output", len(program.outputs) + k)
    offset = 0
    for name, value in program.constants.items():
        slots[name] = Slot("weights", offset)
        offset = _align(offset + max(value.nbytes, 1))
    weights_size = offset

    # Live ranges (first, last kernel index) and sizes of the workspace roots.
    live: dict[str, list[int]] = {}
    size: dict[str, int] = {}
    zones: dict[tuple, list[str]] = {}  # bordered roots by shape, dtype and border
    for k, kernel in enumerate(program.kernels):
        for b in kernel.buffers:
            root = program.root(b.name)
            if root in slots:
                continue
            if root not in live and root in program.borders:
                border = program.borders[root]
                zones.setdefault((b.shape, b.dtype, border.begin, border.end), []).append(root)
            rng = live.setdefault(root, [k, k])
            rng[1] = k
            size[root] = max(size.get(root, 0), b.nbytes)

    _extend_over_loops(program, live, size)

    # Bordered buffers first, each shape and border in a zone of its own.
    zeroed = 0
    for roots in zones.values():
        zeroed = _align(_pack(roots, live, size, zeroed, slots))
    bordered = {r for roots in zones.values() for r in roots}
    workspace = _pack([r for r in live if r not in bordered], live, size, zeroed, slots)
    return MemoryPlan(slots, weights_size, workspace, zeroed)


def _extend_over_loops(program: Program, live: dict[str, list[int]], size: dict[str, int]) -> None:
    """Live ranges that a run-time loop's iterations stretch (:mod:`polyonnx.graph.loops`):
    a buffer the loop's kernels share with kernels outside it (an outer value read, a
    loop-carried value) and the iteration number and condition the entry point writes live
    through the whole loop; the trip count and condition are read when it starts, the
    body's condition output when each iteration ends."""

    def stretch(root: str, start: int, end: int) -> None:
        live[root] = [min(live[root][0], start), max(live[root][1], end)]

    for loop in program.loops:
        inside = [
            k
            for k, kernel in enumerate(program.kernels)
            if (loop.running, True) in program.guards.get(kernel.name, ())
        ]
        if not inside:
            continue
        first, last = inside[0], inside[-1]
        for root, (a, b) in list(live.items()):
            if a <= last and b >= first and not first <= a <= b <= last:
                stretch(root, first, last)  # shared with kernels outside the loop
        for value, nbytes in ((loop.iteration, 8), (loop.running, 1)):
            # (Written every iteration even when no kernel reads it: a loop inside may.)
            live.setdefault(program.root(value), [first, last])
            size.setdefault(program.root(value), nbytes)
            stretch(program.root(value), first, last)
        for value, at in ((loop.trip, first), (loop.condition, first), (loop.next_condition, last)):
            if value and program.root(value) in live:
                stretch(program.root(value), at, at)


def _pack(
    roots: list[str],
    live: dict[str, list[int]],
    size: dict[str, int],
    start: int,
    slots: dict[str, Slot],
) -> int:
    """Place ``roots`` in the workspace from byte ``start`` (into ``slots``); the end.

    Greedy: biggest first, lowest offset that overlaps no placed buffer live at the same time.
    """
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    for root in sorted(roots, key=lambda r: (-size[r], r)):
        first, last = live[root]
        need = _align(max(size[root], 1))
        clashes = sorted((o, e) for o, e, f, lst in placed if f <= last and first <= lst)
        at = start
        for o, e in clashes:
            if at + need <= o:
                break
            at = max(at, _align(e))
        placed.append((at, at + need, first, last))
        slots[root] = Slot("workspace", at)
    return max((e for _, e, _, _ in placed), default=start)
