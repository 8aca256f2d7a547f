"""GridSample: each output pixel reads the input at a position the grid gives at run time.

For output point ``(n, c, o...)`` and each spatial axis ``d`` (the grid lists them last axis
first), the grid value ``g = G[n, o..., D-1-d]`` in ``[-1, 1]`` becomes a position ``x`` along
the axis (``align_corners``: the extreme pixels' centres, else their outer edges), rounded to
even for ``nearest``, brought inside by ``border`` (clamp) or ``reflection`` padding. The
output sums over taps: 1 (nearest), 2 (linear) or 4 (cubic, Keys with a = -0.75) per axis,
around ``floor(x)``, each weighted by the product of the axes' coefficients; a tap outside
the input reads 0 (``zeros``), the edge (``border``) or its reflection. The taps are loops
``t<d>`` of a reduction into the output; every index is computed, clamped inside the input
before it is read::

    for n, c, o0, o1:
      S: Y[n, c, o0, o1] = 0.0
      for t0, t1:
        S: Y[n, c, o0, o1] = Y[n, c, o0, o1] + w0(t0) * w1(t1) * X[n, c, i0(t0), i1(t1)]

As in the ONNX reference (and PyTorch) positions are float32 arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, require_float, str_attr, var, zero
from polyonnx.krnl.lower.registry import LowerContext, register

F32 = "float32"
I64 = "int64"
_TAPS = {"nearest": 1, "linear": 2, "cubic": 4}
_CUBIC_A = -0.75


def _f(v: float) -> ir.Const:
    return ir.Const(float(v), F32)


def _reflect(x: ir.Expr, lo: float, hi: float) -> ir.Expr:
    """``x`` reflected at ``lo`` and ``hi`` until inside (as the reference's ``_gs_reflect``)."""
    span = hi - lo
    if span <= 0:
        return ir.Select(ir.Binary("lt", x, _f(lo)), _f(lo), ir.minimum(x, _f(hi)))

    def fold(dx: ir.Expr, near: float, far: float, sign: float) -> ir.Expr:
        # dx past the near border: n whole spans, r left; even n comes back from the near
        # border, odd n from the far one.
        n = ir.unary("floor", dx / _f(span))
        r = dx - n * _f(span)
        even = ir.Binary("eq", n - _f(2.0) * ir.unary("floor", n / _f(2.0)), _f(0.0))
        return ir.Select(even, _f(near) + r * _f(sign), _f(far) - r * _f(sign))

    below = fold(_f(lo) - x, lo, hi, 1.0)
    above = fold(x - _f(hi), hi, lo, -1.0)
    return ir.Select(
        ir.Binary("lt", x, _f(lo)), below, ir.Select(ir.Binary("gt", x, _f(hi)), above, x)
    )


def _cubic(t: ir.Expr, s: ir.Expr) -> ir.Expr:
    """The Keys coefficient of tap ``t`` (0..3, int64) at fraction ``s``: taps at distances
    ``1 + s``, ``s``, ``1 - s``, ``2 - s``."""
    a = _CUBIC_A

    def outer(d: ir.Expr) -> ir.Expr:  # 1 <= |d| < 2
        return ((_f(a) * d - _f(5 * a)) * d + _f(8 * a)) * d - _f(4 * a)

    def inner(d: ir.Expr) -> ir.Expr:  # |d| < 1
        return (_f(a + 2) * d - _f(a + 3)) * d * d + _f(1.0)

    coeffs = (outer(s + _f(1.0)), inner(s), inner(_f(1.0) - s), outer(_f(2.0) - s))
    out = coeffs[3]
    for k in (2, 1, 0):
        out = ir.Select(ir.Binary("eq", t, ir.Const(k, I64)), coeffs[k], out)
    return out


@register("GridSample", since=16)
def lower_grid_sample(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """GridSample (any number of spatial axes): ``Y[n, c, o...]`` sampled from ``X[n, c]``
    at the grid's positions (see the module docstring)."""
    x, grid, y = node.input(0), node.input(1), node.outputs[0]
    dtype = require_float(node, ctx, x)
    require_float(node, ctx, grid)
    mode = str_attr(node, "mode", "linear" if ctx.graph.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in _TAPS:
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    padding = str_attr(node, "padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise bad_attr(node, "padding_mode", f"has unknown value {padding!r}")
    align = bool(node.attr("align_corners", 0))
    xs, ys = ctx.shape(x), ctx.shape(y)
    sizes = xs[2:]
    rank = len(sizes)
    out_names = ["n", "c", *(f"o{d}" for d in range(rank))]
    taps = _TAPS[mode]
    tap_names = [f"t{d}" for d in range(rank)]

    weight: ir.Expr = _f(1.0)
    inside: ir.Expr = ir.Const(True, "bool")
    index: list[ir.Index] = [var("n"), var("c")]
    for d, size in enumerate(sizes):
        g: ir.Expr = ir.Load(
            grid,
            (var("n"), *(var(f"o{k}") for k in range(rank)), ir.Aff.lift(rank - 1 - d)),
            ctx.dtype(grid),
        )
        g = g if g.dtype == F32 else ir.Cast(g, F32)
        pos: ir.Expr = (
            (g + _f(1.0)) * _f((size - 1) / 2)
            if align
            else ((g + _f(1.0)) * _f(size) - _f(1.0)) / _f(2.0)
        )
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            pos = ir.unary("round", pos)
        if padding == "border":
            pos = ir.Select(
                ir.Binary("or", ir.Binary("lt", pos, _f(lo)), ir.Binary("gt", pos, _f(hi))),
                ir.minimum(ir.maximum(pos, _f(0.0)), _f(size - 1.0)),
                pos,
            )
        elif padding == "reflection":
            pos = _reflect(pos, lo, hi)
        # (Far outside, every tap misses alike: the bound keeps the integer conversion defined.)
        pos = ir.minimum(ir.maximum(pos, _f(-8.0)), _f(size + 8.0))
        t = ir.Iter(tap_names[d])
        tap: ir.Expr
        if mode == "nearest":
            tap = ir.Cast(pos, I64)  # (an integer already, or a reflected half: truncated)
        else:
            base = ir.unary("floor", pos)
            frac = pos - base
            first = ir.Cast(base, I64) - ir.Const(0 if mode == "linear" else 1, I64)
            tap = first + t
            coeff = (
                ir.Select(ir.Binary("eq", t, ir.Const(0, I64)), _f(1.0) - frac, frac)
                if mode == "linear"
                else _cubic(t, frac)
            )
            weight = weight * coeff
        tap_index, tap_inside = _pixel_index(tap, size, padding, lo, hi)
        index.append(tap_index)
        if tap_inside is not None:
            inside = ir.Binary("and", inside, tap_inside)

    pixel: ir.Expr = ir.Load(x, tuple(index), dtype)
    pixel = pixel if dtype == F32 else ir.Cast(pixel, F32)
    term = ir.Select(inside, weight * pixel, _f(0.0))
    at = ir.Access(y, tuple(var(nm) for nm in out_names))
    acc = ir.Load(y, tuple(var(nm) for nm in out_names), dtype)
    value = term if dtype == F32 else ir.Cast(term, dtype)
    body = (
        ir.Stmt("S", at, zero(dtype)),
        *nest([(nm, taps) for nm in tap_names], (ir.Stmt("S", at, acc + value),)),
    )
    return nest(list(zip(out_names, ys, strict=True)), body)


def _pixel_index(
    tap: ir.Expr, size: int, padding: str, lo: float, hi: float
) -> tuple[ir.Expr, ir.Expr | None]:
    """The in-bounds index an integer tap reads, and (zeros padding) whether it is inside."""
    clamp: Callable[[ir.Expr], ir.Expr] = lambda i: ir.minimum(  # noqa: E731
        ir.maximum(i, ir.Const(0, I64)), ir.Const(size - 1, I64)
    )
    if padding == "zeros":
        inside = ir.Binary(
            "and",
            ir.Binary("ge", tap, ir.Const(0, I64)),
            ir.Binary("lt", tap, ir.Const(size, I64)),
        )
        return clamp(tap), inside
    if padding == "border":
        return clamp(tap), None
    reflected = ir.Cast(_reflect(ir.Cast(tap, F32), lo, hi), I64)
    return clamp(reflected), None
