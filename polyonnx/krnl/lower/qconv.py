"""Quantized convolution: ConvInteger and QLinearConv, as int32 loop nests.

Both sum ``(X - x_zero_point) * (W - w_zero_point)`` over the window exactly in int32, as the
ONNX reference does. A window reaching into the padding reads 0 there *after* the zero point
is subtracted (the reference pads the centred input; onnxruntime pads with ``x_zero_point``,
the same thing), so the input is first copied, centred and widened to int32, into a
zero-bordered temp ``<node>__xc``: the reduction then has no guards and no zero-point term::

    for n, c, ih, iw:     S: xc[n, c, ih + pad_t, iw + pad_l] = int32(X[n, c, ih, iw]) - x_zp
    for n, oc, oh, ow:
      S: acc[n, oc, oh, ow] = B[oc]                            (QLinearConv's bias, or 0)
      for ic, kh, kw:
        S: acc[n, oc, oh, ow] = acc[n, oc, oh, ow]
                                + xc[n, ic, oh*s + kh*d, ow*s + kw*d] * wc[oc, ic, kh, kw]
    for n, oc, oh, ow:                                       (QLinearConv only)
      S: Y[n, oc, oh, ow] = saturate(round(float32(acc[n, oc, oh, ow])
                                           * (x_scale * w_scale[oc] / y_scale)) + y_zp)

``wc`` is ``W - w_zero_point`` (per tensor or per output channel) in int32, folded at compile
time when both are initializers (what quantization tools write), else centred in the loop.
ConvInteger's accumulator is its int32 output ``Y`` itself.

QLinearConv's requantization is in float32 as onnxruntime computes it (the scales are float32
tensors): the multiplier ``x_scale * w_scale / y_scale``, the product with the accumulator,
rounding half to even, then the zero point and saturation (in that order or the reference's,
add-then-clip-then-round, the result is the same: the zero point and the bounds are integers).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import INTERNAL_DOMAIN, Node
from polyonnx.graph.passes.qlinear import byte_quads
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    Window,
    load,
    nest,
    pairs,
    spatial_names,
    unsupported,
    var,
)
from polyonnx.krnl.lower.conv import conv_geometry, pad_input, padded_input
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I32 = "int32"
_BYTES = ("int8", "uint8")


def _per_channel(
    node: Node, ctx: LowerContext, name: str, channels: int, oc: Aff, dtype: str
) -> ir.Expr | None:
    """Input ``name`` (one value, or one per output channel) at channel ``oc`` as ``dtype``;
    None when the optional input is absent."""
    if not name:
        return None
    shape = ctx.shape(name)
    size = int(np.prod(shape, dtype=np.int64))
    if size == 1:
        e: ir.Expr = ir.Load(name, (Aff.lift(0),) * len(shape), ctx.dtype(name))
    elif len(shape) == 1 and size == channels:
        e = ir.Load(name, (oc,), ctx.dtype(name))
    else:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): {name!r} of shape {list(shape)} must hold "
            f"one value or one per output channel ({channels})"
        )
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def _scalar(node: Node, ctx: LowerContext, name: str, dtype: str) -> ir.Expr | None:
    """Input ``name``, which must hold a single value (x's zero point and scale, y's)."""
    if name and int(np.prod(ctx.shape(name), dtype=np.int64)) != 1:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): {name!r} of shape "
            f"{list(ctx.shape(name))} must hold a single value (per-tensor quantization)"
        )
    return _per_channel(node, ctx, name, 1, Aff.lift(0), dtype)


def _centred_weights(ctx: LowerContext, w: str, w_zp: str) -> np.ndarray | None:
    """``W - w_zero_point`` (already checked to hold one value or one per output channel) as
    int32, when both are compile-time constants."""
    weights = ctx.constant(w)
    zp = ctx.constant(w_zp) if w_zp else np.zeros((), np.int32)
    if weights is None or zp is None:
        return None
    per_channel = zp.reshape((-1,) + (1,) * (weights.ndim - 1))  # (or its one value)
    return np.ascontiguousarray(weights.astype(np.int32) - per_channel.astype(np.int32))


def _conv_integer(
    node: Node,
    ctx: LowerContext,
    inputs: tuple[str, str, str, str, str],
    acc: str,
) -> Lowered:
    """The int32 convolution of ``inputs`` = (X, x_zero_point, W, w_zero_point, B) into the
    buffer ``acc`` of the output's shape: centred padded input, then the reduction."""
    x, x_zp, w, w_zp, b = inputs
    y = node.outputs[0]
    for name in (x, w):
        if ctx.dtype(name) not in _BYTES:
            raise unsupported(node, ctx, f"input {name!r} of dtype {ctx.dtype(name)}")
    geometry = conv_geometry(node, ctx, x, w, y)
    rank, n_batch, channels, in_spatial, out_channels, out_spatial = geometry[:6]
    group, cg, mg, kernel, win = geometry[6:]

    # The input, centred and widened, in a zero-bordered temp.
    padded = tuple(
        s + lo + hi for s, lo, hi in zip(in_spatial, win.pads_begin, win.pads_end, strict=True)
    )
    xc = ir.Buffer(f"{node.name}__xc", I32, (n_batch, channels, *padded), "temp")
    x_centre = _scalar(node, ctx, x_zp, I32)

    def centre(value: ir.Expr) -> ir.Expr:
        value = ir.Cast(value, I32)
        return value if x_centre is None else value - x_centre

    prologue = pad_input(
        ctx, x, xc.name, I32, n_batch, channels, in_spatial, padded, win.pads_begin, centre
    )

    names = spatial_names(rank)
    o_names, k_names = [f"o{s}" for s in names], [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) + win.pads_begin[k] for k in range(rank)]
    channel_iters = ([("g", group)] if group > 1 else []) + [("oc", mg)]
    g = var("g") if group > 1 else Aff.lift(0)
    oc = g * mg + var("oc")
    ic_iters = [("ic", cg)] if cg > 1 else []
    ic = var("ic") if cg > 1 else Aff.lift(0)
    taps = (oc, ic, *(var(k) for k in k_names))

    constants: tuple[tuple[str, np.ndarray], ...] = ()
    w_centre = _per_channel(node, ctx, w_zp, out_channels, oc, I32)
    centred = _centred_weights(ctx, w, w_zp)
    if centred is not None:
        wc = f"{node.name}__w_i32"
        constants = ((wc, centred),)
        wv: ir.Expr = ir.Load(wc, taps, I32)
    else:
        wv = ir.Cast(load(ctx, w, taps), I32)
        if w_centre is not None:
            wv = wv - w_centre
    point = (var("n"), oc, *(var(o) for o in o_names))
    init_value = _per_channel(node, ctx, b, out_channels, oc, I32) if b else None
    if b and ctx.shape(b) != (out_channels,):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): B of shape {list(ctx.shape(b))} must be "
            f"[{out_channels}]"
        )
    init = ir.Stmt("S", ir.Access(acc, point), init_value or ir.Const(0, I32))
    product = ir.Load(xc.name, (var("n"), g * cg + ic, *positions), I32) * wv
    update = ir.Stmt("S", ir.Access(acc, point), ir.Load(acc, point, I32) + product)
    body = nest(
        [("n", n_batch), *channel_iters, *pairs(o_names, out_spatial)],
        (init, *nest(ic_iters + pairs(k_names, kernel), (update,))),
    )
    return Lowered((*prologue, *body), (xc,), constants)


@register("ConvInteger", since=10)
def lower_conv_integer(node: Node, ctx: LowerContext) -> Lowered:
    """``Y (int32) = conv(X - x_zero_point, W - w_zero_point)``."""
    y = node.outputs[0]
    if ctx.dtype(y) != I32:
        raise ShapeError(f"node {node.name!r} (ConvInteger): output must be int32")
    x, w, x_zp, w_zp = (node.input(k) for k in range(4))
    return _conv_integer(node, ctx, (x, x_zp, w, w_zp, ""), y)


@register("QLinearConv", since=10)
def lower_qlinear_conv(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = saturate(round(conv(X - x_zp, W - w_zp) + B) * x_scale * w_scale / y_scale) +
    y_zp)``, per tensor or per output channel of W."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b = (node.input(k) for k in range(9))
    y = node.outputs[0]
    ys, ydt = ctx.shape(y), ctx.dtype(y)
    if ydt not in _BYTES:
        raise unsupported(node, ctx, f"output dtype {ydt}")
    if b and ctx.dtype(b) != I32:
        raise unsupported(node, ctx, f"bias of dtype {ctx.dtype(b)} (ONNX: int32)")
    acc = ir.Buffer(f"{node.name}__acc", I32, tuple(ys), "temp")
    conv = _conv_integer(node, ctx, (x, x_zp, w, w_zp, b), acc.name)
    f = "float32"
    out_channels = ctx.shape(w)[0]
    point = tuple(var(f"i{k}") for k in range(len(ys)))
    oc = point[1]
    xs_v, ys_v = _scalar(node, ctx, x_scale, f), _scalar(node, ctx, y_scale, f)
    ws_v = _per_channel(node, ctx, w_scale, out_channels, oc, f)
    assert xs_v is not None and ys_v is not None and ws_v is not None
    value: ir.Expr = ir.unary(
        "round", ir.Cast(ir.Load(acc.name, point, I32), f) * (xs_v * ws_v / ys_v)
    )
    zp = _scalar(node, ctx, y_zp, f)
    if zp is not None:
        value = value + zp
    info = np.iinfo(ydt)
    value = ir.minimum(ir.maximum(value, float(info.min)), float(info.max))
    finish = nest(
        [(f"i{k}", d) for k, d in enumerate(ys)],
        (ir.Stmt("S", ir.Access(y, point), ir.Cast(value, ydt)),),
    )
    return Lowered((*conv.nests, *finish), (*conv.temps, acc), conv.constants)


#: An int8 input's four bytes with their sign bits flipped (``x + 128`` each, as uint8).
_SIGN_BITS = np.array(0x80808080, np.uint32).view(np.int32).item()


def byte_quad(x: str, dtype: str, index: Callable[[int], tuple[ir.Index, ...]]) -> ir.Expr:
    """The four bytes of ``x`` at ``index(0..3)`` as the bytes of one int32, low first, each
    as unsigned (an int8's sign bit flipped: ``x + 128``): the unsigned operand of ``dot4``."""

    def byte(q: int) -> ir.Expr:
        v: ir.Expr = ir.Load(x, index(q), dtype)
        widened = ir.Cast(ir.Bitcast(v, "uint8") if dtype == "int8" else v, I32)
        return widened if q == 0 else ir.binary("shl", widened, 8 * q)

    quad = ir.binary(
        "bitor", ir.binary("bitor", byte(0), byte(1)), ir.binary("bitor", byte(2), byte(3))
    )
    return ir.binary("bitxor", quad, _SIGN_BITS) if dtype == "int8" else quad


@register("PackedConvInteger", domain=INTERNAL_DOMAIN)
def lower_packed_conv_integer(node: Node, ctx: LowerContext) -> Lowered:
    """polyonnx's ``PackedConvInteger(X, W, Init)`` (:mod:`polyonnx.graph.passes.qlinear`):
    ``Y = float32(Init[oc] + conv(X, W))`` for bytes ``X`` (uint8, or int8 read as ``x + 128``)
    and int8 weights ``W`` whose input channels are a multiple of 4, four channels at a time
    with ``dot4``; a window reads the padding as bytes of 0::

        for n, oc, o...:
          S: acc[n, oc, o...] = Init[oc]
          for c4, k...:
            S: acc[..] = acc[..] + dot4(X[n, 4c4 : 4c4 + 4, o*s + k*d...], W4[oc, c4, k...])
          S: Y[n, oc, o...] = float32(acc[..])
    """
    x, w, init, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    weights = ctx.constant(w)
    if weights is None or ctx.dtype(w) != "int8" or ctx.dtype(x) not in _BYTES:
        raise unsupported(node, ctx, "weights must be constant int8 and X bytes")
    geometry = conv_geometry(node, ctx, x, w, y)
    rank, n_batch, channels, _, out_channels, out_spatial = geometry[:6]
    group, _, _, kernel, win = geometry[6:]
    if group != 1 or channels % 4 or ctx.shape(init) != (out_channels,):
        raise ShapeError(
            f"node {node.name!r} (PackedConvInteger): {channels} input channels in {group} "
            f"group(s), Init {list(ctx.shape(init))} for {out_channels} output channels"
        )
    source, prologue, temps, (o_names, k_names, positions) = byte_window(node, ctx, x, win)
    quads = f"{node.name}__w4"
    point = (var("n"), var("oc"), *(var(o) for o in o_names))
    quad = byte_quad(source, ctx.dtype(x), lambda q: (var("n"), var("c4") * 4 + q, *positions))
    w_quad = ir.Load(quads, (var("oc"), var("c4"), *(var(k) for k in k_names)), I32)
    body, acc = byte_sum(
        node,
        ctx,
        point,
        [("n", n_batch), ("oc", out_channels), *pairs(o_names, out_spatial)],
        [("c4", channels // 4), *pairs(k_names, kernel)],
        (ir.Load(init, (var("oc"),), I32), quad, w_quad),
    )
    return Lowered((*prologue, *body), (*temps, *acc), ((quads, byte_quads(weights, 1)),))


def byte_window(
    node: Node, ctx: LowerContext, x: str, win: Window
) -> tuple[str, tuple[ir.Node, ...], tuple[ir.Buffer, ...], tuple[list[str], list[str], list[Aff]]]:
    """What a byte convolution's window reads: the input (``x``, or its zero-bordered copy:
    padding reads bytes of 0), the nests that fill a copy and its buffer, and the output and
    tap iterators with the input position each pair reads."""
    names = spatial_names(len(win.kernel))
    o_names, k_names = [f"o{s}" for s in names], [f"k{s}" for s in names]
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(len(names))]
    if not (any(win.pads_begin) or any(win.pads_end)):
        return x, (), (), (o_names, k_names, positions)
    source, prologue, temps, positions = padded_input(node, ctx, x, win, positions)
    return source, prologue, temps, (o_names, k_names, positions)


def byte_sum(
    node: Node,
    ctx: LowerContext,
    point: tuple[Aff, ...],
    outer: list[tuple[str, int]],
    reduction: list[tuple[str, int]],
    terms: tuple[ir.Expr, ir.Expr, ir.Expr],
) -> tuple[tuple[ir.Node, ...], tuple[ir.Buffer, ...]]:
    """The nest summing ``dot4(quad, weights)`` over ``reduction`` from ``initial`` (``terms``
    = initial, quad, weights) at ``point`` of the output: into an int32 output itself, or into
    an int32 accumulator then written as the float32 output; and that accumulator's buffer."""
    y = node.outputs[0]
    initial, quad, weights = terms
    acc = ir.Buffer(f"{node.name}__acc", I32, ctx.shape(y), "temp")
    into = y if ctx.dtype(y) == I32 else acc.name
    at, acc_load = ir.Access(into, point), ir.Load(into, point, I32)
    finish = () if into == y else (ir.Stmt("S", ir.Access(y, point), ir.Cast(acc_load, "float32")),)
    body = nest(
        outer,
        (
            ir.Stmt("S", at, initial),
            *nest(reduction, (ir.Stmt("S", at, acc_load + ir.Binary("dot4", quad, weights)),)),
            *finish,
        ),
    )
    return body, (acc,) if finish else ()
