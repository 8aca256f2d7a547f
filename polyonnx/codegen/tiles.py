"""Register tiles as a plan: which loop nests of a loop AST keep their accumulators in
registers, where those accumulators are, which of their loads are re-read from memory (register
pressure) or prefetched (streamed operands), and which neighbouring nests (an init, an
epilogue) work on the tile's registers too. Pure analysis of the loop AST, the kernel's
accesses and the :class:`~polyonnx.codegen.config.CodegenConfig`: no LLVM (its emission is
:mod:`polyonnx.codegen.tile_emit`).

A register tile is a reduction, a chain of perfectly nested loops, around ``unroll`` loops of
constant trip counts (rows; a conv's pairs of channel blocks; maybe none) around one ``vector``
loop of constant trip count over one statement that reads and writes one element per tile
point, at an index none of the chain's loops moves (``acc[r, v] += ...`` under ``for ic, kh, kw``).

Example:
    >>> from polyonnx.codegen.access import Accesses
    >>> from polyonnx.codegen.config import CodegenConfig
    >>> from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
    >>> i, r = Aff.var("i"), Aff.var("r")
    >>> acc = Load("y", (i,), "float32") + Load("a", (r, i), "float32")
    >>> kernel = Kernel("k", (Buffer("a", "float32", (5, 16), "input"),
    ...                       Buffer("y", "float32", (16,), "output")),
    ...                 (Loop("r", 0, 5, (Loop("i", 0, 16, (Stmt("S0", Access("y", (i,)), acc),
    ...                                                     )),)),))
    >>> def loop(var, n, body):
    ...     return la.For(var, la.IConst(0), la.IOp("lt", (la.IVar(var), la.IConst(n))), 1, body)
    >>> call = la.Call("S0", (la.IVar("c0"), la.IVar("c2")))
    >>> ast = loop("c0", 5, (la.Mark("unroll", (loop("c1", 1, (la.Mark("vector", (
    ...     loop("c2", 16, (call,)),)),)),)),))
    >>> tile = register_tile(ast, Accesses.of(kernel), CodegenConfig(vector_bits=256))
    >>> tile.width, [(a.position, a.step, a.offset) for a in tile.accumulators]
    (8, [((0,), 0, 0), ((0,), 1, 8)])
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import cast

import numpy as np

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import Accesses, linear, static_trip
from polyonnx.codegen.config import CodegenConfig
from polyonnx.krnl.ir import Aff, Load, loads

MAX_UNROLL = 64
"""An ``unroll`` loop of at most this many iterations is emitted straight-line."""
MAX_VECTOR_STEPS = 8
"""A vector loop with a constant trip count up to this many vectors is emitted straight-line
(a register tile); a longer one becomes a loop."""


@dataclass(frozen=True, slots=True)
class Accumulator:
    """One vector of a register tile."""

    position: tuple[int, ...]
    """The iterations of the tile's unrolled loops, outermost first."""
    step: int
    """The vector step of the vector loop."""
    offset: int
    """How many elements its first element lies after the first accumulator's."""


Reread = tuple[Load, tuple[int, ...], int]
"""A vector load at one tile position and vector step of a register tile."""


@dataclass(frozen=True, slots=True)
class RegisterTile:
    """A reduction loop nest whose accumulators live in registers (stack slots, which LLVM
    promotes) while it runs."""

    reduction: la.For
    """The outermost loop of the reduction."""
    unrolled: tuple[la.For, ...]
    vector: la.For
    call: la.Call
    """The statement instance the tile computes (under :attr:`vector`)."""
    width: int
    """Lanes of each accumulator vector."""
    accumulators: tuple[Accumulator, ...]
    """In emission order: tile positions outermost first, then the vector step."""
    rereads: frozenset[Reread]
    """The vector-load instances to read from memory at each use (see :func:`rereads`)."""
    streams: frozenset[Load]
    """The loads to prefetch ahead (see :func:`streamed`)."""


@dataclass(frozen=True, slots=True)
class TileGroup:
    """A register tile with the nests next to it that work on its registers: an ``init``
    right before it that writes every accumulator (a conv's bias, plus the residual in memory
    when the sums start from it) and an ``epilogue`` right after it that rewrites every
    accumulator from its value (the residual Add and the ReLU). Either may be the only branch
    of an ``if`` (a chunked reduction's first or last chunk)."""

    init: la.LNode | None
    tile: RegisterTile
    epilogue: la.LNode | None

    @property
    def size(self) -> int:
        """How many sibling AST nodes the group is."""
        return (self.init is not None) + 1 + (self.epilogue is not None)


def tile_group(
    nodes: tuple[la.LNode, ...], i: int, accesses: Accesses, config: CodegenConfig
) -> TileGroup | None:
    """The tile group that starts at ``nodes[i]`` (an init, or the tile itself), if any."""
    init = nodes[i] if isinstance(nodes[i], la.Mark | la.If) else None
    at = i + (init is not None)
    if at >= len(nodes) or not isinstance(nodes[at], la.For):
        return None
    tile = register_tile(cast(la.For, nodes[at]), accesses, config)
    if tile is None or (init is not None and not covers(init, tile, accesses, config)):
        return None
    after = nodes[at + 1] if at + 1 < len(nodes) else None
    epilogue = after if after is not None and covers(after, tile, accesses, config) else None
    return TileGroup(init, tile, epilogue)


def register_tile(node: la.For, accesses: Accesses, config: CodegenConfig) -> RegisterTile | None:
    """The register tile whose reduction is ``node``, if it is one."""
    loops = reduction_loops(node)
    chain, cur = [loop.iterator for loop in loops], loops[-1]
    nest = unrolled_vector_nest(cur.body)
    if nest is None:
        return None
    unrolled, vec = nest
    starts = [linear(loop.init) for loop in (*unrolled, vec)]
    if any(lin is None or any(lin.get(c, 0) for c in chain) for lin in starts):
        return None  # the tile moves with the reduction (skewed or triangular loops)
    call = cast(la.Call, vec.body[0])
    iterators, stmt = accesses.statements[call.stmt]
    width = accesses.width((call,), config.vector_bits)
    vtrip = static_trip(vec)
    if (
        vtrip is None
        or vtrip % width
        or vtrip > MAX_VECTOR_STEPS * width
        or accesses.lane_steps(call, vec.iterator) is None
        or stmt.guards
        or accesses.buffers[stmt.write.buffer].dtype == "bool"
    ):
        return None
    args = dict(zip(iterators, call.args, strict=True))
    for ix in stmt.write.index:
        if not isinstance(ix, Aff):
            return None
        for name, _ in ix.terms:
            lin = linear(args[name])
            if lin is None or any(lin.get(c, 0) for c in chain):
                return None
    same = [ld for ld in loads(stmt.body) if ld.buffer == stmt.write.buffer]
    if len(same) != 1 or same[0].index != stmt.write.index:
        return None
    accumulators = _accumulators(unrolled, vec, call, width, accesses)
    offsets = sorted(a.offset for a in accumulators)
    if any(b - a < width for a, b in itertools.pairwise(offsets)):
        # Two accumulators would hold one element (an unrolled loop that does not move the
        # written index is a reduction loop, not a row): each would add its own part and the
        # last store would drop the others'.
        return None
    return RegisterTile(
        node,
        unrolled,
        vec,
        call,
        width,
        accumulators,
        rereads(unrolled, vec, call, len(accumulators), accesses, config),
        streamed(node, unrolled, vec, call, accesses, config),
    )


def reduction_loops(node: la.For) -> list[la.For]:
    """``node`` and the loops perfectly nested in it: a register tile's reduction loops (its
    rows and vector loop sit under marks, not directly)."""
    loops = [node]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], la.For):
        loops.append(loops[-1].body[0])
    return loops


def unrolled_vector_nest(body: tuple[la.LNode, ...]) -> tuple[tuple[la.For, ...], la.For] | None:
    """(unrolled loops, vector loop) when ``body`` is ``unroll`` loops of constant trip counts
    (none or more), one inside the other, around one ``vector`` loop of one statement."""
    unrolled: list[la.For] = []
    while len(body) == 1 and (loop := la.marked_loop(body[0], "unroll")) is not None:
        trip = static_trip(loop)
        if trip is None or trip > MAX_UNROLL or loop.inc != 1:
            return None
        unrolled.append(loop)
        body = loop.body
    vec = la.marked_loop(body[0], "vector") if len(body) == 1 else None
    if vec is None:
        return None
    if len(vec.body) != 1 or not isinstance(vec.body[0], la.Call) or vec.inc != 1:
        return None
    return tuple(unrolled), vec


def nest_call(nest: la.LNode) -> la.Call:
    """The statement instance of a straight-line nest (an init or epilogue of a tile group,
    without its ``if``)."""
    parsed = unrolled_vector_nest((nest,))
    assert parsed is not None
    return cast(la.Call, parsed[1].body[0])


def covers(nest: la.LNode, tile: RegisterTile, accesses: Accesses, config: CodegenConfig) -> bool:
    """Whether ``nest`` is a straight-line nest of one statement over the same unrolled and
    vector loops as ``tile`` writing, at each point, the tile's accumulator there, and reading
    no other element of it (an epilogue reads the sum there; an init, the value in memory the
    sums start from: a residual updated in place). The nest may be the only branch of an
    ``if`` (a chunked reduction's first or last chunk)."""
    if isinstance(nest, la.If):
        if len(nest.then) != 1 or nest.orelse:
            return False
        nest = nest.then[0]
    parsed = unrolled_vector_nest((nest,))
    if parsed is None:
        return False
    loops, theirs = (*parsed[0], parsed[1]), (*tile.unrolled, tile.vector)
    call, tile_call = cast(la.Call, parsed[1].body[0]), tile.call
    if len(loops) != len(theirs) or any(
        a.init != b.init or a.inc != 1 or static_trip(a) != static_trip(b)
        for a, b in zip(loops, theirs, strict=True)
    ):
        return False
    _, stmt = accesses.statements[call.stmt]
    _, tile_stmt = accesses.statements[tile_call.stmt]
    if (
        stmt.guards
        or stmt.write.buffer != tile_stmt.write.buffer
        or accesses.width((call,), config.vector_bits) != tile.width
        or accesses.lane_steps(call, parsed[1].iterator) is None
    ):
        return False
    rename = {a.iterator: b.iterator for a, b in zip(loops, theirs, strict=True)}
    element = accesses.element(call, stmt.write.index, rename)
    if element is None or element != accesses.element(tile_call, tile_stmt.write.index, {}):
        return False
    return all(
        ld.index == stmt.write.index for ld in loads(stmt.body) if ld.buffer == stmt.write.buffer
    )


def _accumulators(
    unrolled: tuple[la.For, ...], vec: la.For, call: la.Call, width: int, accesses: Accesses
) -> tuple[Accumulator, ...]:
    """Each accumulator with its element offset from the first one's: the written index is
    affine in the statement iterators, which are linear in the unrolled and vector loops
    (:func:`register_tile` checked both)."""
    _, stmt = accesses.statements[call.stmt]
    per_step = [
        accesses.element_step(
            stmt.write.buffer, stmt.write.index, accesses.iterator_steps(call, loop.iterator) or {}
        )
        for loop in (*unrolled, vec)
    ]
    trips = [range(static_trip(loop) or 0) for loop in unrolled]
    return tuple(
        Accumulator(
            position, j, sum(p * n for p, n in zip((*position, j * width), per_step, strict=True))
        )
        for position in itertools.product(*trips)
        for j in range((static_trip(vec) or 0) // width)
    )


def rereads(
    unrolled: tuple[la.For, ...],
    vec: la.For,
    call: la.Call,
    accumulators: int,
    accesses: Accesses,
    config: CodegenConfig,
) -> frozenset[Reread]:
    """The vector-load instances of a register tile to read from memory at each use.

    Each iteration of the reduction holds the accumulators, every distinct vector it loads
    (a conv's weight vectors: one per channel block and vector step) and a broadcast value,
    if it has one.
    When that is more than the register file (a 7 x 2 x 2 conv tile: 28 + 4 + 1 = 33 of
    AVX-512's 32), LLVM spills accumulators (a store and a reload per iteration). Instead
    vectors over the budget are loaded volatile at each of their uses, which keeps LLVM
    from merging them into one value: they become memory operands of their FMAs, an extra
    load each use but the first, which the load ports absorb. The vectors used least are
    picked first: a load each row makes for itself (a depthwise conv's input under 7 rows)
    is used once, so reading it as a memory operand costs no load at all; a vector the rows
    share (the weights) costs one per row. (Re-reading the shared weights of a depthwise
    conv, 7 rows on AVX2, made two loads per FMA: 26 us for 960 channels at 7x7 on Zen 3,
    13 us with its input as the memory operands.)
    """
    _, stmt = accesses.statements[call.stmt]
    steps = accesses.lane_steps(call, vec.iterator)
    assert steps is not None  # register_tile checked it
    trips = [static_trip(loop) or 0 for loop in unrolled]
    vector_steps = (static_trip(vec) or 0) // accesses.width((call,), config.vector_bits)
    loop_steps = [accesses.iterator_steps(call, loop.iterator) or {} for loop in unrolled]

    def moved_by(ld: Load) -> list[int]:
        """The unrolled loops (by position) the load's address moves with."""
        return [
            k for k, per in enumerate(loop_steps) if accesses.element_step(ld.buffer, ld.index, per)
        ]

    vectors, scalars = [], 0
    for ld in dict.fromkeys(loads(stmt.body)):
        if ld.buffer == stmt.write.buffer or any(not isinstance(i, Aff) for i in ld.index):
            continue
        if accesses.element_step(ld.buffer, ld.index, steps) == 1:
            vectors.append((ld, moved_by(ld)))
        else:
            scalars = 1  # (a broadcast: one register, reused by the loads that follow)
    copies = sum(int(np.prod([trips[k] for k in moved])) * vector_steps for _, moved in vectors)
    excess = accumulators + copies + scalars - config.vector_registers
    if excess <= 0 or not vectors:
        return frozenset()
    chosen: set[Reread] = set()
    # (uses of each copy: the tile positions of the loops it does not move with; the last
    # loaded first among equals)
    for ld, moved in sorted(
        reversed(vectors),
        key=lambda v: int(np.prod([t for k, t in enumerate(trips) if k not in v[1]])),
    ):
        # Its distinct copies in emission order (tile positions outermost first, then the
        # vector step); the last of them are re-read.
        distinct = sorted(
            {
                (tuple(p[k] for k in moved), j)
                for p in itertools.product(*map(range, trips))
                for j in range(vector_steps)
            }
        )
        picked = set(distinct[-excess:])
        excess -= len(picked)
        chosen |= {
            (ld, p, j)
            for p in itertools.product(*map(range, trips))
            for j in range(vector_steps)
            if (tuple(p[k] for k in moved), j) in picked
        }
        if excess <= 0:
            break
    return frozenset(chosen)


def streamed(
    reduction: la.For,
    unrolled: tuple[la.For, ...],
    vec: la.For,
    call: la.Call,
    accesses: Accesses,
    config: CodegenConfig,
) -> frozenset[Load]:
    """The vector loads of a register tile's ``reduction`` that stream through an operand
    larger than ``config.prefetch_above`` bytes, moving forward with the innermost reduction
    loop, the same for every row of the tile (its ``unrolled`` loops).

    The first row tile of each cache chunk fetches that chunk's operand (a conv's weights);
    the hardware prefetchers do not run far enough ahead of it, so each of those loads waits
    on L3 or memory. A software prefetch ahead in the same stream (into the next chunk at the
    end of one) hides that. Operands that fit in L2 get none: there it only costs load-port
    slots. Nor do loads each row makes for itself (a depthwise conv's or a pool's windows
    over its input): the rows' windows overlap, one row's next tap is its neighbour's
    current one, and a prefetch per row and tap only took load-port slots (a depthwise conv
    of 960 channels at 7x7 on Zen 3, 7 rows, 14 prefetches per tap: 19 -> 16.5 us).
    """
    if not config.prefetch_above:
        return frozenset()
    inner = reduction_loops(reduction)[-1]
    _, stmt = accesses.statements[call.stmt]
    lanes = accesses.lane_steps(call, vec.iterator) or {}
    along = accesses.iterator_steps(call, inner.iterator) or {}
    rows = [accesses.iterator_steps(call, loop.iterator) or {} for loop in unrolled]
    return frozenset(
        ld
        for ld in loads(stmt.body)
        if ld.buffer != stmt.write.buffer
        and all(isinstance(i, Aff) for i in ld.index)
        and accesses.buffers[ld.buffer].nbytes > config.prefetch_above
        and accesses.element_step(ld.buffer, ld.index, lanes) == 1
        and accesses.element_step(ld.buffer, ld.index, along) > 0
        and not any(accesses.element_step(ld.buffer, ld.index, per) for per in rows)
    )
