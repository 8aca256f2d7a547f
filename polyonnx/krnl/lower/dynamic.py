"""Ops whose output shape depends on input data: refused with the reason.

NonZero, Unique and Compress (with a run-time condition) size their outputs by the values they
read; polyonnx compiles for static shapes and its runtime has no outputs sized after running.
When the data is constant the graph folds them before lowering, so reaching a lowering means the
shape really is data-dependent.
"""

from __future__ import annotations

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import unsupported
from polyonnx.krnl.lower.registry import LowerContext, register


def _refuse(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    raise unsupported(node, ctx, "its output shape depends on the input data; the runtime "
                                 "only supports shapes known at compile time")


for _op in ("NonZero", "Unique", "Compress"):
    register(_op)(_refuse)
