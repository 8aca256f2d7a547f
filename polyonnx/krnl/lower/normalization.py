"""Normalisations over computed statistics: InstanceNormalization, LayerNormalization,
GroupNormalization, MeanVarianceNormalization, RMSNormalization, LpNormalization.

Each is one nest over the "outer" (kept) iterators computing the statistics of its slice into
temp buffers, then the normalised output. For LayerNormalization over the last axis::

    for i0:
      S: mean[i0] = 0.0
      for r0:
        S: mean[i0] = (mean[i0] + X[i0, r0])
      S: mean[i0] = (mean[i0] / 4.0)
      S: var[i0] = 0.0
      for r0:
        S: var[i0] = (var[i0] + ((X[i0, r0] - mean[i0]) * (X[i0, r0] - mean[i0])))
      S: var[i0] = (1.0 / sqrt(((var[i0] / 4.0) + 1e-05)))
      for r0:
        S: Y[i0, r0] = ((((X[i0, r0] - mean[i0]) * var[i0]) * Scale[r0]) + B[r0])

Statistics are computed in float32 for float16 inputs (the spec's ``stash_type``) and
in the input type otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    broadcast_index,
    nest,
    normalize_axis,
    require_float,
    spatial_names,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


def _compute_dtype(dtype: str) -> str:
    return "float32" if dtype == "float16" else dtype


def _cast(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


Finish = Callable[[ir.Load, ir.Load], tuple[ir.Node, ...]]
"""Given the loaded mean and (transformed) variance statistic, the statements to emit."""


def moments(
    node: Node,
    x_value: ir.Expr,
    outer: Sequence[tuple[str, int]],
    reduced: Sequence[tuple[str, int]],
    cdt: str,
    *,
    centered: bool = True,
    with_mean: bool = True,
    variance: Callable[[ir.Expr], ir.Expr] = lambda v: v,
    finish: Finish,
    stats_index: Sequence[ir.AffLike] | None = None,
) -> Lowered:
    """Mean and variance of ``x_value`` over ``reduced`` per point of ``outer``.

    ``variance`` transforms the (biased) variance in place (e.g. into ``1/sqrt(v + eps)``);
    ``finish`` builds the statements after the statistics, inside the outer loops. With
    ``centered=False`` the second moment ``E[x^2]`` is accumulated instead of the variance;
    ``with_mean=False`` skips the mean.
    """
    row_shape = tuple(e for _, e in outer)
    row = tuple(stats_index) if stats_index is not None else tuple(var(n) for n, _ in outer)
    mean = ir.Buffer(f"{node.name}__mean", cdt, row_shape)
    var_buf = ir.Buffer(f"{node.name}__var", cdt, row_shape)
    m_at, v_at = ir.Access(mean.name, row), ir.Access(var_buf.name, row)
    m, v = ir.Load(mean.name, m_at.index, cdt), ir.Load(var_buf.name, v_at.index, cdt)
    count = float(math.prod(e for _, e in reduced))
    xv = _cast(x_value, cdt)
    body: list[ir.Node] = []
    if with_mean:
        body += [
            ir.Stmt("S", m_at, zero(cdt)),
            *nest(reduced, (ir.Stmt("S", m_at, m + xv),)),
            ir.Stmt("S", m_at, m / count),
        ]
    d = xv - m if centered else xv
    body += [
        ir.Stmt("S", v_at, zero(cdt)),
        *nest(reduced, (ir.Stmt("S", v_at, v + d * d),)),
        ir.Stmt("S", v_at, variance(v / count)),
    ]
    body += finish(m, v)
    temps = (mean, var_buf) if with_mean else (var_buf,)
    return Lowered(nest(outer, body), temps)


def _inv_std(epsilon: float) -> Callable[[ir.Expr], ir.Expr]:
    def f(v: ir.Expr) -> ir.Expr:
        return ir.Const(1.0, v.dtype) / ir.unary("sqrt", v + epsilon)

    return f


def _param(ctx: LowerContext, name: str, index: Sequence[ir.AffLike], cdt: str) -> ir.Expr:
    return _cast(ir.Load(name, tuple(Aff.lift(i) for i in index), ctx.dtype(name)), cdt)


@register("InstanceNormalization")
def lower_instance_norm(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = scale[c] * (X - mean[n, c]) / sqrt(var[n, c] + eps) + B[c]`` over spatial axes."""
    x, scale, bias, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    if len(xs) < 3:
        raise ShapeError(
            f"node {node.name!r} (InstanceNormalization): X {xs} must be [N, C, spatial...]"
        )
    cdt = _compute_dtype(dtype)
    eps = float(node.attr("epsilon", 1e-5))
    names = [f"r_{s}" for s in spatial_names(len(xs) - 2)]
    reduced = list(zip(names, xs[2:], strict=True))
    index = (var("n"), var("c"), *(var(n) for n in names))
    xv = ir.Load(x, index, dtype)

    def finish(m: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        out = (_cast(xv, cdt) - m) * v * _param(ctx, scale, (var("c"),), cdt) + _param(
            ctx, bias, (var("c"),), cdt
        )
        return nest(reduced, (ir.Stmt("S", ir.Access(y, index), _cast(out, dtype)),))

    return moments(
        node, xv, [("n", xs[0]), ("c", xs[1])], reduced, cdt, variance=_inv_std(eps), finish=finish
    )


@register("LayerNormalization")
def lower_layer_norm(node: Node, ctx: LowerContext) -> Lowered:
    """Normalise over axes ``axis..`` then scale and shift; optional Mean / InvStdDev outputs."""
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    y = node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(xs))
    eps = float(node.attr("epsilon", 1e-5))
    stash = int(node.attr("stash_type", 1))
    if stash not in (1, 11):
        raise unsupported(node, ctx, f"stash_type={stash}")
    cdt = _compute_dtype(dtype)
    outer = [(f"i{d}", xs[d]) for d in range(axis)]
    reduced = [(f"r{d}", xs[d]) for d in range(axis, len(xs))]
    names = [n for n, _ in outer + reduced]
    index = tuple(var(n) for n in names)
    r_names = [n for n, _ in reduced]
    xv = ir.Load(x, index, dtype)
    stats_out = [o if k < len(node.outputs) else "" for k, o in enumerate(node.outputs[1:3], 1)]
    stats_index = (*(var(n) for n, _ in outer), *(Aff.lift(0),) * len(reduced))

    def finish(m: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        s = _param(ctx, scale, broadcast_index(ctx.shape(scale), xs[axis:], r_names), cdt)
        out = (_cast(xv, cdt) - m) * v * s
        if bias:
            out = out + _param(ctx, bias, broadcast_index(ctx.shape(bias), xs[axis:], r_names), cdt)
        stmts: list[ir.Node] = []
        for name, value in zip(stats_out, (m, v), strict=False):
            if name:
                stmts.append(
                    ir.Stmt("S", ir.Access(name, stats_index), _cast(value, ctx.dtype(name)))
                )
        return (*stmts, *nest(reduced, (ir.Stmt("S", ir.Access(y, index), _cast(out, dtype)),)))

    return moments(node, xv, outer, reduced, cdt, variance=_inv_std(eps), finish=finish)


@register("GroupNormalization")
def lower_group_norm(node: Node, ctx: LowerContext) -> Lowered:
    """Statistics per (n, group) over the group's channels and all spatial positions."""
    x, scale, bias, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    if not (scale and bias):  # (the checker does not see GroupNormalization-18: deprecated)
        raise ModelError(f"node {node.name!r} (GroupNormalization): scale and bias are required")
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    if len(xs) < 2:
        raise ShapeError(f"node {node.name!r} (GroupNormalization): X {xs} must be [N, C, ...]")
    groups = node.attr("num_groups")
    channels = xs[1]
    if groups is None or int(groups) < 1 or channels % int(groups):
        raise bad_attr(node, "num_groups", f"= {groups!r} must divide C={channels}")
    groups = int(groups)
    cg = channels // groups
    eps = float(node.attr("epsilon", 1e-5))
    cdt = _compute_dtype(dtype)
    names = [f"r_{s}" for s in spatial_names(len(xs) - 2)]
    reduced = [("cc", cg), *zip(names, xs[2:], strict=True)]
    channel = var("g") * cg + var("cc")
    index = (var("n"), channel, *(var(n) for n in names))
    xv = ir.Load(x, index, dtype)
    # Opset 18 has one scale/bias per group, opset 21 one per channel.
    per_channel = ctx.shape(scale)[0] == channels
    p_index = (channel,) if per_channel else (var("g"),)

    def finish(m: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        out = (_cast(xv, cdt) - m) * v * _param(ctx, scale, p_index, cdt) + _param(
            ctx, bias, p_index, cdt
        )
        return nest(reduced, (ir.Stmt("S", ir.Access(y, index), _cast(out, dtype)),))

    return moments(
        node, xv, [("n", xs[0]), ("g", groups)], reduced, cdt, variance=_inv_std(eps), finish=finish
    )


@register("MeanVarianceNormalization")
def lower_mvn(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)`` over ``axes`` (default 0, 2, 3)."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    axes_attr = node.attr("axes", (0, 2, 3))
    axes = sorted({normalize_axis(node, int(a), len(xs), "axes") for a in axes_attr})
    names = {d: (f"r{d}" if d in axes else f"i{d}") for d in range(len(xs))}
    outer = [(names[d], xs[d]) for d in range(len(xs)) if d not in axes]
    reduced = [(names[d], xs[d]) for d in axes]
    index = tuple(var(names[d]) for d in range(len(xs)))
    xv = ir.Load(x, index, dtype)
    cdt = _compute_dtype(dtype)

    def finish(m: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        out = (_cast(xv, cdt) - m) / v
        return nest(reduced, (ir.Stmt("S", ir.Access(y, index), _cast(out, dtype)),))

    # As the function body computes it: from E[X^2] - E[X]^2 (clamped at 0 against
    # rounding), plus 1e-9 after the square root.
    row = tuple(var(n) for n, _ in outer)
    mean = ir.Buffer(f"{node.name}__mean", cdt, tuple(e for _, e in outer))
    sq = ir.Buffer(f"{node.name}__var", cdt, tuple(e for _, e in outer))
    m_at, s_at = ir.Access(mean.name, row), ir.Access(sq.name, row)
    m, s = ir.Load(mean.name, row, cdt), ir.Load(sq.name, row, cdt)
    count = float(math.prod(e for _, e in reduced))
    xc = _cast(xv, cdt)
    body = (
        ir.Stmt("S", m_at, zero(cdt)),
        *nest(reduced, (ir.Stmt("S", m_at, m + xc),)),
        ir.Stmt("S", m_at, m / count),
        ir.Stmt("S", s_at, zero(cdt)),
        *nest(reduced, (ir.Stmt("S", s_at, s + xc * xc),)),
        ir.Stmt("S", s_at, ir.unary("sqrt", ir.maximum(s / count - m * m, 0.0)) + 1e-9),
        *finish(m, s),
    )
    return Lowered(nest(outer, body), (mean, sq))


@register("RMSNormalization", since=23)
def lower_rms_norm(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = X / sqrt(mean(X^2 over axis..) + eps) * scale``."""
    x, scale, y = node.input(0), node.input(1), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(xs))
    eps = float(node.attr("epsilon", 1e-5))
    cdt = _compute_dtype(dtype)
    outer = [(f"i{d}", xs[d]) for d in range(axis)]
    reduced = [(f"r{d}", xs[d]) for d in range(axis, len(xs))]
    r_names = [n for n, _ in reduced]
    index = tuple(var(n) for n, _ in outer + reduced)
    xv = ir.Load(x, index, dtype)

    def finish(_: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        s = _param(ctx, scale, broadcast_index(ctx.shape(scale), xs[axis:], r_names), cdt)
        return nest(
            reduced, (ir.Stmt("S", ir.Access(y, index), _cast(_cast(xv, cdt) * v * s, dtype)),)
        )

    return moments(
        node,
        xv,
        outer,
        reduced,
        cdt,
        centered=False,
        with_mean=False,
        variance=_inv_std(eps),
        finish=finish,
    )


@register("LpNormalization")
def lower_lp_norm(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = X / ||X||_p`` along ``axis`` (p = 1 or 2); a zero norm gives 0."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(xs))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise bad_attr(node, "p", f"must be 1 or 2, got {p}")
    names = [f"r{d}" if d == axis else f"i{d}" for d in range(len(xs))]
    outer = [(names[d], xs[d]) for d in range(len(xs)) if d != axis]
    reduced = [(names[axis], xs[axis])]
    index = tuple(var(n) for n in names)
    row = tuple(var(n) for n, _ in outer)
    norm = ir.Buffer(f"{node.name}__norm", dtype, tuple(e for _, e in outer))
    n_at = ir.Access(norm.name, row)
    n = ir.Load(norm.name, row, dtype)
    xv = ir.Load(x, index, dtype)
    term = ir.unary("abs", xv) if p == 1 else xv * xv
    total = n if p == 1 else ir.unary("sqrt", n)
    z = zero(dtype)
    body = (
        ir.Stmt("S", n_at, z),
        *nest(reduced, (ir.Stmt("S", n_at, n + term),)),
        ir.Stmt("S", n_at, total),
        *nest(
            reduced,
            (ir.Stmt("S", ir.Access(y, index), ir.Select(ir.Binary("eq", n, z), z, xv / n)),),
        ),
    )
    return Lowered(nest(outer, body), (norm,))
