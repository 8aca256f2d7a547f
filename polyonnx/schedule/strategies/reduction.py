"""Register-tiled reductions, with their element-wise epilogues fused and cache chunks.

A **reduction nest** — outer loops over an output, an init statement, inner reduction loops
and an update statement (Conv, MatMul, Gemm, pooling) — is cut into ``rows x vector`` register
tiles: the reduction loops run inside the tile, the rows sit under an ``unroll`` mark and the
vector columns under a ``vector`` mark, so codegen keeps the tile's accumulators in registers
for the whole reduction. The nests that follow it and read its output point for point (bias,
ReLU, residual Add) are fused into the tiles. A long reduction is cut into cache chunks.

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
    loops, ``update`` statement."""

    outer: tuple[Loop, ...]
    init: Stmt
    inner: tuple[Loop, ...]
    update: Stmt


def reduction_nest(nest: Loop) -> ReductionNest | None:
    """``nest`` as a reduction nest with constant outer bounds, or None if it is none."""
    outer, body = chain(nest)
    if len(body) != 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
        return None
    inner, leaf = chain(body[1])
    if len(leaf) != 1 or not isinstance(leaf[0], Stmt):
        return None
    init, update = body[0], leaf[0]
    names = [lp.iterator for lp in outer]
    if init.guards or update.write != init.write or len(outer) < 2:
        return None
    if offsets(init.write.index, names) is None:
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in outer):
        return None
    return ReductionNest(tuple(outer), init, tuple(inner), update)


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
    return bool(reads_out) and all(
        len(ld.index) == len(names) and offsets(ld.index, names) == out for ld in reads_out
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
    """The nest's outer loops in the schedule (the last one carries the vector lanes)."""
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
    """Lanes of the tile (of the last outer loop)."""
    vector_first: bool
    """The vector tiles' loop outermost (the other operands swept once per vector tile),
    else the outer loops in their own order."""
    isolate: bool
    """Generate the full tiles apart from the ragged edge ones (and keep the init apart from
    the chunks: only whole tiles are initialised in their first chunk)."""
    chunks: Chunks | None
    """Cache chunks of the reduction; None: the whole reduction inside each tile."""

    def __post_init__(self) -> None:
        if self.rows < 1 or self.vector < 1:
            raise ScheduleError(f"reduction plan: {self.rows} rows x {self.vector} lanes")
        if self.chunks is not None and self.epilogues and self.isolate:
            raise ScheduleError(
                "reduction plan: epilogues are fused into cache chunks only without ragged tiles"
            )

    def splits(self) -> list[tuple[int, int]]:
        """The register tile: (outer loop position, tile size) of the rows, the pair and the
        vector lanes, in that order."""
        out = [(self.row, self.rows)] if self.row is not None else []
        if self.pair is not None:
            out.append((self.pair, 2))
        return [*out, (len(self.outer) - 1, self.vector)]

    def tile_order(self) -> list[int]:
        """The order of the tile loops, by outer loop position."""
        n = len(self.outer)
        return [n - 1, *range(n - 1)] if self.vector_first else list(range(n))

    def __str__(self) -> str:
        text = f"reduction ({', '.join(self.outer)}) over ({', '.join(self.reduction)})"
        if self.epilogues:
            text += " fusing " + ", ".join(f"({', '.join(e)})" for e in self.epilogues)
        tile = [f"{self.outer[self.row]} {self.rows} rows"] if self.row is not None else []
        if self.pair is not None:
            tile.append(f"{self.outer[self.pair]} 2")
        text += f": tile {' x '.join([*tile, f'{self.outer[-1]} {self.vector} lanes'])}"
        if self.vector_first:
            text += ", vector tiles outermost"
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


def plan_reduction(
    nest: ReductionNest,
    loops: Sequence[str],
    epilogues: Sequence[Sequence[str]],
    kernel: Kernel,
    tiling: Tiling,
) -> ReductionPlan | None:
    """The register tiles of ``nest`` (its loops in the schedule: ``loops``, outer then
    reduction loops), with the nests named ``epilogues`` fused; None when its vector loop is
    too short for a tile."""
    names = [lp.iterator for lp in nest.outer]
    vec = names[-1]
    if extent(nest.outer, vec) < 8:
        return None
    # The vector-moving loads: those whose contiguous index follows the vector loop.
    moving = [
        ld
        for ld in loads(nest.update.body)
        if ld.buffer != nest.update.write.buffer
        and ld.index
        and isinstance(ld.index[-1], Aff)
        and ld.index[-1].coeff(vec)
    ]
    row, rows, pair = _tile_shape(nest, moving, tiling)
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
        _vector_first(nest, kernel, moving, row, rows, v),
        ragged,
        None,
    )
    moving_buffers = {ld.buffer for ld in moving}
    itemsize = (
        max(np.dtype(b.dtype).itemsize for b in kernel.buffers if b.name in moving_buffers)
        if moving
        else 4
    )
    cut = reduction_chunks(nest, tiling.chunk_bytes // (v * (2 if pair else 1) * itemsize))
    if cut is None or (epilogues and ragged):
        return plan
    return replace(plan, chunks=_place_chunks(nest, plan, cut, tiling))


def _tile_shape(
    nest: ReductionNest, moving: list[Load], tiling: Tiling
) -> tuple[str | None, int, str | None]:
    """The register tile's row loop, its rows and its pair loop (krnl iterators)."""
    names = [lp.iterator for lp in nest.outer]

    def used_by_moving(n: str) -> bool:
        return any(not isinstance(i, Aff) or i.coeff(n) for ld in moving for i in ld.index)

    # Unroll the outer loop that the vector-moving loads do not depend on: the rows of the
    # register tile then share each vector load (conv: output pixels share a weight vector).
    candidates = [n for n in names[:-1] if not used_by_moving(n) and extent(nest.outer, n) >= 2]
    if not candidates:
        return _reuse_row(nest, moving, tiling)
    row = candidates[-1]
    rows = tiling.rows(extent(nest.outer, row)) if row else 1
    # Pair up two vector tiles of a loop the moving loads depend on (a conv's output-channel
    # blocks) when the rows divide into tiles of ``paired_rows`` (or one fewer): every loaded
    # row value then feeds four vectors, not two. (GEMMs of power-of-two sizes do not divide
    # so: they keep one vector tile.)
    if row and tiling.paired_rows:
        rows_extent = extent(nest.outer, row)
        paired = [p for p in (tiling.paired_rows, tiling.paired_rows - 1) if rows_extent % p == 0]
        partners = [
            n
            for n in names[:-1]
            if n != row and used_by_moving(n) and extent(nest.outer, n) % 2 == 0
        ]
        if paired and partners:
            return row, paired[0], partners[-1]
    return row, rows, None


def _lanes(vector_extent: int, tiling: Tiling) -> int:
    """The tile's lanes: ``tiling.vector``, or the vector loop's extent when that is exactly
    one vector (half of ``tiling.vector``: a block of 16 channels under AVX-512's 32-lane
    tiles), which a split by ``tiling.vector`` would leave without a full tile."""
    return vector_extent if 2 * vector_extent == tiling.vector else tiling.vector


def _reuse_row(
    nest: ReductionNest, moving: list[Load], tiling: Tiling
) -> tuple[str | None, int, str | None]:
    """The row loop when every outer loop moves some vector-moving load (a depthwise conv:
    its input and its weights both move with the channels): the last loop that one of them
    does not depend on, so the rows share that operand's vectors (the weights across output
    pixels; the input vectors the taps of neighbouring pixels read are loaded once). No pair."""
    names = [lp.iterator for lp in nest.outer]

    def uses(ld: Load, n: str) -> bool:
        return any(not isinstance(i, Aff) or i.coeff(n) for i in ld.index)

    reused = [
        n
        for n in names[:-1]
        if extent(nest.outer, n) >= 2 and any(not uses(ld, n) for ld in moving)
    ]
    if not reused:
        return None, 1, None
    return reused[-1], tiling.rows(extent(nest.outer, reused[-1])), None


def _vector_first(
    nest: ReductionNest, kernel: Kernel, moving: list[Load], row: str | None, rows: int, vector: int
) -> bool:
    """Whether the vector tiles' loop goes outermost. Sweeping the other loops inside a
    vector tile re-reads the other operands once per vector tile; the kernel's own order
    re-reads the moving operand (conv weights) once per row tile of every outer iteration:
    the smaller traffic wins."""
    names = [lp.iterator for lp in nest.outer]
    vec = names[-1]
    sizes = {b.name: b.nbytes for b in kernel.buffers}
    moving_buffers = {ld.buffer for ld in moving}
    moving_bytes = sum(sizes[b] for b in moving_buffers)
    other_bytes = sum(
        sizes[b]
        for b in {ld.buffer for ld in loads(nest.update.body)}
        if b != nest.update.write.buffer and b not in moving_buffers
    )
    sweeps = int(np.prod([extent(nest.outer, n) for n in names if n not in (vec, row)]))
    sweeps *= -(-extent(nest.outer, row) // rows) if row else 1
    return other_bytes * -(-extent(nest.outer, vec) // vector) < moving_bytes * sweeps


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
    loop right after its block loop (after the chunk loops when ``chunked``)."""
    current, tiles, points = list(outer), list(outer), []
    made = {}
    splits = plan.splits()
    for k, size in splits:
        s, t, p = _split(s, current, outer[k], size)
        tiles[k] = made[k] = t
        points.append(p)
    chunks = plan.chunks
    block_point = None
    if chunks is not None and chunks.block is not None:
        s, block, block_point = _split(s, current, outer[chunks.block], chunks.block_size)
        tiles[chunks.block] = block
    tiles = [tiles[k] for k in plan.tile_order()]
    if block_point is not None:
        tiles.insert(tiles.index(block) + 1, block_point)
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
