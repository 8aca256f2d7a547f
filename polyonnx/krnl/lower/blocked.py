"""The channel-blocked operators made by :mod:`polyonnx.graph.passes.layout`.

Tensors are ``[N, C/b, spatial..., b]``. ``ConvBlocked`` is a direct convolution::

    for n, ob, oh, ow, o:
      S: Y[n, ob, oh, ow, o] = B[ob*b + o]
      for ib, kh, kw, i:
        S: Y[n, ob, oh, ow, o] += X[n, ib, oh*s + kh*d, ow*s + kw*d, i] * W[ob, ib, kh, kw, i, o]

so ``o`` (a block of output channels, contiguous in ``Y`` and ``W``) is the vector loop and
``ow`` the register-tile rows that share each weight vector. A grouped conv is one such nest
per group, over the group's output blocks and reading its input blocks (constant block
offsets, so each nest's output index stays a point of the nest); a depthwise conv is::

    for n, cb, oh, ow, c:
      S: Y[n, cb, oh, ow, c] = B[cb*b + c]
      for kh, kw:
        S: Y[n, cb, oh, ow, c] += X[n, cb, oh*s + kh*d, ow*s + kw*d, c] * W[cb, 0, kh, kw, c]

(the channels the vector, the rows along ``ow`` sharing each weight vector and the input
vectors their taps overlap on). The epilogue (Relu, the residual
Add) is an element-wise nest over the same points that the schedule fuses into the tile. A
padded window reads ``X`` zero-bordered: in place when the kernel producing it wrote it into its
border (:mod:`polyonnx.krnl.borders`), else from a copy (border slabs written once, as for Conv).
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    Window,
    check_out_spatial,
    ints_attr,
    load,
    lowest,
    nest,
    pairs,
    spatial_names,
    var,
    window,
    zero,
)
from polyonnx.krnl.lower.conv import padded_input
from polyonnx.krnl.lower.pool import average_pool
from polyonnx.krnl.lower.qconv import byte_quad, byte_sum, byte_window
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


@register("ConvBlocked", domain=DOMAIN)
def lower_conv_blocked(node: Node, ctx: LowerContext) -> Lowered:
    """Direct convolution over blocked input, weights and output (see the module docstring).

    With ``plain_input`` (too few input channels to block: an image), ``X`` is
    ``[N, C, spatial...]``, the weights ``[OB, C, kernel..., b]`` and ``ic`` replaces
    ``(ib, i)``. With ``group`` > 1 the weights are ``[OB, IB/group, kernel..., b, b]`` (each
    output block's own group's input blocks), one nest per group (one for all when each
    group has one output block); a
    depthwise conv (``group`` = channels, weights ``[CB, 1, kernel..., b]``) has no input
    channel loop: ``Y[n, cb, s..., c] += X[n, cb, s'..., c] * W[cb, 0, k..., c]``.
    """
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    block, plain = int(node.attr("block")), bool(node.attr("plain_input", 0))
    group = int(node.attr("group", 1))
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    rank = len(xs) - (2 if plain else 3)
    n_batch, in_channels, in_spatial = xs[0], xs[1], xs[2 : 2 + rank]
    out_blocks, kernel, out_spatial = ws[0], ws[2 : 2 + rank], ys[2 : 2 + rank]
    depthwise = group > 1 and group == in_channels * block
    in_per_group = 1 if depthwise else in_channels // group
    fits = (
        (ws[1], out_blocks, len(ws)) == (1, in_channels, rank + 3)
        if depthwise
        else ws[1] * group == in_channels and out_blocks % group == 0 and not (plain and group > 1)
    )
    if (
        not fits
        or (ws[-1], ys[1], ys[-1]) != (block, out_blocks, block)
        or (not plain and xs[-1] != block)
    ):
        raise ShapeError(
            f"node {node.name!r} (ConvBlocked): X {xs}, W {ws} and Y {ys} do "
            f"not agree on blocks of {block} channels in {group} group(s)"
        )
    win = window(node, ctx, in_spatial, kernel)
    check_out_spatial(node, win, in_spatial, out_spatial, ceil_mode=False)
    names = spatial_names(rank)
    o_names, k_names = [f"o{s}" for s in names], [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(rank)]
    dtype = ctx.dtype(x)

    prologue: tuple[ir.Node, ...] = ()
    temps: tuple[ir.Buffer, ...] = ()
    source = x
    if any(win.pads_begin) or any(win.pads_end):
        source, prologue, temps, positions = padded_input(node, ctx, x, win, positions)

    taps = tuple(var(k) for k in k_names)
    if depthwise:
        return Lowered(
            (*prologue, *_depthwise(ctx, source, w, b, y, dtype, positions, o_names, k_names)),
            temps,
        )
    skips = _padding_skips(win, o_names, k_names, in_spatial, out_spatial)
    # One nest per group, at constant block offsets: the output index stays a point of the
    # nest (what the register-tiling strategy looks for), each group's slice of X, W and Y.
    # With one output block per group the block is the group: one nest over all blocks, each
    # reading its group's input blocks (ib + ob * in_per_group), which the parallel strategy
    # can split (RegNet's 16-channel groups were ten nests too small to share).
    out_per_group = out_blocks // group
    groups_as_blocks = group > 1 and out_per_group == 1
    nests: list[ir.Node] = []
    for g in range(1 if groups_as_blocks else group):
        ob = var("ob") + g * out_per_group
        first_input = var("ob") * in_per_group if groups_as_blocks else g * in_per_group
        point = (var("n"), ob, *(var(o) for o in o_names), var("o"))
        channel = ob * block + var("o")
        init = ir.Stmt("S", ir.Access(y, point), load(ctx, b, (channel,)) if b else zero(dtype))
        if plain:
            reduction_iters = [("ic", in_channels), *pairs(k_names, kernel)]
            x_index = (var("n"), var("ic"), *positions)
            w_index = (ob, var("ic"), *taps, var("o"))
        else:
            reduction_iters = [("ib", in_per_group), *pairs(k_names, kernel), ("i", block)]
            x_index = (var("n"), var("ib") + first_input, *positions, var("i"))
            w_index = (ob, var("ib"), *taps, var("i"), var("o"))
        product = ir.Load(source, x_index, dtype) * load(ctx, w, w_index)
        update = ir.Stmt("S", ir.Access(y, point), ir.Load(y, point, dtype) + product, skips)
        last_o, last_k = o_names[-1], k_names[-1]
        for first, end, tap_first, tap_end in _column_pieces(win, in_spatial[-1], out_spatial[-1]):
            # (each run of outputs from 0, so that its register tiles start with it)
            shift = {last_o: var(last_o) + first, last_k: var(last_k) + tap_first}
            reduction = [
                (n, tap_end - tap_first) if n == last_k else (n, e) for n, e in reduction_iters
            ]
            body = (init, *nest(reduction, (update,))) if tap_first < tap_end else (init,)
            nests += nest(
                [
                    ("n", n_batch),
                    ("ob", out_blocks if groups_as_blocks else out_per_group),
                    *pairs(o_names[:-1], out_spatial[:-1]),
                    (last_o, end - first),
                    ("o", block),
                ],
                tuple(ir.substitute(b, shift) for b in body),
            )
    return Lowered((*prologue, *nests), temps)


#: The share of a spatial axis' (output, tap) pairs that read padding from which the taps in
#: the padding are left out of the sum rather than multiplied by zeros.
PADDING_SKIP_SHARE = 0.2

#: The outputs per run (on average) below which a last axis is not cut into runs of equal
#: taps: about a register tile's rows.
MIN_COLUMN_RUN = 8


def _column_pieces(win: Window, size: int, out: int) -> list[tuple[int, int, int, int]]:
    """The outputs of the last axis as runs ``[first, end)`` whose taps inside the input are
    one range ``[tap_first, tap_end)``, when at least :data:`PADDING_SKIP_SHARE` of its (output,
    tap) pairs read padding; else one run of every output and tap."""
    k, taps = len(win.kernel) - 1, win.kernel[-1]
    whole = [(0, out, 0, taps)]
    if _padded_share(win, k, size, out) < PADDING_SKIP_SHARE:
        return whole
    pieces: list[tuple[int, int, int, int]] = []
    for o in range(out):
        inside = [t for t in range(taps) if _reads_input(win, k, o, t, size)]
        tap_range = (inside[0], inside[-1] + 1) if inside else (0, 0)
        if pieces and pieces[-1][2:] == tap_range:
            pieces[-1] = (pieces[-1][0], o + 1, *tap_range)
        else:
            pieces.append((o, o + 1, *tap_range))
    # (runs shorter than a register tile on average cost more in partial tiles than the
    # padding's multiplications: a 5x5 conv on 6x6 ran 1.7-2x slower in five runs)
    return pieces if out >= MIN_COLUMN_RUN * len(pieces) else whole


def _reads_input(win: Window, k: int, o: int, t: int, size: int) -> bool:
    """Whether output ``o``'s tap ``t`` along axis ``k`` (of ``size`` inputs) is no padding."""
    return 0 <= o * win.strides[k] + t * win.dilations[k] - win.pads_begin[k] < size


def _padded_share(win: Window, k: int, size: int, out: int) -> float:
    """The share of axis ``k``'s (output, tap) pairs whose tap reads padding."""
    taps = win.kernel[k]
    outside = sum(not _reads_input(win, k, o, t, size) for o in range(out) for t in range(taps))
    return outside / (out * taps)


def _padding_skips(
    win: Window,
    o_names: list[str],
    k_names: list[str],
    in_spatial: tuple[int, ...],
    out_spatial: tuple[int, ...],
) -> tuple[ir.Cond, ...]:
    """Guards that leave out the taps reading padding along each spatial axis but the last,
    where at least :data:`PADDING_SKIP_SHARE` of that axis' (output, tap) pairs read padding: a
    dilated conv's wide padding (DeepLab's ASPP: dilation 12 or 18 on 33x33 leaves 24% or 36%
    of each axis' taps in padding), not a 3x3's one-pixel border. The last axis' outputs are
    the register tile's rows, which a guard would cut into partial tiles (ASPP twice as slow);
    a 3x3 on 6x6 (11% of its taps in padding) ran 10% slower with its rows' taps bounded."""
    guards: list[ir.Cond] = []
    for k in range(len(win.kernel) - 1):
        if _padded_share(win, k, in_spatial[k], out_spatial[k]) >= PADDING_SKIP_SHARE:
            guards += win.guards(k, o_names[k], k_names[k], out_spatial[k], 0, in_spatial[k])
    return tuple(guards)


@register("ConvBlockedBytes", domain=DOMAIN)
def lower_conv_blocked_bytes(node: Node, ctx: LowerContext) -> Lowered:
    """``PackedConvInteger`` on blocks (:mod:`polyonnx.graph.passes.layout`): bytes ``X``
    ``[N, C/b, spatial..., b]``, weights ``W4[OB, IB, kernel..., b/4, b]`` (four input
    channels' int8 weights to an int32), ``Init[OC]``; four input channels of a pixel are
    four adjacent bytes, one int32 that every output lane's ``dot4`` shares::

        for n, ob, o..., o:
          S: acc[n, ob, o.., o] = Init[ob*b + o]
          for ib, k..., i4:
            S: acc[..] = acc[..] + dot4(X[n, ib, o*s + k*d.., 4i4 : 4i4+4], W4[ob, ib, k.., i4, o])
          S: Y[n, ob, o.., o] = float32(acc[..])
    """
    x, w, init, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    block = int(node.attr("block"))
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    rank = len(xs) - 3
    out_blocks, kernel, out_spatial = ws[0], ws[2 : 2 + rank], ys[2 : 2 + rank]
    if (
        ctx.dtype(x) not in ("uint8", "int8")
        or ctx.dtype(w) != "int32"
        or (ws[1], ws[-2] * 4, ws[-1]) != (xs[1], block, block)
        or (ys[1], ys[-1], xs[-1]) != (out_blocks, block, block)
        or ctx.shape(init) != (out_blocks * block,)
    ):
        raise ShapeError(
            f"node {node.name!r} (ConvBlockedBytes): X {ctx.dtype(x)}{list(xs)}, "
            f"W {ctx.dtype(w)}{list(ws)} and Y {list(ys)} do not agree on blocks of {block}"
        )
    win = window(node, ctx, xs[2 : 2 + rank], kernel)
    check_out_spatial(node, win, xs[2 : 2 + rank], out_spatial, ceil_mode=False)
    source, prologue, temps, (o_names, k_names, positions) = byte_window(node, ctx, x, win)
    point = (var("n"), var("ob"), *(var(o) for o in o_names), var("o"))
    quad = byte_quad(
        source, ctx.dtype(x), lambda q: (var("n"), var("ib"), *positions, var("i4") * 4 + q)
    )
    taps = (*(var(k) for k in k_names), var("i4"), var("o"))
    body, acc = byte_sum(
        node,
        ctx,
        point,
        [("n", xs[0]), ("ob", out_blocks), *pairs(o_names, out_spatial), ("o", block)],
        [("ib", xs[1]), *pairs(k_names, kernel), ("i4", block // 4)],
        (
            ir.Load(init, (var("ob") * block + var("o"),), "int32"),
            quad,
            ir.Load(w, (var("ob"), var("ib"), *taps), "int32"),
        ),
    )
    return Lowered((*prologue, *body), (*temps, *acc))


def _depthwise(
    ctx: LowerContext,
    source: str,
    w: str,
    b: str,
    y: str,
    dtype: str,
    positions: list[ir.Aff],
    o_names: list[str],
    k_names: list[str],
) -> tuple[ir.Node, ...]:
    """The depthwise nest: the block of channels ``c`` is the vector loop and every tap a
    multiply-accumulate of one input vector and one weight vector."""
    ys, ws = ctx.shape(y), ctx.shape(w)
    rank, block = len(o_names), ys[-1]
    point = (var("n"), var("cb"), *(var(o) for o in o_names), var("c"))
    channel = var("cb") * block + var("c")
    init = ir.Stmt("S", ir.Access(y, point), load(ctx, b, (channel,)) if b else zero(dtype))
    x_index = (var("n"), var("cb"), *positions, var("c"))
    w_index: tuple[ir.Aff | int, ...] = (var("cb"), 0, *(var(k) for k in k_names), var("c"))
    product = ir.Load(source, x_index, dtype) * load(ctx, w, w_index)
    update = ir.Stmt("S", ir.Access(y, point), ir.Load(y, point, dtype) + product)
    return nest(
        [("n", ys[0]), ("cb", ys[1]), *pairs(o_names, ys[2 : 2 + rank]), ("c", block)],
        (init, *nest(pairs(k_names, ws[2 : 2 + rank]), (update,))),
    )


@register("MaxPoolBlocked", domain=DOMAIN)
def lower_max_pool_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """MaxPool over blocked tensors: the lowest value, then the max over the window's taps
    that fall inside the input; the block of channels is the vector loop."""
    x, y = node.input(0), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    rank = len(xs) - 3
    dtype = ctx.dtype(x)
    kernel = ints_attr(node, "kernel_shape", rank, None)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    win = window(node, ctx, xs[2 : 2 + rank], kernel, ceil_mode=ceil_mode)
    check_out_spatial(node, win, xs[2 : 2 + rank], ys[2 : 2 + rank], ceil_mode)
    names = spatial_names(rank)
    o_names, k_names = [f"o{s}" for s in names], [f"k{s}" for s in names]
    guards = tuple(
        g
        for k in range(rank)
        for g in win.guards(k, o_names[k], k_names[k], ys[2 + k], 0, xs[2 + k])
    )
    point = (var("n"), var("cb"), *(var(o) for o in o_names), var("c"))
    tap = load(
        ctx,
        x,
        (
            var("n"),
            var("cb"),
            *(win.position(k, o_names[k], k_names[k]) for k in range(rank)),
            var("c"),
        ),
    )
    update = ir.Stmt("S", ir.Access(y, point), ir.maximum(ir.Load(y, point, dtype), tap), guards)
    return nest(
        [("n", xs[0]), ("cb", xs[1]), *pairs(o_names, ys[2 : 2 + rank]), ("c", xs[-1])],
        (
            ir.Stmt("S", ir.Access(y, point), lowest(dtype)),
            *nest(pairs(k_names, win.kernel), (update,)),
        ),
    )


@register("AveragePoolBlocked", domain=DOMAIN)
def lower_average_pool_blocked(node: Node, ctx: LowerContext) -> Lowered:
    """AveragePool over blocked tensors, the block of channels the vector loop (the window,
    divisors and guards as :func:`polyonnx.krnl.lower.pool.average_pool` makes them)."""
    return average_pool(node, ctx, blocked=True)


@register("ToBlocked", domain=DOMAIN)
def lower_to_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, cb, s..., c] = X[n, cb*b + c, s...]``, and 0 in the padding of a last block
    that the channels do not fill."""
    return _reorder(node, ctx, to_blocked=True)


@register("FromBlocked", domain=DOMAIN)
def lower_from_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, cb*b + c, s...] = X[n, cb, s..., c]`` (a last block's padding left out)."""
    return _reorder(node, ctx, to_blocked=False)


def _reorder(node: Node, ctx: LowerContext, to_blocked: bool) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    block = int(node.attr("block"))
    plain = ctx.shape(x) if to_blocked else ctx.shape(y)
    n_batch, channels, spatial = plain[0], plain[1], plain[2:]
    blocks, ragged = -(-channels // block), channels % block
    s_names = [f"s{k}" for k in range(len(spatial))]
    blocked_index = (var("n"), var("cb"), *(var(s) for s in s_names), var("c"))
    channel = var("cb") * block + var("c")
    plain_index = (var("n"), channel, *(var(s) for s in s_names))
    dst, src = (blocked_index, plain_index) if to_blocked else (plain_index, blocked_index)
    guards = (ir.lt(channel, channels),) if ragged else ()
    copy = ir.Stmt("S", ir.Access(y, dst), load(ctx, x, src), guards)
    # Loop order: the destination's own (its innermost axis is contiguous).
    if not to_blocked:
        return nest(
            [("n", n_batch), ("cb", blocks), ("c", block), *pairs(s_names, spatial)], (copy,)
        )
    nests = nest([("n", n_batch), ("cb", blocks), *pairs(s_names, spatial), ("c", block)], (copy,))
    if ragged:  # (a reader multiplies the padding by zero weights: it must be finite)
        last = (var("n"), Aff.lift(blocks - 1), *(var(s) for s in s_names), var("c"))
        pad = ir.Stmt("S", ir.Access(y, last), zero(ctx.dtype(x)))
        inner = ir.Loop("c", ragged, block, (pad,))
        nests = (*nests, *nest([("n", n_batch), *pairs(s_names, spatial)], (inner,)))
    return nests
