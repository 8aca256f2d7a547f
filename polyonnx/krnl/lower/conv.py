"""Conv: direct convolution as an init statement plus a multiply-accumulate reduction.

For a 2-D, ungrouped Conv with padding the nest is::

    for n, oc, oh, ow:
      S: Y[n, oc, oh, ow] = B[oc]
      for ic, kh, kw:
        S: Y[n, oc, oh, ow] = Y[n, oc, oh, ow] + X[n, ic, ih, iw] * W[oc, ic, kh, kw]
           if 0 <= ih < H and 0 <= iw < W      (ih = oh*stride + kh*dilation - pad_top, ...)

When the window reaches into the padding, the input is first copied into a zero-bordered temp
``<node>__pad`` so the reduction has no guards: its inner loops then have constant bounds, which
is what lets the default schedule keep a register tile of outputs through the whole reduction
(guards would give every tap its own loop bounds). A channel-blocked input that another kernel
computes needs no copy: that kernel writes it into a zero-bordered buffer
(:mod:`polyonnx.krnl.borders`), which :func:`padded_input` then reads. Grouped convolutions
split the output channel into ``g`` (group) and ``oc`` (channel within the group) because the
input channel ``g * C/group + ic`` must stay affine; a depthwise Conv has no ``oc``/``ic`` loop.
An unpadded 1x1 Conv, grouped or not, is a (batched) matrix product over the output pixels
(:func:`_pointwise`), except an ungrouped one on one row of pixels (what
:mod:`polyonnx.graph.passes.pixels` makes of it): the direct nest already runs its rows along
the pixels and writes Y itself, so its epilogue fuses. A grouped direct nest accumulates into
``acc[n, g, oc, spatial...]`` (the output index a point of the nest) and then writes Y.
Convolutions whose channels fit blocks run channel-blocked instead
(:mod:`polyonnx.krnl.lower.blocked`): these NCHW nests are what is left (odd channel counts per
group, depthwise multipliers, a depthwise conv on an NCHW value). An ungrouped one with at
least a register tile's width of output channels (:attr:`LowerContext.tile_bytes`)
accumulates channels-last (:func:`_channels_last`); with fewer (a style-transfer network's
last conv to 3 colours) the direct nest's vector loop runs along the output row instead, where
channels-last would leave most lanes of each vector empty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    Window,
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
from polyonnx.krnl.lower.half import half_product
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


class ConvGeometry(NamedTuple):
    """A convolution's shapes and window, checked against each other (:func:`conv_geometry`)."""

    rank: int
    n_batch: int
    channels: int
    in_spatial: tuple[int, ...]
    out_channels: int
    out_spatial: tuple[int, ...]
    group: int
    cg: int
    """Input channels per group."""
    mg: int
    """Output channels per group."""
    kernel: tuple[int, ...]
    win: Window


def conv_geometry(node: Node, ctx: LowerContext, x: str, w: str, y: str) -> ConvGeometry:
    """The geometry of a convolution node (Conv, ConvInteger, QLinearConv) reading ``x`` with
    weights ``w`` into ``y``: ShapeError or a bad attribute when X, W, Y, ``group`` and
    ``kernel_shape`` disagree."""
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    if len(xs) < 3 or len(ws) != len(xs):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): X {xs} and W {ws} must both be "
            "[N, C, spatial...] / [M, C/group, kernel...]"
        )
    rank = len(xs) - 2
    n_batch, channels, in_spatial = xs[0], xs[1], xs[2:]
    out_channels, out_spatial = ws[0], ys[2:]
    group = int(node.attr("group", 1))
    if group < 1 or channels % group or out_channels % group:
        raise bad_attr(node, "group", f"= {group} must divide C={channels} and M={out_channels}")
    cg, mg = channels // group, out_channels // group
    if ws[1] != cg:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): W has {ws[1]} input channels, "
            f"expected C/group = {cg}"
        )
    kernel = ws[2:]
    if node.has_attr("kernel_shape") and ints_attr(node, "kernel_shape", rank, None) != kernel:
        raise bad_attr(node, "kernel_shape", f"disagrees with W's shape {ws}")
    win = window(node, ctx, in_spatial, kernel)
    check_out_spatial(node, win, in_spatial, out_spatial, ceil_mode=False)
    return ConvGeometry(
        rank, n_batch, channels, in_spatial, out_channels, out_spatial, group, cg, mg, kernel, win
    )


@register("Conv")
def lower_conv(node: Node, ctx: LowerContext) -> Lowered:
    """Conv (any spatial rank): bias-or-zero init, then the guarded multiply-accumulate."""
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, x)
    geometry = conv_geometry(node, ctx, x, w, y)
    rank, n_batch, channels, in_spatial, out_channels, out_spatial = geometry[:6]
    group, cg, mg, kernel, win = geometry[6:]

    names = spatial_names(rank)
    o_names = [f"o{s}" for s in names]
    k_names = [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(rank)]
    reaches_padding = any(
        win.guards(k, o_names[k], k_names[k], out_spatial[k], 0, in_spatial[k]) for k in range(rank)
    )

    prologue: tuple[ir.Node, ...] = ()
    temps: tuple[ir.Buffer, ...] = ()
    source = x
    if reaches_padding:
        source, prologue, temps, positions = padded_input(node, ctx, x, win, positions)

    # The channels of the direct nest (and of float16's): ungrouped, or a group loop ``g``.
    grouped = group > 1 and mg > 1
    if group == 1:
        channel_iters = [("oc", out_channels)]
        oc, xc_base = var("oc"), Aff.lift(0)
    else:
        channel_iters = [("g", group)] + ([("oc", mg)] if mg > 1 else [])
        oc = var("g") * mg + (var("oc") if mg > 1 else 0)
        xc_base = var("g") * cg
    ic_iters = [("ic", cg)] if cg > 1 else []
    ic = var("ic") if cg > 1 else Aff.lift(0)
    if dtype == "float16":  # summed in float32, rounded once, as the reference does
        return half_product(
            node.name,
            [("n", n_batch), *channel_iters, *pairs(o_names, out_spatial)],
            ir.Access(y, (var("n"), oc, *(var(o) for o in o_names))),
            ic_iters + pairs(k_names, kernel),
            ir.Load(source, (var("n"), xc_base + ic, *positions), dtype),
            load(ctx, w, (oc, ic, *(var(k) for k in k_names))),
            guards=(),
            bias=load(ctx, b, (oc,)) if b else None,
            before=prologue,
            temps=temps,
        )
    weights = ctx.constant(w)
    pointwise = weights is not None and source == x and all(k == 1 for k in kernel)
    one_row = all(s == 1 for s in (*out_spatial[:-1], *win.strides))
    if pointwise and not (group == 1 and one_row):
        return _pointwise(node, ctx, dtype, group, out_spatial, win.strides)
    channels_last = out_channels * np.dtype(dtype).itemsize >= ctx.tile_bytes
    if weights is not None and group == 1 and not pointwise and channels_last:
        return _channels_last(
            node,
            ctx,
            source,
            dtype,
            weights,
            positions,
            o_names,
            k_names,
            out_spatial,
            prologue,
            temps,
        )

    # The direct nest: ungrouped (a 1x1 conv on one row of pixels: rows of output channels
    # along the pixels; fewer output channels than a register tile is wide; weights given at
    # run time), depthwise, or grouped into ``acc[n, g, oc, spatial...]`` (its index a point
    # of the nest) and then copied to Y.
    spatial = tuple(var(o) for o in o_names)
    if grouped:
        acc = ir.Buffer(f"{node.name}__acc", dtype, (n_batch, group, mg, *out_spatial), "temp")
        out = ir.Access(acc.name, (var("n"), var("g"), var("oc"), *spatial))
        temps = (*temps, acc)
    else:
        out = ir.Access(y, (var("n"), oc, *spatial))
    init_value = load(ctx, b, (oc,)) if b else zero(dtype)
    init = ir.Stmt("S", out, init_value)
    out_load = ir.Load(out.buffer, out.index, dtype)
    product = ir.Load(source, (var("n"), xc_base + ic, *positions), dtype) * load(
        ctx, w, (oc, ic, *(var(k) for k in k_names))
    )
    update = ir.Stmt("S", out, out_load + product)
    reduction = nest(ic_iters + pairs(k_names, kernel), (update,))
    iters = [("n", n_batch), *channel_iters, *pairs(o_names, out_spatial)]
    body = nest(iters, (init, *reduction))
    if grouped:
        store = ir.Stmt(
            "S", ir.Access(y, (var("n"), oc, *spatial)), ir.Load(acc.name, out.index, dtype)
        )
        body = (*body, *nest(iters, (store,)))
    return Lowered((*prologue, *body), temps)


def _pointwise(
    node: Node,
    ctx: LowerContext,
    dtype: str,
    group: int,
    out_spatial: tuple[int, ...],
    strides: tuple[int, ...],
) -> Lowered:
    """An unpadded 1x1 Conv is a matrix product over the flattened output pixels, one per
    group (a grouped Conv: a batch of them)::

        acc[n, g, oc, p] = B[g*M/G + oc] + sum_ic W[g*M/G + oc, ic] * X[n, g*C/G + ic, p]

    (p = row-major pixel; no ``g`` loop without groups). With stride 1, X is read through a
    ``[N, C, pixels]`` view; with larger strides a first nest gathers the pixels the conv
    reads into such a buffer (a quarter of X for stride 2). Pixels are then contiguous in both
    operands and the output, so the register tiles run along them with no transpose (rows of
    output channels sharing each input vector), and a final nest writes Y.
    """
    x, b, y = node.input(0), node.input(2), node.outputs[0]
    n_batch, channels = ctx.shape(x)[:2]
    out_channels = ctx.shape(node.input(1))[0]
    cg, mg = channels // group, out_channels // group
    pixels = int(np.prod(out_spatial))
    names = spatial_names(len(out_spatial))
    o_names = [f"o{s}" for s in names]
    flat = Aff.lift(0)
    for o, size in zip(o_names, out_spatial, strict=True):
        flat = flat * size + var(o)
    columns = ir.Buffer(f"{x}__pixels", dtype, (n_batch, channels, pixels), "input")
    prologue: tuple[ir.Node, ...] = ()
    groups = [("g", group)] if group > 1 else []
    acc_shape = (n_batch, *([group] if group > 1 else []), mg, pixels)
    temps = [ir.Buffer(f"{node.name}__acc", dtype, acc_shape, "temp")]
    views: tuple[tuple[ir.Buffer, str], ...] = ((columns, x),)
    if any(s != 1 for s in strides):
        columns = ir.Buffer(f"{node.name}__pixels", dtype, columns.shape, "temp")
        temps.append(columns)
        views = ()
        gather = ir.Stmt(
            "S",
            ir.Access(columns.name, (var("n"), var("c"), flat)),
            load(
                ctx,
                x,
                (
                    var("n"),
                    var("c"),
                    *(var(o) * st for o, st in zip(o_names, strides, strict=True)),
                ),
            ),
        )
        prologue = nest([("n", n_batch), ("c", channels), *pairs(o_names, out_spatial)], (gather,))
    acc = temps[0].name
    g = var("g") if group > 1 else Aff.lift(0)
    oc = g * mg + var("oc")
    acc_index = (var("n"), *([g] if group > 1 else []), var("oc"))
    point = (*acc_index, var("p"))
    init = ir.Stmt("S", ir.Access(acc, point), load(ctx, b, (oc,)) if b else zero(dtype))
    taps = (Aff.lift(0),) * len(out_spatial)
    product = load(ctx, node.input(1), (oc, var("ic"), *taps)) * ir.Load(
        columns.name, (var("n"), g * cg + var("ic"), var("p")), dtype
    )
    update = ir.Stmt("S", ir.Access(acc, point), ir.Load(acc, point, dtype) + product)
    body = nest(
        [("n", n_batch), *groups, ("oc", mg), ("p", pixels)],
        (init, *nest([("ic", cg)], (update,))),
    )
    store = ir.Stmt(
        "S",
        ir.Access(y, (var("n"), oc, *(var(o) for o in o_names))),
        ir.Load(acc, (*acc_index, flat), dtype),
    )
    final = nest([("n", n_batch), *groups, ("oc", mg), *pairs(o_names, out_spatial)], (store,))
    return Lowered((*prologue, *body, *final), tuple(temps), (), views)


def _channels_last(
    node: Node,
    ctx: LowerContext,
    source: str,
    dtype: str,
    weights: np.ndarray,
    positions: list[Aff],
    o_names: list[str],
    k_names: list[str],
    out_spatial: tuple[int, ...],
    prologue: tuple[ir.Node, ...],
    temps: tuple[ir.Buffer, ...],
) -> Lowered:
    """Accumulate into ``acc[n, spatial..., oc]`` against weights repacked at compile time to
    ``[ic, kernel..., oc]``: output channels are contiguous in both, so a register tile of
    output pixels x channels is updated with one weight vector and one broadcast input value per
    pixel. A final nest writes ``Y`` in ONNX's NCHW order.
    """
    x, b, y = node.input(0), node.input(2), node.outputs[0]
    n_batch, channels = ctx.shape(x)[:2]
    out_channels = weights.shape[0]
    rank = len(out_spatial)
    packed = f"{node.input(1)}__packed_ic_k_oc"
    packed_value = np.ascontiguousarray(np.transpose(weights, (1, *range(2, rank + 2), 0)))
    acc = f"{node.name}__acc"
    acc_buffer = ir.Buffer(acc, dtype, (n_batch, *out_spatial, out_channels), "temp")
    point = (var("n"), *(var(o) for o in o_names), var("oc"))
    init = ir.Stmt("S", ir.Access(acc, point), load(ctx, b, (var("oc"),)) if b else zero(dtype))
    product = ir.Load(source, (var("n"), var("ic"), *positions), dtype) * ir.Load(
        packed, (var("ic"), *(var(k) for k in k_names), var("oc")), dtype
    )
    update = ir.Stmt("S", ir.Access(acc, point), ir.Load(acc, point, dtype) + product)
    reduction = nest([("ic", channels), *pairs(k_names, weights.shape[2:])], (update,))
    body = nest(
        [("n", n_batch), *pairs(o_names, out_spatial), ("oc", out_channels)], (init, *reduction)
    )
    store = ir.Stmt(
        "S",
        ir.Access(y, (var("n"), var("oc"), *(var(o) for o in o_names))),
        ir.Load(acc, point, dtype),
    )
    final = nest([("n", n_batch), ("oc", out_channels), *pairs(o_names, out_spatial)], (store,))
    return Lowered((*prologue, *body, *final), (*temps, acc_buffer), ((packed, packed_value),))


def padded_input(
    node: Node, ctx: LowerContext, x: str, win: Window, positions: list[Aff]
) -> tuple[str, tuple[ir.Node, ...], tuple[ir.Buffer, ...], list[Aff]]:
    """A zero-bordered copy ``<node>__pad`` of the window's input ``x`` (``[N, C, spatial...,
    unpadded trailing axes...]``): (its name, the nests that fill it, its temp buffer, the
    window ``positions`` moved into it). When ``x`` is stored with a zero border at least as
    wide as the padding (:mod:`polyonnx.krnl.borders`), that buffer is read and nothing is
    copied."""
    xs, rank = ctx.shape(x), len(win.kernel)
    spatial, extra = xs[2 : 2 + rank], xs[2 + rank :]
    border, unpadded = ctx.border(x), (0,) * len(extra)
    if border is not None and border.covers(
        (0, 0, *win.pads_begin, *unpadded), (0, 0, *win.pads_end, *unpadded)
    ):
        return (
            border.buffer,
            (),
            (),
            [pos + lo for pos, lo in zip(positions, border.begin[2 : 2 + rank], strict=True)],
        )
    padded = tuple(
        size + lo + hi for size, lo, hi in zip(spatial, win.pads_begin, win.pads_end, strict=True)
    )
    source, dtype = f"{node.name}__pad", ctx.dtype(x)
    temp = ir.Buffer(source, dtype, (xs[0], xs[1], *padded, *extra), "temp")
    prologue = pad_input(
        ctx,
        x,
        source,
        dtype,
        xs[0],
        xs[1],
        (*spatial, *extra),
        (*padded, *extra),
        (*win.pads_begin, *(0,) * len(extra)),
    )
    return (
        source,
        prologue,
        (temp,),
        [pos + lo for pos, lo in zip(positions, win.pads_begin, strict=True)],
    )


def pad_input(
    ctx: LowerContext,
    x: str,
    padded_name: str,
    dtype: str,
    n_batch: int,
    channels: int,
    in_spatial: tuple[int, ...],
    padded: tuple[int, ...],
    begin: tuple[int, ...],
    convert: Callable[[ir.Expr], ir.Expr] | None = None,
) -> tuple[ir.Node, ...]:
    """``padded[.., i + begin] = x[.., i]`` inside and 0 on the border, each element written
    once: along each axis ``k`` the slabs before and after the input (with the axes before
    ``k`` inside), then the copy. ``convert`` maps each copied element (e.g. widened and
    centred on a zero point, so that quantized convs read 0 in the padding)."""
    names = [f"p{k}" for k in range(len(padded))]
    point = (var("n"), var("c"), *(var(p) for p in names))
    inner = [(begin[k], begin[k] + in_spatial[k]) for k in range(len(padded))]
    full = [(0, size) for size in padded]

    def box(ranges: list[tuple[int, int]], stmt: ir.Stmt) -> ir.Node:
        node: ir.Node = stmt
        for name, (lo, hi) in reversed(list(zip(names, ranges, strict=True))):
            node = ir.Loop(name, lo, hi, (node,))
        return ir.Loop("n", 0, n_batch, (ir.Loop("c", 0, channels, (node,)),))

    zero_fill = ir.Stmt("S", ir.Access(padded_name, point), zero(dtype))
    nests = []
    for k in range(len(padded)):
        for slab in ((0, begin[k]), (begin[k] + in_spatial[k], padded[k])):
            if slab[0] < slab[1]:
                nests.append(box([*inner[:k], slab, *full[k + 1 :]], zero_fill))
    value: ir.Expr = load(
        ctx, x, (var("n"), var("c"), *(var(p) - begin[k] for k, p in enumerate(names)))
    )
    copy = ir.Stmt("S", ir.Access(padded_name, point), convert(value) if convert else value)
    return (*nests, box(inner, copy))
