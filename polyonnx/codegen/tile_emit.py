"""The emission of register tiles (the plans of :mod:`polyonnx.codegen.tiles`): each
accumulator gets a stack slot, which LLVM turns into a register (the slots alias nothing; LLVM
does not reliably do that for the buffer itself once other loads and stores of it follow the
loop, as a fused epilogue's do).

Alone, a tile's accumulators are loaded from memory before its reduction and stored after it.
In a tile group the init writes the slots instead of memory and the epilogue reads them there,
so the tile goes to memory once instead of three times (``init -> store, load -> reduction ->
store, load -> epilogue -> store``). The loop emitter emits the reduction and the nests with
one :class:`TileState` entered for each, which says where their accumulators are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import Accesses, Lanes
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.frame import Frame
from polyonnx.codegen.llvm_types import I8, I32, PTR, i64, memory_type
from polyonnx.codegen.tiles import RegisterTile, Reread, TileGroup, nest_call
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import Aff, Kernel, Load

PREFETCH_BYTES = 1024
"""How far ahead a register tile's reduction prefetches a streamed operand: 8 iterations of
a conv tile's weights (128 bytes per channel block each)."""


Position = tuple[tuple[int, ...], int]
"""Where an accumulator is in its register tile: the iterations of the tile's unrolled loops,
then the vector step."""


@dataclass(frozen=True)
class TileState:
    """What the loop emitter needs while it emits a register tile's reduction, or its init or
    epilogue: the accumulators of one statement and where they are. Positions count from the
    tile: the iterations of its unrolled loops, then the vector step."""

    statement: str
    """The statement whose instances are the accumulators."""
    slots: Mapping[Position, ir.Value]
    """(tile position, vector step) -> the stack slot of that accumulator"""
    writes_slots: bool = True
    """Whether the statement writes its accumulator's slot (reduction, init) or memory (an
    epilogue, which reads the slot)."""
    reads_memory: bool = False
    """Whether the statement reads its accumulator's element from memory (an init: a residual
    the sums start from), the slot holding nothing yet."""
    rereads: frozenset[Reread] = frozenset()
    """Vector loads to read from memory at each use (see :func:`~.tiles.rereads`)."""
    streams: frozenset[Load] = frozenset()
    """Loads to prefetch :data:`PREFETCH_BYTES` ahead (see :func:`~.tiles.streamed`)."""

    def slot(self, statement: str, position: tuple[int, ...], step: int) -> ir.Value | None:
        """The slot of ``statement``'s accumulator at a tile position and vector step."""
        return self.slots.get((position, step)) if statement == self.statement else None


class Loops(Protocol):
    """What tile emission needs of the loop emitter
    (:class:`~polyonnx.codegen.emit.KernelEmitter`)."""

    kernel: Kernel
    accesses: Accesses
    config: CodegenConfig
    frame: Frame

    def address(
        self, buffer: str, index: tuple[Aff, ...], point: Mapping[str, ir.Value], lanes: Lanes
    ) -> ir.Value:
        """The address of lane 0 of ``buffer[index]`` at a statement instance."""

    def emit_in_tile(
        self, nodes: tuple[la.LNode, ...], env: dict[str, ir.Value], state: TileState
    ) -> frozenset[Position]:
        """Emit ``nodes`` with ``state`` the register tile being emitted; the positions of the
        accumulators its statement was emitted for."""


@dataclass(frozen=True)
class _Place:
    """Where one accumulator lives: its stack slot during the tile, its address in memory."""

    position: tuple[int, ...]
    step: int
    slot: ir.Value
    ptr: ir.Value
    type: ir.Type
    align: int


def emit_register_tile(loops: Loops, tile: RegisterTile, env: dict[str, ir.Value]) -> None:
    """The tile alone: its accumulators loaded before the reduction and stored after it."""
    places = _places(loops, tile, env)
    _load(loops.frame.builder, places)
    _reduction(loops, tile, env, places)
    _store(loops.frame.builder, places)


def emit_tile_group(loops: Loops, group: TileGroup, env: dict[str, ir.Value]) -> None:
    """A tile group: the init into the slots, the reduction, the epilogue from the slots."""
    if group.init is None and group.epilogue is None:
        emit_register_tile(loops, group.tile, env)
        return
    places = _places(loops, group.tile, env)
    _guarded(
        loops,
        group.init,
        env,
        lambda nest: _fill(loops, nest, env, places, init=True),
        lambda: _load(loops.frame.builder, places),
    )
    _reduction(loops, group.tile, env, places)
    _guarded(
        loops,
        group.epilogue,
        env,
        lambda nest: _fill(loops, nest, env, places, init=False),
        lambda: _store(loops.frame.builder, places),
    )


def _places(loops: Loops, tile: RegisterTile, env: dict[str, ir.Value]) -> list[_Place]:
    """A stack slot and the address of each accumulator of ``tile``."""
    frame = loops.frame
    b, index = frame.builder, frame.index
    unrolled, vec, call, width = tile.unrolled, tile.vector, tile.call, tile.width
    iterators, stmt = loops.accesses.statements[call.stmt]
    lanes = Lanes(width, loops.accesses.lane_steps(call, vec.iterator) or {})
    buf = loops.accesses.buffers[stmt.write.buffer]
    vty = ir.VectorType(memory_type(buf.dtype), width)
    used = {n for ix in stmt.write.index for n, _ in ix.terms}

    def address(position: tuple[int, ...], j: int) -> ir.Value:
        """The accumulator's address computed from the tile's loop values."""
        tile_env = dict(env)
        for loop, k in zip(unrolled, position, strict=True):
            start = index.expr(loop.init, tile_env)
            tile_env[loop.iterator] = index.int("add", start, i64(k))
        lane = index.int("add", index.expr(vec.init, tile_env), i64(j * width))
        point = {
            it: index.expr(arg, {**tile_env, vec.iterator: lane})
            for it, arg in zip(iterators, call.args, strict=True)
            if it in used
        }
        return loops.address(stmt.write.buffer, stmt.write.index, point, lanes)

    # One base pointer and constant offsets: LLVM then keeps a single register live across
    # the reduction, not one address per accumulator (which spilled to the stack around every
    # tile). Checked code computes each address, to range-check it.
    places = []
    first = None
    for acc in tile.accumulators:
        if first is None or loops.config.checked:
            ptr = address(acc.position, acc.step)
            first = ptr if first is None else first
        else:
            ptr = b.gep(
                first,
                [i64(acc.offset)],
                inbounds=True,
                source_etype=memory_type(buf.dtype),
            )
        with b.goto_entry_block():
            slot = b.alloca(vty)
        places.append(_Place(acc.position, acc.step, slot, ptr, vty, np.dtype(buf.dtype).itemsize))
    return places


def _slots(places: list[_Place]) -> dict[Position, ir.Value]:
    return {(p.position, p.step): p.slot for p in places}


def _load(b: ir.IRBuilder, places: list[_Place]) -> None:
    for p in places:
        b.store(b.load(p.ptr, typ=p.type, align=p.align), p.slot)


def _store(b: ir.IRBuilder, places: list[_Place]) -> None:
    for p in places:
        b.store(b.load(p.slot, typ=p.type), p.ptr, align=p.align)


def _reduction(
    loops: Loops, tile: RegisterTile, env: dict[str, ir.Value], places: list[_Place]
) -> None:
    state = TileState(tile.call.stmt, _slots(places), rereads=tile.rereads, streams=tile.streams)
    loops.emit_in_tile((tile.reduction,), env, state)


def _guarded(
    loops: Loops,
    node: la.LNode | None,
    env: dict[str, ir.Value],
    fill: Callable[[la.LNode], None],
    otherwise: Callable[[], None],
) -> None:
    """``fill(nest)`` for a tile group's init or epilogue ``node``, or ``otherwise()`` without
    one; a chunked reduction's (``if`` first chunk / ``if`` last chunk) runs ``otherwise()``
    in the other chunks (they load / store the running sums)."""
    if node is None:
        otherwise()
    elif isinstance(node, la.If):
        cond = loops.frame.index.expr(node.cond, env)
        with loops.frame.builder.if_else(cond) as (then, orelse):
            with then:
                fill(node.then[0])
            with orelse:
                otherwise()
    else:
        fill(node)


def _fill(
    loops: Loops, nest: la.LNode, env: dict[str, ir.Value], places: list[_Place], init: bool
) -> None:
    """Emit the init or epilogue ``nest`` of a tile group: its statement at each tile point
    writes (init) or reads (epilogue) that point's slot."""
    state = TileState(nest_call(nest).stmt, _slots(places), writes_slots=init, reads_memory=init)
    filled = loops.emit_in_tile((nest,), env, state)
    if len(filled) != len(places):  # (covers() matched a nest emitted otherwise)
        raise CodegenError(
            f"{loops.kernel.name}: a register tile's "
            f"{'init' if init else 'epilogue'} reached "
            f"{len(filled)} of its {len(places)} accumulators"
        )


def prefetch(
    frame: Frame, done: set[tuple[ir.Block, str, object]], buffer: str, ptr: ir.GEPInstr
) -> None:
    """Prefetch :data:`PREFETCH_BYTES` after ``ptr`` (an element of ``buffer``) into L1, once
    per address and block (``done`` holds those emitted): the rows of a tile load the same
    weights, and LLVM merges those loads, not the prefetches."""
    b = frame.builder
    offset = ptr.indices[0]  # (numbered: one value per distinct offset)
    key = (b.block, buffer, offset.constant if isinstance(offset, ir.Constant) else offset)
    if key in done:
        return
    done.add(key)
    fn = frame.declare("llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    ahead = b.gep(ptr, [i64(PREFETCH_BYTES)], source_etype=I8)
    # (read, locality 3: keep in all cache levels, data cache)
    b.call(fn, [ahead, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])
