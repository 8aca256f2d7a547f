"""Register-tiled reductions, with their element-wise epilogues fused and cache chunks.

A **reduction nest** — outer loops over an output, an init statement, inner reduction loops
and an update statement, then maybe statements that finish the element (Conv, MatMul, Gemm,
pooling, LRN, an attention row) — is cut into ``rows x vector`` register tiles: the reduction
loops run inside the tile, the rows sit under an ``unroll`` mark and the vector columns under
a ``vector`` mark, so codegen keeps the tile's accumulators in registers for the whole
reduction. The nests that follow it and read its output point for point (bias, ReLU, residual
Add) are fused into the tiles. A long reduction is cut into cache chunks.

The knobs come from the accesses (strides along each outer loop, :func:`.analysis.stride`)
and the target (:class:`~.tiling.Tiling`):

* the **vector loop** is the outer loop along which the output is contiguous (it carries no
  dependence: every outer point writes its own element), wherever it sits in the nest;
* the **rows** are the outer loop that makes the fewest loads per multiply-add — one along
  which loads are invariant, so the rows share them (a GEMM's B vector, a conv's weights, a
  depthwise conv's weight vector); without such a loop, when the loads are contiguous
  streams (a GEMV's weight panels), still a loop, for independent accumulators;
* as many rows as the register file holds accumulators for, besides the vectors one
  reduction step keeps live and a broadcast (at most :attr:`~.tiling.Tiling.unroll`);
* cache chunks only when some tile loop reuses the vector operand (a GEMV has none).

:func:`plan_reduction` decides the knobs from the nest and the target (a
:class:`ReductionPlan`); :func:`apply_reduction` applies them with the schedule verbs.

Example:
    >>> from polyonnx.testing.examples import matmul
    >>> kernel = matmul(64, 64, 1024)
    >>> nest = reduction_nest(kernel.body[0])
    >>> plan = plan_reduction(nest, ["i", "j", "k"], [], kernel, Tiling.for_vector_bits(256))
    >>> print(plan)
    reduction (i, j) over (k): tile i 4 rows x j 16 lanes, vector tiles outermost; chunks: k by 256 after 1 tile loop
    >>> s, bands = apply_reduction(Schedule.from_kernel(kernel), plan)
    >>> bands, s.verify().verified
    ([('j_1_o', 'k_o', 'i_1_o')], True)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Aff, Kernel, Load, Loop, Stmt, loads
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.analysis import stride
from polyonnx.schedule.strategies.nests import chain, extent, offsets
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.verbs import (
    ComputeAt,
    Distribute,
    Fuse,
    Isolate,
    Reorder,
    ReverseComputeAt,
    Split,
    Unroll,
    Vectorize,
)


@dataclass(frozen=True, slots=True)
class ReductionNest:
    """A reduction nest of a kernel: ``outer`` loops, ``init`` statement, ``inner`` (reduction)
    loops, ``update`` statement, and the statements ``after`` the reduction in the outer
    loops (finishing each element: LRN's division, an attention row's output)."""

    outer: tuple[Loop, ...]
    init: Stmt
    inner: tuple[Loop, ...]
    update: Stmt
    after: tuple[Stmt, ...] = ()


def reduction_nest(nest: Loop) -> ReductionNest | None:
    """``nest`` as a reduction nest with constant outer bounds and an affine output index, or
    None if it is none."""
    outer, body = chain(nest)
    if len(body) < 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
        return None
    after = body[2:]
    if not all(isinstance(a, Stmt) and not a.guards for a in after):
        return None
    inner, leaf = chain(body[1])
    if len(leaf) != 1 or not isinstance(leaf[0], Stmt):
        return None
    init, update = body[0], leaf[0]
    if init.guards or update.write != init.write:
        return None
    if not all(isinstance(i, Aff) for i in init.write.index):
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in outer):
        return None
    return ReductionNest(tuple(outer), init, tuple(inner), update, tuple(after))


def is_epilogue(nest: object, red: ReductionNest) -> bool:
    """Whether ``nest`` is ``for i...: S: y[i...] = f(out[i...], ...)`` over exactly the
    reduction's output (each point read where it is written)."""
    if not isinstance(nest, Loop):
        return False
    loops, body = chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt) or len(loops) != len(red.outer):
        return False
    stmt = body[0]
    if stmt.guards or any(
        (a.lower, a.upper) != (b.lower, b.upper) for a, b in zip(loops, red.outer, strict=True)
    ):
        return False
    names = [lp.iterator for lp in loops]
    if len(stmt.write.index) != len(names) or offsets(stmt.write.index, names) is None:
        return False
    out = offsets(red.init.write.index, [lp.iterator for lp in red.outer])
    reads_out = [ld for ld in loads(stmt.body) if ld.buffer == red.init.write.buffer]
    return (
        out is not None
        and bool(reads_out)
        and all(len(ld.index) == len(names) and offsets(ld.index, names) == out for ld in reads_out)
    )


@dataclass(frozen=True, slots=True)
class Chunks:
    """How a reduction is cut into cache chunks, and where the chunk loops go."""

    whole: int
    """Leading reduction loops that go outside the row tiles entirely."""
    size: int
    """Iterations of the next reduction loop per chunk."""
    at: int
    """Tile loops (in tile order, a row-block loop included) outside the chunk loops."""
    block: int | None = None
    """Position (among the outer loops) of a loop cut in blocks of ``block_size``, so that the
    loops outside the chunks give the thread pool enough iterations; None: none."""
    block_size: int = 0


@dataclass(frozen=True, slots=True)
class ReductionPlan:
    """The knobs of one register-tiled reduction nest. Loops of the tile are named by their
    position among the outer loops, as they apply to each copy of the nest (the init, the
    update, every fused epilogue)."""

    outer: tuple[str, ...]
    """The nest's outer loops in the schedule, in the kernel's order."""
    reduction: tuple[str, ...]
    """Its reduction loops."""
    epilogues: tuple[tuple[str, ...], ...]
    """The outer loops of each element-wise nest fused into the tiles."""
    row: int | None
    """The outer loop whose ``rows`` iterations the tile unrolls (they share each vector load);
    None: one row."""
    rows: int
    pair: int | None
    """An outer loop whose two iterations the tile holds side by side (two vector tiles);
    None: one vector tile."""
    vector: int
    """Lanes of the tile (of the :attr:`lane` loop)."""
    vector_first: bool
    """The vector tiles' loop outermost (the other operands swept once per vector tile),
    else the outer loops in their own order."""
    isolate: bool
    """Generate the full tiles apart from the ragged edge ones (and keep the init apart from
    the chunks: only whole tiles are initialised in their first chunk)."""
    chunks: Chunks | None
    """Cache chunks of the reduction; None: the whole reduction inside each tile."""
    lane: int | None = None
    """The outer loop that carries the vector lanes (the output is contiguous along it);
    None: the last one."""
    first: tuple[int, ...] = ()
    """Outer loops (positions) that go before all the others, in this order: the loops a
    large moving operand depends on, so that each slice of it serves every row tile (a
    GEMM's B panels) instead of being streamed again per row tile."""

    def __post_init__(self) -> None:
        if self.rows < 1 or self.vector < 1:
            raise ScheduleError(f"reduction plan: {self.rows} rows x {self.vector} lanes")
        if self.chunks is not None and self.epilogues and self.isolate:
            raise ScheduleError(
                "reduction plan: epilogues are fused into cache chunks only without ragged tiles"
            )
        if len({self.lane_at, self.row, self.pair} - {None}) != 1 + (self.row is not None) + (
            self.pair is not None
        ):
            raise ScheduleError("reduction plan: the lanes, rows and pair are different loops")

    @property
    def lane_at(self) -> int:
        """The position of the lanes' loop among the outer loops."""
        return len(self.outer) - 1 if self.lane is None else self.lane

    def splits(self) -> list[tuple[int, int]]:
        """The register tile: (outer loop position, tile size) of the rows, the pair and the
        vector lanes, in that order."""
        out = [(self.row, self.rows)] if self.row is not None else []
        if self.pair is not None:
            out.append((self.pair, 2))
        return [*out, (self.lane_at, self.vector)]

    def tile_order(self) -> list[int]:
        """The order of the tile loops, by outer loop position."""
        n, v = len(self.outer), self.lane_at
        order = [v, *(k for k in range(n) if k != v)] if self.vector_first else list(range(n))
        return [*self.first, *(k for k in order if k not in self.first)]

    def __str__(self) -> str:
        text = f"reduction ({', '.join(self.outer)}) over ({', '.join(self.reduction)})"
        if self.epilogues:
            text += " fusing " + ", ".join(f"({', '.join(e)})" for e in self.epilogues)
        tile = [f"{self.outer[self.row]} {self.rows} rows"] if self.row is not None else []
        if self.pair is not None:
            tile.append(f"{self.outer[self.pair]} 2")
        lanes = f"{self.outer[self.lane_at]} {self.vector} lanes"
        text += f": tile {' x '.join([*tile, lanes])}"
        if self.vector_first:
            text += ", vector tiles outermost"
        if self.first:
            text += f", {', '.join(self.outer[k] for k in self.first)} first"
        if self.isolate:
            text += ", full tiles isolated"
        c = self.chunks
        if c is not None:
            whole = f" ({', '.join(self.reduction[: c.whole])} whole)" if c.whole else ""
            text += (
                f"; chunks: {self.reduction[c.whole]} by {c.size}{whole} after {c.at} "
                f"tile loop{'s' if c.at != 1 else ''}"
            )
            if c.block is not None:
                text += f", {self.outer[c.block]} in blocks of {c.block_size}"
        return text


@dataclass(frozen=True, slots=True)
class Operand:
    """A load of a reduction's update (not of its accumulator) and how it moves along the
    vector lanes: ``vector`` (contiguous), ``broadcast`` (invariant) or ``gather``."""

    load: Load
    kind: str
    shape: tuple[int, ...]

    def invariant(self, iterator: str) -> bool:
        """Whether the load reads the same element whatever ``iterator`` is."""
        return stride(self.load.index, self.shape, iterator) == 0


def operands(nest: ReductionNest, kernel: Kernel, lane: str) -> list[Operand]:
    """The loads of the nest's update other than its accumulator, each once (the bytes of one
    word once: a ``dot4``'s quad), by how they move along the loop ``lane``."""
    out = []
    words: set[tuple] = set()
    for ld in dict.fromkeys(loads(nest.update.body)):
        if ld.buffer == nest.update.write.buffer:
            continue
        last = ld.index[-1] if ld.index else None
        if ld.dtype in ("uint8", "int8") and isinstance(last, Aff):
            # (four adjacent bytes are one word: a ``dot4``'s quad, one int32 load)
            word = (ld.buffer, ld.index[:-1], Aff(last.terms, last.const // 4))
            if word in words:
                continue
            words.add(word)
        shape = kernel.buffer(ld.buffer).shape
        step = stride(ld.index, shape, lane)
        kind = "vector" if step == 1 else "broadcast" if step == 0 else "gather"
        out.append(Operand(ld, kind, shape))
    return out


def lane_loop(nest: ReductionNest, kernel: Kernel) -> int | None:
    """The outer loop (position) to run in vector lanes: the innermost one along which the
    output is contiguous, with at least 8 iterations; None if there is none."""
    out = nest.init.write
    shape = kernel.buffer(out.buffer).shape
    found = [
        k
        for k, lp in enumerate(nest.outer)
        if stride(out.index, shape, lp.iterator) == 1 and extent(nest.outer, lp.iterator) >= 8
    ]
    return found[-1] if found else None


def plan_reduction(
    nest: ReductionNest,
    loops: Sequence[str],
    epilogues: Sequence[Sequence[str]],
    kernel: Kernel,
    tiling: Tiling,
) -> ReductionPlan | None:
    """The register tiles of ``nest`` (its loops in the schedule: ``loops``, outer then
    reduction loops), with the nests named ``epilogues`` fused; None when no outer loop of
    enough iterations has the output contiguous along it."""
    names = [lp.iterator for lp in nest.outer]
    lane = lane_loop(nest, kernel)
    if lane is None:
        return None
    vec = names[lane]
    ops = operands(nest, kernel, vec)
    moving = [o for o in ops if o.kind != "broadcast"]
    row, rows, pair = _tile_shape(nest, ops, lane, tiling)
    v = _lanes(extent(nest.outer, vec), tiling)
    ragged = bool(extent(nest.outer, vec) % v or (row and extent(nest.outer, row) % rows))
    n_outer = len(names)
    plan = ReductionPlan(
        tuple(loops[:n_outer]),
        tuple(loops[n_outer:]),
        tuple(tuple(e) for e in epilogues),
        names.index(row) if row else None,
        rows,
        names.index(pair) if pair else None,
        v,
        _vector_first(nest, kernel, moving, lane, row, rows, v),
        ragged,
        None,
        None if lane == n_outer - 1 else lane,
        _moving_first(nest, kernel, moving, lane, row, rows),
    )
    if nest.after:
        return plan
    # Chunks keep a slice of the vector operand in cache while other tiles reuse it; without
    # a tile loop that reads the same slice, the operand is streamed once (a GEMV's weights,
    # or a MatMul of a few rows, all in one register tile, by a B it cannot pack).
    reused = any(
        k != lane
        and extent(nest.outer, n) > (rows if k == plan.row else 1)
        and all(o.invariant(n) for o in moving)
        for k, n in enumerate(names)
    )
    if not reused and not _windowed(nest, moving):
        streamed = _streamed_chunks(nest, plan, tiling)
        if streamed is None:
            return plan
        # (ragged tiles: the epilogues run as nests of their own, a pass over the output)
        return replace(plan, chunks=streamed, epilogues=() if ragged else plan.epilogues)
    itemsize = (
        max(np.dtype(kernel.buffer(o.load.buffer).dtype).itemsize for o in moving) if moving else 4
    )
    cut = reduction_chunks(nest, tiling.chunk_bytes // (v * (2 if pair else 1) * itemsize))
    if not reused or cut is None or (epilogues and ragged):
        return plan
    chunks = _place_chunks(nest, plan, cut, tiling)
    if plan.first and not plan.epilogues and _other_operands_leave_l2(nest, kernel, moving, tiling):
        chunks = replace(chunks, at=0, block=None, block_size=0)
    return replace(plan, chunks=chunks)


def _windowed(nest: ReductionNest, moving: list[Operand]) -> bool:
    """Whether a moving operand is read through a window: some index combines an outer and a
    reduction loop (a pool's ``2*oh + kh``), so neighbouring tiles read overlapping elements
    and the operand is no stream read once (it is re-read from cache, not from memory)."""
    outer = {lp.iterator for lp in nest.outer}
    inner = {lp.iterator for lp in nest.inner}
    return any(
        isinstance(i, Aff) and outer & set(i.vars) and inner & set(i.vars)
        for o in moving
        for i in o.load.index
    )


def _streamed_chunks(nest: ReductionNest, plan: ReductionPlan, tiling: Tiling) -> Chunks | None:
    """Chunks for a reduction whose vector operand is read once: its reduction cut into
    chunks of :attr:`~.tiling.Tiling.streams` iterations outside every tile loop, so the
    consecutive vector tiles of a chunk go on along the same few rows of the operand (a few
    sequential streams) rather than each tile walking down its column over every row (a
    new page per row, which the prefetchers do not follow); the output tiles are re-read
    per chunk, from L1. With several threads the lanes' loop is first cut into one block
    per thread outside the chunks, to run in parallel: each thread reads the widest span of
    every row it can, which its prefetchers follow (two blocks per thread, half the span,
    made a batch-1 FC layer of 8 MB run 328 us on two threads instead of 227; four, 418).
    None when the lanes make one vector tile (no rows to go on along)."""
    tiles = -(-extent(nest.outer, nest.outer[plan.lane_at].iterator) // plan.vector)
    cut = reduction_chunks(nest, tiling.streams)
    if tiles < 2 or cut is None:
        return None
    whole, size = cut
    per_block = -(-tiles // tiling.threads)
    if tiling.threads > 1 and per_block < tiles:
        return Chunks(whole, size, 1, plan.lane_at, per_block * plan.vector)
    return Chunks(whole, size, 0)


def _tile_shape(
    nest: ReductionNest, ops: list[Operand], lane: int, tiling: Tiling
) -> tuple[str | None, int, str | None]:
    """The register tile's row loop, its rows and its pair loop (krnl iterators).

    The rows are the outer loop whose tile makes the fewest loads per multiply-add (a load
    invariant along it is shared by all rows: a conv's weight vector, a GEMM's B vector),
    the innermost of equals; without one (every load moves with every loop), the innermost
    loop when all moving loads are contiguous streams and the update has no guards, for
    independent accumulators (a GEMV's weight panels), else none. As many rows as the
    registers hold accumulators for (:func:`_row_budget`), at most ``tiling.unroll``.
    """
    names = [lp.iterator for lp in nest.outer]
    vec = names[lane]
    steps = tiling.steps
    candidates = [n for n in names if n != vec and extent(nest.outer, n) >= 2]
    shared = [n for n in candidates if any(o.invariant(n) for o in ops)]

    def cost(n: str) -> int:
        """Loads of one reduction step of a ``unroll`` x ``vector`` tile with rows ``n``."""
        r = tiling.unroll
        per = {"vector": steps, "broadcast": 1, "gather": steps * tiling.lanes}
        return sum(per[o.kind] * (1 if o.invariant(n) else r) for o in ops)

    if shared:
        row: str | None = min(reversed(shared), key=cost)
    elif candidates and all(o.kind != "gather" for o in ops) and not nest.update.guards:
        # (a guarded update gets no register tile from codegen: rows would only unroll it)
        row = candidates[-1]
    else:
        return None, 1, None
    assert row is not None
    rows_extent = extent(nest.outer, row)
    # Pair up two vector tiles of a loop the vector loads depend on and the row loads do not
    # (a conv's output-channel blocks) when the rows divide into tiles of ``paired_rows`` (or
    # one fewer): every loaded row value then feeds four vectors, not two. (GEMMs of
    # power-of-two sizes do not divide so: they keep one vector tile.)
    if row in shared and tiling.paired_rows:
        paired = [
            p for p in (tiling.paired_rows, tiling.paired_rows - 1) if p and rows_extent % p == 0
        ]
        partners = [
            n
            for n in names
            if n not in (vec, row)
            and extent(nest.outer, n) % 2 == 0
            and any(o.kind == "vector" and not o.invariant(n) for o in ops)
            and all(o.invariant(n) for o in ops if o.kind == "broadcast")
        ]
        if paired and partners:
            return row, paired[0], partners[-1]
    return row, tiling.rows(rows_extent, *_row_budget(ops, row, tiling)), None


def _row_budget(ops: list[Operand], row: str, tiling: Tiling) -> tuple[int | None, int | None]:
    """Rows whose accumulators fit the register file besides what one reduction step keeps
    live: the vectors the rows share, one vector a row loads for itself and one broadcast;
    and the rows that fit when the shared vectors are FMA memory operands instead (the
    ``folded`` rows of :meth:`~.tiling.Tiling.rows`), only when the registers, not
    :attr:`~.tiling.Tiling.unroll`, limit the rows. (None, None) when the register count
    is not known."""
    if not tiling.registers:
        return None, None
    shared = sum(1 for o in ops if o.kind == "vector" and o.invariant(row))
    own = any(o.kind != "broadcast" and not o.invariant(row) for o in ops)
    bare = own + any(o.kind == "broadcast" for o in ops)
    budget = max((tiling.registers - shared * tiling.steps - bare) // tiling.steps, 1)
    folded = (tiling.registers - bare) // tiling.steps
    return budget, folded if shared and budget <= tiling.unroll else None


def _lanes(vector_extent: int, tiling: Tiling) -> int:
    """The tile's lanes: ``tiling.vector``, or the vector loop's extent when that is exactly
    one vector (half of ``tiling.vector``: a block of 16 channels under AVX-512's 32-lane
    tiles), which a split by ``tiling.vector`` would leave without a full tile."""
    return vector_extent if 2 * vector_extent == tiling.vector else tiling.vector


def _operand_bytes(nest: ReductionNest, kernel: Kernel, moving: list[Operand]) -> tuple[int, int]:
    """The bytes of the update's moving operands, and of its other operands (the
    accumulator left out): what a tile order re-reads, whole."""
    sizes = {b.name: b.nbytes for b in kernel.buffers}
    moving_buffers = {o.load.buffer for o in moving}
    others = {ld.buffer for ld in loads(nest.update.body)} - moving_buffers
    others.discard(nest.update.write.buffer)
    return sum(sizes[b] for b in moving_buffers), sum(sizes[b] for b in others)


def _vector_first(
    nest: ReductionNest,
    kernel: Kernel,
    moving: list[Operand],
    lane: int,
    row: str | None,
    rows: int,
    vector: int,
) -> bool:
    """Whether the vector tiles' loop goes outermost. Sweeping the other loops inside a
    vector tile re-reads the other operands once per vector tile; the kernel's own order
    re-reads the moving operand (conv weights) once per row tile of every outer iteration:
    the smaller traffic wins. An operand read through windows that moves with every other
    loop (LRN's or an NCHW pool's input) is read once in either order, the vector tiles
    outermost would only stride through it: the kernel's order (LRN of 96x109x109, 7.3 ->
    3.2 ms, its pixels' rows read in order)."""
    names = [lp.iterator for lp in nest.outer]
    vec = names[lane]
    swept = [n for n in names if n != vec and extent(nest.outer, n) > 1]
    if _windowed(nest, moving) and not any(o.invariant(n) for o in moving for n in swept):
        return False
    moving_bytes, other_bytes = _operand_bytes(nest, kernel, moving)
    sweeps = int(np.prod([extent(nest.outer, n) for n in names if n not in (vec, row)]))
    sweeps *= -(-extent(nest.outer, row) // rows) if row else 1
    return other_bytes * -(-extent(nest.outer, vec) // vector) < moving_bytes * sweeps


def _moving_first(
    nest: ReductionNest,
    kernel: Kernel,
    moving: list[Operand],
    lane: int,
    row: str | None,
    rows: int,
) -> tuple[int, ...]:
    """The loops after the row loop that the moving operand depends on (other than the
    lanes'), to go first when that moves fewer bytes: in the kernel's order each row tile
    streams the whole moving operand again (a GEMM's B, 8 row tiles x 3.2 MB from L3 for
    64x3136x256); with them first, each slice of it serves every row tile from L1 and the
    other operands are re-read once per iteration of those loops instead (its A: 98 panels
    x 64 KiB, from L2)."""
    if row is None:
        return ()
    names = [lp.iterator for lp in nest.outer]
    at = names.index(row)
    deps = tuple(
        k
        for k in range(at + 1, len(names))
        if k != lane and any(not o.invariant(names[k]) for o in moving)
    )
    if not deps:
        return ()
    moving_bytes, other_bytes = _operand_bytes(nest, kernel, moving)
    row_tiles = -(-extent(nest.outer, row) // rows)
    iterations = int(np.prod([extent(nest.outer, names[k]) for k in deps]))
    return deps if other_bytes * iterations < moving_bytes * row_tiles else ()


def _other_operands_leave_l2(
    nest: ReductionNest, kernel: Kernel, moving: list[Operand], tiling: Tiling
) -> bool:
    """Whether the chunk loops should go outside the loops of :attr:`ReductionPlan.first` (a
    GEMM's panels): the operands those loops re-read (its A, once per panel) are more than
    half of L2, so each panel would fetch them again from L3, while the accumulators fit in
    half of it. Chunks first, each chunk's slice of A stays in L2 across the panels and the
    accumulators are re-read from L2 once per chunk (GotoBLAS's order). BERT's 128x3072x768
    product (A 1.5 MB, 2 MB of L2): 142 -> 159 GFLOP/s at 1 thread on Emerald Rapids."""
    if not tiling.l2_bytes:
        return False
    _, other_bytes = _operand_bytes(nest, kernel, moving)
    out_bytes = kernel.buffer(nest.init.write.buffer).nbytes
    return other_bytes > tiling.l2_bytes // 2 >= out_bytes


def _place_chunks(
    nest: ReductionNest, plan: ReductionPlan, cut: tuple[int, int], tiling: Tiling
) -> Chunks:
    """Where the chunk loops of ``cut`` go among the plan's tile loops, and the row block
    that gives the thread pool enough iterations outside them."""
    names = [lp.iterator for lp in nest.outer]
    # The chunk loops sit after the first loop that really iterates, which stays free to run
    # in parallel (a GEMM: before its row tiles, so one chunk of the packed B panels serves
    # all of them); with an epilogue, after the first *tile* loop that iterates.
    order = plan.tile_order()
    tile_sizes = dict(plan.splits())
    counts = [-(-extent(nest.outer, names[k]) // tile_sizes.get(k, 1)) for k in order]
    extents = [extent(nest.outer, names[k]) for k in order]
    at = next((pos + 1 for pos, c in enumerate(counts if plan.epilogues else extents) if c > 1), 1)
    whole, size = cut
    if plan.epilogues and at < len(order) and order[at] not in tile_sizes:
        # Everything the epilogue is fused with runs per iteration of the loops outside the
        # chunk loop, so they are the only parallel loops: cut the next loop in blocks until
        # they give ``parallel_tiles`` iterations (a conv: blocks of output rows).
        have = int(np.prod(counts[:at]))
        block_extent = extent(nest.outer, names[order[at]])
        if have < tiling.parallel_tiles and block_extent > 1:
            block_size = -(-block_extent // -(-tiling.parallel_tiles // have))
            if block_size < block_extent:  # (the block loop goes before the chunk loops)
                return Chunks(whole, size, at + 1, order[at], block_size)
    return Chunks(whole, size, at)


def reduction_chunks(nest: ReductionNest, depth: int) -> tuple[int, int] | None:
    """How a reduction longer than ``depth`` iterations is cut into cache chunks, else None:
    ``(whole, size)`` — its first ``whole`` loops go outside the row tiles entirely (each
    iteration of them holds more than twice ``depth``: a 3x3 conv's input-channel blocks and
    kernel rows), and the next loop is cut in chunks of ``size`` (preferring a divisor of its
    extent) so a chunk is about ``depth`` iterations."""
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in nest.inner):
        return None
    extents = [lp.upper.const - lp.lower.const for lp in nest.inner]
    if int(np.prod(extents)) <= depth:
        return None
    whole = 0
    while int(np.prod(extents[whole + 1 :])) > 2 * depth:
        whole += 1
    inside = int(np.prod(extents[whole + 1 :]))
    size = max(1, depth // inside)
    divisors = [d for d in range(size, max(size // 2, 1) - 1, -1) if extents[whole] % d == 0]
    return whole, divisors[0] if divisors else size


def apply_reduction(s: Schedule, plan: ReductionPlan) -> tuple[Schedule, list[tuple[str, ...]]]:
    """``plan`` applied to ``s`` (unverified), and the outer bands of the nests it leaves
    (the candidates for ``parallel``)."""
    outer, reduction = list(plan.outer), list(plan.reduction)
    if plan.chunks is None:
        for e in plan.epilogues:
            s = s.apply_unverified(Fuse(outer[0], e[0], len(outer)))
        s, tiles, points, full = _tile(s, plan, outer, [])
        # The point loops over the init, the reduction loops and each epilogue statement.
        s = s.apply_unverified(Distribute(points[0]))
        copies = s.created
        groups = [points] + [
            list(copies[k : k + len(points)]) for k in range(0, len(copies), len(points))
        ]
        s = s.apply_unverified(Reorder((*reduction, *groups[1])))
        return _mark(s, plan, tiles, full, groups), [tuple(tiles)]
    # A long reduction is cut into chunks: the operands of one chunk stay in cache while
    # every output tile of a row takes its share.
    s = s.apply_unverified(Distribute(outer[0]))
    update = list(s.created[: len(outer)])
    s, init_tiles, init_points, full = _tile(s, plan, outer, [])
    s = _mark(s, plan, init_tiles, full, [init_points])
    s, upd_tiles, upd_points, full = _tile(s, plan, update, reduction, chunked=True)
    s = _mark(s, plan, upd_tiles, full, [upd_points])
    if plan.isolate:  # (no epilogue: see ReductionPlan.__post_init__)
        return s, [tuple(init_tiles), tuple(upd_tiles)]
    # Each output tile is initialised in the first chunk and finished (the epilogue) in the
    # last, while its accumulators are in registers: one pass over the output per chunk, not
    # two more.
    s = s.apply_unverified(ComputeAt(init_tiles[0], upd_tiles[-1]))
    for e in plan.epilogues:
        s, e_tiles, e_points, _ = _tile(s, plan, list(e), [])
        s = _mark(s, plan, e_tiles, [], [e_points])
        s = s.apply_unverified(ReverseComputeAt(e_tiles[0], upd_tiles[-1]))
    # (With an epilogue, below the chunk loops there are several nests: not one band.)
    return s, [tuple(upd_tiles[: plan.chunks.at] if plan.epilogues else upd_tiles)]


def _tile(
    s: Schedule, plan: ReductionPlan, outer: list[str], reduction: list[str], chunked: bool = False
) -> tuple[Schedule, list[str], list[str], list[str]]:
    """Floor-split the tile loops of the perfect nest ``outer`` (the reduction loops inside
    it; cut into chunk loops when ``chunked``) and order the tile loops before the reduction
    loops and the points: (schedule, tile loops, point loops: row, pair, vector, full-tile
    loops: vector, pair, row). A row-block loop of the plan's chunks is cut too, its point
    loop right after its block loop (after the chunk loops when ``chunked``); a block of a
    tiled loop (the lanes') goes right before its tile loop, which cuts the block's points."""
    current, tiles, points = list(outer), list(outer), []
    made = {}
    splits = plan.splits()
    chunks = plan.chunks
    cut = list(outer)
    tiled_block: str | None = None
    if chunks is not None and chunks.block is not None and chunks.block in dict(splits):
        s, tiled_block, cut[chunks.block] = _split(
            s, current, outer[chunks.block], chunks.block_size
        )
    for k, size in splits:
        s, t, p = _split(s, current, cut[k], size)
        tiles[k] = made[k] = t
        points.append(p)
    block_point = None
    if chunks is not None and chunks.block is not None and tiled_block is None:
        s, block, block_point = _split(s, current, outer[chunks.block], chunks.block_size)
        tiles[chunks.block] = block
    tiles = [tiles[k] for k in plan.tile_order()]
    if block_point is not None:
        tiles.insert(tiles.index(block) + 1, block_point)
    if tiled_block is not None:
        assert chunks is not None and chunks.block is not None  # (how tiled_block was set)
        tiles.insert(tiles.index(made[chunks.block]), tiled_block)
    inner = list(reduction)
    current += inner
    if chunked:  # the chunk loops: whole leading loops, then the chunked one
        assert chunks is not None
        s, chunk, first = _split(s, current, reduction[chunks.whole], chunks.size)
        tiles[chunks.at : chunks.at] = [*reduction[: chunks.whole], chunk]
        inner = [first, *reduction[chunks.whole + 1 :]]
    full = [made[k] for k, _ in reversed(splits)]
    want = tiles + inner + points
    if want != current:
        s = s.apply_unverified(Reorder(tuple(want)))
    return s, tiles, points, full


def _split(s: Schedule, current: list[str], loop: str, size: int) -> tuple[Schedule, str, str]:
    """``s`` with ``loop`` floor-split by ``size``, its tile and point loops; they replace
    ``loop`` in the loop order ``current``."""
    s = s.apply_unverified(Split(loop, size, floor=True))
    tile, point = s.created
    at = current.index(loop)
    current[at : at + 1] = [tile, point]
    return s, tile, point


def _mark(
    s: Schedule, plan: ReductionPlan, tiles: list[str], full: list[str], groups: list[list[str]]
) -> Schedule:
    """Each group of point loops under ``unroll`` marks (rows, pair) and a ``vector`` mark
    (lanes), and the full tiles isolated when the plan says so (the full tiles of the vector
    loop first, then of the row loop): their inner loops then have constant trip counts; the
    partial tiles at the edges get their own, general code."""
    for points in groups:
        for p in points[:-1]:
            s = s.apply_unverified(Unroll(p, 0, mark=True))
        s = s.apply_unverified(Vectorize(points[-1], 0, mark=True))
    if plan.isolate:
        s = s.apply_unverified(Isolate(tiles[0], tiles[-1], tuple(full)))
    return s
