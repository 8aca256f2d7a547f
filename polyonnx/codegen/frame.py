"""The LLVM function being emitted: its builder, buffer pointers and failure block, and the
index and scalar emitters at its builder. A kernel's function and each outlined parallel loop
body get one; both return :data:`STATUS_OK`, or :data:`STATUS_INDEX_OUT_OF_RANGE` from the
failure block a failed run-time check branches to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llvmlite import ir

from polyonnx.codegen.index import IndexEmitter
from polyonnx.codegen.llvm_types import I32
from polyonnx.codegen.scalar import Declare, ScalarEmitter

STATUS_OK, STATUS_INDEX_OUT_OF_RANGE = 0, 1


@dataclass(frozen=True)
class Frame:
    """One function under construction."""

    fn: ir.Function
    builder: ir.IRBuilder
    pointers: Mapping[str, ir.Value]
    """buffer name -> its pointer (a ``noalias`` argument of ``fn``)"""
    fail_block: ir.Block
    declare: Declare
    """Declares the external functions the code calls (in the module of ``fn``)."""
    index: IndexEmitter
    scalars: ScalarEmitter
    outlined: bool = False
    """Whether ``fn`` is an outlined parallel loop body (parallel loops do not nest)."""


def open_frame(
    fn: ir.Function,
    pointers: Mapping[str, ir.Value],
    declare: Declare,
    outlined: bool = False,
    dot4_bits: int = 0,
) -> Frame:
    """``fn``'s entry block (the builder at its end) and failure block; ``dot4_bits``: see
    :attr:`~polyonnx.codegen.config.CodegenConfig.dot4_bits`."""
    entry = fn.append_basic_block("entry")
    fail = fn.append_basic_block("index_out_of_range")
    ir.IRBuilder(fail).ret(ir.Constant(I32, STATUS_INDEX_OUT_OF_RANGE))
    builder = ir.IRBuilder(entry)
    return Frame(
        fn,
        builder,
        pointers,
        fail,
        declare,
        IndexEmitter(builder),
        ScalarEmitter(builder, declare, dot4_bits),
        outlined,
    )


def close_frame(frame: Frame) -> None:
    """Return :data:`STATUS_OK` where the builder is."""
    frame.builder.ret(ir.Constant(I32, STATUS_OK))
