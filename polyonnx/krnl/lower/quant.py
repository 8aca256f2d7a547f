"""Quantized linear algebra: MatMulInteger and QLinearMatMul, and polyonnx's
``PackedMatMulInteger``, the sum of both on a target with a byte dot product.

Both accumulate ``(A - a_zero_point) * (B - b_zero_point)`` in int32 with MatMul's batch
broadcasting; QLinearMatMul then rescales by ``a_scale * b_scale / y_scale`` in float32, rounds
half to even, adds ``y_zero_point`` and saturates to the output type. Zero points and scales are
per tensor, or per row of A / per column of B.

``PackedMatMulInteger(A, B4, B_sums[, a_zero_point])`` sums four bytes at a time with krnl's
``dot4`` (x86's ``vpdpbusd``: :mod:`polyonnx.graph.passes.qlinear` writes it where the target
has one): ``B4[k, j]`` holds the four centred weights ``B[4k..4k+3, j] - b_zero_point`` as the
bytes of one int32, ``B_sums[j]`` their column's sum, and A's four bytes along K are read as
one int32 (unsigned: an int8 A's bytes have their sign bit flipped, ``a + 128``, and its zero
point moves by 128 with them). The zero point comes off once per element::

    for b..., i, j:
      S: acc[b.., i, j] = -(a_zero_point (+ 128)) * B_sums[j]
      for k < K / 4:
        S: acc[b.., i, j] = acc[b.., i, j] + dot4(A[b.., i, 4k : 4k + 4] (^ 0x80808080), B4[k, j])
      S: Y[b.., i, j] = float32(acc[b.., i, j])       (a float32 Y; an int32 Y is acc itself)

The same int32 arithmetic as MatMulInteger's, so the same sums, wrapping included.
"""

from __future__ import annotations

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import INTERNAL_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import Aff, broadcast_index, nest, unsupported, var
from polyonnx.krnl.lower.qconv import byte_quad, byte_sum
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


@register("PackedMatMulInteger", domain=INTERNAL_DOMAIN)
def lower_packed_matmul_integer(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = (A - a_zero_point) @ B`` four bytes at a time: see the module docstring."""
    a, packed, sums = node.input(0), node.input(1), node.input(2)
    a_zp = node.input(3) if len(node.inputs) > 3 else ""
    y = node.outputs[0]
    a_shape, (quads, columns), ys = ctx.shape(a), ctx.shape(packed), ctx.shape(y)
    signed = ctx.dtype(a) == "int8"
    if (
        ctx.dtype(a) not in ("int8", "uint8")
        or (ctx.dtype(packed), ctx.dtype(sums)) != (I32, I32)
        or len(a_shape) < 2
        or a_shape[-1] != 4 * quads
        or ys != (*a_shape[:-1], columns)
        or ctx.dtype(y) not in (I32, "float32")
    ):
        raise ShapeError(
            f"node {node.name!r} (PackedMatMulInteger): A {ctx.dtype(a)}{list(a_shape)}, "
            f"weights {ctx.dtype(packed)}{[quads, columns]}, Y {ctx.dtype(y)}{list(ys)}"
        )
    names = [f"b{d}" for d in range(len(ys) - 2)]
    out = (*(var(n) for n in names), var("i"), var("j"))
    quad = byte_quad(a, ctx.dtype(a), lambda q: (*out[:-1], var("k") * 4 + q))
    zero: ir.Expr = ir.Const(128 if signed else 0, I32)  # (an int8 A is read as A + 128)
    if a_zp:
        zero = _required(ctx, a_zp, var("i"), I32) + zero
    body, acc = byte_sum(
        node,
        ctx,
        out,
        [*zip(names, ys[:-2], strict=True), ("i", ys[-2]), ("j", ys[-1])],
        [("k", quads)],
        (
            ir.Const(0, I32) - zero * ir.Load(sums, (var("j"),), I32),
            quad,
            ir.Load(packed, (var("k"), var("j")), I32),
        ),
    )
    return Lowered(body, acc)
