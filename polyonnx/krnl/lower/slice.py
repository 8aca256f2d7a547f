"""Affine data movement: Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth, Trilu,
EyeLike, Range, ReverseSequence, Shape, Size.

All of these are copies whose index maps are affine once the right iterators are chosen:
Tile iterates ``(repeat, i)`` per axis and writes ``Y[repeat * dim + i]`` (no modulo needed);
DepthToSpace iterates the block offsets ``b0, b1`` as loops of their own. Slice with a negative
step reads ``X[start + o * step]``. ReverseSequence is the exception: its read position along
the time axis depends on ``sequence_lens`` and is computed at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    broadcast_index,
    generic_iters,
    nest,
    normalize_axis,
    opset,
    str_attr,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.gather import I64, as_int64, index_vars
from polyonnx.krnl.lower.registry import LowerContext, register


def _const_ints(node: Node, ctx: LowerContext, i: int, what: str) -> list[int] | None:
    """The values of constant input ``i`` as ints, None when the input is absent."""
    name = node.input(i)
    if not name:
        return None
    value = ctx.constant(name)
    if value is None:
        raise unsupported(
            node, ctx, f"{what} computed at run time (input {name!r} must be a constant)"
        )
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _typed_const(value: float | int | bool, dtype: str) -> ir.Const:
    if dtype in ir.FLOAT_DTYPES:
        return ir.Const(float(value), dtype)
    if dtype == "bool":
        return ir.Const(bool(value), dtype)
    return ir.Const(int(value), dtype)


def _copy(
    y: str,
    out_index: Sequence[ir.AffLike],
    x: str,
    in_index: Sequence[ir.Index],
    dtype: str,
    iters: Sequence[tuple[str, int]],
) -> tuple[ir.Node, ...]:
    if any(extent == 0 for _, extent in iters):
        return ()
    stmt = ir.Stmt(
        "S", ir.Access(y, tuple(Aff.lift(i) for i in out_index)), ir.Load(x, tuple(in_index), dtype)
    )
    return nest(iters, (stmt,))


# --------------------------------------------------------------------------- Slice, Split


def slice_starts(
    node: Node,
    dims: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int],
    steps: Sequence[int],
) -> list[tuple[int, int, int]]:
    """Per axis ``(start, step, count)`` after ONNX's clamping rules."""
    rank = len(dims)
    out = [(0, 1, d) for d in dims]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(
            f"node {node.name!r} (Slice): starts, ends, axes and steps must have the same length"
        )
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = normalize_axis(node, a, rank, "axes")
        if a in seen:
            raise bad_attr(node, "axes", "repeats an axis")
        seen.add(a)
        if st == 0:
            raise bad_attr(node, "steps", "must not contain 0")
        d = dims[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            count = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, -1), d - 1), min(max(e, -1), d - 1)
            count = max(0, -(-(s - e) // -st))
        out[a] = (s, st, count)
    return out


@register("Slice")
def lower_slice(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[o] = X[start + o * step]`` per axis (starts/ends/axes/steps must be constants)."""
    x, y = node.input(0), node.outputs[0]
    xs = ctx.shape(x)
    if opset(ctx) < 10:
        starts = [int(v) for v in node.attr("starts", ())]
        ends = [int(v) for v in node.attr("ends", ())]
        axes = [int(v) for v in node.attr("axes", range(len(starts)))]
        steps = [1] * len(starts)
    else:
        starts = _const_ints(node, ctx, 1, "starts") or []
        ends = _const_ints(node, ctx, 2, "ends") or []
        given_axes = _const_ints(node, ctx, 3, "axes")
        axes = list(range(len(starts))) if given_axes is None else given_axes
        given_steps = _const_ints(node, ctx, 4, "steps")
        steps = [1] * len(starts) if given_steps is None else given_steps
    per_axis = slice_starts(node, xs, starts, ends, axes, steps)
    ys = ctx.shape(y)
    if tuple(c for _, _, c in per_axis) != tuple(ys):
        raise ShapeError(
            f"node {node.name!r} (Slice): output {ys} does not match the slice "
            f"({tuple(c for _, _, c in per_axis)})"
        )
    iters = generic_iters(ys)
    index = [var(n) * st + s for (n, _), (s, st, _) in zip(iters, per_axis, strict=True)]
    return _copy(y, index_vars([n for n, _ in iters]), x, index, ctx.dtype(x), iters)


@register("Split")
def lower_split(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """One copy per output from its offset along ``axis`` (sizes come from the typed outputs)."""
    x = node.input(0)
    xs = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(xs))
    nests: list[ir.Node] = []
    offset = 0
    for y in node.outputs:
        if not y:
            continue
        ys = ctx.shape(y)
        iters = generic_iters(ys)
        out = index_vars([n for n, _ in iters])
        index = list(out)
        index[axis] = out[axis] + offset
        nests.extend(_copy(y, out, x, index, ctx.dtype(x), iters))
        offset += ys[axis]
    if offset != xs[axis]:
        raise ShapeError(
            f"node {node.name!r} (Split): outputs add up to {offset} along axis "
            f"{axis}, the input has {xs[axis]}"
        )
    return tuple(nests)


# --------------------------------------------------------------------------- Expand, Tile


@register("Expand")
def lower_expand(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y = X`` broadcast to the output shape."""
    x, y = node.input(0), node.outputs[0]
    ys = ctx.shape(y)
    iters = generic_iters(ys)
    names = [n for n, _ in iters]
    return _copy(
        y, index_vars(names), x, broadcast_index(ctx.shape(x), ys, names), ctx.dtype(x), iters
    )


@register("Tile")
def lower_tile(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[r0*d0 + i0, ..] = X[i0, ..]`` over repeats ``r`` and input positions ``i``."""
    x, y = node.input(0), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    if len(xs) != len(ys) or any(d and o % d for o, d in zip(ys, xs, strict=True)):
        raise ShapeError(f"node {node.name!r} (Tile): output {ys} is not a tiling of {xs}")
    iters: list[tuple[str, int]] = []
    out: list[Aff] = []
    for d, (size, o) in enumerate(zip(xs, ys, strict=True)):
        reps = o // size if size else 0
        iters += [(f"r{d}", reps), (f"i{d}", size)]
        out.append(var(f"r{d}") * size + var(f"i{d}"))
    return _copy(y, out, x, index_vars([f"i{d}" for d in range(len(xs))]), ctx.dtype(x), iters)


# --------------------------------------------------------------------------- depth <-> space


def _block(node: Node, ctx: LowerContext) -> int:
    bs = node.attr("blocksize")
    if bs is None or int(bs) < 1:
        raise bad_attr(node, "blocksize", f"must be a positive integer, got {bs!r}")
    if len(ctx.shape(node.input(0))) != 4:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): input must be 4-D [N, C, H, W]")
    return int(bs)


@register("DepthToSpace")
def lower_depth_to_space(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, c, h*bs + b0, w*bs + b1] = X[n, channel(c, b0, b1), h, w]`` (DCR or CRD)."""
    x, y = node.input(0), node.outputs[0]
    bs = _block(node, ctx)
    n, _, h, w = ctx.shape(x)
    c = ctx.shape(y)[1]
    mode = str_attr(node, "mode", "DCR")
    b0, b1, cv = var("b0"), var("b1"), var("c")
    if mode == "DCR":
        channel = b0 * (bs * c) + b1 * c + cv
    elif mode == "CRD":
        channel = cv * (bs * bs) + b0 * bs + b1
    else:
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    iters = [("n", n), ("c", c), ("h", h), ("b0", bs), ("w", w), ("b1", bs)]
    return _copy(
        y,
        (var("n"), cv, var("h") * bs + b0, var("w") * bs + b1),
        x,
        (var("n"), channel, var("h"), var("w")),
        ctx.dtype(x),
        iters,
    )


@register("SpaceToDepth")
def lower_space_to_depth(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[n, (b0*bs + b1)*C + c, h, w] = X[n, c, h*bs + b0, w*bs + b1]`` (DCR; CRD: channel
    ``c*bs*bs + b0*bs + b1``)."""
    x, y = node.input(0), node.outputs[0]
    bs = _block(node, ctx)
    n, c, _, _ = ctx.shape(x)
    _, _, h, w = ctx.shape(y)
    b0, b1 = var("b0"), var("b1")
    mode = str_attr(node, "mode", "DCR")
    if mode == "DCR":
        channel = (b0 * bs + b1) * c + var("c")
        iters = [("n", n), ("b0", bs), ("b1", bs), ("c", c), ("h", h), ("w", w)]
    elif mode == "CRD":
        channel = var("c") * (bs * bs) + b0 * bs + b1
        iters = [("n", n), ("c", c), ("b0", bs), ("b1", bs), ("h", h), ("w", w)]
    else:
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    return _copy(
        y,
        (var("n"), channel, var("h"), var("w")),
        x,
        (var("n"), var("c"), var("h") * bs + b0, var("w") * bs + b1),
        ctx.dtype(x),
        iters,
    )


# --------------------------------------------------------------------------- matrices


@register("Trilu")
def lower_trilu(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Keep ``X[.., i, j]`` where ``j - i >= k`` (upper) or ``j - i <= k`` (lower), else 0.

    ``k`` is read at run time (it may be a graph input), so the test is a select.
    """
    x, k, y = node.input(0), node.input(1), node.outputs[0]
    ys = ctx.shape(y)
    if len(ys) < 2:
        raise ShapeError(f"node {node.name!r} (Trilu): input must be at least 2-D")
    iters = generic_iters(ys)
    names = [n for n, _ in iters]
    index = index_vars(names)
    diagonal = ir.Iter(names[-1]) - ir.Iter(names[-2])
    kv: ir.Expr = (
        as_int64(ir.Load(k, (Aff.lift(0),) * len(ctx.shape(k)), ctx.dtype(k)))
        if k
        else ir.Const(0, I64)
    )
    upper = int(node.attr("upper", 1))
    keep = ir.Binary("ge" if upper else "le", diagonal, kv)
    dtype = ctx.dtype(x)
    value = ir.Select(
        keep, ir.Load(x, index, dtype), zero(dtype) if dtype != "bool" else ir.Const(False, dtype)
    )
    return nest(iters, (ir.Stmt("S", ir.Access(y, index), value),)) if all(ys) else ()


@register("EyeLike")
def lower_eye_like(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Zeros, then ones on the diagonal ``j == i + k``."""
    y = node.outputs[0]
    ys = ctx.shape(y)
    if len(ys) != 2:
        raise ShapeError(f"node {node.name!r} (EyeLike): input must be 2-D")
    dtype = ctx.dtype(y)
    k = int(node.attr("k", 0))
    fill = nest(
        [("i", ys[0]), ("j", ys[1])],
        (ir.Stmt("S", ir.Access(y, (var("i"), var("j"))), _typed_const(0, dtype)),),
    )
    lo, hi = max(0, -k), min(ys[0], ys[1] - k)
    if lo >= hi:
        return fill
    diag = ir.Loop(
        "i", lo, hi, (ir.Stmt("S", ir.Access(y, (var("i"), var("i") + k)), _typed_const(1, dtype)),)
    )
    return fill + (diag,)


@register("Range")
def lower_range(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[i] = start + i * delta`` (the length is static: it comes from the typed output)."""
    start, delta, y = node.input(0), node.input(2), node.outputs[0]
    dtype = ctx.dtype(y)
    (length,) = ctx.shape(y)
    s = ir.Load(start, (Aff.lift(0),) * len(ctx.shape(start)), dtype)
    d = ir.Load(delta, (Aff.lift(0),) * len(ctx.shape(delta)), dtype)
    i = ir.Iter("i") if dtype == I64 else ir.Cast(ir.Iter("i"), dtype)
    return (
        nest([("i", length)], (ir.Stmt("S", ir.Access(y, (var("i"),)), s + i * d),))
        if length
        else ()
    )


@register("ReverseSequence")
def lower_reverse_sequence(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[t, b] = t < len[b] ? X[len[b] - 1 - t, b] : X[t, b]`` (time/batch axes 0/1)."""
    x, lens, y = node.input(0), node.input(1), node.outputs[0]
    xs = ctx.shape(x)
    time_axis = int(node.attr("time_axis", 0))
    batch_axis = int(node.attr("batch_axis", 1))
    if {time_axis, batch_axis} != {0, 1} or len(xs) < 2:
        raise bad_attr(
            node, "time_axis", f"/ batch_axis must be 0 and 1 (got {time_axis}, {batch_axis})"
        )
    iters = generic_iters(xs)
    names = [n for n, _ in iters]
    index = index_vars(names)
    length = as_int64(ir.Load(lens, (var(names[batch_axis]),), ctx.dtype(lens)))
    t = ir.Iter(names[time_axis])
    # Clamp to the axis so a sequence length longer than the tensor cannot read out of range.
    length = ir.minimum(length, ir.Const(xs[time_axis], I64))
    reversed_t = ir.Select(ir.Binary("lt", t, length), length - ir.Const(1, I64) - t, t)
    x_index: list[ir.Index] = list(index)
    x_index[time_axis] = reversed_t
    return nest(
        iters, (ir.Stmt("S", ir.Access(y, index), ir.Load(x, tuple(x_index), ctx.dtype(x))),)
    )


# --------------------------------------------------------------------------- Shape, Size


@register("Shape")
def lower_shape(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """The (static) shape as constants; normally folded away before lowering."""
    dims = np.array(ctx.shape(node.input(0)), dtype=np.int64)
    start, end = node.attr("start", 0), node.attr("end", None)
    values = dims[int(start) : None if end is None else int(end)]
    y = node.outputs[0]
    return tuple(
        ir.Stmt("S", ir.Access(y, (k,)), ir.Const(int(v), I64)) for k, v in enumerate(values)
    )


@register("Size")
def lower_size(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """The (static) element count as a constant; normally folded away before lowering."""
    y = node.outputs[0]
    size = int(np.prod(ctx.shape(node.input(0)), dtype=np.int64))
    return (ir.Stmt("S", ir.Access(y, (0,) * len(ctx.shape(y))), ir.Const(size, I64)),)


# --------------------------------------------------------------------------- CenterCropPad


@register("CenterCropPad", since=18)
def lower_center_crop_pad(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Crop or zero-pad each of ``axes`` to the target size, centred: zeros, then the copy of
    the overlapping window ``Y[o] = X[o + shift]``."""
    x, y = node.input(0), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    dtype = ctx.dtype(x)
    shift = []
    for size, out in zip(xs, ys, strict=True):
        # Cropping drops the extra half (rounded down) at the start; padding adds it.
        shift.append((size - out) // 2 if size >= out else -((out - size) // 2))
    names = [f"i{d}" for d in range(len(ys))]
    fill_value = ir.Const(False, dtype) if dtype == "bool" else zero(dtype)
    nests: list[ir.Node] = list(_copy_fill(y, names, ys, fill_value))
    lo = [max(0, -s) for s in shift]
    hi = [min(out, size - s) for out, size, s in zip(ys, xs, shift, strict=True)]
    if all(a < b for a, b in zip(lo, hi, strict=True)):
        stmt: ir.Node = ir.Stmt(
            "S",
            ir.Access(y, tuple(var(n) for n in names)),
            ir.Load(x, tuple(var(n) + s for n, s in zip(names, shift, strict=True)), dtype),
        )
        for n, a, b in reversed(list(zip(names, lo, hi, strict=True))):
            stmt = ir.Loop(n, a, b, (stmt,))
        nests.append(stmt)
    return tuple(nests) if all(ys) else ()


def _copy_fill(
    y: str, names: Sequence[str], shape: Sequence[int], value: ir.Expr
) -> tuple[ir.Node, ...]:
    return nest(
        list(zip(names, shape, strict=True)),
        (ir.Stmt("S", ir.Access(y, tuple(var(n) for n in names)), value),),
    )
