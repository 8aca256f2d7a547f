"""ConvTranspose: the adjoint of Conv, written as a scatter-accumulate with affine writes.

Every input position ``i`` and tap ``k`` contributes to output position
``o = i*stride + k*dilation - pad_begin``, so iterating over inputs and taps makes the write
index affine (iterating over outputs would need ``(o + pad - k*dilation) / stride`` to be
integral)::

    for n, m, oh, ow:
      S: Y[n, m, oh, ow] = B[m]
    for n, m, c, ih, iw, kh, kw:
      S: Y[n, m, ih*sh + kh*dh - ph, iw*sw + kw*dw - pw] += X[n, c, ih, iw] * W[c, m, kh, kw]
         if 0 <= ih*sh + kh*dh - ph < OH and ...

Groups split the channels into ``g`` and the channel within the group, as in Conv.
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    bad_attr,
    bound_guards,
    ints_attr,
    load,
    nest,
    pairs,
    require_float,
    spatial_names,
    str_attr,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register


def transpose_pads_begin(
    node: Node,
    in_spatial: tuple[int, ...],
    out_spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> tuple[int, ...]:
    """The begin padding per spatial axis, by the spec's rules (explicit pads, or derived from
    the output shape for ``output_shape`` / ``SAME_*``)."""
    rank = len(in_spatial)
    auto_pad = str_attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise bad_attr(node, "auto_pad", f"has unknown value {auto_pad!r}")
    if auto_pad == "VALID":
        return (0,) * rank
    if auto_pad == "NOTSET" and (node.has_attr("pads") or not node.has_attr("output_shape")):
        pads = ints_attr(node, "pads", 2 * rank, 0)
        if any(p < 0 for p in pads):
            raise bad_attr(node, "pads", f"must be non-negative, got {list(pads)}")
        return pads[:rank]
    full = _full_lengths(in_spatial, kernel, strides, dilations, output_padding)
    begin = []
    for k in range(rank):
        total = full[k] - out_spatial[k]
        begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    return tuple(begin)


def _full_lengths(
    in_spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> tuple[int, ...]:
    """The output length per axis before any padding is cut off."""
    return tuple(
        s * (i - 1) + p + (k - 1) * d + 1
        for i, k, s, d, p in zip(
            in_spatial, kernel, strides, dilations, output_padding, strict=True
        )
    )


def check_transpose_out(
    node: Node,
    in_spatial: tuple[int, ...],
    out_spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    output_padding: tuple[int, ...],
) -> None:
    """Refuse a typed output shape the attributes do not give, as onnxruntime computes it.
    ``SAME_*`` pads the full output down to ``in * stride``, never below 0 (a shorter full
    output is kept). ONNX shape inference adds output_padding once more when it pads: the
    begin padding was derived from that wider shape, a wrong answer of the wrong shape."""
    rank = len(in_spatial)
    auto_pad = str_attr(node, "auto_pad", "NOTSET")
    pads = (0,) * 2 * rank if auto_pad == "VALID" else ints_attr(node, "pads", 2 * rank, 0)
    full = _full_lengths(in_spatial, kernel, strides, dilations, output_padding)
    if node.has_attr("output_shape"):
        expected = tuple(int(v) for v in node.attr("output_shape"))[-rank:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        expected = tuple(min(f, i * s) for f, i, s in zip(full, in_spatial, strides, strict=True))
    else:
        expected = tuple(full[k] - pads[k] - pads[rank + k] for k in range(rank))
    if tuple(out_spatial) != expected:
        raise ShapeError(
            f"node {node.name!r} (ConvTranspose): output spatial shape {tuple(out_spatial)} "
            f"does not match the attributes (expected {expected})"
        )


@register("ConvTranspose")
def lower_conv_transpose(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """ConvTranspose (any spatial rank, groups, dilations, output padding / shape, auto_pad)."""
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    if len(xs) < 3 or len(ws) != len(xs):
        raise ShapeError(
            f"node {node.name!r} (ConvTranspose): X {xs} and W {ws} must both be "
            "[N, C, spatial...] / [C, M/group, kernel...]"
        )
    rank = len(xs) - 2
    channels = xs[1]
    group = int(node.attr("group", 1))
    if group < 1 or channels % group or ws[0] != channels:
        raise bad_attr(
            node, "group", f"= {group} must divide C={channels} (W has {ws[0]} input channels)"
        )
    cg, mg = channels // group, ws[1]
    if ys[1] != mg * group:
        raise ShapeError(
            f"node {node.name!r} (ConvTranspose): output has {ys[1]} channels, "
            f"expected {mg * group}"
        )
    kernel = tuple(ws[2:])
    if node.has_attr("kernel_shape") and ints_attr(node, "kernel_shape", rank, None) != kernel:
        raise bad_attr(node, "kernel_shape", f"disagrees with W's shape {ws}")
    strides = ints_attr(node, "strides", rank, 1)
    dilations = ints_attr(node, "dilations", rank, 1)
    output_padding = ints_attr(node, "output_padding", rank, 0)
    for attr, values in (("strides", strides), ("dilations", dilations)):
        if any(v < 1 for v in values):
            raise bad_attr(node, attr, f"must be positive, got {list(values)}")
    in_spatial, out_spatial = tuple(xs[2:]), tuple(ys[2:])
    check_transpose_out(node, in_spatial, out_spatial, kernel, strides, dilations, output_padding)
    begin = transpose_pads_begin(
        node, in_spatial, out_spatial, kernel, strides, dilations, output_padding
    )

    names = spatial_names(rank)
    i_names = [f"i{s}" for s in names]
    k_names = [f"k{s}" for s in names]
    o_names = [f"o{s}" for s in names]
    positions = [
        var(i_names[k]) * strides[k] + var(k_names[k]) * dilations[k] - begin[k]
        for k in range(rank)
    ]
    guards = tuple(
        g
        for k in range(rank)
        for g in bound_guards(
            positions[k],
            -begin[k],
            (in_spatial[k] - 1) * strides[k] + (kernel[k] - 1) * dilations[k] - begin[k],
            0,
            out_spatial[k],
        )
    )

    if group == 1:
        channel_iters, m, c = [("m", mg), ("c", cg)], var("m"), var("c")
    else:
        channel_iters = [("g", group), ("m", mg), ("c", cg)]
        m, c = var("g") * mg + var("m"), var("g") * cg + var("c")
    init_index = (var("n"), var("m"), *(var(o) for o in o_names))
    init_value = ir.Load(b, (var("m"),), ctx.dtype(b)) if b else zero(dtype)
    init = nest(
        [("n", xs[0]), ("m", ys[1]), *pairs(o_names, out_spatial)],
        (ir.Stmt("S", ir.Access(y, init_index), init_value),),
    )
    out = ir.Access(y, (var("n"), m, *positions))
    product = load(ctx, x, (var("n"), c, *(var(i) for i in i_names))) * load(
        ctx, w, (c, var("m"), *(var(k) for k in k_names))
    )
    update = ir.Stmt("S", out, ir.Load(y, out.index, dtype) + product, guards)
    if any(e == 0 for e in (*in_spatial, *kernel, cg, mg, xs[0])):
        return init
    return init + nest(
        [("n", xs[0]), *channel_iters, *pairs(i_names, in_spatial), *pairs(k_names, kernel)],
        (update,),
    )
