"""Reductions: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare}, ArgMax/ArgMin,
Hardmax and CumSum.

A reduction keeps a running value per output element in a temp accumulator ``<node>__acc``
(float32 for float16 data, the data type otherwise): initialise, fold every reduced element in,
then finish (divide for Mean, sqrt for L2, log for LogSum...) into the output. Kept axes are
iterated by ``i<d>``, reduced axes by ``r<d>``; with ``keepdims`` the output index is 0 on the
reduced axes::

    for i0:
      S: acc[i0] = 0.0
      for r1:
        S: acc[i0] = (acc[i0] + X[i0, r1])
      S: Y[i0, 0] = acc[i0]

ReduceLogSumExp subtracts the running maximum first (a second temp), as Softmax does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.graph.shapes import REDUCTIONS
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    highest,
    lowest,
    nest,
    normalize_axis,
    opset,
    unsupported,
    var,
)
from polyonnx.krnl.lower.elementwise import ALL, FLOATS, INTS, NUMERIC, check_dtype, const
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

Aff = ir.Aff


def reduce_axes(node: Node, ctx: LowerContext, rank: int, axes_input: bool) -> list[int] | None:
    """The reduced axes, sorted; None for "no axes given" (all, or none with noop)."""
    if axes_input:
        name = node.input(1)
        if not name:
            return None
        value = ctx.constant(name)
        if value is None:
            raise unsupported(
                node, ctx, f"axes input {name!r} is computed at run time; it must be a constant"
            )
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
        if not axes:
            return None
    else:
        attr = node.attr("axes")
        if attr is None:
            return None
        axes = [int(a) for a in (attr if isinstance(attr, Sequence) else (attr,))]
    return sorted({normalize_axis(node, a, rank, "axes") for a in axes})


# name -> (allowed dtypes, init(acc dtype), fold(acc, x), finish(acc, count))
Fold = Callable[[ir.Expr, ir.Expr], ir.Expr]
Finish = Callable[[ir.Expr, int], ir.Expr]


def _cast(x: ir.Expr, dtype: str) -> ir.Expr:
    return x if x.dtype == dtype else ir.Cast(x, dtype)


_REDUCTIONS: dict[str, tuple[tuple[str, ...], Callable[[str], ir.Const], Fold, Finish | None]] = {
    "ReduceSum": (NUMERIC, lambda t: const(0, ir.Const(0, t)), lambda a, x: a + x, None),
    "ReduceSumSquare": (NUMERIC, lambda t: const(0, ir.Const(0, t)), lambda a, x: a + x * x, None),
    "ReduceL1": (
        NUMERIC,
        lambda t: const(0, ir.Const(0, t)),
        lambda a, x: a + (x if x.dtype.startswith("uint") else ir.unary("abs", x)),
        None,
    ),
    "ReduceL2": (
        NUMERIC,
        lambda t: const(0, ir.Const(0, t)),
        lambda a, x: a + x * x,
        lambda a, n: (
            ir.unary("sqrt", a)
            if a.dtype in FLOATS
            else _cast(ir.unary("sqrt", ir.Cast(a, "float64")), a.dtype)
        ),
    ),
    "ReduceLogSum": (
        FLOATS,
        lambda t: ir.Const(0.0, t),
        lambda a, x: a + x,
        lambda a, n: ir.unary("log", a),
    ),
    "ReduceMean": (
        NUMERIC,
        lambda t: const(0, ir.Const(0, t)),
        lambda a, x: a + x,
        lambda a, n: a / const(max(n, 0), a) if a.dtype in FLOATS or n else a,
    ),
    "ReduceProd": (NUMERIC, lambda t: const(1, ir.Const(0, t)), lambda a, x: a * x, None),
    "ReduceMax": (
        ALL,
        lowest,
        lambda a, x: ir.binary("or", a, x) if a.dtype == "bool" else ir.maximum(a, x),
        None,
    ),
    "ReduceMin": (
        ALL,
        highest,
        lambda a, x: ir.binary("and", a, x) if a.dtype == "bool" else ir.minimum(a, x),
        None,
    ),
    "ReduceLogSumExp": (FLOATS, lambda t: ir.Const(0.0, t), lambda a, x: a, None),
}

#: Opset from which each reduction takes its axes as an input rather than an attribute.
_AXES_INPUT_SINCE = dict.fromkeys(REDUCTIONS, 18) | {"ReduceSum": 13}


def _iter_names(rank: int, reduced: Sequence[int]) -> list[str]:
    return [f"r{d}" if d in reduced else f"i{d}" for d in range(rank)]


def _lower_reduce(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...] | Lowered:
    op = node.op_type
    dtypes, init, fold, finish = _REDUCTIONS[op]
    x, y = node.input(0), node.outputs[0]
    dtype = check_dtype(node, ctx, x, dtypes)
    shape = ctx.shape(x)
    rank = len(shape)
    axes = reduce_axes(node, ctx, rank, opset(ctx) >= _AXES_INPUT_SINCE[op])
    keepdims = int(node.attr("keepdims", 1))
    if axes is None:
        axes = [] if int(node.attr("noop_with_empty_axes", 0)) else list(range(rank))
    names = _iter_names(rank, axes)
    kept = [d for d in range(rank) if d not in axes]
    out_index = tuple(
        Aff.lift(0) if d in axes else var(names[d])
        for d in range(rank)
        if keepdims or d not in axes
    )
    if len(out_index) != len(ctx.shape(y)):
        raise unsupported(
            node, ctx, f"output rank {len(ctx.shape(y))} does not match keepdims={keepdims}"
        )
    in_index = tuple(var(n) for n in names)
    count = int(np.prod([shape[d] for d in axes], dtype=np.int64))
    acc_dtype = "float32" if dtype == "float16" else dtype
    acc_shape = tuple(shape[d] for d in kept)
    acc_index = tuple(var(names[d]) for d in kept)
    acc = ir.Buffer(f"{node.name}__acc", acc_dtype, acc_shape)
    acc_at, acc_load = ir.Access(acc.name, acc_index), ir.Load(acc.name, acc_index, acc_dtype)
    xv = _cast(ir.Load(x, in_index, dtype), acc_dtype)
    r_iters = [(names[d], shape[d]) for d in axes]
    temps = [acc]
    if op == "ReduceLogSumExp":
        mx = ir.Buffer(f"{node.name}__max", acc_dtype, acc_shape)
        mx_at, mx_load = ir.Access(mx.name, acc_index), ir.Load(mx.name, acc_index, acc_dtype)
        # An all -inf (or empty) slice keeps shift 0, so the result is log(0) = -inf, not NaN.
        shift = ir.Select(ir.unary("isinf", mx_load), ir.Const(0.0, acc_dtype), mx_load)
        body: tuple[ir.Node, ...] = (
            ir.Stmt("S", mx_at, lowest(acc_dtype)),
            *nest(r_iters, (ir.Stmt("S", mx_at, ir.maximum(mx_load, xv)),)),
            ir.Stmt("S", acc_at, ir.Const(0.0, acc_dtype)),
            *nest(r_iters, (ir.Stmt("S", acc_at, acc_load + ir.unary("exp", xv - shift)),)),
        )
        result: ir.Expr = ir.unary("log", acc_load) + shift
        temps.append(mx)
    else:
        body = (
            ir.Stmt("S", acc_at, init(acc_dtype)),
            *nest(r_iters, (ir.Stmt("S", acc_at, fold(acc_load, xv)),)),
        )
        result = finish(acc_load, count) if finish else acc_load
    body += (ir.Stmt("S", ir.Access(y, out_index), _cast(result, dtype)),)
    return Lowered(nest([(names[d], shape[d]) for d in kept], body), tuple(temps))


for _op in REDUCTIONS:
    register(_op)(_lower_reduce)


# --------------------------------------------------------------------------- ArgMax / ArgMin


def _arg_best(
    node: Node,
    ctx: LowerContext,
    x: str,
    axis: int,
    names: list[str],
    idx_at: ir.Access,
    idx_load: ir.Expr,
    greater: bool,
) -> tuple[tuple[ir.Node, ...], ir.Buffer]:
    """Statements leaving the index of the best element along ``axis`` in ``idx_at``
    (to be placed inside the loops of the other axes)."""
    shape = ctx.shape(x)
    dtype = ctx.dtype(x)
    last = int(node.attr("select_last_index", 0))
    kept = [d for d in range(len(shape)) if d != axis]
    best = ir.Buffer(f"{node.name}__best", dtype, tuple(shape[d] for d in kept))
    b_index = tuple(var(names[d]) for d in kept)
    b_at, b_load = ir.Access(best.name, b_index), ir.Load(best.name, b_index, dtype)
    r = names[axis]
    first = tuple(Aff.lift(0) if d == axis else var(names[d]) for d in range(len(shape)))
    xv = ir.Load(x, tuple(var(n) for n in names), dtype)
    cmp = ("ge" if last else "gt") if greater else ("le" if last else "lt")
    better = ir.binary(cmp, xv, b_load)
    body = (
        ir.Stmt("S", b_at, ir.Load(x, first, dtype)),
        ir.Stmt("S", idx_at, ir.Const(0, "int64")),
        ir.Loop(
            r,
            1,
            shape[axis],
            (
                ir.Stmt("S", idx_at, ir.Select(better, ir.Iter(r), idx_load)),
                ir.Stmt("S", b_at, ir.Select(better, xv, b_load)),
            ),
        ),
    )
    return body, best


def _lower_arg(node: Node, ctx: LowerContext) -> Lowered:
    x, y = node.input(0), node.outputs[0]
    check_dtype(node, ctx, x, NUMERIC)
    shape = ctx.shape(x)
    rank = len(shape)
    axis = normalize_axis(node, int(node.attr("axis", 0)), rank)
    if shape[axis] == 0:
        raise unsupported(node, ctx, f"an empty axis {axis}")
    keepdims = int(node.attr("keepdims", 1))
    names = _iter_names(rank, [axis])
    kept = [d for d in range(rank) if d != axis]
    out_index = tuple(
        Aff.lift(0) if d == axis else var(names[d]) for d in range(rank) if keepdims or d != axis
    )
    idx_at = ir.Access(y, out_index)
    idx_load = ir.Load(y, out_index, "int64")
    body, best = _arg_best(node, ctx, x, axis, names, idx_at, idx_load, node.op_type == "ArgMax")
    return Lowered(nest([(names[d], shape[d]) for d in kept], body), (best,))


register("ArgMax")(_lower_arg)
register("ArgMin")(_lower_arg)


@register("Hardmax")
def lower_hardmax(node: Node, ctx: LowerContext) -> Lowered:
    """Hardmax: 1 at the first maximum along ``axis``, 0 elsewhere (opset 13 semantics)."""
    x, y = node.input(0), node.outputs[0]
    dtype = check_dtype(node, ctx, x, FLOATS)
    shape = ctx.shape(x)
    rank = len(shape)
    if opset(ctx) < 13:
        raise unsupported(node, ctx, "the opset < 13 form (input coerced to 2-D)")
    axis = normalize_axis(node, int(node.attr("axis", -1)), rank)
    names = _iter_names(rank, [axis])
    kept = [d for d in range(rank) if d != axis]
    arg = ir.Buffer(f"{node.name}__arg", "int64", tuple(shape[d] for d in kept))
    a_index = tuple(var(names[d]) for d in kept)
    a_at, a_load = ir.Access(arg.name, a_index), ir.Load(arg.name, a_index, "int64")
    body, best = _arg_best(node, ctx, x, axis, names, a_at, a_load, True)
    r = names[axis]
    write = ir.Stmt(
        "S",
        ir.Access(y, tuple(var(n) for n in names)),
        ir.Select(ir.binary("eq", ir.Iter(r), a_load), ir.Const(1.0, dtype), ir.Const(0.0, dtype)),
    )
    return Lowered(
        nest([(names[d], shape[d]) for d in kept], body + nest([(r, shape[axis])], (write,))),
        (best, arg),
    )


# --------------------------------------------------------------------------- CumSum


def _lower_cumulative(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """CumSum / CumProd: a running sum (product) along ``axis`` (a constant input), with
    ``exclusive`` / ``reverse``.

    Each element combines its input with its predecessor's result along the axis (in the
    direction of the scan), so the scan is one sequential loop: ``y[p] = y[p-1] + x[p]``.
    """
    x, axis_in, y = node.input(0), node.input(1), node.outputs[0]
    dtype = check_dtype(node, ctx, x, FLOATS + INTS)
    shape = ctx.shape(x)
    rank = len(shape)
    value = ctx.constant(axis_in)
    if value is None:
        raise unsupported(
            node, ctx, f"axis input {axis_in!r} is computed at run time; it must be a constant"
        )
    axis = normalize_axis(node, int(np.asarray(value).reshape(-1)[0]), rank)
    exclusive, reverse = int(node.attr("exclusive", 0)), int(node.attr("reverse", 0))
    n = shape[axis]
    names = [f"i{d}" for d in range(rank)]
    k = var(names[axis])
    # Position of scan step k, and of the step before it.
    pos = (n - 1) - k if reverse else k
    prev = pos + 1 if reverse else pos - 1

    def at(p: Aff) -> tuple[Aff, ...]:
        return tuple(p if d == axis else var(names[d]) for d in range(rank))

    out = ir.Access(y, at(pos))
    op = "add" if node.op_type == "CumSum" else "mul"
    src = at(prev) if exclusive else at(pos)
    step = ir.binary(op, ir.Load(y, at(prev), dtype), ir.Load(x, src, dtype))
    head = (
        const(0 if op == "add" else 1, ir.Const(0, dtype))
        if exclusive
        else ir.Load(x, at(pos), dtype)
    )
    body = (
        ir.Stmt("S", out, head, (ir.Cond(k, eq=True),)),
        ir.Stmt("S", out, step, (ir.ge(k, 1),)),
    )
    # The scanned axis is innermost so each step follows its predecessor directly.
    order = [d for d in range(rank) if d != axis] + [axis]
    return nest([(names[d], shape[d]) for d in order], body)


register("CumSum")(_lower_cumulative)
register("CumProd")(_lower_cumulative)
