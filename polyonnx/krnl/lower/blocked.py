"""The channel-blocked operators made by :mod:`polyonnx.graph.passes.layout`.

Tensors are ``[N, C/b, spatial..., b]``. ``ConvBlocked`` is a direct convolution::

    for n, ob, oh, ow, o:
      S: Y[n, ob, oh, ow, o] = B[ob*b + o]
      for ib, kh, kw, i:
        S: Y[n, ob, oh, ow, o] += X[n, ib, oh*s + kh*d, ow*s + kw*d, i] * W[ob, ib, kh, kw, i, o]

so ``o`` (a block of output channels, contiguous in ``Y`` and ``W``) is the vector loop and
``ow`` the register-tile rows that share each weight vector; the epilogue (Relu, the residual
Add) is an element-wise nest over the same points that the schedule fuses into the tile. A
padded window reads a zero-bordered copy of ``X`` (border slabs written once, as for Conv).
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    check_out_spatial,
    load,
    nest,
    pairs,
    spatial_names,
    var,
    window,
    zero,
)
from polyonnx.krnl.lower.conv import pad_input
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


@register("ConvBlocked", domain=DOMAIN)
def lower_conv_blocked(node: Node, ctx: LowerContext) -> Lowered:
    """Direct convolution over blocked input, weights and output (see the module docstring)."""
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    block = int(node.attr("block"))
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    rank = len(xs) - 3
    n_batch, in_blocks, in_spatial = xs[0], xs[1], xs[2:2 + rank]
    out_blocks, kernel, out_spatial = ws[0], ws[2:2 + rank], ys[2:2 + rank]
    if ws[1] != in_blocks or xs[-1] != block or ys[-1] != block or ys[1] != out_blocks:
        raise ShapeError(f"node {node.name!r} (ConvBlocked): X {xs}, W {ws} and Y {ys} do "
                         f"not agree on blocks of {block} channels")
    win = window(node, ctx, in_spatial, kernel)
    check_out_spatial(node, win, in_spatial, out_spatial, ceil_mode=False)
    names = spatial_names(rank)
    o_names, k_names = [f"o{s}" for s in names], [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(rank)]
    dtype = ctx.dtype(x)

    source, prologue, temps = x, (), ()
    if any(win.pads_begin) or any(win.pads_end):
        source = f"{node.name}__pad"
        padded = tuple(size + lo + hi for size, lo, hi in
                       zip(in_spatial, win.pads_begin, win.pads_end, strict=True))
        # The block of channels is one more (unpadded) trailing axis for the padding nests.
        temps = (ir.Buffer(source, dtype, (n_batch, in_blocks, *padded, block), "temp"),)
        prologue = pad_input(ctx, x, source, dtype, n_batch, in_blocks, (*in_spatial, block),
                             (*padded, block), (*win.pads_begin, 0))
        positions = [pos + lo for pos, lo in zip(positions, win.pads_begin, strict=True)]

    point = (var("n"), var("ob"), *(var(o) for o in o_names), var("o"))
    channel = var("ob") * block + var("o")
    init = ir.Stmt("S", ir.Access(y, point), load(ctx, b, (channel,)) if b else zero(dtype))
    product = ir.Load(source, (var("n"), var("ib"), *positions, var("i")), dtype) \
        * load(ctx, w, (var("ob"), var("ib"), *(var(k) for k in k_names), var("i"), var("o")))
    update = ir.Stmt("S", ir.Access(y, point), ir.Load(y, point, dtype) + product)
    reduction = nest([("ib", in_blocks), *pairs(k_names, kernel), ("i", block)], (update,))
    body = nest([("n", n_batch), ("ob", out_blocks), *pairs(o_names, out_spatial),
                 ("o", block)], (init, *reduction))
    return Lowered((*prologue, *body), temps)


@register("ToBlocked", domain=DOMAIN)
def lower_to_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, cb, s..., c] = X[n, cb*b + c, s...]``."""
    return _reorder(node, ctx, to_blocked=True)


@register("FromBlocked", domain=DOMAIN)
def lower_from_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, cb*b + c, s...] = X[n, cb, s..., c]``."""
    return _reorder(node, ctx, to_blocked=False)


def _reorder(node: Node, ctx: LowerContext, to_blocked: bool) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    block = int(node.attr("block"))
    plain = ctx.shape(x) if to_blocked else ctx.shape(y)
    n_batch, channels, spatial = plain[0], plain[1], plain[2:]
    s_names = [f"s{k}" for k in range(len(spatial))]
    blocked_index = (var("n"), var("cb"), *(var(s) for s in s_names), var("c"))
    plain_index = (var("n"), var("cb") * block + var("c"), *(var(s) for s in s_names))
    dst, src = (blocked_index, plain_index) if to_blocked else (plain_index, blocked_index)
    copy = ir.Stmt("S", ir.Access(y, dst), load(ctx, x, src))
    # Loop order: the destination's own (its innermost axis is contiguous).
    if to_blocked:
        iters = [("n", n_batch), ("cb", channels // block), *pairs(s_names, spatial),
                 ("c", block)]
    else:
        iters = [("n", n_batch), ("cb", channels // block), ("c", block),
                 *pairs(s_names, spatial)]
    return nest(iters, (copy,))
