"""MaxPool, AveragePool, LpPool, their global forms, and MaxUnpool.

A pool is a reduction like Conv without the channel sum::

    for n, c, oh, ow:
      S: Y[n, c, oh, ow] = -inf
      for kh, kw:
        S: Y[n, c, oh, ow] = max(Y[n, c, oh, ow], X[n, c, ih, iw])   if 0 <= ih < H and ...

AveragePool divides by the number of taps counted. When that number differs between windows
(padding with ``count_include_pad=0``, or ``ceil_mode`` windows cut by the padded end) a first
nest counts the taps of every output position into the temp buffer ``<node>__count`` with the
same guards, so the divisor is computed by the kernel rather than stored as a table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    Window,
    bad_attr,
    bound_guards,
    check_out_spatial,
    ints_attr,
    load,
    lowest,
    nest,
    opset,
    pairs,
    require_float,
    spatial_names,
    unsupported,
    var,
    window,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


def _pool_setup(
    node: Node, ctx: LowerContext, *, dilations: bool, blocked: bool = False
) -> tuple[str, str, tuple[int, ...], tuple[int, ...], Window, list[str], list[str]]:
    """X, Y, their shapes, the checked window and the output / tap iterator names. ``blocked``:
    the tensors are ``[N, C/b, spatial..., b]`` (:mod:`polyonnx.krnl.lower.blocked`)."""
    x, y = node.input(0), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    if len(xs) < 3 + blocked:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): X {xs} must be [N, C, spatial...]")
    rank = len(xs) - 2 - blocked
    kernel = ints_attr(node, "kernel_shape", rank, None)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    in_spatial, out_spatial = xs[2 : 2 + rank], ys[2 : 2 + rank]
    win = window(node, ctx, in_spatial, kernel, ceil_mode=ceil_mode, dilations_attr=dilations)
    check_out_spatial(node, win, in_spatial, out_spatial, ceil_mode)
    names = spatial_names(rank)
    return x, y, xs, ys, win, [f"o{s}" for s in names], [f"k{s}" for s in names]


def aff_expr(a: Aff) -> ir.Expr:
    """An affine expression as an int64 scalar expression (for values computed from indices)."""
    out: ir.Expr = ir.Const(a.const, "int64")
    for name, c in a.terms:
        term: ir.Expr = ir.Iter(name)
        out = out + (term if c == 1 else term * ir.Const(c, "int64"))
    return out


@register("MaxPool")
def lower_max_pool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """MaxPool: init to the lowest value, then max over the valid taps of the window.

    With the Indices output, a statement before the max records the flat index
    (``storage_order`` 0: row-major, 1: column-major over the spatial axes) of a tap that is
    strictly larger than the running max, so the first maximum wins.
    """
    indices = node.outputs[1] if len(node.outputs) > 1 else ""
    dtype = ctx.dtype(node.input(0))
    if dtype not in ir.FLOAT_DTYPES + ("int8", "uint8"):
        raise unsupported(node, ctx, f"dtype {dtype}")
    x, y, xs, ys, win, o_names, k_names = _pool_setup(node, ctx, dilations=opset(ctx) >= 10)
    rank = len(xs) - 2
    guards = tuple(
        g
        for k in range(rank)
        for g in win.guards(k, o_names[k], k_names[k], ys[2 + k], 0, xs[2 + k])
    )
    out = ir.Access(y, (var("n"), var("c"), *(var(o) for o in o_names)))
    init = ir.Stmt("S", out, lowest(dtype))
    positions = [win.position(k, o_names[k], k_names[k]) for k in range(rank)]
    tap = load(ctx, x, (var("n"), var("c"), *positions))
    current = ir.Load(y, out.index, dtype)
    update = ir.Stmt("S", out, ir.maximum(current, tap), guards)
    body: tuple[ir.Node, ...] = (init, *nest(pairs(k_names, win.kernel), (update,)))
    if indices:
        order = int(node.attr("storage_order", 0))
        if order not in (0, 1):
            raise bad_attr(node, "storage_order", f"must be 0 or 1, got {order}")
        spatial = xs[2:]
        flat = Aff.lift(0)
        stride = 1
        axes = range(rank - 1, -1, -1) if order == 0 else range(rank)
        for k in axes:
            flat = flat + positions[k] * stride
            stride *= spatial[k]
        flat = flat + (var("n") * xs[1] + var("c")) * math.prod(spatial)
        i_out = ir.Access(indices, out.index)
        record = ir.Stmt(
            "S",
            i_out,
            ir.Select(
                ir.Binary("gt", tap, current), aff_expr(flat), ir.Load(indices, out.index, "int64")
            ),
            guards,
        )
        body = (
            init,
            ir.Stmt("S", i_out, ir.Const(0, "int64")),
            *nest(pairs(k_names, win.kernel), (record, update)),
        )
    return nest([("n", xs[0]), ("c", xs[1]), *pairs(o_names, ys[2:])], body)


@register("LpPool")
def lower_lp_pool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """LpPool: ``(sum over valid taps of |x|^p) ^ (1/p)``; padding contributes zeros."""
    dtype = require_float(node, ctx, node.input(0))
    x, y, xs, ys, win, o_names, k_names = _pool_setup(node, ctx, dilations=opset(ctx) >= 18)
    rank = len(xs) - 2
    p = float(node.attr("p", 2))
    guards = tuple(
        g
        for k in range(rank)
        for g in win.guards(k, o_names[k], k_names[k], ys[2 + k], 0, xs[2 + k])
    )
    out = ir.Access(y, (var("n"), var("c"), *(var(o) for o in o_names)))
    out_load = ir.Load(y, out.index, dtype)
    tap = load(
        ctx,
        x,
        (var("n"), var("c"), *(win.position(k, o_names[k], k_names[k]) for k in range(rank))),
    )
    return nest(
        [("n", xs[0]), ("c", xs[1]), *pairs(o_names, ys[2:])],
        (
            ir.Stmt("S", out, zero(dtype)),
            *nest(
                pairs(k_names, win.kernel),
                (ir.Stmt("S", out, out_load + _abs_pow(tap, p), guards),),
            ),
            ir.Stmt("S", out, _root(out_load, p)),
        ),
    )


def _abs_pow(x: ir.Expr, p: float) -> ir.Expr:
    if p == 1.0:
        return ir.unary("abs", x)
    if p == 2.0:
        return x * x
    return ir.binary("pow", ir.unary("abs", x), p)


def _root(x: ir.Expr, p: float) -> ir.Expr:
    if p == 1.0:
        return x
    if p == 2.0:
        return ir.unary("sqrt", x)
    return ir.binary("pow", x, 1.0 / p)


@register("AveragePool")
def lower_average_pool(node: Node, ctx: LowerContext) -> Lowered:
    """AveragePool: sum the valid taps, divide by a constant or by the counted taps."""
    return average_pool(node, ctx, blocked=False)


def average_pool(node: Node, ctx: LowerContext, *, blocked: bool) -> Lowered:
    """AveragePool on ``[N, C, spatial...]`` tensors, or with ``blocked`` on channel-blocked
    ``[N, C/b, spatial..., b]`` ones, the block of channels the innermost loop."""
    dtype = require_float(node, ctx, node.input(0))
    setup = _pool_setup(node, ctx, dilations=opset(ctx) >= 19, blocked=blocked)
    x, y, xs, ys, win, o_names, k_names = setup
    rank = len(o_names)
    include_pad = bool(node.attr("count_include_pad", 0))
    in_spatial, out_spatial = xs[2 : 2 + rank], ys[2 : 2 + rank]
    lanes = (("c", xs[-1]),) if blocked else ()  # (the block of channels)

    def at(spatial: Sequence[Aff]) -> tuple[Aff, ...]:
        channel = (var("cb"),) if blocked else (var("c"),)
        return (var("n"), *channel, *spatial, *(var("c") for _ in lanes))

    def counted_range(k: int) -> tuple[int, int]:
        # Taps in the padding count towards the divisor only with count_include_pad, and even
        # then not past the end padding (a ceil_mode window can reach beyond it).
        if include_pad:
            return -win.pads_begin[k], in_spatial[k] + win.pads_end[k]
        return 0, in_spatial[k]

    def taps(k: int, o: int) -> int:
        lo, hi = counted_range(k)
        return sum(
            lo <= o * win.strides[k] + t * win.dilations[k] - win.pads_begin[k] < hi
            for t in range(win.kernel[k])
        )

    read_guards = tuple(
        g
        for k in range(rank)
        for g in win.guards(k, o_names[k], k_names[k], out_spatial[k], 0, in_spatial[k])
    )
    # The sum goes to a temp and the division to the output: a reduction nest and its finish,
    # which the krnl passes make a register-tiled reduction with a fused epilogue.
    point = at([var(o) for o in o_names])
    total = ir.Buffer(f"{node.name}__sum", dtype, ys)
    total_at, total_load = ir.Access(total.name, point), ir.Load(total.name, point, dtype)
    tap = load(ctx, x, at([win.position(k, o_names[k], k_names[k]) for k in range(rank)]))
    init = ir.Stmt("S", total_at, zero(dtype))
    update = ir.Stmt("S", total_at, total_load + tap, read_guards)

    counts = [{taps(k, o) for o in range(out_spatial[k])} for k in range(rank)]
    nests: tuple[ir.Node, ...] = ()
    temps: tuple[ir.Buffer, ...] = (total,)
    if all(len(c) == 1 for c in counts):
        divisor: ir.Expr = ir.Const(float(math.prod(next(iter(c)) for c in counts)), dtype)
    else:
        count = ir.Buffer(f"{node.name}__count", dtype, tuple(out_spatial))
        count_at = ir.Access(count.name, tuple(var(o) for o in o_names))
        count_guards = tuple(
            g
            for k in range(rank)
            for g in win.guards(k, o_names[k], k_names[k], out_spatial[k], *counted_range(k))
        )
        count_nest = nest(
            pairs(o_names, out_spatial),
            (
                ir.Stmt("S", count_at, zero(dtype)),
                *nest(
                    pairs(k_names, win.kernel),
                    (
                        ir.Stmt(
                            "S",
                            count_at,
                            ir.Load(count.name, count_at.index, dtype) + 1.0,
                            count_guards,
                        ),
                    ),
                ),
            ),
        )
        nests, temps = count_nest, (count, total)
        divisor = ir.Load(count.name, count_at.index, dtype)
    finish = ir.Stmt("S", ir.Access(y, point), total_load / divisor)
    channels = ("cb" if blocked else "c", xs[1])
    main = nest(
        [("n", xs[0]), channels, *pairs(o_names, out_spatial), *lanes],
        (init, *nest(pairs(k_names, win.kernel), (update,)), finish),
    )
    return Lowered(nests + main, temps)


def _global_pool(
    node: Node, ctx: LowerContext, is_max: bool, lp: float | None = None
) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs = ctx.shape(x)
    if len(xs) < 3:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): X {xs} must be [N, C, spatial...]")
    spatial = xs[2:]
    r_iters = [(f"r{k}", d) for k, d in enumerate(spatial)]
    out = ir.Access(y, (var("n"), var("c"), *(0,) * len(spatial)))
    out_load = ir.Load(y, out.index, dtype)
    tap = load(ctx, x, (var("n"), var("c"), *(var(r) for r, _ in r_iters)))
    if lp is not None:
        body: tuple[ir.Node, ...] = (
            ir.Stmt("S", out, zero(dtype)),
            *nest(r_iters, (ir.Stmt("S", out, out_load + _abs_pow(tap, lp)),)),
            ir.Stmt("S", out, _root(out_load, lp)),
        )
    elif is_max:
        body = (
            ir.Stmt("S", out, lowest(dtype)),
            *nest(r_iters, (ir.Stmt("S", out, ir.maximum(out_load, tap)),)),
        )
    else:
        body = (
            ir.Stmt("S", out, zero(dtype)),
            *nest(r_iters, (ir.Stmt("S", out, out_load + tap),)),
            ir.Stmt("S", out, out_load / float(math.prod(spatial))),
        )
    return nest([("n", xs[0]), ("c", xs[1])], body)


@register("GlobalMaxPool")
def lower_global_max_pool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """GlobalMaxPool: max over all spatial positions (reduction iterators ``r0..``)."""
    return _global_pool(node, ctx, is_max=True)


@register("GlobalAveragePool")
def lower_global_average_pool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """GlobalAveragePool: sum over all spatial positions, then divide by their number."""
    return _global_pool(node, ctx, is_max=False)


@register("GlobalLpPool")
def lower_global_lp_pool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """GlobalLpPool: the p-norm over all spatial positions."""
    return _global_pool(node, ctx, is_max=False, lp=float(node.attr("p", 2)))


@register("MaxUnpool", since=9)
def lower_max_unpool(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """MaxUnpool: ``Y`` zero, then each ``X[k]`` written at the flat position ``I[k]`` of
    ``Y`` (row-major over all of ``Y``, batch and channel included, as MaxPool's Indices count
    them over its input).

    ``Y`` has the unpooled shape ``[N, C, (P-1)*stride - pads + kernel...]``, or the
    ``output_shape`` given as a constant (a run-time one is refused when the model is
    imported), the indices then counting over it as onnxruntime counts them (onnx.reference
    counts them over the unpooled shape and pads that to ``output_shape``). MaxPool's
    Indices point into the window of ``X[k]``'s own pooling, and krnl writes are affine, so
    each element visits the taps of its window and writes where the index says::

        for n, c, oh, ow:
          S: Y[n, c, oh, ow] = 0
        for n, c, ph, pw, kh, kw:                       (taps inside Y only)
          S: Y[n, c, ih, iw] = I[n, c, ph, pw] == flat(n, c, ih, iw)
                               ? X[n', c, ph, pw] : Y[n, c, ih, iw]

    with ``ih = ph*stride - pad + kh``. The element read is the index checked: ``n'`` is
    ``n`` when ``I[n, c, ph, pw]`` is a position of its window and -1 otherwise, so an
    index outside its window (negative, past the end of Y, or anywhere MaxPool could not
    have put it) fails the run-time range check of that load, and the run raises instead
    of writing anywhere. Overlapping windows (stride < kernel) visit the elements in
    ``X``'s order, so the last one written to a position wins, as in the reference. Cost:
    ``|X| * prod(kernel)`` statements.
    """
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    dtype = ctx.dtype(x)
    xs, ys = ctx.shape(x), ctx.shape(y)
    kernel, strides, pads = _unpool_window(node, ctx)
    rank = len(kernel)
    names = spatial_names(rank)
    p_names, k_names = [f"p{s}" for s in names], [f"k{s}" for s in names]
    starts = [var(p_names[k]) * strides[k] - pads[k] for k in range(rank)]
    positions = [starts[k] + var(k_names[k]) for k in range(rank)]
    guards = tuple(
        g
        for k in range(rank)
        for g in bound_guards(
            positions[k],
            -pads[k],
            (xs[2 + k] - 1) * strides[k] - pads[k] + kernel[k] - 1,
            0,
            ys[2 + k],
        )
    )
    sizes = [math.prod(ys[d + 1 :]) for d in range(len(ys))]  # Y's row-major strides
    flat = sum((a * sizes[d] for d, a in enumerate((var("n"), var("c"), *positions))), Aff.lift(0))
    p_index = (var("n"), var("c"), *(var(p) for p in p_names))
    at = ir.Load(idx, p_index, ctx.dtype(idx))
    i = at if at.dtype == "int64" else ir.Cast(at, "int64")
    ok = _in_window(i, ys, starts, kernel)
    batch = ir.Select(ok, ir.Iter("n"), ir.Const(-1, "int64"))
    value = ir.Load(x, (batch, *p_index[1:]), dtype)
    out = ir.Access(y, (var("n"), var("c"), *positions))
    old = ir.Load(y, out.index, dtype)
    scatter = ir.Stmt("S", out, ir.Select(ir.Binary("eq", i, aff_expr(flat)), value, old), guards)
    o_iters = [("n", ys[0]), ("c", ys[1]), *pairs([f"o{s}" for s in names], ys[2:])]
    fill = ir.Stmt("S", ir.Access(y, tuple(var(n) for n, _ in o_iters)), zero(dtype))
    return nest(o_iters, (fill,)) + nest(
        [("n", xs[0]), ("c", xs[1]), *pairs(p_names, xs[2:]), *pairs(k_names, kernel)],
        (scatter,),
    )


def _unpool_window(
    node: Node, ctx: LowerContext
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """MaxUnpool's kernel, strides and pads, checked with the shapes: the output is the
    unpooled shape or the constant ``output_shape``, and every window has a position in it
    (so that every index is checked)."""
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    if ctx.dtype(idx) not in ("int32", "int64"):
        raise unsupported(node, ctx, f"indices {idx!r} of dtype {ctx.dtype(idx)}")
    if len(xs) < 3 or ctx.shape(idx) != xs:
        raise ShapeError(
            f"node {node.name!r} (MaxUnpool): X {list(xs)} must be [N, C, spatial...] and "
            f"I {list(ctx.shape(idx))} of its shape"
        )
    rank = len(xs) - 2
    kernel = ints_attr(node, "kernel_shape", rank, None)
    strides = ints_attr(node, "strides", rank, 1)
    pads = ints_attr(node, "pads", 2 * rank, 0)
    if any(v < 1 for v in (*kernel, *strides)):
        raise bad_attr(node, "kernel_shape", f"and strides must be positive: {kernel}, {strides}")
    if any(not 0 <= p < kernel[k % rank] for k, p in enumerate(pads)):
        raise bad_attr(node, "pads", f"must be in [0, kernel) per axis, got {list(pads)}")
    unpooled = (
        *xs[:2],
        *((xs[2 + k] - 1) * strides[k] - pads[k] - pads[rank + k] + kernel[k] for k in range(rank)),
    )
    shape_in = node.input(2) if len(node.inputs) > 2 else ""
    if not shape_in:
        expected = unpooled
    elif (given := ctx.constant(shape_in)) is None:
        raise unsupported(node, ctx, f"output_shape {shape_in!r} computed at run time")
    else:
        expected = tuple(int(d) for d in given.reshape(-1))
    if ys != expected or ys[:2] != xs[:2]:
        raise ShapeError(
            f"node {node.name!r} (MaxUnpool): output {list(ys)} is not "
            f"{'output_shape' if shape_in else 'the unpooled shape'} {list(expected)} of X "
            f"{list(xs)}"
        )
    if any((xs[2 + k] - 1) * strides[k] - pads[k] >= ys[2 + k] for k in range(rank)):
        raise ShapeError(
            f"node {node.name!r} (MaxUnpool): output {list(ys)} is too small for X "
            f"{list(xs)}: a window lies past its end"
        )
    return kernel, strides, pads


def _in_window(
    i: ir.Expr, shape: Sequence[int], starts: Sequence[Aff], kernel: Sequence[int]
) -> ir.Expr:
    """Whether flat index ``i`` (int64) over ``shape`` is a position of the window at ``n,
    c`` that starts at ``starts`` (affine in the element's iterators)."""
    i64 = "int64"
    sizes = [math.prod(shape[d + 1 :]) for d in range(len(shape))]

    def coordinate(d: int) -> ir.Expr:
        q = ir.Binary("div", i, ir.Const(sizes[d], i64)) if sizes[d] > 1 else i
        return q if d == 0 else ir.Binary("mod", q, ir.Const(shape[d], i64))

    ok: ir.Expr = ir.Binary("ge", i, ir.Const(0, i64))
    checks = [
        ir.Binary("eq", coordinate(0), ir.Iter("n")),
        ir.Binary("eq", coordinate(1), ir.Iter("c")),
    ]
    for k, start in enumerate(starts):
        tap = coordinate(2 + k) - aff_expr(start)
        checks += [
            ir.Binary("ge", tap, ir.Const(0, i64)),
            ir.Binary("lt", tap, ir.Const(kernel[k], i64)),
        ]
    for c in checks:
        ok = ir.Binary("and", ok, c)
    return ok
