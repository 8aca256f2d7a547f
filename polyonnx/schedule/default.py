"""Default schedules: what the compiler does to a kernel when the user gives no schedule.

Each top-level loop nest of a kernel gets a strategy by its shape:

* a **reduction nest** (outer loops over an output, an init statement, inner reduction loops and
  an update statement — Conv, MatMul, Gemm, pooling) is register-tiled: the output is cut into
  ``unroll x vector`` tiles, the reduction loops run inside the tile, the ``unroll`` rows are
  unrolled by isl and the ``vector`` columns are emitted as vector code, so the tile's
  accumulators stay in registers for the whole reduction. Elementwise nests that read the
  reduction's output point for point (bias, ReLU, residual Add) are fused into the same tile.
* any other nest gets its innermost loop vectorized.

The strategies are written with the schedule verbs users script with
(:class:`~polyonnx.schedule.schedule.Schedule`: ``fuse``, ``split(..., floor=True)``,
``reorder``, ``distribute``, ``unroll(..., mark=True)``, ``vectorize(..., mark=True)``,
``isolate(..., through=, tiles=)``, ``parallel(..., named=)``), applied with
:meth:`~polyonnx.schedule.schedule.Schedule.apply_all`: every result is checked against the
kernel's exact dependences, and its trace (``ScheduledKernel.trace``) replays it. A strategy
whose schedule does not respect them is dropped for the kernel's own loop structure, which
always does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import islpy as isl
import numpy as np

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Aff, Index, Kernel, Loop, Stmt, loads
from polyonnx.schedule.legality import loops_that_may_carry
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.scheduled import ScheduledKernel, own_loop_order
from polyonnx.schedule.tree import Band, band_paths, get, instances, stmts
from polyonnx.schedule.tree import Sequence as TreeSequence
from polyonnx.schedule.verbs import (
    ComputeAt,
    Directive,
    Distribute,
    Fuse,
    Isolate,
    Parallel,
    Reorder,
    ReverseComputeAt,
    Split,
    Unroll,
    Vectorize,
)

if TYPE_CHECKING:
    from polyonnx.schedule.schedule import Schedule

VECTOR_MARK = "vector"
UNROLL_MARK = "unroll"


@dataclass(frozen=True)
class Tiling:
    """Register-tile sizes of the reduction strategy."""

    unroll: int = 4
    vector: int = 16
    chunk_bytes: int = 16 * 1024
    """The slice of the vector-moving operand (a conv's weights, a GEMM's B panel) one cache
    block of the reduction reads per register tile: half of the L1 data cache, so it stays
    there while the row tiles sweep it (see :func:`_reduction_split`)."""
    paired_rows: int = 0
    """Rows of a tile two vector tiles wide (see :func:`_tile_reduction`); 0: never."""
    parallel_tiles: int = 1
    """Iterations the tile loops outside a reduction's cache chunks should give the thread
    pool when an epilogue is fused there (see :func:`_tile_reduction`); 1: one thread."""

    @staticmethod
    def for_vector_bits(bits: int, threads: int = 1, l1_bytes: int = 32 * 1024) -> Tiling:
        """Two float32 vectors wide; as many rows as the register file holds accumulators for
        (16 vector registers with AVX2, 32 with AVX-512). With 32 registers a tile may also be
        7 rows by two vector tiles (28 accumulators, each row's broadcast serving 4 FMAs).
        Cache chunks are half of ``l1_bytes`` (this host's 48 KiB L1: 24 KiB chunks ran
        ResNet50's convolutions 0.5-1% faster than 16 KiB ones per layer, the same within noise
        as whole models; 8 KiB ones 4-8% slower, 48 KiB ones 6-8% slower).
        With several threads, 2 tiles per thread at least (a worker the OS wakes late leaves
        its share to the others). 4 per thread, the most chunks the pool cuts a loop into,
        ran no faster (ResNet50 at 2 threads: 0.969 / 0.957x onnxruntime, libraries
        interleaved) and cost isl a row-block loop in more kernels: 0.4-0.8 s more CPU to
        schedule and generate ASTs."""
        return Tiling(unroll=8 if bits >= 512 else 6, vector=2 * bits // 32,
                      chunk_bytes=l1_bytes // 2, paired_rows=7 if bits >= 512 else 0,
                      parallel_tiles=2 * threads if threads > 1 else 1)

    def rows(self, extent: int) -> int:
        """Unrolled rows for a loop of ``extent``: the largest divisor of it between half the
        budget and the budget, so the tiles have no ragged edge, else the budget."""
        for u in range(self.unroll, max(self.unroll // 2, 1) - 1, -1):
            if extent % u == 0:
                return u
        return self.unroll


def default_schedule(kernel: Kernel, tiling: Tiling | None = None,
                     parallel: bool = True) -> ScheduledKernel:
    """The kernel's schedule: the strategies above when legal, else its own loop structure.

    With ``parallel``, the outermost loop of each nest with enough work is marked ``parallel``
    (naming the loops of its band that carry no dependence).
    """
    from polyonnx.schedule.schedule import Schedule

    start = Schedule.from_kernel(kernel)
    tiling = tiling or Tiling()
    try:
        s, bands = _strategy(start, tiling)
        if parallel:
            s = _parallel_outer(s, bands)
        s = s.verify("default schedule: " + "; ".join(str(d) for d in s.directives))
    except (_NotApplicable, ScheduleError):
        return plain_schedule(kernel)
    return s.scheduled()


def plain_schedule(kernel: Kernel) -> ScheduledKernel:
    """The kernel's own loop structure, untransformed."""
    return own_loop_order(kernel)


def respects(poly: PolyKernel, schedule: isl.Schedule,
             deps: isl.UnionMap | None = None) -> bool:
    """Whether ``schedule`` executes every dependence source before its sink."""
    order = schedule.get_map()
    deps = poly.dependences().all if deps is None else deps
    return deps.is_subset(order.lex_lt_union_map(order))


PARALLEL_MARK = "parallel"
MIN_PARALLEL_INSTANCES = 1 << 20
"""Statement instances below which a nest stays on one thread: waking the pool and joining
it costs several µs, about what a million instances (~10 µs) would save on a second core
(MNIST's convolutions, at 0.2M and 0.6M, ran slower on two threads than on one)."""
MIN_PARALLEL_BYTES = 256 * 1024
"""Bytes written above which a nest runs in parallel whatever its instance count: a copy
(a conv's zero-bordered input: 0.2M instances, 860 KB at 56x56) is bound by memory traffic,
tens of µs that a second core shares (ResNet50's 56x56 layers on two threads: 1.4 -> 1.1x
onnxruntime's time with their padding copies in parallel)."""


def _parallel_outer(s: Schedule, bands: list[list[str]]) -> Schedule:
    """``parallel(band[0], loops=...)`` for the outer band (loop names) of each nest with
    enough work, naming the band's loops that may run in parallel.

    The loop of band member ``m`` is parallel when every dependence that has distance 0 on
    the members before it has distance 0 on ``m`` too: under the mark, a loop that codegen
    meets first has all the members before it fixed (isl made no loop for them), so the
    dependences among its iterations are exactly those (:func:`loops_that_may_carry`). (The
    verb checks each named loop again; this finds them with one distance computation per
    nest.)
    """
    steps: list[Directive] = []
    paths = band_paths(s.tree)
    for names in bands:
        if not names:
            continue
        nodes = [get(s.tree, paths[n]) for n in names]
        assert all(isinstance(b, Band) for b in nodes)
        top = nodes[0]
        assert isinstance(top, Band)
        below = instances(s.poly, stmts(top))
        count, written = _instances(s.poly, below)
        if count < MIN_PARALLEL_INSTANCES and written < MIN_PARALLEL_BYTES:
            continue
        may = loops_that_may_carry(s.dependences, below, [b.sched for b in nodes],
                                   range(len(names)))
        safe = [n for m, n in enumerate(names) if m not in may]
        if safe:
            steps.append(Parallel(names[0], tuple(safe)))
    return _apply(s, steps)


def _instances(poly: PolyKernel, domain: isl.UnionSet) -> tuple[int, int]:
    """Statement instances of ``domain`` and the bytes they write (each buffer's at most
    once: a reduction writes its output, not one element per instance), counted from the
    krnl loops (guards ignored)."""
    total = 0
    names = set()
    domain.foreach_set(lambda s: names.add(s.get_tuple_name()))
    buffers = {b.name: b for b in poly.kernel.buffers}
    written: dict[str, int] = {}
    for name in names:
        info = poly.stmts[name]
        count = 1
        for lp in info.loops:
            count *= max(lp.upper.const - lp.lower.const, 1)
        total += count
        out = info.stmt.write.buffer
        written[out] = written.get(out, 0) + count * np.dtype(buffers[out].dtype).itemsize
    return total, sum(min(n, buffers[b].nbytes) for b, n in written.items())


class _NotApplicable(Exception):
    pass


def _apply(s: Schedule, steps: Sequence[Directive]) -> Schedule:
    """``steps`` checked and applied, legality left to the caller (one check at the end)."""
    for d in steps:
        s = s.apply_unverified(d)
    return s


def _created(s: Schedule, d: Directive) -> tuple[Schedule, tuple[str, ...]]:
    """``s`` after ``d`` and the loops ``d`` made."""
    s = s.apply_unverified(d)
    return s, s.created


# ------------------------------------------------------------------------ strategies


def _chain(node: Loop) -> tuple[list[Loop], tuple]:
    """The perfectly nested loops from ``node`` down, and the body below them."""
    loops = [node]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    return loops, loops[-1].body


def _strategy(start: Schedule, tiling: Tiling) -> tuple[Schedule, list[list[str]]]:
    """The strategies applied to ``start`` (the kernel's own loops), and for each top-level
    nest the loops of its outer band (the candidates for ``parallel``)."""
    poly = start.poly
    nests = list(poly.kernel.body)
    # The initial tree has one top-level node per kernel body node; verbs keep loop names.
    tree = start.tree
    top = tree.children if isinstance(tree, TreeSequence) else (tree,)
    names = [_band_chain(t) for t in top]
    s = start
    bands: list[list[str]] = []
    i = 0
    changed = False
    while i < len(nests):
        nest = nests[i]
        if not isinstance(nest, Loop):
            i += 1
            continue
        reduction = _reduction_nest(nest)
        if reduction is not None:
            # Fuse following elementwise nests that read this nest's output point for point.
            epilogue = []
            while i + 1 + len(epilogue) < len(nests):
                e = _pointwise_consumer(nests[i + 1 + len(epilogue)], reduction)
                if e is None:
                    break
                epilogue.append(e)
            try:
                s, outer = _tile_reduction(s, reduction, names[i],
                                           [names[i + 1 + k] for k in range(len(epilogue))],
                                           tiling)
            except _NotApplicable:
                bands.append(names[i][:1])
                i += 1
                continue
            bands.extend(outer)
            i += 1 + len(epilogue)
            changed = True
            continue
        vec = _vector_nest(s, nest, names[i])
        if vec is None:
            bands.append(names[i][:1])
        else:
            s, outer = vec
            bands.append(outer)
            changed = True
        i += 1
    if not changed:
        return start, [n[:1] for n in names if n]
    return s, bands


def _band_chain(node: object) -> list[str]:
    """The loops perfectly nested from ``node`` down (empty for a statement), then, below a
    statement followed by a loop (a reduction's init and update), that loop's chain."""
    out = []
    while isinstance(node, Band):
        out.append(node.name)
        node = node.child
    if isinstance(node, TreeSequence) and len(node.children) == 2 and \
            isinstance(node.children[1], Band):
        out += _band_chain(node.children[1])
    return out


@dataclass(frozen=True)
class _Reduction:
    outer: list[Loop]
    init: Stmt
    inner: list[Loop]
    update: Stmt


def _reduction_nest(nest: Loop) -> _Reduction | None:
    outer, body = _chain(nest)
    if len(body) != 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
        return None
    inner, leaf = _chain(body[1])
    if len(leaf) != 1 or not isinstance(leaf[0], Stmt):
        return None
    init, update = body[0], leaf[0]
    names = [lp.iterator for lp in outer]
    if init.guards or update.write != init.write or len(outer) < 2:
        return None
    if _offsets(init.write.index, names) is None:
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in outer):
        return None
    return _Reduction(outer, init, inner, update)


def _pointwise_consumer(nest: object, red: _Reduction) -> Stmt | None:
    """A nest ``for i...: S: y[i...] = f(out[i...], ...)`` over exactly the reduction's output."""
    if not isinstance(nest, Loop):
        return None
    loops, body = _chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt) or len(loops) != len(red.outer):
        return None
    stmt = body[0]
    if stmt.guards or any((a.lower, a.upper) != (b.lower, b.upper)
                          for a, b in zip(loops, red.outer, strict=True)):
        return None
    names = [lp.iterator for lp in loops]
    if len(stmt.write.index) != len(names) or _offsets(stmt.write.index, names) is None:
        return None
    out = _offsets(red.init.write.index, [lp.iterator for lp in red.outer])
    reads_out = [ld for ld in loads(stmt.body) if ld.buffer == red.init.write.buffer]
    if not reads_out or any(len(ld.index) != len(names) or _offsets(ld.index, names) != out
                            for ld in reads_out):
        return None
    return stmt


def _offsets(index: Sequence[Index], names: Sequence[str]) -> tuple[int, ...] | None:
    """The constants ``c`` with ``index == (m + c[0], ..., n + c[-1])`` for the last loops
    ``m ... n`` of ``names`` (a point of the nest, or its place in a zero-bordered buffer), or
    None when ``index`` is not such a translate."""
    if len(index) > len(names):
        return None
    out = []
    for i, n in zip(index, names[len(names) - len(index):], strict=True):
        shift = i - Aff.var(n) if isinstance(i, Aff) else None
        if shift is None or not shift.is_const:
            return None
        out.append(shift.const)
    return tuple(out)


def _tile_reduction(s: Schedule, red: _Reduction, loops: list[str],
                    epilogue_loops: list[list[str]], tiling: Tiling
                    ) -> tuple[Schedule, list[list[str]]]:
    """Register-tile the reduction nest whose loops (in ``s``) are ``loops`` (outer loops, then
    the reduction loops), fusing the epilogue nests (their loops ``epilogue_loops``)."""
    poly = s.poly
    names = [lp.iterator for lp in red.outer]
    vec = names[-1]
    if _extent(red.outer, vec) < 8:
        raise _NotApplicable
    # Unroll the outer loop that the vector-moving loads do not depend on: the rows of the
    # register tile then share each vector load (conv: output pixels share a weight vector).
    moving = [ld for ld in loads(red.update.body) if ld.buffer != red.update.write.buffer
              and ld.index and isinstance(ld.index[-1], Aff) and ld.index[-1].coeff(vec)]

    def used_by_moving(n: str) -> bool:
        return any(not isinstance(i, Aff) or i.coeff(n) for ld in moving for i in ld.index)

    candidates = [n for n in names[:-1] if not used_by_moving(n) and _extent(red.outer, n) >= 2]
    row = candidates[-1] if candidates else None
    u = tiling.rows(_extent(red.outer, row)) if row else 1
    v = tiling.vector
    # Pair up two vector tiles of a loop the moving loads depend on (a conv's output-channel
    # blocks) when the rows divide into tiles of ``paired_rows`` (or one fewer): every loaded
    # row value then feeds four vectors, not two. (Not for GEMMs of power-of-two sizes, whose
    # rows do not divide so; their tiles stay as they were measured.)
    pair = None
    if row and tiling.paired_rows:
        extent = _extent(red.outer, row)
        paired = [p for p in (tiling.paired_rows, tiling.paired_rows - 1) if extent % p == 0]
        partners = [n for n in names[:-1] if n != row and used_by_moving(n)
                    and _extent(red.outer, n) % 2 == 0]
        if paired and partners:
            pair, u = partners[-1], paired[0]
    # Loop order of the tiles: sweeping the other loops inside a vector tile re-reads the
    # other operands once per vector tile; the kernel's own order re-reads the moving operand
    # (conv weights) once per outer iteration. Take the smaller traffic (measured on ResNet50's
    # convolutions: 512->2048 at 7x7 goes from 37 to 54 GF/s, 256->128 at 56x56 stays).
    order = list(range(len(names)))
    sizes = {b.name: b.nbytes for b in poly.kernel.buffers}
    moving_bytes = sum(sizes[b] for b in {ld.buffer for ld in moving})
    other_bytes = sum(sizes[b] for b in {ld.buffer for ld in loads(red.update.body)}
                      if b != red.update.write.buffer and b not in {ld.buffer for ld in moving})
    # The moving operand is swept once per row tile of every outer iteration.
    sweeps = int(np.prod([_extent(red.outer, n) for n in names if n not in (vec, row)]))
    sweeps *= -(-_extent(red.outer, row) // u) if row else 1
    if other_bytes * -(-_extent(red.outer, vec) // v) < moving_bytes * sweeps:
        order = [len(names) - 1, *range(len(names) - 1)]
    ragged = bool(_extent(red.outer, vec) % v or (row and _extent(red.outer, row) % u))
    itemsize = max(np.dtype(b.dtype).itemsize for b in poly.kernel.buffers
                   if b.name in {ld.buffer for ld in moving}) if moving else 4
    chunking = _reduction_split(red, tiling.chunk_bytes // (v * (2 if pair else 1) * itemsize))
    n_outer = len(names)
    # The register tile: the row loop (unrolled) by u, the vector loop by v.
    splits = [(names.index(row), u)] if row else []
    if pair:
        splits.append((names.index(pair), 2))
    splits.append((n_outer - 1, v))

    def tile(s: Schedule, outer: list[str], reduction: list[str],
             at: int | None = None, band: tuple[int, int] | None = None
             ) -> tuple[Schedule, list[str], list[str], list[str]]:
        """Floor-split the row and vector loops of the perfect nest ``outer`` (the reduction
        loops inside it; cut by ``chunking`` into chunk loops at tile position ``at`` when
        given) and order the tile loops before the reduction loops and the points:
        (schedule, tile loops, point loops: row, vector, tile loops: vector, row).
        ``band = (k, size)`` also cuts loop ``k`` in blocks of ``size``, its point loop right
        after its block loop (after the chunk loop when there is one)."""
        current, tiles, points = list(outer), list(outer), []
        made = {}
        for k, size in splits:
            s, (t, p) = _created(s, Split(outer[k], size, floor=True))
            tiles[k] = made[k] = t
            current[current.index(outer[k]):current.index(outer[k]) + 1] = [t, p]
            points.append(p)
        block_point = None
        if band is not None:
            k, size = band
            s, (block, block_point) = _created(s, Split(outer[k], size, floor=True))
            tiles[k] = block
            current[current.index(outer[k]):current.index(outer[k]) + 1] = [block, block_point]
        tiles = [tiles[k] for k in order]
        if block_point is not None:
            tiles.insert(tiles.index(block) + 1, block_point)
        inner = list(reduction)
        current += inner
        if at is not None:  # the chunk loops: whole leading loops, then the chunked one
            whole, size = chunking
            cut = reduction[whole]
            s, (chunk, first) = _created(s, Split(cut, size, floor=True))
            tiles[at:at] = [*reduction[:whole], chunk]
            inner = [first, *reduction[whole + 1:]]
            current[current.index(cut):current.index(cut) + 1] = [chunk, first]
        full = [made[k] for k, _ in reversed(splits)]
        want = tiles + inner + points
        if want != current:
            s = s.apply_unverified(Reorder(tuple(want)))
        return s, tiles, points, full

    def finish(s: Schedule, tiles: list[str], full: list[str],
               groups: list[list[str]]) -> Schedule:
        for points in groups:
            for p in points[:-1]:  # (the rows, and the pair)
                s = s.apply_unverified(Unroll(p, 0, mark=True))
            s = s.apply_unverified(Vectorize(points[-1], 0, mark=True))
        # Isolate the full tiles, so their inner loops have constant trip counts (the partial
        # tiles at the edges get their own, general code).
        if ragged:  # (the full tiles of the vector loop first, then of the row loop)
            s = s.apply_unverified(Isolate(tiles[0], tiles[-1], tuple(full)))
        return s

    outer, reduction = loops[:n_outer], loops[n_outer:]
    if chunking is None or (epilogue_loops and ragged):
        for e in epilogue_loops:
            s = s.apply_unverified(Fuse(outer[0], e[0], n_outer))
        s, tiles, points, full = tile(s, outer, [])
        # The point loops over the init, the reduction loops and each epilogue statement.
        s, copies = _created(s, Distribute(points[0]))
        groups = [points] + [list(copies[k:k + len(points)])
                             for k in range(0, len(copies), len(points))]
        s = s.apply_unverified(Reorder((*reduction, *groups[1])))
        return finish(s, tiles, full, groups), [tiles]
    # A long reduction is cut into chunks (cache blocking, see _reduction_split): the operands
    # of one chunk stay in cache while every output tile of a row takes its share. The chunk
    # loops sit after the first loop that really iterates, which stays free to run in parallel
    # (a GEMM: before its row tiles, so one chunk of the packed B panels serves all of them).
    # With an epilogue they sit after the first *tile* loop that iterates (see below).
    sizes_of = dict(splits)
    counts = [-(-_extent(red.outer, names[k]) // sizes_of.get(k, 1)) for k in order]
    extents = [_extent(red.outer, names[k]) for k in order]
    at = next((pos + 1 for pos, c in enumerate(counts if epilogue_loops else extents)
               if c > 1), 1)
    band = None
    if epilogue_loops and at < len(order) and order[at] not in sizes_of:
        # Everything the epilogue is fused with runs per iteration of the loops outside the
        # chunk loop, so they are the only parallel loops: cut the next loop in blocks until
        # they give ``parallel_tiles`` iterations (a conv: blocks of output rows).
        have = int(np.prod(counts[:at]))
        extent = _extent(red.outer, names[order[at]])
        if have < tiling.parallel_tiles and extent > 1:
            size = -(-extent // -(-tiling.parallel_tiles // have))
            if size < extent:
                band = (order[at], size)
    s, copies = _created(s, Distribute(outer[0]))
    update = list(copies[:n_outer])
    s, init_tiles, init_points, full = tile(s, outer, [], band=band)
    s = finish(s, init_tiles, full, [init_points])
    if band is not None:
        at += 1  # (the block loop)
    s, upd_tiles, upd_points, full = tile(s, update, reduction, at, band)
    s = finish(s, upd_tiles, full, [upd_points])
    if ragged:  # (without an epilogue: ragged tiles with one took the unchunked way above)
        return s, [init_tiles, upd_tiles]
    # Each output tile is initialised in the first chunk and finished (the epilogue) in the
    # last, while its accumulators are in registers: one pass over the output per chunk, not
    # two more (which made L1-sized chunks cost more than they saved).
    s = s.apply_unverified(ComputeAt(init_tiles[0], upd_tiles[-1]))
    for e in epilogue_loops:
        s, e_tiles, e_points, _ = tile(s, e, [], band=band)
        s = finish(s, e_tiles, [], [e_points])
        s = s.apply_unverified(ReverseComputeAt(e_tiles[0], upd_tiles[-1]))
    # (With an epilogue, below the chunk loops there are several nests: not one band.)
    return s, [upd_tiles[:at] if epilogue_loops else upd_tiles]


def _reduction_split(red: _Reduction, depth: int) -> tuple[int, int] | None:
    """How a reduction longer than ``depth`` iterations is cut into cache chunks, else None:
    ``(whole, size)`` — its first ``whole`` loops go outside the row tiles entirely (each
    iteration of them holds more than twice ``depth``: a 3x3 conv's input-channel blocks and
    kernel rows), and the next loop is cut in chunks of ``size`` (preferring a divisor of its
    extent) so a chunk is about ``depth`` iterations."""
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in red.inner):
        return None
    extents = [lp.upper.const - lp.lower.const for lp in red.inner]
    if int(np.prod(extents)) <= depth:
        return None
    whole = 0
    while int(np.prod(extents[whole + 1:])) > 2 * depth:
        whole += 1
    inside = int(np.prod(extents[whole + 1:]))
    size = max(1, depth // inside)
    divisors = [d for d in range(size, max(size // 2, 1) - 1, -1) if extents[whole] % d == 0]
    return whole, divisors[0] if divisors else size


def _extent(loops: Sequence[Loop], name: str) -> int:
    for lp in loops:
        if lp.iterator == name:
            return lp.upper.const - lp.lower.const
    raise KeyError(name)


def _vector_nest(s: Schedule, nest: Loop, loops: list[str]
                 ) -> tuple[Schedule, list[str]] | None:
    """The nest's own loops (named ``loops`` in ``s``) with its innermost loop marked for
    vector code, and the loops of its outer band; None if it does not fit."""
    chain, body = _chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt) or len(chain) < 1:
        return None
    stmt = body[0]
    its = list(s.poly.stmts[stmt.name].iterators)
    if stmt.write.index and _offsets(stmt.write.index[-1:], its) is None:
        return None
    transposed = _transposing_loop(stmt, its, chain)
    if transposed is not None:
        # A transpose: lanes run along ``inner`` but a load's contiguous dimension follows
        # ``transposed``. Cut ``inner`` into tiles and run ``transposed`` inside a tile, so the
        # lines the strided loads touch are reused by the next values of ``transposed``.
        width = 16
        across = loops[its.index(transposed)]
        s, (tile, point) = _created(s, Split(loops[-1], width, floor=True))
        outer = [n for n in loops[:-1] if n != across] + [tile]
        if [*outer, across, point] != [*loops[:-1], tile, point]:
            s = s.apply_unverified(Reorder((*outer, across, point)))
        return s.apply_unverified(Vectorize(point, 0, mark=True)), outer
    return s.apply_unverified(Vectorize(loops[-1], 0, mark=True)), loops[:-1]


def _transposing_loop(stmt: Stmt, its: list[str], loops: list[Loop]) -> str | None:
    """The loop along which some load of ``stmt`` is contiguous, when that is not the innermost
    loop (and the innermost loop moves that load with a stride)."""
    inner = its[-1]
    for ld in loads(stmt.body):
        last = ld.index[-1] if ld.index else None
        if not isinstance(last, Aff) or last.coeff(inner) or len(last.terms) != 1:
            continue
        name = last.terms[0][0]
        if last.terms[0][1] == 1 and name in its[:-1] and any(
                isinstance(i, Aff) and i.coeff(inner) for i in ld.index) and \
                _extent(loops, name) >= 8:
            return name
    return None
