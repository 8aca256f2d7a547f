"""Gathers and scatters: Gather, GatherElements, GatherND, ScatterElements (and the deprecated
Scatter), ScatterND, OneHot.

A gather reads its data through an index computed at run time from the indices tensor
(``Load`` with an int64 ``Expr`` index; codegen range-checks it), after normalising negative
indices in the expression (``idx < 0 ? idx + dim : idx``)::

    for i0, i1:
      S: Y[i0, i1] = X[select(lt(int64(I[i0, i1]), 0), (int64(I[i0, i1]) + 3), int64(I[i0, i1]))]

krnl writes are affine, so a scatter cannot write to a computed position. It visits every
candidate position instead and keeps or replaces the element there: for each update (in
order, so the last duplicate wins as in onnxruntime) and each position ``j`` along the
scattered axes, ``Y[.., j, ..] = (idx == j) ? combine(Y[.., j, ..], U[..]) : Y[.., j, ..]``.
That is ``O(updates × axis length)`` work and keeps every dependence visible to isl.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    generic_iters,
    nest,
    normalize_axis,
    str_attr,
    unsupported,
    var,
)
from polyonnx.krnl.lower.registry import LowerContext, register

I64 = "int64"


def as_int64(e: ir.Expr) -> ir.Expr:
    """``e`` as an int64 expression (indices may be int32, or float for OneHot)."""
    return e if e.dtype == I64 else ir.Cast(e, I64)


def wrap_negative(e: ir.Expr, dim: int) -> ir.Expr:
    """``e < 0 ? e + dim : e`` — an ONNX index allowed to count from the end."""
    e = as_int64(e)
    return ir.Select(ir.Binary("lt", e, ir.Const(0, I64)), e + ir.Const(int(dim), I64), e)


def index_vars(names: Sequence[str]) -> tuple[Aff, ...]:
    return tuple(var(n) for n in names)


def copy_nest(ctx: LowerContext, src: str, dst: str) -> tuple[ir.Node, ...]:
    """``dst = src`` elementwise (same shape)."""
    iters = generic_iters(ctx.shape(dst))
    index = index_vars([n for n, _ in iters])
    return nest(iters, (ir.Stmt("S", ir.Access(dst, index), ir.Load(src, index, ctx.dtype(src))),))


def _require_int(node: Node, ctx: LowerContext, name: str) -> None:
    if ctx.dtype(name) not in ("int32", "int64"):
        raise unsupported(node, ctx, f"indices {name!r} of dtype {ctx.dtype(name)}")


@register("Gather")
def lower_gather(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[a.., j.., b..] = X[a.., idx[j..], b..]`` with ``idx`` read at run time."""
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    _require_int(node, ctx, idx)
    xs, js = ctx.shape(x), ctx.shape(idx)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(xs))
    a_names = [f"a{d}" for d in range(axis)]
    j_names = [f"j{d}" for d in range(len(js))]
    b_names = [f"b{d}" for d in range(len(xs) - axis - 1)]
    iters = list(zip(a_names + j_names + b_names, ctx.shape(y), strict=True))
    gathered = wrap_negative(ir.Load(idx, index_vars(j_names), ctx.dtype(idx)), xs[axis])
    value = ir.Load(x, (*index_vars(a_names), gathered, *index_vars(b_names)), ctx.dtype(x))
    return nest(iters, (ir.Stmt("S", ir.Access(y, index_vars([n for n, _ in iters])), value),))


@register("GatherElements")
def lower_gather_elements(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[i] = X[i with axis replaced by idx[i]]``."""
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    _require_int(node, ctx, idx)
    xs = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(xs))
    iters = generic_iters(ctx.shape(y))
    index = index_vars([n for n, _ in iters])
    x_index: list[ir.Index] = list(index)
    x_index[axis] = wrap_negative(ir.Load(idx, index, ctx.dtype(idx)), xs[axis])
    return nest(
        iters, (ir.Stmt("S", ir.Access(y, index), ir.Load(x, tuple(x_index), ctx.dtype(x))),)
    )


@register("GatherND")
def lower_gather_nd(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[i.., k..] = X[i[:b].., idx[i.., 0], .., idx[i.., m-1], k..]`` (``b`` batch dims)."""
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    _require_int(node, ctx, idx)
    xs, js = ctx.shape(x), ctx.shape(idx)
    b = int(node.attr("batch_dims", 0))
    if not js or not 0 <= b < min(len(xs), len(js)):
        raise bad_attr(
            node,
            "batch_dims",
            f"= {b} is out of range for data rank {len(xs)} and indices rank {len(js)}",
        )
    m = js[-1]
    if b + m > len(xs):
        raise ShapeError(
            f"node {node.name!r} (GatherND): indices address {m} axes after "
            f"{b} batch axes of a rank-{len(xs)} tensor"
        )
    i_names = [f"i{d}" for d in range(len(js) - 1)]
    k_names = [f"k{d}" for d in range(len(xs) - b - m)]
    iters = list(zip(i_names + k_names, ctx.shape(y), strict=True))
    gathered = [
        wrap_negative(ir.Load(idx, (*index_vars(i_names), Aff.lift(t)), ctx.dtype(idx)), xs[b + t])
        for t in range(m)
    ]
    value = ir.Load(x, (*index_vars(i_names[:b]), *gathered, *index_vars(k_names)), ctx.dtype(x))
    return nest(iters, (ir.Stmt("S", ir.Access(y, index_vars([n for n, _ in iters])), value),))


def _combine(node: Node, ctx: LowerContext, old: ir.Expr, new: ir.Expr) -> ir.Expr:
    reduction = str_attr(node, "reduction", "none")
    if reduction == "none":
        return new
    if reduction == "add":
        return ir.Binary("or", old, new) if old.dtype == "bool" else old + new
    if reduction == "mul":
        return ir.Binary("and", old, new) if old.dtype == "bool" else old * new
    if reduction in ("max", "min"):
        if old.dtype == "bool":
            return ir.Binary("or" if reduction == "max" else "and", old, new)
        return ir.binary(reduction, old, new)
    raise bad_attr(node, "reduction", f"has unknown value {reduction!r}")


@register("ScatterElements")
@register("Scatter")
def lower_scatter_elements(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Copy the data, then for each update and each position ``j`` along ``axis``, replace (or
    combine) the element the index selects."""
    x, idx, upd, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    _require_int(node, ctx, idx)
    xs, js = ctx.shape(x), ctx.shape(idx)
    if ctx.shape(upd) != js or len(js) != len(xs):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): updates {ctx.shape(upd)} and "
            f"indices {js} must have the same shape and the rank of data {xs}"
        )
    axis = normalize_axis(node, int(node.attr("axis", 0)), len(xs))
    dtype = ctx.dtype(x)
    iters = generic_iters(js)
    p = index_vars([n for n, _ in iters])
    out_index = list(p)
    out_index[axis] = var("j")
    out = ir.Access(y, tuple(out_index))
    old = ir.Load(y, out.index, dtype)
    hit = ir.Binary("eq", wrap_negative(ir.Load(idx, p, ctx.dtype(idx)), xs[axis]), ir.Iter("j"))
    value = ir.Select(hit, _combine(node, ctx, old, ir.Load(upd, p, ctx.dtype(upd))), old)
    return copy_nest(ctx, x, y) + nest(iters + [("j", xs[axis])], (ir.Stmt("S", out, value),))


@register("ScatterND")
def lower_scatter_nd(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Copy the data, then for each update slice and each position of the addressed axes,
    replace (or combine) the elements the index tuple selects."""
    x, idx, upd, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    _require_int(node, ctx, idx)
    xs, js = ctx.shape(x), ctx.shape(idx)
    m = js[-1] if js else 0
    if not js or m > len(xs) or ctx.shape(upd) != js[:-1] + xs[m:]:
        raise ShapeError(
            f"node {node.name!r} (ScatterND): updates {ctx.shape(upd)} must be "
            f"indices.shape[:-1] + data.shape[m:] for indices {js}, data {xs}"
        )
    dtype = ctx.dtype(x)
    u_names = [f"u{d}" for d in range(len(js) - 1)]
    o_names = [f"o{d}" for d in range(m)]
    k_names = [f"k{d}" for d in range(len(xs) - m)]
    hit: ir.Expr | None = None
    for t in range(m):
        at = ir.Load(idx, (*index_vars(u_names), Aff.lift(t)), ctx.dtype(idx))
        eq = ir.Binary("eq", wrap_negative(at, xs[t]), ir.Iter(o_names[t]))
        hit = eq if hit is None else ir.Binary("and", hit, eq)
    out = ir.Access(y, index_vars(o_names + k_names))
    old = ir.Load(y, out.index, dtype)
    new = ir.Load(upd, index_vars(u_names + k_names), ctx.dtype(upd))
    value = _combine(node, ctx, old, new)
    if hit is not None:
        value = ir.Select(hit, value, old)
    iters = (
        list(zip(u_names, js[:-1], strict=True))
        + list(zip(o_names, xs[:m], strict=True))
        + list(zip(k_names, xs[m:], strict=True))
    )
    return copy_nest(ctx, x, y) + nest(iters, (ir.Stmt("S", out, value),))


@register("OneHot")
def lower_one_hot(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[.., j, ..] = (idx[..] == j) ? on : off`` — out-of-range indices give all ``off``."""
    idx, depth_name, values, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    depth_value = ctx.constant(depth_name)
    if depth_value is None:
        raise unsupported(node, ctx, "depth computed at run time (the output shape depends on it)")
    depth = int(np.asarray(depth_value).reshape(-1)[0])
    ys = ctx.shape(y)
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(ys))
    if ys[axis] != depth:
        raise ShapeError(
            f"node {node.name!r} (OneHot): output {ys} does not have depth {depth} on axis {axis}"
        )
    iters = generic_iters(ys)
    index = index_vars([n for n, _ in iters])
    i_index = index[:axis] + index[axis + 1 :]
    # A float index is cast (truncated) to int64, as the spec says.
    raw = ir.Load(idx, i_index, ctx.dtype(idx))
    hit = ir.Binary("eq", wrap_negative(raw, depth), ir.Iter(iters[axis][0]))
    vs = ctx.shape(values)
    if len(vs) > 1 or (vs and vs[0] != 2):
        raise ShapeError(f"node {node.name!r} (OneHot): values must hold [off, on], got {vs}")
    vdtype = ctx.dtype(values)
    on = ir.Load(values, (Aff.lift(1),), vdtype)
    off = ir.Load(values, (Aff.lift(0),), vdtype)
    return nest(iters, (ir.Stmt("S", ir.Access(y, index), ir.Select(hit, on, off)),))


@register("TensorScatter", since=24)
def lower_tensor_scatter(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """TensorScatter (a KV-cache update): ``Y`` is the cache with batch ``b``'s update
    written along ``axis`` from ``write_indices[b]`` on (wrapping around, ``circular``). Each
    cache position gathers instead: ``j = s - w[b]`` (mod the cache length), the update's
    row ``j`` when ``j`` is one, else the cache's own value."""
    cache, update, y = node.input(0), node.input(1), node.outputs[0]
    where = node.input(2) if len(node.inputs) > 2 else ""
    mode = str_attr(node, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    cs, us = ctx.shape(cache), ctx.shape(update)
    axis = normalize_axis(node, int(node.attr("axis", -2)), len(cs))
    if axis == 0 or len(us) != len(cs) or us[axis] > cs[axis]:
        raise ShapeError(
            f"node {node.name!r} (TensorScatter): update {list(us)} does not fit cache "
            f"{list(cs)} along axis {axis}"
        )
    iters = generic_iters(cs)
    index = index_vars([n for n, _ in iters])
    start: ir.Expr = (
        as_int64(ir.Load(where, (index[0],), ctx.dtype(where))) if where else ir.Const(0, I64)
    )
    length = ir.Const(cs[axis], I64)
    j = ir.Iter(iters[axis][0]) - start
    if mode == "circular":
        j = ir.Binary("mod", ir.Binary("mod", j, length) + length, length)
    hit = ir.Binary(
        "and", ir.Binary("ge", j, ir.Const(0, I64)), ir.Binary("lt", j, ir.Const(us[axis], I64))
    )
    u_index: list[ir.Index] = list(index)
    u_index[axis] = ir.minimum(ir.maximum(j, ir.Const(0, I64)), ir.Const(us[axis] - 1, I64))
    dtype = ctx.dtype(cache)
    value = ir.Select(hit, ir.Load(update, tuple(u_index), dtype), ir.Load(cache, index, dtype))
    return nest(iters, (ir.Stmt("S", ir.Access(y, index), value),))
