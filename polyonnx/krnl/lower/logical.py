"""Comparisons, logical and bitwise ops, BitShift and Where: broadcasting elementwise nests.

Comparisons and logical ops write bool (a byte in memory)::

    for i0, i1:
      S: Y[i0, i1] = lt(A[i0, i1], B[0, i1])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.graph.strings import string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import opset, unsupported
from polyonnx.krnl.lower.elementwise import (
    ALL,
    INTS,
    NUMERIC,
    SIGNED,
    check_dtype,
    elementwise,
)
from polyonnx.krnl.lower.registry import LowerContext, register
from polyonnx.krnl.lower.strings import string_equal


def _binary(op_type: str, op: str, dtypes: Sequence[str], strings: bool = False) -> None:
    """Register ``op_type``: ``op`` of two broadcast inputs of ``dtypes`` (and, with
    ``strings``, of two string inputs: :func:`polyonnx.krnl.lower.strings.string_equal`)."""

    def lower(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
        a, b = node.input(0), node.input(1)
        if strings and string_width(ctx.dtype(a)) is not None:
            return string_equal(node, ctx)
        check_dtype(node, ctx, a, dtypes)
        check_dtype(node, ctx, b, dtypes)
        if opset(ctx) < 7 and node.has_attr("axis"):
            raise unsupported(node, ctx, "legacy broadcasting with 'axis'")
        return elementwise(node, ctx, (a, b), lambda x: ir.binary(op, x[0], x[1]))

    lower.__name__ = f"lower_{op_type.lower()}"
    lower.__doc__ = f"{op_type}: ``{op}`` of two broadcast inputs."
    register(op_type)(lower)


_binary("Equal", "eq", ALL, strings=True)
_binary("Less", "lt", NUMERIC)
_binary("LessOrEqual", "le", NUMERIC)
_binary("Greater", "gt", NUMERIC)
_binary("GreaterOrEqual", "ge", NUMERIC)
_binary("And", "and", ("bool",))
_binary("Or", "or", ("bool",))
_binary("Xor", "xor", ("bool",))
_binary("BitwiseAnd", "bitand", INTS)
_binary("BitwiseOr", "bitor", INTS)
_binary("BitwiseXor", "bitxor", INTS)


@register("Not")
def lower_not(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Not: logical negation of a bool tensor."""
    check_dtype(node, ctx, node.input(0), ("bool",))
    return elementwise(node, ctx, node.inputs[:1], lambda x: ir.unary("not", x[0]))


@register("BitwiseNot")
def lower_bitwise_not(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """BitwiseNot: every bit flipped."""
    check_dtype(node, ctx, node.input(0), INTS)
    return elementwise(node, ctx, node.inputs[:1], lambda x: ir.unary("bitnot", x[0]))


@register("BitShift")
def lower_bit_shift(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """BitShift: ``x << y`` or ``x >> y`` (logical for unsigned, arithmetic for signed types).

    A shift by a negative amount or by the bit width or more gives what shifting one bit at a
    time would: 0, or -1 for a negative value shifted right.
    """
    a, b = node.input(0), node.input(1)
    dtype = check_dtype(node, ctx, a, INTS)
    direction = node.attr("direction")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise unsupported(node, ctx, f"direction={direction!r} (must be LEFT or RIGHT)")
    op = "shl" if direction == "LEFT" else "shr"
    width = np.iinfo(dtype).bits

    def body(v: Sequence[ir.Expr]) -> ir.Expr:
        x, n = v
        zero = ir.Const(0, dtype)
        valid = ir.binary("lt", n, ir.Const(width, n.dtype))
        if n.dtype in SIGNED:
            valid = ir.binary("and", valid, ir.binary("ge", n, ir.Const(0, n.dtype)))
        fallback: ir.Expr = zero
        if op == "shr" and dtype in SIGNED:
            fallback = ir.Select(ir.binary("lt", x, zero), ir.Const(-1, dtype), zero)
        return ir.Select(valid, ir.binary(op, x, n), fallback)

    return elementwise(node, ctx, (a, b), body)


@register("Where")
def lower_where(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Where: ``cond ? x : y`` with three-way broadcasting."""
    c, x, y = node.input(0), node.input(1), node.input(2)
    check_dtype(node, ctx, c, ("bool",))
    check_dtype(node, ctx, x, ALL)
    return elementwise(node, ctx, (c, x, y), lambda v: ir.Select(v[0], v[1], v[2]))
