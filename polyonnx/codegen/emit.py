"""LLVM IR for one kernel: the loop AST (from isl) with each statement's scalar body inlined.

A kernel becomes ``i32 @name(ptr noalias %buf0, ...)`` taking its buffers in
``Kernel.buffers`` order and returning 0, or a non-zero status when a run-time check fails
(a computed index out of range, or any access out of range in checked mode).

The scalar arithmetic of statement bodies is :mod:`polyonnx.codegen.scalar`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import Accesses, linear, static_trip
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.frame import Frame, close_frame, open_frame
from polyonnx.codegen.llvm_types import (
    I8,
    I32,
    I64,
    PTR,
    constant,
    declare,
    like,
    memory_type,
    volatile_load,
    whole,
    zero,
)
from polyonnx.codegen.parallel import can_share, parallel_children, run_on_pool
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import (
    Aff,
    Binary,
    Cast,
    Const,
    Expr,
    Iter,
    Kernel,
    Load,
    Select,
    Unary,
    loads,
)

MAX_UNROLL = 64
MAX_VECTOR_STEPS = 8
"""A vector loop with a constant trip count up to this many vectors is emitted straight-line
(a register tile); a longer one becomes a loop."""
PREFETCH_BYTES = 1024
"""How far ahead a register tile's reduction prefetches a streamed operand (see
:meth:`KernelEmitter._streamed`): 8 iterations of a conv tile's weights (128 bytes per
channel block each). 1 KiB ran ResNet50's 7x7 and 14x14 layers 2-9% faster per layer; 512
bytes and 2 KiB no better, 4 KiB worse."""


@dataclass
class KernelEmitter:
    """Emits one kernel function into ``module``."""

    module: ir.Module
    kernel: Kernel
    accesses: Accesses
    config: CodegenConfig
    frame: Frame = field(init=False)
    """The function being emitted: the kernel's, or an outlined parallel loop body."""
    _parallel_loops: Iterator[int] = field(init=False, default_factory=itertools.count)
    """Numbers the parallel loops outlined (their functions' names)."""
    _lanes: tuple[int, dict[str, int]] | None = field(init=False, default=None)
    """Inside a vector loop: (width, element step of each statement iterator per lane)."""
    _registers: dict[tuple[str | int, ...], ir.Value] | None = field(init=False, default=None)
    """Inside a promoted reduction (see :meth:`_promoted_for`): the stack slot that holds the
    accumulator of each (statement, unrolled iterations..., vector step) of the register
    tile."""
    _tile_position: tuple[int, ...] = field(init=False, default=())
    """The iterations of the enclosing ``unroll`` loops being emitted, outermost first."""
    _vector_step: int = field(init=False, default=0)
    _slot: tuple[ir.Value, str, ir.Type] | None = field(init=False, default=None)
    """While emitting a promoted accumulator's statement: (its slot, buffer, vector type)."""
    _reread: frozenset[tuple[Load, tuple[int, ...], int]] = field(init=False,
                                                                  default=frozenset())
    """Inside a promoted reduction: the (vector load, tile position, vector step) instances
    read from memory at each use (see :meth:`_rereads`)."""
    _into_slots: bool = field(init=False, default=True)
    """Whether a statement of a promoted register tile writes its accumulator's slot (init,
    reduction) or memory (a tile group's epilogue, see :meth:`_tile_group`)."""
    _initialising: bool = field(init=False, default=False)
    """While emitting a tile group's init: its statement reads the accumulator's element from
    memory (a residual the sums start from), its slot holds nothing yet."""
    _filled: set[tuple[int, ...]] = field(init=False, default_factory=set)
    """The tile points a tile group's init or epilogue has written."""
    _streams: frozenset[Load] = field(init=False, default=frozenset())
    """Inside a promoted reduction: the loads to prefetch ahead (see :meth:`_streamed`)."""
    _prefetched: set[tuple[ir.Block, str, object]] = field(init=False, default_factory=set)
    """(block, buffer, element offset) of the prefetches emitted."""

    def emit(self, ast: tuple[la.LNode, ...]) -> ir.Function:
        """The kernel's function, its loops ``ast``."""
        fnty = ir.FunctionType(I32, [PTR] * len(self.kernel.buffers))
        fn = ir.Function(self.module, fnty, name=self.kernel.name)
        fn.attributes.add("nounwind")
        for arg, buf in zip(fn.args, self.kernel.buffers, strict=True):
            arg.name = "b_" + "".join(ch if ch.isalnum() else "_" for ch in buf.name)
            arg.add_attribute("noalias")
        pointers = {buf.name: arg for buf, arg in zip(self.kernel.buffers, fn.args, strict=True)}
        self.frame = open_frame(fn, pointers, self._declare)
        self._nodes(ast, {})
        close_frame(self.frame)
        return fn

    # ------------------------------------------------------------------ loop structure

    def _nodes(self, nodes: tuple[la.LNode, ...], env: dict[str, ir.Value]) -> None:
        i = 0
        while i < len(nodes):
            taken = self._tile_group(nodes, i, env)
            if taken:
                i += taken
                continue
            node = nodes[i]
            i += 1
            if isinstance(node, la.For):  # (not a register tile: _tile_group looked)
                self._plain_for(node, env)
            elif isinstance(node, la.If):
                self._if(node, env)
            elif isinstance(node, la.Mark) and node.name == "vector" and len(node.body) == 1 \
                    and isinstance(node.body[0], la.For):
                self._vector_for(node.body[0], env)
            elif isinstance(node, la.Mark) and node.name == "unroll" and len(node.body) == 1 \
                    and isinstance(node.body[0], la.For):
                self._unrolled_for(node.body[0], env)
            elif isinstance(node, la.Mark) and node.name.split()[0] == "parallel" \
                    and self.config.threads > 1 and not self.frame.outlined:
                self._parallel_mark(node, env)
            elif isinstance(node, la.Mark):
                self._nodes(node.body, env)
            else:
                self._call(node, env)

    def _for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        if self._registers is None and self._lanes is None:
            tile = self._register_tile(node)
            if tile is not None:
                self._promoted_for(node, env, *tile)
                return
        self._plain_for(node, env)

    def _plain_for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        b = self.frame.builder
        init = self.frame.index.expr(node.init, env)
        pre = b.block
        header = self.frame.fn.append_basic_block(f"{node.iterator}.header")
        body = self.frame.fn.append_basic_block(f"{node.iterator}.body")
        exit_ = self.frame.fn.append_basic_block(f"{node.iterator}.exit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=node.iterator)
        iv.add_incoming(init, pre)
        inner = {**env, node.iterator: iv}
        b.cbranch(self.frame.index.expr(node.cond, inner), body, exit_)
        b.position_at_end(body)
        self._nodes(node.body, inner)
        nxt = b.add(iv, ir.Constant(I64, node.inc), name=f"{node.iterator}.next", flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(exit_)

    def _parallel_mark(self, mark: la.Mark, env: dict[str, ir.Value]) -> None:
        """A ``parallel`` mark's body, its parallel loops run on the thread pool
        (:mod:`polyonnx.codegen.parallel`)."""
        for node, on_pool in parallel_children(mark, self.config.threads):
            if on_pool and can_share(node):
                name = f"{self.frame.fn.name}.parallel{next(self._parallel_loops)}"
                run_on_pool(self.frame, node, env, name=name, threads=self.config.threads,
                            declare=self._declare, emit_chunk=self._chunk)
            elif on_pool:
                self._for(node, env)
            else:
                self._nodes((node,), env)

    def _chunk(self, frame: Frame, loop: la.For, env: dict[str, ir.Value]) -> None:
        with self._in(frame):
            self._for(loop, env)

    @contextmanager
    def _in(self, frame: Frame) -> Iterator[None]:
        """Emit into ``frame`` (an outlined function) for the duration."""
        outer, self.frame = self.frame, frame
        try:
            yield
        finally:
            self.frame = outer

    # ------------------------------------------------------------------ register tiles

    def _register_tile(self, node: la.For
                       ) -> tuple[tuple[la.For, ...], la.For, la.Call] | None:
        """(unrolled loops, vector loop, statement) when ``node`` is a reduction around a
        register tile: a chain of loops down to ``unroll`` loops (rows; a conv's pairs of
        channel blocks) of ``vector`` steps of one statement that reads and writes one element
        per tile point, at an index none of the chain's loops moves (``acc[r, v] += ...``
        under ``for ic, kh, kw``)."""
        loops = _reduction_loops(node)
        chain, cur = [loop.iterator for loop in loops], loops[-1]
        nest = _unrolled_vector_nest(cur.body)
        if nest is None:
            return None
        unrolled, vec = nest
        starts = [linear(loop.init) for loop in (*unrolled, vec)]
        if any(lin is None or any(lin.get(c, 0) for c in chain) for lin in starts):
            return None  # the tile moves with the reduction (skewed or triangular loops)
        call = vec.body[0]
        iterators, stmt = self.accesses.statements[call.stmt]
        width = self.accesses.width((call,), self.config.vector_bits)
        vtrip = static_trip(vec)
        if (vtrip is None or vtrip % width or vtrip > MAX_VECTOR_STEPS * width
                or self.accesses.lane_steps(call, vec.iterator) is None or stmt.guards
                or self.accesses.buffers[stmt.write.buffer].dtype == "bool"):
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
        return unrolled, vec, call

    def _promoted_for(self, node: la.For, env: dict[str, ir.Value],
                      unrolled: tuple[la.For, ...], vec: la.For, call: la.Call,
                      places: list[_Accumulator] | None = None) -> None:
        """Emit the reduction ``node`` with the tile's accumulators in stack slots. LLVM turns
        the slots into registers (they alias nothing), which it does not reliably do for the
        buffer itself once other loads and stores of it follow the loop (a fused epilogue).
        Alone, the tile is loaded from memory before the loop and stored after it; within a
        tile group (:meth:`_tile_group`), ``places`` come initialised and are left to the
        epilogue."""
        alone = places is None
        if places is None:
            places = self._accumulators(env, unrolled, vec, call)
            self._load_accumulators(places)
        self._registers = self._slots_of(call.stmt, places)
        self._reread = self._rereads(unrolled, vec, call, len(places))
        self._streams = self._streamed(node, vec, call)
        try:
            self._plain_for(node, env)
        finally:
            self._registers, self._reread, self._streams = None, frozenset(), frozenset()
        if alone:
            self._store_accumulators(places)

    def _accumulators(self, env: dict[str, ir.Value], unrolled: tuple[la.For, ...],
                      vec: la.For, call: la.Call) -> list[_Accumulator]:
        """A stack slot and the address of each accumulator of a register tile."""
        b = self.frame.builder
        iterators, stmt = self.accesses.statements[call.stmt]
        width = self.accesses.width((call,), self.config.vector_bits)
        steps = self.accesses.lane_steps(call, vec.iterator)
        buf = self.accesses.buffers[stmt.write.buffer]
        vty = ir.VectorType(memory_type(buf.dtype), width)
        used = {n for ix in stmt.write.index for n, _ in ix.terms}

        def address(position: tuple[int, ...], j: int) -> ir.Value:
            """The accumulator's address computed from the tile's loop values."""
            tile_env = dict(env)
            for loop, k in zip(unrolled, position, strict=True):
                start = self.frame.index.expr(loop.init, tile_env)
                tile_env[loop.iterator] = self.frame.index.int("add", start, ir.Constant(I64, k))
            lane = self.frame.index.int("add", self.frame.index.expr(vec.init, tile_env),
                             ir.Constant(I64, j * width))
            point = {it: self.frame.index.expr(arg, {**tile_env, vec.iterator: lane})
                     for it, arg in zip(iterators, call.args, strict=True) if it in used}
            self._lanes = (width, steps)
            try:
                return self._address(stmt.write.buffer, stmt.write.index, point)[0]
            finally:
                self._lanes = None

        # One base pointer and constant offsets: LLVM then keeps a single register live across
        # the reduction, not one address per accumulator (28 of them spilled to the stack
        # around every tile). Checked code computes each address, to range-check it.
        offset = self._tile_offsets(unrolled, vec, call, width)
        places = []
        first = None
        trips = [range(static_trip(loop) or 0) for loop in unrolled]
        for position in itertools.product(*trips):
            for j in range(static_trip(vec) // width):
                if first is None or self.config.checked:
                    ptr = address(position, j)
                    first = ptr if first is None else first
                else:
                    ptr = b.gep(first, [ir.Constant(I64, offset(position, j))], inbounds=True,
                                source_etype=memory_type(buf.dtype))
                with b.goto_entry_block():
                    slot = b.alloca(vty)
                places.append(_Accumulator(position, j, slot, ptr, vty,
                                           np.dtype(buf.dtype).itemsize))
        return places

    def _slots_of(self, stmt: str, places: list[_Accumulator]
                  ) -> dict[tuple[str | int, ...], ir.Value]:
        """The slot of each accumulator, keyed as :meth:`_call` looks them up: statement, tile
        position (after the iterations of any ``unroll`` loops around the tile) and vector
        step."""
        outer = self._tile_position
        return {(stmt, *outer, *a.position, a.step): a.slot for a in places}

    def _load_accumulators(self, places: list[_Accumulator]) -> None:
        b = self.frame.builder
        for a in places:
            b.store(b.load(a.ptr, typ=a.type, align=a.align), a.slot)

    def _store_accumulators(self, places: list[_Accumulator]) -> None:
        b = self.frame.builder
        for a in places:
            b.store(b.load(a.slot, typ=a.type), a.ptr, align=a.align)

    def _tile_group(self, nodes: tuple[la.LNode, ...], i: int, env: dict[str, ir.Value]) -> int:
        """Emit ``nodes[i:]`` as one register tile when they are its init (a straight-line
        nest that writes every accumulator: a conv's bias, plus the residual in memory when
        the sums start from it), its reduction, and
        its epilogue (one that rewrites every accumulator from its value: the residual Add and
        the ReLU), each when there is one: the init writes the accumulators' slots instead of
        memory and the epilogue reads them from the slots, so the tile goes to memory once
        instead of three times (``init -> store, load -> reduction -> store, load -> epilogue
        -> store``). How many nodes it emitted (0: no register tile here, emit as usual)."""
        if self._registers is not None or self._lanes is not None:
            return 0
        init = nodes[i] if isinstance(nodes[i], la.Mark | la.If) else None
        at = i + (init is not None)
        if at >= len(nodes) or not isinstance(nodes[at], la.For):
            return 0
        tile = self._register_tile(nodes[at])
        if tile is None or (init is not None and not self._covers(init, tile)):
            return 0
        after = nodes[at + 1] if at + 1 < len(nodes) else None
        epilogue = after if after is not None and self._covers(after, tile) else None
        if init is None and epilogue is None:  # the tile alone (analysed once, not again)
            self._promoted_for(nodes[at], env, *tile)
            return 1
        places = self._accumulators(env, *tile)
        self._guarded(init, env, lambda nest: self._fill(nest, env, places, into_slots=True),
                      lambda: self._load_accumulators(places))
        self._promoted_for(nodes[at], env, *tile, places=places)
        self._guarded(epilogue, env,
                      lambda nest: self._fill(nest, env, places, into_slots=False),
                      lambda: self._store_accumulators(places))
        return at + 1 - i + (epilogue is not None)

    def _guarded(self, node: la.LNode | None, env: dict[str, ir.Value],
                 fill: Callable[[la.LNode], None], otherwise: Callable[[], None]) -> None:
        """``fill(nest)`` for a tile group's init or epilogue ``node``, or ``otherwise()``
        without one; a chunked reduction's (``if`` first chunk / ``if`` last chunk) runs
        ``otherwise()`` in the other chunks (they load / store the running sums)."""
        if node is None:
            otherwise()
        elif isinstance(node, la.If):
            cond = self.frame.index.expr(node.cond, env)
            with self.frame.builder.if_else(cond) as (then, orelse):
                with then:
                    fill(node.then[0])
                with orelse:
                    otherwise()
        else:
            fill(node)

    def _covers(self, nest: la.LNode, tile: tuple[tuple[la.For, ...], la.For, la.Call]
                ) -> bool:
        """Whether ``nest`` is a straight-line nest of one statement over the same unrolled
        and vector loops as ``tile`` writing, at each point, the tile's accumulator there, and
        reading no other element of it (an epilogue reads the sum there; an init, the value
        in memory the sums start from: a residual updated in place). The nest may be the
        only branch of an ``if`` (a chunked reduction's first or last chunk)."""
        if isinstance(nest, la.If):
            if len(nest.then) != 1 or nest.orelse:
                return False
            nest = nest.then[0]
        parsed = _unrolled_vector_nest((nest,))
        if parsed is None:
            return False
        loops, theirs = (*parsed[0], parsed[1]), (*tile[0], tile[1])
        call, tile_call = parsed[1].body[0], tile[2]
        if len(loops) != len(theirs) or any(
                a.init != b.init or a.inc != 1 or static_trip(a) != static_trip(b)
                for a, b in zip(loops, theirs, strict=True)):
            return False
        _, stmt = self.accesses.statements[call.stmt]
        _, tile_stmt = self.accesses.statements[tile_call.stmt]
        if (stmt.guards or stmt.write.buffer != tile_stmt.write.buffer
                or self.accesses.width((call,), self.config.vector_bits)
                != self.accesses.width((tile_call,), self.config.vector_bits)
                or self.accesses.lane_steps(call, parsed[1].iterator) is None):
            return False
        rename = {a.iterator: b.iterator for a, b in zip(loops, theirs, strict=True)}
        element = self.accesses.element(call, stmt.write.index, rename)
        if element is None or element != self.accesses.element(tile_call,
                                                                tile_stmt.write.index, {}):
            return False
        return all(ld.index == stmt.write.index for ld in loads(stmt.body)
                   if ld.buffer == stmt.write.buffer)

    def _fill(self, nest: la.LNode, env: dict[str, ir.Value], places: list[_Accumulator],
              into_slots: bool) -> None:
        """Emit the init (``into_slots``) or epilogue ``nest`` of a tile group: its statement
        at each tile point reads (epilogue) and writes (init) that point's slot."""
        parsed = _unrolled_vector_nest((nest,))
        assert parsed is not None
        stmt = parsed[1].body[0].stmt
        self._registers = self._slots_of(stmt, places)
        self._into_slots = self._initialising = into_slots
        self._filled = set()
        try:
            self._nodes((nest,), env)
        finally:
            self._registers, self._into_slots, self._initialising = None, True, False
        if len(self._filled) != len(places):  # (_covers matched a nest emitted otherwise)
            raise CodegenError(f"{self.kernel.name}: a register tile's "
                               f"{'init' if into_slots else 'epilogue'} reached "
                               f"{len(self._filled)} of its {len(places)} accumulators")

    def _tile_offsets(self, unrolled: tuple[la.For, ...], vec: la.For, call: la.Call,
                      width: int) -> Callable[[tuple[int, ...], int], int]:
        """Element offset of a register tile's accumulator (tile position, vector step) from
        the first one's: the written index is affine in the statement iterators, which are
        linear in the unrolled and vector loops (:meth:`_register_tile` checked both)."""
        _, stmt = self.accesses.statements[call.stmt]
        per_step = [self.accesses.element_step(stmt.write.buffer, stmt.write.index,
                                       self.accesses.iterator_steps(call, loop.iterator) or {})
                    for loop in (*unrolled, vec)]

        def offset(position: tuple[int, ...], j: int) -> int:
            return sum(p * n for p, n in zip((*position, j * width), per_step, strict=True))

        return offset

    def _rereads(self, unrolled: tuple[la.For, ...], vec: la.For, call: la.Call,
                 accumulators: int) -> frozenset[tuple[Load, tuple[int, ...], int]]:
        """The vector-load instances of a register tile to read from memory at each use.

        Each iteration of the reduction holds the accumulators, every distinct vector it loads
        (a conv's weight vectors: one per channel block and vector step) and one broadcast
        value. When that is more than the register file (a 7 x 2 x 2 conv tile: 28 + 4 + 1 =
        33 of AVX-512's 32), LLVM spills accumulators (a store and a reload per iteration).
        Instead the last vectors loaded over the budget are loaded volatile at each of their
        uses, which keeps LLVM from merging them into one value: they become memory operands
        of their FMAs, an extra load each, which the load ports absorb.
        """
        _, stmt = self.accesses.statements[call.stmt]
        steps = self.accesses.lane_steps(call, vec.iterator)
        trips = [static_trip(loop) or 0 for loop in unrolled]
        vector_steps = (static_trip(vec) or 0) // self.accesses.width((call,),
                                                                      self.config.vector_bits)
        loop_steps = [self.accesses.iterator_steps(call, loop.iterator) or {} for loop in unrolled]

        def moved_by(ld: Load) -> list[int]:
            """The unrolled loops (by position) the load's address moves with."""
            return [k for k, per in enumerate(loop_steps)
                    if self.accesses.element_step(ld.buffer, ld.index, per)]

        vectors = []
        for ld in dict.fromkeys(loads(stmt.body)):
            if ld.buffer == stmt.write.buffer or any(not isinstance(i, Aff) for i in ld.index):
                continue
            if self.accesses.element_step(ld.buffer, ld.index, steps) == 1:
                vectors.append((ld, moved_by(ld)))
        copies = sum(int(np.prod([trips[k] for k in moved])) * vector_steps
                     for _, moved in vectors)
        excess = accumulators + copies + 1 - self._vector_registers()
        if excess <= 0 or not vectors:
            return frozenset()
        ld, moved = vectors[-1]
        # Its distinct copies in emission order (tile positions outermost first, then the
        # vector step); the last ``excess`` of them are re-read.
        distinct = sorted({(tuple(p[k] for k in moved), j)
                           for p in itertools.product(*map(range, trips))
                           for j in range(vector_steps)})
        chosen = set(distinct[-excess:])
        outer = self._tile_position  # (the iterations of unroll loops around the tile)
        return frozenset((ld, (*outer, *p), j) for p in itertools.product(*map(range, trips))
                         for j in range(vector_steps)
                         if (tuple(p[k] for k in moved), j) in chosen)

    def _streamed(self, node: la.For, vec: la.For, call: la.Call) -> frozenset[Load]:
        """The vector loads of a register tile's reduction ``node`` that stream through an
        operand larger than ``prefetch_above`` bytes (a quarter of L2: ResNet50's 7x7 and
        14x14 weights, 1-9 MB a layer), moving forward with the innermost reduction loop.

        The first row tile of each cache chunk fetches that chunk's weights; the hardware
        prefetchers do not run far enough ahead of it, so each of those loads waits on L3 or
        memory. A software prefetch ``PREFETCH_BYTES`` ahead in the same stream (into the
        next chunk at the end of one) hides that. Operands that fit in L2 get none: there it
        only costs load-port slots (ResNet50's 28x28 1x1 convs and the stem ran 3-8% slower
        with it)."""
        if not self.config.prefetch_above:
            return frozenset()
        inner = _reduction_loops(node)[-1]
        _, stmt = self.accesses.statements[call.stmt]
        lanes = self.accesses.lane_steps(call, vec.iterator) or {}
        along = self.accesses.iterator_steps(call, inner.iterator) or {}
        return frozenset(
            ld for ld in loads(stmt.body)
            if ld.buffer != stmt.write.buffer and all(isinstance(i, Aff) for i in ld.index)
            and self.accesses.buffers[ld.buffer].nbytes > self.config.prefetch_above
            and self.accesses.element_step(ld.buffer, ld.index, lanes) == 1
            and self.accesses.element_step(ld.buffer, ld.index, along) > 0)

    def _prefetch(self, buffer: str, ptr: ir.GEPInstr) -> None:
        """Prefetch ``PREFETCH_BYTES`` after ``ptr`` (an element of ``buffer``) into L1, once
        per address and block (the rows of a tile load the same weights: LLVM merges those
        loads, not the prefetches)."""
        b = self.frame.builder
        offset = ptr.indices[0]  # (numbered by _int: one value per distinct offset)
        key = (b.block, buffer, offset.constant if isinstance(offset, ir.Constant) else offset)
        if key in self._prefetched:
            return
        self._prefetched.add(key)
        fn = self._declare("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        ahead = b.gep(ptr, [ir.Constant(I64, PREFETCH_BYTES)], source_etype=I8)
        # (read, locality 3: keep in all cache levels, data cache)
        b.call(fn, [ahead, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def _vector_registers(self) -> int:
        """Vector registers to budget a tile for: 32 with AVX-512, else 16 (AVX; AArch64's 32
        NEON registers are counted as 16, which only makes its budget conservative)."""
        return 32 if self.config.vector_bits >= 512 else 16

    def _declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        return declare(self.module, name, ret, args)

    def _unrolled_for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        """A loop under an ``unroll`` mark with a constant trip count: its body, once per
        iteration, straight-line (isl could unroll too, but generating the AST then costs far
        more)."""
        trip = static_trip(node)
        if trip is None or trip > MAX_UNROLL or node.inc != 1:
            self._for(node, env)
            return
        init = self.frame.index.expr(node.init, env)
        outer = self._tile_position
        for k in range(trip):
            value = self.frame.index.int("add", init, ir.Constant(I64, k))
            self._tile_position = (*outer, k)
            self._nodes(node.body, {**env, node.iterator: value})
        self._tile_position = outer

    def _if(self, node: la.If, env: dict[str, ir.Value]) -> None:
        cond = self.frame.index.expr(node.cond, env)
        with self.frame.builder.if_else(cond) as (then, orelse):
            with then:
                self._nodes(node.then, env)
            with orelse:
                self._nodes(node.orelse, env)

    # ------------------------------------------------------------------ vector loops

    def _vector_for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        """A loop under a ``vector`` mark: ``width`` lanes per step, scalar remainder.

        The schedule verb proved the loop carries no dependence; codegen only checks that every
        statement can be written with vector loads and stores, and falls back to the scalar loop
        otherwise (which is always correct).
        """
        calls = node.body
        if (node.inc != 1 or not calls or not all(isinstance(c, la.Call) for c in calls)
                or not all(self.accesses.lane_steps(c, node.iterator) is not None for c in calls)):
            self._for(node, env)
            return
        width = self.accesses.width(calls, self.config.vector_bits)
        b = self.frame.builder
        init = self.frame.index.expr(node.init, env)
        trip = static_trip(node)
        if trip is not None and trip <= MAX_VECTOR_STEPS * width:
            # Full vectors straight-line (a register tile's trip count), then the remainder.
            for k in range(trip // width):
                base = self.frame.index.int("add", init, ir.Constant(I64, k * width))
                self._vector_step = k
                self._vector_calls(calls, {**env, node.iterator: base}, node.iterator, width)
            self._vector_step = 0
            if trip % width:
                rest = la.IOp("add", (node.init, la.IConst(trip // width * width)))
                self._for(la.For(node.iterator, rest, node.cond, 1, node.body), env)
            return
        # Unknown trip count: strip-mine while the last lane is still in range.
        pre = b.block
        header = self.frame.fn.append_basic_block(f"{node.iterator}.vheader")
        body = self.frame.fn.append_basic_block(f"{node.iterator}.vbody")
        done = self.frame.fn.append_basic_block(f"{node.iterator}.vexit")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=f"{node.iterator}.v")
        iv.add_incoming(init, pre)
        last = b.add(iv, ir.Constant(I64, width - 1), flags=["nsw"])
        b.cbranch(self.frame.index.expr(node.cond, {**env, node.iterator: last}), body, done)
        b.position_at_end(body)
        self._vector_calls(calls, {**env, node.iterator: iv}, node.iterator, width)
        iv.add_incoming(b.add(iv, ir.Constant(I64, width), flags=["nsw"]), b.block)
        b.branch(header)
        b.position_at_end(done)
        rest_var = f"{node.iterator}_rest"
        self._for(la.For(node.iterator, la.IVar(rest_var), node.cond, 1, node.body),
                  {**env, rest_var: iv})

    def _vector_calls(self, calls: tuple[la.LNode, ...], env: dict[str, ir.Value], var: str,
                      width: int) -> None:
        for call in calls:
            steps = self.accesses.lane_steps(call, var)
            self._lanes = (width, steps)
            try:
                self._call(call, env)
            finally:
                self._lanes = None

    # ------------------------------------------------------------------ statements

    def _call(self, call: la.Call, env: dict[str, ir.Value]) -> None:
        iterators, stmt = self.accesses.statements[call.stmt]
        if len(iterators) != len(call.args):
            raise CodegenError(f"{call.stmt}: {len(call.args)} AST args for "
                               f"{len(iterators)} iterators")
        point = {it: self.frame.index.expr(arg, env)
                 for it, arg in zip(iterators, call.args, strict=True)}
        slot = None
        if self._registers is not None and self._lanes is not None:
            slot = self._registers.get((call.stmt, *self._tile_position, self._vector_step))
        if slot is not None:  # an accumulator of a promoted register tile
            buf = self.accesses.buffers[stmt.write.buffer]
            vty = ir.VectorType(memory_type(buf.dtype), self._lanes[0])
            self._slot = None if self._initialising else (slot, stmt.write.buffer, vty)
            try:
                value = self._expr(stmt.body, point)
            finally:
                self._slot = None
            if not isinstance(value.type, ir.VectorType):
                value = self.frame.scalars.splat(value, self._lanes[0])
            self._filled.add((*self._tile_position, self._vector_step))
            if self._into_slots:
                self.frame.builder.store(value, slot)
                return
        else:
            value = self._expr(stmt.body, point)
        ptr, step = self._address(stmt.write.buffer, stmt.write.index, point)
        buf = self.accesses.buffers[stmt.write.buffer]
        if self._lanes is not None and not isinstance(value.type, ir.VectorType):
            value = self.frame.scalars.splat(value, self._lanes[0])
        if buf.dtype == "bool":
            value = self.frame.builder.zext(value, like(value.type, I8))
        self.frame.builder.store(value, ptr, align=np.dtype(buf.dtype).itemsize)

    def _address(self, buffer: str, index: tuple[Aff | Expr, ...],
                 point: Mapping[str, ir.Value]) -> tuple[ir.Value, int]:
        """The address of lane 0 and the element step between lanes (0 outside vector loops)."""
        b = self.frame.builder
        buf, base = self.accesses.buffers[buffer], self.frame.pointers[buffer]
        if len(index) != len(buf.shape):
            raise CodegenError(f"{buffer}: index rank {len(index)} != buffer rank "
                               f"{len(buf.shape)}")
        linear: ir.Value | None = None
        stride = 1
        for ix, extent in reversed(list(zip(index, buf.shape, strict=True))):
            if isinstance(ix, Aff):
                v = self.frame.index.aff(ix, point)
                if self.config.checked:
                    self._check_range(v, extent, ix, point)
            else:  # computed at run time: always range-checked, whatever the mode
                v = self._expr(ix, point)
                v = b.sext(v, I64) if v.type.width < 64 else v
                self._check_range(v, extent)
            term = self.frame.index.int("mul", v, ir.Constant(I64, stride))
            linear = term if linear is None else self.frame.index.int("add", linear, term)
            stride *= extent
        if linear is None:  # a scalar buffer
            linear = ir.Constant(I64, 0)
        step = 0
        if self._lanes is not None:
            step = self.accesses.element_step(buffer, index, self._lanes[1])
        return b.gep(base, [linear], inbounds=True, source_etype=memory_type(buf.dtype)), step

    def _check_range(self, v: ir.Value, extent: int, ix: Aff | None = None,
                     point: Mapping[str, ir.Value] | None = None) -> None:
        b = self.frame.builder
        ok = b.icmp_unsigned("<", v, ir.Constant(I64, extent))
        if self._lanes is not None and ix is not None and point is not None:
            # Lanes move along this index too: the last lane must be in range as well.
            width, steps = self._lanes
            delta = sum(c * steps.get(n, 0) for n, c in ix.terms) * (width - 1)
            if delta:
                last = b.add(v, ir.Constant(I64, delta))
                ok = b.and_(ok, b.icmp_unsigned("<", last, ir.Constant(I64, extent)))
        cont = self.frame.fn.append_basic_block("in_range")
        b.cbranch(ok, cont, self.frame.fail_block)
        b.position_at_end(cont)

    def _load(self, e: Load, point: Mapping[str, ir.Value]) -> ir.Value:
        b = self.frame.builder
        buf = self.accesses.buffers[e.buffer]
        if self._slot is not None and e.buffer == self._slot[1]:
            return b.load(self._slot[0], typ=self._slot[2])
        ptr, step = self._address(e.buffer, e.index, point)
        mty, align = memory_type(buf.dtype), np.dtype(buf.dtype).itemsize
        if step == 0:
            v = b.load(ptr, typ=mty, align=align)
        elif step == 1:
            vty = ir.VectorType(mty, self._lanes[0])
            if (e, self._tile_position, self._vector_step) in self._reread:
                v = volatile_load(b, ptr, vty, align)
            else:
                v = b.load(ptr, typ=vty, align=align)
            if e in self._streams:
                self._prefetch(e.buffer, ptr)
        else:  # strided: gather lane by lane
            width = self._lanes[0]
            v = whole(ir.VectorType(mty, width), ir.Undefined)
            for lane in range(width):
                p = b.gep(ptr, [ir.Constant(I64, lane * step)], inbounds=True, source_etype=mty)
                v = b.insert_element(v, b.load(p, typ=mty, align=align), ir.Constant(I32, lane))
        if buf.dtype == "bool":
            return b.icmp_unsigned("!=", v, zero(v.type))
        return v

    # ------------------------------------------------------------------ scalar expressions

    def _expr(self, e: Expr, point: Mapping[str, ir.Value]) -> ir.Value:
        b = self.frame.builder
        if isinstance(e, Const):
            return constant(e)
        if isinstance(e, Load):
            return self._load(e, point)
        if isinstance(e, Iter):
            v = point[e.name]
            if self._lanes is not None and self._lanes[1].get(e.name, 0):
                width, steps = self._lanes
                lanes = ir.Constant(ir.VectorType(I64, width),
                                    [k * steps[e.name] for k in range(width)])
                v = b.add(self.frame.scalars.splat(v, width), lanes)
            return v if e.dtype == "int64" else self.frame.scalars.cast(v, "int64", e.dtype)
        if isinstance(e, Cast):
            return self.frame.scalars.cast(self._expr(e.x, point), e.x.dtype, e.dtype)
        if isinstance(e, Select):
            c, x, y = self.frame.scalars.match(self._expr(e.cond, point), self._expr(e.a, point),
                                  self._expr(e.b, point))
            return b.select(c, x, y)
        if isinstance(e, Unary):
            return self.frame.scalars.unary(e.op, self._expr(e.x, point), e.x.dtype)
        if isinstance(e, Binary):
            x, y = self.frame.scalars.match(self._expr(e.a, point), self._expr(e.b, point))
            return self.frame.scalars.binary(e.op, x, y, e.a.dtype)
        raise CodegenError(f"cannot emit expression {e!r}")



@dataclass(frozen=True)
class _Accumulator:
    """One vector of a register tile: its tile position and vector step, the stack slot it
    lives in during the reduction and its address in memory."""

    position: tuple[int, ...]
    step: int
    slot: ir.Value
    ptr: ir.Value
    type: ir.Type
    align: int


def _reduction_loops(node: la.For) -> list[la.For]:
    """``node`` and the loops perfectly nested in it: a register tile's reduction loops (its
    rows and vector loop sit under marks, not directly)."""
    loops = [node]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], la.For):
        loops.append(loops[-1].body[0])
    return loops


def _unrolled_vector_nest(body: tuple[la.LNode, ...]
                          ) -> tuple[tuple[la.For, ...], la.For] | None:
    """(unrolled loops, vector loop) when ``body`` is one or more ``unroll`` loops of constant
    trip counts, one inside the other, around one ``vector`` loop of one statement."""
    unrolled: list[la.For] = []
    while (len(body) == 1 and isinstance(body[0], la.Mark) and body[0].name == "unroll"
           and len(body[0].body) == 1 and isinstance(body[0].body[0], la.For)):
        loop = body[0].body[0]
        trip = static_trip(loop)
        if trip is None or trip > MAX_UNROLL or loop.inc != 1:
            return None
        unrolled.append(loop)
        body = loop.body
    if not unrolled or not (len(body) == 1 and isinstance(body[0], la.Mark)
                            and body[0].name == "vector" and len(body[0].body) == 1
                            and isinstance(body[0].body[0], la.For)):
        return None
    vec = body[0].body[0]
    if len(vec.body) != 1 or not isinstance(vec.body[0], la.Call) or vec.inc != 1:
        return None
    return tuple(unrolled), vec


def emit_kernel(module: ir.Module, kernel: Kernel, ast: tuple[la.LNode, ...],
                config: CodegenConfig) -> ir.Function:
    """Add ``kernel`` to ``module``, its loops given by ``ast``, its code decided by
    ``config``."""
    return KernelEmitter(module, kernel, Accesses.of(kernel), config).emit(ast)
