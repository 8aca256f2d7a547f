"""Cast and CastLike: one elementwise conversion statement.

Conversions follow LLVM's (and C's) rules, which are numpy's ``astype`` for every value in range:
float to int truncates toward zero, float to narrower float rounds to nearest even, anything
to bool is ``!= 0`` (NaN is true)::

    for i0:
      S: Y[i0] = float16(X[i0])

Types without a machine representation here (strings, bfloat16, float8, int4...) are refused
at compile time.
"""

from __future__ import annotations

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import unsupported
from polyonnx.krnl.lower.elementwise import elementwise
from polyonnx.krnl.lower.registry import LowerContext, register


def _cast(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    src, dst = ctx.dtype(x), ctx.dtype(y)
    for what, dtype in (("input", src), ("target", dst)):
        if dtype not in ir.DTYPES:
            name = "string" if dtype == "object" else dtype
            raise unsupported(node, ctx, f"{what} type {name} (supported: {', '.join(ir.DTYPES)})")
    return elementwise(node, ctx, (x,), lambda a: a[0] if src == dst else ir.Cast(a[0], dst))


@register("Cast")
def lower_cast(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Cast: ``Y = to(X)``."""
    return _cast(node, ctx)


@register("CastLike")
def lower_cast_like(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """CastLike: Cast to the element type of the second input (whose data is not read)."""
    return _cast(node, ctx)
