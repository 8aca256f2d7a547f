"""Col2Im: the sliding blocks of an image, one column each, summed back into the image.

The input is ``[N, C·K, L]`` (``K`` the elements of a block, ``L`` the blocks, both
row-major over the spatial axes). Image point ``p`` gets block offset ``k`` of block ``b``
when ``p = b·stride + k·dilation - pad``. Split by the residue ``r`` of ``p`` modulo the
stride (``p = q·stride + r``), the offsets that reach a residue are known at compile time,
and each one's block is affine in ``q``: one nest per residue (per axis), with one guarded
update per reaching offset, every index affine (no division, no select)::

    for each residue (r0, r1):                  # stride0 x stride1 nests
      for n, c, q0, q1:
        S: Y[n, c, q0·s0 + r0, q1·s1 + r1] = 0.0
        for each reaching offset (k0, k1), at block offsets (o0, o1):
          S: Y[..] = Y[..] + X[n, c·K + k0·K1 + k1, (q0 + o0)·B1 + q1 + o1]
               if 0 <= q0 + o0 < B0 and 0 <= q1 + o1 < B1
"""

from __future__ import annotations

import itertools

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.ir import Aff
from polyonnx.krnl.lower.common import (
    bad_attr,
    bound_guards,
    nest,
    require_float,
    unsupported,
    var,
    zero,
)
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
    for attr, values in (("strides", strides), ("dilations", dil)):
        if min(values, default=1) < 1:
            raise bad_attr(node, attr, f"must be positive, got {values}")
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
    return tuple(
        loop
        for residues in itertools.product(*(range(st) for st in strides))
        for loop in _phase(x, y, dtype, xs[0], ctx.shape(y)[1], residues, image, block, strides,
                           dil, pads[:rank], counts)
    )  # fmt: skip


def _phase(
    x: str,
    y: str,
    dtype: str,
    batch: int,
    channels: int,
    residues: tuple[int, ...],
    image: list[int],
    block: list[int],
    strides: list[int],
    dil: list[int],
    pads_begin: list[int],
    counts: list[int],
) -> tuple[ir.Node, ...]:
    """The image points ``p = q·stride + r`` of one residue ``r`` per axis: zero, then one
    guarded update per tap that reaches them (a tap ``k`` does when ``r + pad - k·dilation``
    is a multiple of the stride; its block is then ``b = q + (r + pad - k·dilation) / stride``,
    affine in ``q``, and the guards keep ``b`` within the blocks)."""
    rank = len(image)
    extents = [-(-(image[d] - residues[d]) // strides[d]) for d in range(rank)]
    if min(extents) <= 0:
        return ()
    qs = [var(f"q{d}") for d in range(rank)]
    at = ir.Access(
        y, (var("n"), var("c"), *(qs[d] * strides[d] + residues[d] for d in range(rank)))
    )
    reaching = [
        [
            (k, (residues[d] + pads_begin[d] - k * dil[d]) // strides[d])
            for k in range(block[d])
            if (residues[d] + pads_begin[d] - k * dil[d]) % strides[d] == 0
        ]
        for d in range(rank)
    ]
    updates = []
    for taps in itertools.product(*reaching):
        channel = var("c") * int(np.prod(block))
        column = Aff.lift(0)
        guards: list[ir.Cond] = []
        for d, (k, offset) in enumerate(taps):
            channel = channel + k * int(np.prod(block[d + 1 :]))
            column = column * counts[d] + qs[d] + offset
            guards += bound_guards(qs[d] + offset, offset, extents[d] - 1 + offset, 0, counts[d])
        value = ir.Load(y, at.index, dtype) + ir.Load(x, (var("n"), channel, column), dtype)
        updates.append(ir.Stmt("S", at, value, tuple(guards)))
    iters = [("n", batch), ("c", channels), *((f"q{d}", extents[d]) for d in range(rank))]
    return nest(iters, (ir.Stmt("S", at, zero(dtype)), *updates))
