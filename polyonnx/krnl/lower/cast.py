"""Cast and CastLike: one elementwise conversion statement (and BitCast, a reinterpretation).

Conversions follow LLVM's (and C's) rules, which are numpy's ``astype`` for every value in range:
float to int truncates toward zero, float to narrower float rounds to nearest even, anything
to bool is ``!= 0`` (NaN is true)::

    for i0:
      S: Y[i0] = float16(X[i0])

The encoded types (bfloat16, float8, float4, int4...: :data:`polyonnx.krnl.ir.ENCODED_DTYPES`)
convert through float32 (or int64, for the small integers) by the bit arithmetic of
:mod:`polyonnx.krnl.lower.encoding`, which rounds and saturates as the ONNX reference does.
An encoding is computed from a float16 or float32 only (a float64 or a wide integer would be
rounded twice on the way), and strings are refused, at compile time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import str_attr, unsupported
from polyonnx.krnl.lower.elementwise import elementwise
from polyonnx.krnl.lower.encoding import INT_RANGES, decode, encode
from polyonnx.krnl.lower.registry import LowerContext, register

#: What an encoding may be computed from exactly (see the module docstring).
_ENCODABLE = ("float16", "float32")


def _cast(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    src, dst = ctx.dtype(x), ctx.dtype(y)
    for what, dtype in (("input", src), ("target", dst)):
        if dtype not in ir.DTYPES:
            name = "string" if dtype == "object" else dtype
            raise unsupported(node, ctx, f"{what} type {name} (supported: {', '.join(ir.DTYPES)})")
    if src == dst:
        return elementwise(node, ctx, (x,), lambda a: a[0])
    if src not in ir.ENCODED_DTYPES and dst not in ir.ENCODED_DTYPES:
        return elementwise(node, ctx, (x,), lambda a: ir.Cast(a[0], dst))
    if dst in ir.ENCODED_DTYPES and src not in (*ir.ENCODED_DTYPES, *_ENCODABLE):
        raise unsupported(
            node, ctx, f"a cast from {src} to {dst} (it would round twice through float32)"
        )
    if src in INT_RANGES and dst in INT_RANGES:
        raise unsupported(node, ctx, f"a cast from {src} to {dst}")
    saturate = bool(node.attr("saturate", 1))
    round_mode = str_attr(node, "round_mode", "up")
    if round_mode not in ("up", "down", "nearest"):
        raise unsupported(node, ctx, f"round_mode {round_mode!r}")

    def convert(a: Sequence[ir.Expr]) -> ir.Expr:
        v = decode(a[0]) if src in ir.ENCODED_DTYPES else a[0]
        if dst not in ir.ENCODED_DTYPES:
            return v if v.dtype == dst else ir.Cast(v, dst)
        if v.dtype == "int64":  # a small integer: its value is exact in float32
            v = ir.Cast(v, "float32")
        return encode(v, dst, saturate=saturate, round_mode=round_mode)

    return elementwise(node, ctx, (x,), convert)


@register("Cast")
def lower_cast(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Cast: ``Y = to(X)``."""
    return _cast(node, ctx)


@register("CastLike")
def lower_cast_like(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """CastLike: Cast to the element type of the second input (whose data is not read)."""
    return _cast(node, ctx)


@register("BitCast")
def lower_bit_cast(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """BitCast: ``X``'s bits read as the type ``to`` of the same size (a bool is its byte,
    0 or 1)."""
    x, y = node.input(0), node.outputs[0]
    src, dst = ctx.dtype(x), ctx.dtype(y)
    if src not in ir.DTYPES or dst not in ir.DTYPES:
        raise unsupported(node, ctx, f"a bit cast from {src} to {dst}")
    if np.dtype(src).itemsize != np.dtype(dst).itemsize:
        raise unsupported(node, ctx, f"{src} and {dst} differ in size")

    def reinterpret(a: Sequence[ir.Expr]) -> ir.Expr:
        if "bool" in (src, dst):  # (a bool is one bit in registers: its byte is 0 or 1)
            return ir.Cast(a[0], dst)
        return a[0] if src == dst else ir.Bitcast(a[0], dst)

    return elementwise(node, ctx, (x,), reinterpret)
