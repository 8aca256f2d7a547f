"""Conv: direct convolution as an init statement plus a multiply-accumulate reduction.

For a 2-D, ungrouped Conv with padding the nest is::

    for n, oc, oh, ow:
      S: Y[n, oc, oh, ow] = B[oc]
      for ic, kh, kw:
        S: Y[n, oc, oh, ow] = Y[n, oc, oh, ow] + X[n, ic, ih, iw] * W[oc, ic, kh, kw]
           if 0 <= ih < H and 0 <= iw < W      (ih = oh*stride + kh*dilation - pad_top, ...)

The guards restrict the reduction's domain so padded zeros are never read. Grouped convolutions
split the output channel into ``g`` (group) and ``oc`` (channel within the group) because the
input channel ``g * C/group + ic`` must stay affine; a depthwise Conv has no ``oc``/``ic`` loop.
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    check_out_spatial,
    ints_attr,
    load,
    nest,
    pairs,
    require_float,
    spatial_names,
    var,
    window,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register


@register("Conv")
def lower_conv(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Conv (any spatial rank): bias-or-zero init, then the guarded multiply-accumulate."""
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    if len(xs) < 3 or len(ws) != len(xs):
        raise ShapeError(f"node {node.name!r} (Conv): X {xs} and W {ws} must both be "
                         "[N, C, spatial...] / [M, C/group, kernel...]")
    rank = len(xs) - 2
    n_batch, channels, in_spatial = xs[0], xs[1], xs[2:]
    out_channels, out_spatial = ws[0], ys[2:]
    group = int(node.attr("group", 1))
    if group < 1 or channels % group or out_channels % group:
        raise bad_attr(node, "group", f"= {group} must divide C={channels} and M={out_channels}")
    cg, mg = channels // group, out_channels // group
    if ws[1] != cg:
        raise ShapeError(f"node {node.name!r} (Conv): W has {ws[1]} input channels, "
                         f"expected C/group = {cg}")
    kernel = ws[2:]
    if node.has_attr("kernel_shape") and ints_attr(node, "kernel_shape", rank, None) != kernel:
        raise bad_attr(node, "kernel_shape", f"disagrees with W's shape {ws}")
    win = window(node, ctx, in_spatial, kernel)
    check_out_spatial(node, win, in_spatial, out_spatial, ceil_mode=False)

    if group == 1:
        channel_iters = [("oc", out_channels)]
        oc, xc_base = var("oc"), Aff.lift(0)
    else:
        channel_iters = [("g", group)] + ([("oc", mg)] if mg > 1 else [])
        oc = var("g") * mg + (var("oc") if mg > 1 else 0)
        xc_base = var("g") * cg
    ic_iters = [("ic", cg)] if cg > 1 else []
    ic = var("ic") if cg > 1 else Aff.lift(0)

    names = spatial_names(rank)
    o_names = [f"o{s}" for s in names]
    k_names = [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(rank)]
    guards = tuple(g for k in range(rank)
                   for g in win.guards(k, o_names[k], k_names[k], out_spatial[k], 0,
                                       in_spatial[k]))

    out = ir.Access(y, (var("n"), oc, *(var(o) for o in o_names)))
    init_value = load(ctx, b, (oc,)) if b else zero(dtype)
    init = ir.Stmt("S", out, init_value)
    out_load = ir.Load(y, out.index, dtype)
    product = load(ctx, x, (var("n"), xc_base + ic, *positions)) \
        * load(ctx, w, (oc, ic, *(var(k) for k in k_names)))
    update = ir.Stmt("S", out, out_load + product, guards)
    reduction = nest(ic_iters + pairs(k_names, kernel), (update,))
    return nest([("n", n_batch), *channel_iters, *pairs(o_names, out_spatial)],
                (init, *reduction))
