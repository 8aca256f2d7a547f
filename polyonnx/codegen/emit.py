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
from polyonnx.codegen.access import Accesses, static_trip
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
from polyonnx.codegen.tiles import (
    MAX_UNROLL,
    MAX_VECTOR_STEPS,
    RegisterTile,
    nest_call,
    register_tile,
    tile_group,
)
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
)

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
        if self._registers is None:
            tile = register_tile(node, self.accesses, self.config)
            if tile is not None:
                self._promoted_for(tile, env)
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

    def _promoted_for(self, tile: RegisterTile, env: dict[str, ir.Value],
                      places: list[_Accumulator] | None = None) -> None:
        """Emit the reduction of ``tile`` with its accumulators in stack slots. LLVM turns
        the slots into registers (they alias nothing), which it does not reliably do for the
        buffer itself once other loads and stores of it follow the loop (a fused epilogue).
        Alone, the tile is loaded from memory before the loop and stored after it; within a
        tile group (:meth:`_tile_group`), ``places`` come initialised and are left to the
        epilogue."""
        alone = places is None
        if places is None:
            places = self._accumulators(env, tile)
            self._load_accumulators(places)
        self._registers = self._slots_of(tile.call.stmt, places)
        outer = self._tile_position
        self._reread = frozenset((ld, (*outer, *p), j) for ld, p, j in tile.rereads)
        self._streams = tile.streams
        try:
            self._plain_for(tile.reduction, env)
        finally:
            self._registers, self._reread, self._streams = None, frozenset(), frozenset()
        if alone:
            self._store_accumulators(places)

    def _accumulators(self, env: dict[str, ir.Value], tile: RegisterTile
                      ) -> list[_Accumulator]:
        """A stack slot and the address of each accumulator of a register tile."""
        b = self.frame.builder
        unrolled, vec, call, width = tile.unrolled, tile.vector, tile.call, tile.width
        iterators, stmt = self.accesses.statements[call.stmt]
        steps = self.accesses.lane_steps(call, vec.iterator)
        buf = self.accesses.buffers[stmt.write.buffer]
        vty = ir.VectorType(memory_type(buf.dtype), width)
        used = {n for ix in stmt.write.index for n, _ in ix.terms}

        def address(position: tuple[int, ...], j: int) -> ir.Value:
            """The accumulator's address computed from the tile's loop values."""
            index = self.frame.index
            tile_env = dict(env)
            for loop, k in zip(unrolled, position, strict=True):
                start = index.expr(loop.init, tile_env)
                tile_env[loop.iterator] = index.int("add", start, ir.Constant(I64, k))
            lane = index.int("add", index.expr(vec.init, tile_env), ir.Constant(I64, j * width))
            point = {it: index.expr(arg, {**tile_env, vec.iterator: lane})
                     for it, arg in zip(iterators, call.args, strict=True) if it in used}
            self._lanes = (width, steps)
            try:
                return self._address(stmt.write.buffer, stmt.write.index, point)[0]
            finally:
                self._lanes = None

        # One base pointer and constant offsets: LLVM then keeps a single register live across
        # the reduction, not one address per accumulator (which spilled to the stack around
        # every tile). Checked code computes each address, to range-check it.
        places = []
        first = None
        for acc in tile.accumulators:
            if first is None or self.config.checked:
                ptr = address(acc.position, acc.step)
                first = ptr if first is None else first
            else:
                ptr = b.gep(first, [ir.Constant(I64, acc.offset)], inbounds=True,
                            source_etype=memory_type(buf.dtype))
            with b.goto_entry_block():
                slot = b.alloca(vty)
            places.append(_Accumulator(acc.position, acc.step, slot, ptr, vty,
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
        if self._registers is not None:
            return 0
        group = tile_group(nodes, i, self.accesses, self.config)
        if group is None:
            return 0
        if group.init is None and group.epilogue is None:
            self._promoted_for(group.tile, env)
            return 1
        places = self._accumulators(env, group.tile)
        self._guarded(group.init, env,
                      lambda nest: self._fill(nest, env, places, into_slots=True),
                      lambda: self._load_accumulators(places))
        self._promoted_for(group.tile, env, places=places)
        self._guarded(group.epilogue, env,
                      lambda nest: self._fill(nest, env, places, into_slots=False),
                      lambda: self._store_accumulators(places))
        return group.size

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

    def _fill(self, nest: la.LNode, env: dict[str, ir.Value], places: list[_Accumulator],
              into_slots: bool) -> None:
        """Emit the init (``into_slots``) or epilogue ``nest`` of a tile group: its statement
        at each tile point reads (epilogue) and writes (init) that point's slot."""
        stmt = nest_call(nest).stmt
        self._registers = self._slots_of(stmt, places)
        self._into_slots = self._initialising = into_slots
        self._filled = set()
        try:
            self._nodes((nest,), env)
        finally:
            self._registers, self._into_slots, self._initialising = None, True, False
        if len(self._filled) != len(places):  # (covers() matched a nest emitted otherwise)
            raise CodegenError(f"{self.kernel.name}: a register tile's "
                               f"{'init' if into_slots else 'epilogue'} reached "
                               f"{len(self._filled)} of its {len(places)} accumulators")

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


def emit_kernel(module: ir.Module, kernel: Kernel, ast: tuple[la.LNode, ...],
                config: CodegenConfig) -> ir.Function:
    """Add ``kernel`` to ``module``, its loops given by ``ast``, its code decided by
    ``config``."""
    return KernelEmitter(module, kernel, Accesses.of(kernel), config).emit(ast)
