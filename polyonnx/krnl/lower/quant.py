"""Quantized linear algebra: MatMulInteger and QLinearMatMul.

Both accumulate ``(A - a_zero_point) * (B - b_zero_point)`` in int32 with MatMul's batch
broadcasting; QLinearMatMul then rescales by ``a_scale * b_scale / y_scale`` in float32, rounds
half to even, adds ``y_zero_point`` and saturates to the output type. Zero points and scales are
per tensor, or per row of A / per column of B.
"""

from __future__ import annotations

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import Aff, broadcast_index, nest, unsupported, var
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I32 = "int32"


def _param(ctx: LowerContext, name: str, row: Aff, dtype: str) -> ir.Expr | None:
    """A per-tensor (scalar / 1-element) or per-row/column parameter, as ``dtype``; None for
    an optional input left out."""
    if not name:
        return None
    return _required(ctx, name, row, dtype)


def _required(ctx: LowerContext, name: str, row: Aff, dtype: str) -> ir.Expr:
    """The parameter ``name`` (see :func:`_param`) of an input that must be given."""
    shape = ctx.shape(name)
    size = int(np.prod(shape, dtype=np.int64))
    index = (
        tuple(Aff.lift(0) for _ in shape)
        if size == 1
        else (*(Aff.lift(0) for _ in shape[:-1]), row)
    )
    e: ir.Expr = ir.Load(name, index, ctx.dtype(name))
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def _accumulate(
    node: Node, ctx: LowerContext, acc: str, acc_shape: tuple[int, ...], a_zp: str, b_zp: str
) -> tuple[list[tuple[str, int]], tuple[Aff, ...], tuple[ir.Node, ...]]:
    a, b = node.input(0), node.input(1)
    a_shape, b_shape = ctx.shape(a), ctx.shape(b)
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[-1] != b_shape[-2]:
        raise unsupported(
            node,
            ctx,
            f"operand shapes {a_shape} x {b_shape} (1-D operands or mismatched inner dimensions)",
        )
    batch = acc_shape[:-2]
    names = [f"b{d}" for d in range(len(batch))]
    iters = [*zip(names, batch, strict=True), ("i", acc_shape[-2]), ("j", acc_shape[-1])]
    out = (*(var(n) for n in names), var("i"), var("j"))
    k = var("k")
    av: ir.Expr = ir.Cast(
        ir.Load(a, (*broadcast_index(a_shape[:-2], batch, names), var("i"), k), ctx.dtype(a)), I32
    )
    bv: ir.Expr = ir.Cast(
        ir.Load(b, (*broadcast_index(b_shape[:-2], batch, names), k, var("j")), ctx.dtype(b)), I32
    )
    azp, bzp = _param(ctx, a_zp, var("i"), I32), _param(ctx, b_zp, var("j"), I32)
    if azp is not None:
        av = av - azp
    if bzp is not None:
        bv = bv - bzp
    target = ir.Access(acc, out)
    body = (
        ir.Stmt("S", target, ir.Const(0, I32)),
        *nest([("k", a_shape[-1])], (ir.Stmt("S", target, ir.Load(acc, out, I32) + av * bv),)),
    )
    return iters, out, body


@register("MatMulInteger", since=10)
def lower_matmul_integer(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y (int32) = (A - a_zero_point) @ (B - b_zero_point)``."""
    y = node.outputs[0]
    if ctx.dtype(y) != I32:
        raise ShapeError(f"node {node.name!r} (MatMulInteger): output must be int32")
    iters, _, body = _accumulate(node, ctx, y, ctx.shape(y), node.input(2), node.input(3))
    return nest(iters, body)


@register("QLinearMatMul", since=10)
def lower_qlinear_matmul(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = saturate(rint(acc * a_scale * b_scale / y_scale) + y_zero_point)``."""
    a_scale, a_zp, b_scale, b_zp = (node.input(k) for k in (1, 2, 4, 5))
    y_scale, y_zp = node.input(6), node.input(7)
    y = node.outputs[0]
    ys, ydt = ctx.shape(y), ctx.dtype(y)
    if ydt not in ("int8", "uint8"):
        raise unsupported(node, ctx, f"output dtype {ydt}")
    node_ab = Node(node.name, node.op_type, (node.input(0), node.input(3)), node.outputs)
    acc = ir.Buffer(f"{node.name}__acc", I32, tuple(ys))
    iters, out, body = _accumulate(node_ab, ctx, acc.name, tuple(ys), a_zp, b_zp)
    f = "float32"
    scale = (
        _required(ctx, a_scale, var("i"), f)
        * _required(ctx, b_scale, var("j"), f)
        / _required(ctx, y_scale, var("j"), f)
    )
    value: ir.Expr = ir.unary("round", ir.Cast(ir.Load(acc.name, out, I32), f) * scale)
    zp = _param(ctx, y_zp, var("j"), f)
    if zp is not None:
        value = value + zp
    info = np.iinfo(ydt)
    value = ir.minimum(ir.maximum(value, float(info.min)), float(info.max))
    finish = ir.Stmt("S", ir.Access(y, out), ir.Cast(value, ydt))
    return Lowered(nest(iters, (*body, finish)), (acc,))
