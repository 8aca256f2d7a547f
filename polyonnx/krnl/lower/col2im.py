"""Col2Im: the sliding blocks of an image, one column each, summed back into the image.

The input is ``[N, C·K, L]`` (``K`` the elements of a block, ``L`` the blocks, both
row-major over the spatial axes). krnl writes are affine, so instead of scattering each
column into the image, every image point gathers: for each block offset ``k`` (per axis),
the block that covers the point at that offset is ``b = (p + pad - k·dilation) / stride``,
a column when the division is exact and ``b`` in range::

    for n, c, p0, p1:
      S: Y[n, c, p0, p1] = 0.0
      for k0, k1:
        S: Y[..] = Y[..] + select(covered, X[n, c·K + k0·K1 + k1, b0·B1 + b1], 0.0)
"""

from __future__ import annotations

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, require_float, unsupported, var, zero
from polyonnx.krnl.lower.registry import LowerContext, register

I64 = "int64"


def _ints(node: Node, name: str, n: int, default: int) -> list[int]:
    value = node.attr(name)
    out = [default] * n if value is None else [int(v) for v in value]
    if len(out) != n:
        raise bad_attr(
            node, name, f"has {len(out)} values for {n // (2 if name == 'pads' else 1)} axes"
        )
    return out


@register("Col2Im", since=18)
@register("Col2Im", domain=INTERNAL_DOMAIN)  # ConvTranspose's overlap-add, at any opset
def lower_col2im(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Col2Im: see the module docstring."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    consts = [ctx.constant(node.input(k)) for k in (1, 2)]
    if any(c is None for c in consts):
        raise unsupported(node, ctx, "image_shape or block_shape known only at run time")
    image, block = ([int(v) for v in np.asarray(c).reshape(-1)] for c in consts if c is not None)
    rank = len(image)
    dil = _ints(node, "dilations", rank, 1)
    strides = _ints(node, "strides", rank, 1)
    pads = _ints(node, "pads", 2 * rank, 0)
    counts = [
        (image[d] + pads[d] + pads[rank + d] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
        for d in range(rank)
    ]
    xs = ctx.shape(x)
    size = int(np.prod(block))
    if len(block) != rank or xs[2] != int(np.prod(counts)) or xs[1] % size or min(counts) < 1:
        raise bad_attr(
            node,
            "block_shape",
            f"{block} with image {image}, strides {strides}, pads {pads}, dilations {dil} "
            f"does not fit an input of shape {list(xs)}",
        )
    names = ["n", "c", *(f"p{d}" for d in range(rank))]
    taps = [f"k{d}" for d in range(rank)]
    channel = var("c") * size
    column: ir.Expr = ir.Const(0, I64)
    covered: ir.Expr = ir.Const(True, "bool")
    for d in range(rank):
        channel = channel + var(taps[d]) * int(np.prod(block[d + 1 :]))
        # Where the block starting at b·stride - pad puts its offset k: p = b·s - pad + k·dil.
        shifted = (
            ir.Iter(f"p{d}") + ir.Const(pads[d], I64) - ir.Iter(taps[d]) * ir.Const(dil[d], I64)
        )
        b = ir.Binary("div", shifted, ir.Const(strides[d], I64))
        exact = ir.Binary("eq", b * ir.Const(strides[d], I64), shifted)
        inside = ir.Binary(
            "and",
            ir.Binary("ge", shifted, ir.Const(0, I64)),
            ir.Binary("lt", b, ir.Const(counts[d], I64)),
        )
        covered = ir.Binary("and", covered, ir.Binary("and", exact, inside))
        clamped = ir.minimum(ir.maximum(b, ir.Const(0, I64)), ir.Const(counts[d] - 1, I64))
        column = column * ir.Const(counts[d], I64) + clamped
    value = ir.Select(covered, ir.Load(x, (var("n"), channel, column), dtype), zero(dtype))
    index = tuple(var(n) for n in names)
    at = ir.Access(y, index)
    body = (
        ir.Stmt("S", at, zero(dtype)),
        *nest(
            [(t, block[d]) for d, t in enumerate(taps)],
            (ir.Stmt("S", at, ir.Load(y, index, dtype) + value),),
        ),
    )
    return nest(list(zip(names, ctx.shape(y), strict=True)), body)
