"""LLVM IR for one kernel: the loop AST (from isl) with each statement's scalar body inlined.

A kernel becomes ``i32 @name(ptr noalias %buf0, ...)`` taking its buffers in
``Kernel.buffers`` order and returning 0, or a non-zero status when a run-time check fails
(a computed index out of range, or any access out of range in checked mode).

This module walks the loop AST: plain, ``unroll`` and ``vector`` loops, conditionals, statement
instances with their addresses and range checks. The rest is its collaborators':
:mod:`~polyonnx.codegen.parallel` outlines ``parallel`` loops, :mod:`~polyonnx.codegen.tiles`
plans the register tiles and :mod:`~polyonnx.codegen.tile_emit` emits them,
:mod:`~polyonnx.codegen.scalar` and :mod:`~polyonnx.codegen.index` emit the arithmetic.

Example:
    >>> from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
    >>> i = Aff.var("i")
    >>> kernel = Kernel("double", (Buffer("x", "float32", (4,), "input"),
    ...                            Buffer("y", "float32", (4,), "output")),
    ...                 (Loop("i", 0, 4, (Stmt("S0", Access("y", (i,)),
    ...                                        Load("x", (i,), "float32") * 2.0),)),))
    >>> loop = la.For("c0", la.IConst(0), la.IOp("le", (la.IVar("c0"), la.IConst(3))), 1,
    ...               (la.Call("S0", (la.IVar("c0"),)),))
    >>> module = ir.Module()
    >>> config = CodegenConfig(vector_bits=128)  # 4 lanes: the whole loop, one vector
    >>> fn = emit_kernel(module, kernel, (la.Mark("vector", (loop,)),), config)
    >>> "fmul <4 x float>" in str(module)
    True
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import Accesses, Lanes, static_trip
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.frame import Frame, close_frame, open_frame
from polyonnx.codegen.llvm_types import (
    I8,
    I32,
    I64,
    PTR,
    constant,
    declare,
    i64,
    is_float,
    like,
    memory_type,
    no_unroll,
    value_type,
    volatile_load,
    whole,
    zero,
)
from polyonnx.codegen.parallel import can_share, parallel_children, run_on_pool
from polyonnx.codegen.tile_emit import (
    Position,
    TileState,
    emit_register_tile,
    emit_tile_group,
    prefetch,
)
from polyonnx.codegen.tiles import MAX_UNROLL, MAX_VECTOR_STEPS, register_tile, tile_group
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import (
    Aff,
    Binary,
    Bitcast,
    Cast,
    Const,
    Expr,
    Iter,
    Kernel,
    LaneFold,
    Load,
    Select,
    Stmt,
    Unary,
)


@dataclass(frozen=True)
class _Instance:
    """A statement instance being emitted."""

    point: Mapping[str, ir.Value]
    """Each statement iterator's value (lane 0's in a vector loop)."""
    lanes: Lanes | None = None
    """In a vector loop: its lanes."""
    held: tuple[str, ir.Value, ir.Type] | None = None
    """In a register tile: (buffer, slot, type) of the accumulator the statement reads from
    its slot instead of memory."""


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
    _tile: TileState | None = field(init=False, default=None)
    """The register tile being emitted (see :meth:`emit_in_tile`)."""
    _unrolled: tuple[int, ...] = field(init=False, default=())
    """The iterations of the enclosing ``unroll`` loops being emitted, outermost first (from
    the register tile's start inside one); set for a scope by :meth:`_at`."""
    _vector_step: int = field(init=False, default=0)
    """The vector being emitted of a straight-line vector loop (:meth:`_at`)."""
    _filled: set[Position] = field(init=False, default_factory=set)
    """In a register tile: the positions of the accumulators emitted (:meth:`emit_in_tile`
    returns them)."""
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
        self.frame = open_frame(fn, pointers, self._declare, dot4_bits=self.config.dot4_bits)
        self._nodes(ast, {})
        close_frame(self.frame)
        return fn

    def _declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """The module's declaration of the external function ``name``."""
        return declare(self.module, name, ret, args)

    # ------------------------------------------------------------------ loop structure

    def _nodes(self, nodes: tuple[la.LNode, ...], env: dict[str, ir.Value]) -> None:
        i = 0
        while i < len(nodes):
            group = None
            if self._tile is None:  # (register tiles do not nest)
                group = tile_group(nodes, i, self.accesses, self.config)
            if group is not None:
                emit_tile_group(self, group, env)
                i += group.size
                continue
            node = nodes[i]
            i += 1
            if isinstance(node, la.For):  # (not a register tile: tile_group looked)
                self._plain_for(node, env)
            elif isinstance(node, la.If):
                self._if(node, env)
            elif (loop := la.marked_loop(node, "vector")) is not None:
                self._vector_for(loop, env)
            elif (loop := la.marked_loop(node, "unroll")) is not None:
                self._unrolled_for(loop, env)
            elif (
                isinstance(node, la.Mark)
                and node.name.split()[0] == "parallel"
                and self.config.threads > 1
                and not self.frame.outlined
            ):
                self._parallel_mark(node, env)
            elif isinstance(node, la.Mark):
                self._nodes(node.body, env)
            else:
                self._call(node, env)

    def _for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        tile = register_tile(node, self.accesses, self.config) if self._tile is None else None
        if tile is not None:
            emit_register_tile(self, tile, env)
        else:
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
        nxt = b.add(iv, i64(node.inc), name=f"{node.iterator}.next", flags=["nsw"])
        iv.add_incoming(nxt, b.block)
        latch = b.branch(header)
        if not self._worth_unrolling(node):
            no_unroll(latch)
        b.position_at_end(exit_)

    def _worth_unrolling(self, node: la.For) -> bool:
        """Whether LLVM's unroller may unroll ``node``: an innermost scalar loop (its body is
        small, and LLVM vectorizes what is left of a vector loop by unrolling it), or a loop
        in which some statement may write one element in several iterations (a reduction, or
        accesses that do not tell: unrolling a small reduction keeps its accumulators in
        registers). The bodies of the other loops are straight-line vector code already,
        which unrolling makes twice as slow to compile and no faster to run."""
        if all(isinstance(child, la.Call) for child in node.body):
            return True
        for call in la.calls(node):
            stmt = self.accesses.statements[call.stmt][1]
            steps = self.accesses.iterator_steps(call, node.iterator)
            if steps is None or not all(isinstance(i, Aff) for i in stmt.write.index):
                return True
            if self.accesses.element_step(stmt.write.buffer, stmt.write.index, steps) == 0:
                return True
        return False

    def _unrolled_for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        """A loop under an ``unroll`` mark with a constant trip count: its body, once per
        iteration, straight-line (isl could unroll too, but generating the AST then costs far
        more)."""
        trip = static_trip(node)
        if trip is None or trip > MAX_UNROLL or node.inc != 1:
            self._for(node, env)
            return
        init = self.frame.index.expr(node.init, env)
        outer = self._unrolled
        for k in range(trip):
            value = self.frame.index.int("add", init, i64(k))
            with self._at((*outer, k), self._vector_step):
                self._nodes(node.body, {**env, node.iterator: value})

    def _if(self, node: la.If, env: dict[str, ir.Value]) -> None:
        cond = self.frame.index.expr(node.cond, env)
        with self.frame.builder.if_else(cond) as (then, orelse):
            with then:
                self._nodes(node.then, env)
            with orelse:
                self._nodes(node.orelse, env)

    # ------------------------------------------------------------------ parallel loops

    def _parallel_mark(self, mark: la.Mark, env: dict[str, ir.Value]) -> None:
        """A ``parallel`` mark's body, its parallel loops run on the thread pool
        (:mod:`polyonnx.codegen.parallel`)."""
        for node, on_pool in parallel_children(mark, self.config.threads):
            if on_pool and can_share(cast(la.For, node)):
                name = f"{self.frame.fn.name}.parallel{next(self._parallel_loops)}"
                run_on_pool(
                    self.frame,
                    cast(la.For, node),
                    env,
                    name=name,
                    threads=self.config.threads,
                    emit_chunk=self._chunk,
                )
            elif on_pool:
                self._for(cast(la.For, node), env)
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

    def emit_in_tile(
        self, nodes: tuple[la.LNode, ...], env: dict[str, ir.Value], state: TileState
    ) -> frozenset[Position]:
        """Emit ``nodes`` (a register tile's reduction, init or epilogue) with ``state`` the
        tile being emitted (for :mod:`~polyonnx.codegen.tile_emit`); the positions of the
        accumulators its statement was emitted for."""
        filled: set[Position] = set()
        assert self._tile is None, "register tiles do not nest"
        self._tile, self._filled = state, filled
        try:
            with self._at((), self._vector_step):  # (positions count from the tile)
                self._nodes(nodes, env)
        finally:
            self._tile, self._filled = None, set()
        return frozenset(filled)

    @contextmanager
    def _at(self, unrolled: tuple[int, ...], step: int) -> Iterator[None]:
        """Emit at a position for the duration: ``unrolled``, the iterations of the enclosing
        ``unroll`` loops (from the register tile's start inside one), and ``step``, the vector
        of a straight-line vector loop."""
        outer = self._unrolled, self._vector_step
        self._unrolled, self._vector_step = unrolled, step
        try:
            yield
        finally:
            self._unrolled, self._vector_step = outer

    def address(
        self, buffer: str, index: tuple[Aff, ...], point: Mapping[str, ir.Value], lanes: Lanes
    ) -> ir.Value:
        """The address of lane 0 of ``buffer[index]`` at a statement instance (range-checked
        in checked mode)."""
        return self._address(buffer, index, _Instance(point, lanes))[0]

    # ------------------------------------------------------------------ vector loops

    def _vector_for(self, node: la.For, env: dict[str, ir.Value]) -> None:
        """A loop under a ``vector`` mark: ``width`` lanes per step, scalar remainder.

        The schedule verb proved the loop carries no dependence; codegen only checks that every
        statement can be written with vector loads and stores, and falls back to the scalar loop
        otherwise (which is always correct).
        """
        calls = tuple(c for c in node.body if isinstance(c, la.Call))
        if (
            node.inc != 1
            or not calls
            or len(calls) != len(node.body)
            or not all(self.accesses.lane_steps(c, node.iterator) is not None for c in calls)
        ):
            self._for(node, env)
            return
        width = self.accesses.width(calls, self.config.vector_bits)
        b = self.frame.builder
        init = self.frame.index.expr(node.init, env)
        trip = static_trip(node)
        if trip is not None and trip <= MAX_VECTOR_STEPS * width:
            # Full vectors straight-line (a register tile's trip count), then the remainder.
            for k in range(trip // width):
                base = self.frame.index.int("add", init, i64(k * width))
                with self._at(self._unrolled, k):
                    self._vector_calls(calls, {**env, node.iterator: base}, node.iterator, width)
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
        last = b.add(iv, i64(width - 1), flags=["nsw"])
        b.cbranch(self.frame.index.expr(node.cond, {**env, node.iterator: last}), body, done)
        b.position_at_end(body)
        self._vector_calls(calls, {**env, node.iterator: iv}, node.iterator, width)
        iv.add_incoming(b.add(iv, i64(width), flags=["nsw"]), b.block)
        b.branch(header)
        b.position_at_end(done)
        rest_var = f"{node.iterator}_rest"
        self._for(
            la.For(node.iterator, la.IVar(rest_var), node.cond, 1, node.body), {**env, rest_var: iv}
        )

    def _vector_calls(
        self, calls: tuple[la.Call, ...], env: dict[str, ir.Value], var: str, width: int
    ) -> None:
        for call in calls:
            self._call(call, env, Lanes(width, self.accesses.lane_steps(call, var) or {}))

    # ------------------------------------------------------------------ statements

    def _call(self, call: la.Call, env: dict[str, ir.Value], lanes: Lanes | None = None) -> None:
        """One statement instance (``lanes`` of them in a vector loop)."""
        iterators, stmt = self.accesses.statements[call.stmt]
        if len(iterators) != len(call.args):
            raise CodegenError(
                f"{call.stmt}: {len(call.args)} AST args for {len(iterators)} iterators"
            )
        point = {
            it: self.frame.index.expr(arg, env)
            for it, arg in zip(iterators, call.args, strict=True)
        }
        b, scalars = self.frame.builder, self.frame.scalars
        buf = self.accesses.buffers[stmt.write.buffer]
        at = _Instance(point, lanes)
        tile = self._tile
        slot = None
        if tile is not None and lanes is not None:
            slot = tile.slot(call.stmt, self._unrolled, self._vector_step)
        if slot is not None:  # an accumulator of a register tile
            assert tile is not None and lanes is not None
            vty = ir.VectorType(memory_type(buf.dtype), lanes.width)
            held = None if tile.reads_memory else (stmt.write.buffer, slot, vty)
            value = self._body(stmt, _Instance(point, lanes, held))
            if not isinstance(value.type, ir.VectorType):
                value = scalars.splat(value, lanes.width)
            self._filled.add((self._unrolled, self._vector_step))
            if tile.writes_slots:
                b.store(value, slot)
                return
        else:
            value = self._body(stmt, at)
        ptr, step = self._address(stmt.write.buffer, stmt.write.index, at)
        if lanes is not None and not isinstance(value.type, ir.VectorType):
            value = scalars.splat(value, lanes.width)
        if buf.dtype == "bool":
            value = b.zext(value, like(value.type, I8))
        b.store(value, ptr, align=np.dtype(buf.dtype).itemsize)

    def _address(
        self, buffer: str, index: tuple[Aff | Expr, ...], at: _Instance
    ) -> tuple[ir.Value, int]:
        """The address of lane 0 and the element step between lanes (0 outside vector loops)."""
        b = self.frame.builder
        buf, base = self.accesses.buffers[buffer], self.frame.pointers[buffer]
        if len(index) != len(buf.shape):
            raise CodegenError(f"{buffer}: index rank {len(index)} != buffer rank {len(buf.shape)}")
        linear: ir.Value | None = None
        stride = 1
        for ix, extent in reversed(list(zip(index, buf.shape, strict=True))):
            if isinstance(ix, Aff):
                v = self.frame.index.aff(ix, at.point)
                if self.config.checked:
                    # In a vector loop the last lane must be in range as well.
                    lanes = at.lanes
                    last = (
                        0
                        if lanes is None
                        else sum(c * lanes.steps.get(n, 0) for n, c in ix.terms) * (lanes.width - 1)
                    )
                    self._check_range(v, extent, last)
            else:  # computed at run time: always range-checked, whatever the mode
                v = self._expr(ix, at)
                v = b.sext(v, I64) if v.type.width < 64 else v
                self._check_range(v, extent)
            term = self.frame.index.int("mul", v, i64(stride))
            linear = term if linear is None else self.frame.index.int("add", linear, term)
            stride *= extent
        if linear is None:  # a scalar buffer
            linear = i64(0)
        step = 0
        if at.lanes is not None:
            step = self.accesses.element_step(buffer, index, at.lanes.steps)
        return b.gep(base, [linear], inbounds=True, source_etype=memory_type(buf.dtype)), step

    def _check_range(self, v: ir.Value, extent: int, last: int = 0) -> None:
        """Branch to the failure block unless ``0 <= v < extent`` (and ``v + last`` too)."""
        b = self.frame.builder
        ok = b.icmp_unsigned("<", v, i64(extent))
        if last:
            moved = b.add(v, i64(last))
            ok = b.and_(ok, b.icmp_unsigned("<", moved, i64(extent)))
        cont = self.frame.fn.append_basic_block("in_range")
        b.cbranch(ok, cont, self.frame.fail_block)
        b.position_at_end(cont)

    def _load(self, e: Load, at: _Instance) -> ir.Value:
        b = self.frame.builder
        buf = self.accesses.buffers[e.buffer]
        if at.held is not None and e.buffer == at.held[0]:
            return b.load(at.held[1], typ=at.held[2])
        ptr, step = self._address(e.buffer, e.index, at)
        mty, align = memory_type(buf.dtype), np.dtype(buf.dtype).itemsize
        tile = self._tile
        if step == 0:
            v = b.load(ptr, typ=mty, align=align)
        elif step == 1:
            assert at.lanes is not None  # a step is a vector's
            vty = ir.VectorType(mty, at.lanes.width)
            if tile is not None and (e, self._unrolled, self._vector_step) in tile.rereads:
                v = volatile_load(b, ptr, vty, align)
            else:
                v = b.load(ptr, typ=vty, align=align)
            if tile is not None and e in tile.streams:
                prefetch(self.frame, self._prefetched, e.buffer, ptr)
        elif 1 < step <= MAX_SPAN_STEP:
            # A short stride (a stride-2 pooling's or convolution's): the span from the first
            # lane to the last as one load, its lanes picked by a shuffle.
            assert at.lanes is not None
            width = at.lanes.width
            span = b.load(ptr, typ=ir.VectorType(mty, (width - 1) * step + 1), align=align)
            v = b.shuffle_vector(span, span, _lanes(0, width, step))
        else:  # strided: gather lane by lane
            assert at.lanes is not None
            width = at.lanes.width
            v = whole(ir.VectorType(mty, width), ir.Undefined)
            for lane in range(width):
                p = b.gep(ptr, [i64(lane * step)], inbounds=True, source_etype=mty)
                v = b.insert_element(v, b.load(p, typ=mty, align=align), ir.Constant(I32, lane))
        if buf.dtype == "bool":
            return b.icmp_unsigned("!=", v, zero(v.type))
        return v

    def _lane_fold(self, e: LaneFold, at: _Instance) -> ir.Value:
        """The lanes read as one vector, halved until one is left: ``log2(lanes)`` shuffles
        and ops (statements with lane folds are never vectorized: see ``lane_steps``)."""
        b, scalars = self.frame.builder, self.frame.scalars
        buf = self.accesses.buffers[e.x.buffer]
        ptr, _ = self._address(e.x.buffer, e.x.index, at)
        if self.config.checked:
            last = e.x.index[-1]
            assert isinstance(last, Aff)
            self._check_range(self.frame.index.aff(last, at.point), buf.shape[-1], e.lanes - 1)
        mty = memory_type(buf.dtype)
        v = b.load(ptr, typ=ir.VectorType(mty, e.lanes), align=np.dtype(buf.dtype).itemsize)
        if buf.dtype == "bool":
            v = b.icmp_unsigned("!=", v, zero(v.type))
        width = e.lanes
        while width > 1:
            width //= 2
            low = b.shuffle_vector(v, v, _lanes(0, width))
            high = b.shuffle_vector(v, v, _lanes(width, width))
            v = scalars.binary(e.op, low, high, e.dtype)
        return b.extract_element(v, ir.Constant(I32, 0))

    # ------------------------------------------------------------------ scalar expressions

    def _body(self, stmt: Stmt, at: _Instance) -> ir.Value:
        """The value ``stmt`` stores: an accumulation ``acc + x * y`` (``acc`` the point it
        writes) as one multiply-add, which may be an FMA, and ``acc + dot4(x, y)`` as the
        target's byte dot product; any other expression as written."""
        e = stmt.body
        # (the term each kind of accumulator fuses, and how)
        fused = "mul" if is_float(e.dtype) else "dot4" if e.dtype == "int32" else None
        if isinstance(e, Binary) and e.op == "add" and fused:
            for acc, term in ((e.a, e.b), (e.b, e.a)):
                if (
                    isinstance(acc, Load)
                    and (acc.buffer, acc.index) == (stmt.write.buffer, stmt.write.index)
                    and isinstance(term, Binary)
                    and term.op == fused
                ):
                    scalars = self.frame.scalars
                    a, x, y = scalars.match(
                        self._expr(acc, at), self._expr(term.a, at), self._expr(term.b, at)
                    )
                    if fused == "mul":
                        return scalars.multiply_add(a, x, y)
                    return scalars.dot4_add(a, x, y)
        return self._expr(e, at)

    def _expr(self, e: Expr, at: _Instance) -> ir.Value:
        b, scalars = self.frame.builder, self.frame.scalars
        if isinstance(e, Const):
            return constant(e)
        if isinstance(e, Load):
            return self._load(e, at)
        if isinstance(e, Iter):
            v = at.point[e.name]
            if at.lanes is not None and at.lanes.steps.get(e.name, 0):
                width, steps = at.lanes.width, at.lanes.steps
                lanes = ir.Constant(
                    ir.VectorType(I64, width), [k * steps[e.name] for k in range(width)]
                )
                v = b.add(scalars.splat(v, width), lanes)
            return v if e.dtype == "int64" else scalars.cast(v, "int64", e.dtype)
        if isinstance(e, Cast):
            return scalars.cast(self._expr(e.x, at), e.x.dtype, e.dtype)
        if isinstance(e, Bitcast):
            v = self._expr(e.x, at)
            to = like(v.type, value_type(e.dtype))
            return v if v.type == to else b.bitcast(v, to)
        if isinstance(e, Select):
            c, x, y = scalars.match(
                self._expr(e.cond, at), self._expr(e.a, at), self._expr(e.b, at)
            )
            return b.select(c, x, y)
        if isinstance(e, Unary):
            return scalars.unary(e.op, self._expr(e.x, at), e.x.dtype)
        if isinstance(e, Binary):
            return self._binary(e, at)
        if isinstance(e, LaneFold):
            return self._lane_fold(e, at)
        raise CodegenError(f"cannot emit expression {e!r}")

    def _binary(self, e: Binary, at: _Instance) -> ir.Value:
        """``e``; a float max or min against a number (not NaN) as one compare and select."""
        a, c, op = e.a, e.b, e.op
        if op in ("max", "min") and is_float(a.dtype):
            if _number(a) and not _number(c):
                a, c = c, a  # (max and min commute)
            if _number(c):
                op += "_number"
        scalars = self.frame.scalars
        x, y = scalars.match(self._expr(a, at), self._expr(c, at))
        return scalars.binary(op, x, y, a.dtype)


def _number(e: Expr) -> bool:
    """Whether ``e`` is a constant that is not NaN (a ReLU's 0, a Clip's bounds)."""
    return isinstance(e, Const) and not np.isnan(e.value)


def _lanes(first: int, count: int, step: int = 1) -> ir.Constant:
    """The shuffle mask picking ``count`` lanes from ``first`` on, every ``step``-th."""
    return ir.Constant(ir.VectorType(I32, count), [first + k * step for k in range(count)])


MAX_SPAN_STEP = 4
"""The longest stride between a vector's lanes that codegen loads as the span they cover and
a shuffle (longer ones: lane by lane), so a span is at most four vectors."""


def emit_kernel(
    module: ir.Module, kernel: Kernel, ast: tuple[la.LNode, ...], config: CodegenConfig
) -> ir.Function:
    """Add ``kernel`` to ``module``, its loops given by ``ast``, its code decided by
    ``config``."""
    return KernelEmitter(module, kernel, Accesses.of(kernel), config).emit(ast)
