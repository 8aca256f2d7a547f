"""Normalisations: BatchNormalization (inference and training mode), LRN, Softmax and LogSoftmax.

Softmax keeps a running max and sum per row in temp buffers ``<node>__max`` / ``<node>__sum``
(shape: the input shape without the reduced axes)::

    for i0:
      S: M[i0] = -inf
      for r0:
        S: M[i0] = max(M[i0], X[i0, r0])
      S: Z[i0] = 0.0
      for r0:
        S: Y[i0, r0] = exp((X[i0, r0] - M[i0]))
        S: Z[i0] = (Z[i0] + Y[i0, r0])
      for r0:
        S: Y[i0, r0] = (Y[i0, r0] / Z[i0])
"""

from __future__ import annotations

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    bad_attr,
    bound_guards,
    load,
    lowest,
    nest,
    normalize_axis,
    opset,
    pairs,
    require_float,
    spatial_names,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.encoding import encode, round_bfloat16, widen
from polyonnx.krnl.lower.normalization import moments
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


def _channel_iters(node: Node, shape: tuple[int, ...]) -> list[tuple[str, int]]:
    """``n, c`` and then ``h, w`` (``d, h, w`` ...) over an ``[N, C, spatial...]`` tensor."""
    if len(shape) < 2:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): input {shape} must be [N, C, ...]")
    return [("n", shape[0]), ("c", shape[1]), *pairs(spatial_names(len(shape) - 2), shape[2:])]


@register("BatchNormalization")
def lower_batch_norm(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...] | Lowered:
    """``Y = (X - mean[c]) * (scale[c] / sqrt(var[c] + epsilon)) + B[c]`` (inference mode);
    with ``spatial=0`` (before opset 9) the statistics are per activation, indexed by every
    axis but the batch's. Training mode (``training_mode=1``, opset 14 on): see
    :func:`_batch_norm_training`."""
    x, scale, bias, mean, variance = node.inputs[:5]
    dtype = require_float(node, ctx, x)
    if int(node.attr("training_mode", 0)) and opset(ctx) >= 14:
        return _batch_norm_training(node, ctx)
    if any(node.outputs[1:]):  # (opset 7 and 9's statistics outputs)
        raise unsupported(
            node, ctx, "training mode before opset 14 (training_mode=1 of opset 14 on is lowered)"
        )
    iters = _channel_iters(node, ctx.shape(x))
    index = tuple(var(n) for n, _ in iters)
    c = index[1:] if not int(node.attr("spatial", 1)) else (var("c"),)
    epsilon = float(node.attr("epsilon", 1e-5))
    inv_std = load(ctx, scale, c) / ir.unary("sqrt", load(ctx, variance, c) + epsilon)
    value = (load(ctx, x, index) - load(ctx, mean, c)) * inv_std + load(ctx, bias, c)
    if value.dtype != dtype:
        raise unsupported(node, ctx, "statistics with a dtype other than X's")
    return nest(iters, (ir.Stmt("S", ir.Access(node.outputs[0], index), value),))


def _batch_norm_training(node: Node, ctx: LowerContext) -> Lowered:
    """BatchNormalization in training mode, as ``onnx.reference`` computes it: the batch's
    mean and (population, biased) variance per channel over the batch and spatial axes
    normalise X, and the optional outputs are the running statistics
    ``input_mean * momentum + batch_mean * (1 - momentum)`` (the same for the variance)::

        for c:
          S: mean[c] = 0.0
          for n, h, w:
            S: mean[c] = (mean[c] + X[n, c, h, w])
          ...                                  (var[c]: the mean of (X - mean[c])^2)
          S: running_mean[c] = ((input_mean[c] * 0.9) + (mean[c] * 0.1))
          S: running_var[c] = ((input_var[c] * 0.9) + (var[c] * 0.1))
          S: var[c] = (1.0 / sqrt((var[c] + 1e-05)))
          for n, h, w:
            S: Y[n, c, h, w] = ((((X[n, c, h, w] - mean[c]) * var[c]) * scale[c]) + B[c])

    Statistics are computed in float32 for a float16 X (numpy's mean and var accumulate
    float16 in float32) and in X's type otherwise."""
    x, scale, bias, mean, variance = node.inputs[:5]
    y = node.outputs[0]
    dtype = ctx.dtype(x)
    xs = ctx.shape(x)
    iters = _channel_iters(node, xs)
    cdt = "float32" if dtype == "float16" else dtype
    # (The defaults float32, as an attribute given is.)
    epsilon = float(node.attr("epsilon", np.float32(1e-5)))
    momentum = float(node.attr("momentum", np.float32(0.9)))
    reduced = [iters[0], *iters[2:]]
    index = tuple(var(n) for n, _ in iters)
    xv = ir.Load(x, index, dtype)
    c = (var("c"),)

    def cast(e: ir.Expr, to: str) -> ir.Expr:
        return e if e.dtype == to else ir.Cast(e, to)

    def param(name: str) -> ir.Expr:
        return cast(load(ctx, name, c), cdt)

    def finish(m: ir.Load, v: ir.Load) -> tuple[ir.Node, ...]:
        stmts: list[ir.Node] = []
        for out, given, batch in zip(node.outputs[1:3], (mean, variance), (m, v), strict=False):
            if out:
                running = param(given) * momentum + batch * (1.0 - momentum)
                stmts.append(ir.Stmt("S", ir.Access(out, c), cast(running, ctx.dtype(out))))
        inv_std = ir.Stmt(
            "S",
            ir.Access(v.buffer, c),
            ir.Const(1.0, cdt) / ir.unary("sqrt", v + epsilon),
        )
        value = (cast(xv, cdt) - m) * v * param(scale) + param(bias)
        normalised = nest(reduced, (ir.Stmt("S", ir.Access(y, index), cast(value, dtype)),))
        return (*stmts, inv_std, *normalised)

    return moments(node, xv, [iters[1]], reduced, cdt, finish=finish)


@register("LRN")
def lower_lrn(node: Node, ctx: LowerContext) -> Lowered:
    """``Y = X / (bias + alpha/size * sum of X^2 over nearby channels) ^ beta``.

    The sum is a reduction over ``r0`` into a temp (the window ``c + r0 - (size-1)//2``
    guarded to the valid channels), the finish a point-wise nest after it: the shape the
    scheduler vectorises along the pixels. With a positive base (``bias > 0``, ``alpha >=
    0``) the power is ``exp(-beta * log(base))`` in vector math, not a libm call per element.
    """
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    size = node.attr("size")
    if size is None or int(size) < 1:
        raise bad_attr(node, "size", f"must be a positive integer, got {size!r}")
    size = int(size)
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    shape = ctx.shape(x)
    iters = _channel_iters(node, shape)
    index = tuple(var(n) for n, _ in iters)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    channel = var("c") + var("r0") - before
    tap = load(ctx, x, (index[0], channel, *index[2:]))
    squares = f"{node.name}__squares"
    acc = ir.Access(squares, index)
    update = ir.Stmt(
        "S",
        acc,
        ir.Load(squares, index, dtype) + tap * tap,
        bound_guards(channel, -before, shape[1] - 1 + after, 0, shape[1]),
    )
    base = ir.Load(squares, index, dtype) * (alpha / size) + bias
    if bias > 0 and alpha >= 0:
        finish = load(ctx, x, index) * ir.unary("exp", ir.unary("log", base) * -beta)
    else:
        finish = load(ctx, x, index) / ir.binary("pow", base, beta)
    reduction = nest(iters, (ir.Stmt("S", acc, zero(dtype)), *nest([("r0", size)], (update,))))
    return Lowered(
        (*reduction, *nest(iters, (ir.Stmt("S", ir.Access(y, index), finish),))),
        (ir.Buffer(squares, dtype, shape, "temp"),),
    )


def _softmax(node: Node, ctx: LowerContext, log: bool) -> Lowered:
    x, y = node.input(0), node.outputs[0]
    if ctx.dtype(x) == "bfloat16":
        return _softmax_bfloat16(node, ctx, log)
    dtype = require_float(node, ctx, x)
    shape = ctx.shape(x)
    reduced, outer, names = _softmax_axes(node, ctx)
    index = tuple(var(names[d]) for d in range(len(shape)))
    row_shape = tuple(shape[d] for d in outer)
    row = tuple(var(names[d]) for d in outer)
    # float16 as the reference computes it: each op rounded to float16, the sum along the
    # row in float32 (numpy's pairwise sum), and log-softmax as the log of the softmax.
    half = dtype == "float16"
    sum_dtype = "float32" if half else dtype
    mx = ir.Buffer(f"{node.name}__max", dtype, row_shape)
    total = ir.Buffer(f"{node.name}__sum", sum_dtype, row_shape)
    mx_at, total_at = ir.Access(mx.name, row), ir.Access(total.name, row)
    mx_load, total_load = ir.Load(mx.name, row, dtype), ir.Load(total.name, row, sum_dtype)
    x_load = load(ctx, x, index)
    out = ir.Access(y, index)
    out_load = ir.Load(y, index, dtype)
    r_iters = [(names[d], shape[d]) for d in reduced]
    shifted = x_load - mx_load
    finishes: tuple[ir.Node, ...]
    if log and not half:
        accumulate: tuple[ir.Node, ...] = (
            ir.Stmt("S", total_at, total_load + ir.unary("exp", shifted)),
        )
        finishes = (ir.Stmt("S", out, shifted - ir.unary("log", total_load)),)
    else:
        # Y holds exp(x - max) between the two passes, so exp is evaluated once per element.
        summand = ir.Cast(out_load, sum_dtype) if half else out_load
        accumulate = (
            ir.Stmt("S", out, ir.unary("exp", shifted)),
            ir.Stmt("S", total_at, total_load + summand),
        )
        divisor = ir.Cast(total_load, dtype) if half else total_load
        finishes = (ir.Stmt("S", out, out_load / divisor),)
        if log:
            finishes += (ir.Stmt("S", out, ir.unary("log", out_load)),)
    body = (
        ir.Stmt("S", mx_at, lowest(dtype)),
        *nest(r_iters, (ir.Stmt("S", mx_at, ir.maximum(mx_load, x_load)),)),
        ir.Stmt("S", total_at, zero(sum_dtype)),
        *nest(r_iters, accumulate),
        *nest(r_iters, finishes),
    )
    return Lowered(nest([(names[d], shape[d]) for d in outer], body), (mx, total))


def _softmax_axes(node: Node, ctx: LowerContext) -> tuple[list[int], list[int], dict[int, str]]:
    """The reduced axes, the other axes and each axis's iterator name."""
    shape = ctx.shape(node.input(0))
    rank = len(shape)
    if rank == 0:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): input must not be a scalar")
    legacy = opset(ctx) < 13
    axis = normalize_axis(node, int(node.attr("axis", 1 if legacy else -1)), rank)
    # Before opset 13 the input is viewed as 2-D [prod(shape[:axis]), prod(shape[axis:])].
    reduced = list(range(axis, rank)) if legacy else [axis]
    outer = [d for d in range(rank) if d not in reduced]
    return reduced, outer, {d: f"i{d}" for d in outer} | {d: f"r{k}" for k, d in enumerate(reduced)}


def _softmax_bfloat16(node: Node, ctx: LowerContext, log: bool) -> Lowered:
    """bfloat16 Softmax in float32, each step rounded to bfloat16 as ONNX's function body
    rounds its tensors (``x - max``, ``exp``, the sum, the quotient), the sum accumulated in
    float32; LogSoftmax the log of that softmax, as the reference computes it. (numpy sums
    bfloat16 in bfloat16, rounding every partial sum: a row of 4096 keys loses half its mass.
    polyonnx sums in float32, as for float16.)"""
    x, y = node.input(0), node.outputs[0]
    shape = ctx.shape(x)
    reduced, outer, names = _softmax_axes(node, ctx)
    index = tuple(var(names[d]) for d in range(len(shape)))
    row_shape = tuple(shape[d] for d in outer)
    row = tuple(var(names[d]) for d in outer)
    f32 = "float32"
    mx = ir.Buffer(f"{node.name}__max", f32, row_shape)
    total = ir.Buffer(f"{node.name}__sum", f32, row_shape)
    mx_at, total_at = ir.Access(mx.name, row), ir.Access(total.name, row)
    mx_load, total_load = ir.Load(mx.name, row, f32), ir.Load(total.name, row, f32)
    x_load = widen(load(ctx, x, index))
    out = ir.Access(y, index)
    out_load = widen(ir.Load(y, index, "bfloat16"))
    r_iters = [(names[d], shape[d]) for d in reduced]
    # Y holds exp(x - max), rounded, between the two passes.
    exp = ir.unary("exp", round_bfloat16(x_load - mx_load))
    quotient: ir.Expr = out_load / round_bfloat16(total_load)
    if log:
        quotient = ir.unary("log", round_bfloat16(quotient))
    body = (
        ir.Stmt("S", mx_at, lowest(f32)),
        *nest(r_iters, (ir.Stmt("S", mx_at, ir.maximum(mx_load, x_load)),)),
        ir.Stmt("S", total_at, zero(f32)),
        *nest(
            r_iters,
            (
                ir.Stmt("S", out, encode(exp, "bfloat16", saturate=False)),
                ir.Stmt("S", total_at, total_load + out_load),
            ),
        ),
        *nest(r_iters, (ir.Stmt("S", out, encode(quotient, "bfloat16", saturate=False)),)),
    )
    return Lowered(nest([(names[d], shape[d]) for d in outer], body), (mx, total))


@register("Softmax")
def lower_softmax(node: Node, ctx: LowerContext) -> Lowered:
    """Softmax: max-reduce, exp-and-sum, divide."""
    return _softmax(node, ctx, log=False)


@register("LogSoftmax")
def lower_log_softmax(node: Node, ctx: LowerContext) -> Lowered:
    """LogSoftmax: max-reduce, sum of exp, ``x - max - log(sum)``."""
    return _softmax(node, ctx, log=True)
