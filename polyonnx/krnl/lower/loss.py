"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both pick, per sample ``n`` and position ``d...``, the log-probability of the target class
(a run-time computed index) and weight it::

    for n, d1:
      S: Y[n, d1] = select(eq(T[n, d1], ii), 0.0, -(X[n, select(eq(T[n, d1], ii), 0, T[n, d1]),
                                                   d1] * W[...]))

``reduction`` ``sum`` / ``mean`` accumulate into scalar temps (``mean`` divides by the summed
weights of the targets not ignored). SoftmaxCrossEntropyLoss first computes the log-softmax
over the class axis (into its ``log_prob`` output, or a temp), as LogSoftmax does.
"""

from __future__ import annotations

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import lowest, nest, str_attr, unsupported, var, zero
from polyonnx.krnl.lower.elementwise import FLOATS, check_dtype
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

Aff = ir.Aff


def _cast(x: ir.Expr, dtype: str) -> ir.Expr:
    return x if x.dtype == dtype else ir.Cast(x, dtype)


def _log_softmax(
    node: Node, shape: tuple[int, ...], x: str, dtype: str, out: ir.Buffer, acc: str
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """``out = log_softmax(x)`` over axis 1; returns the nests and the temps they use."""
    names = ["n", "c"] + [f"d{k}" for k in range(len(shape) - 2)]
    row_names = [names[0]] + names[2:]
    row_shape = (shape[0],) + tuple(shape[2:])
    row = tuple(var(n) for n in row_names)
    full = tuple(var(n) for n in names)
    mx = ir.Buffer(f"{node.name}__max", acc, row_shape)
    total = ir.Buffer(f"{node.name}__sum", acc, row_shape)
    mx_at, mx_load = ir.Access(mx.name, row), ir.Load(mx.name, row, acc)
    tot_at, tot_load = ir.Access(total.name, row), ir.Load(total.name, row, acc)
    xv = _cast(ir.Load(x, full, dtype), acc)
    c_iter = [("c", shape[1])]
    body = (
        ir.Stmt("S", mx_at, lowest(acc)),
        *nest(c_iter, (ir.Stmt("S", mx_at, ir.maximum(mx_load, xv)),)),
        ir.Stmt("S", tot_at, zero(acc)),
        *nest(c_iter, (ir.Stmt("S", tot_at, tot_load + ir.unary("exp", xv - mx_load)),)),
        *nest(
            c_iter,
            (
                ir.Stmt(
                    "S",
                    ir.Access(out.name, full),
                    _cast(xv - mx_load - ir.unary("log", tot_load), out.dtype),
                ),
            ),
        ),
    )
    return nest(list(zip(row_names, row_shape, strict=True)), body), [mx, total]


def _nll(
    node: Node, ctx: LowerContext, logp: ir.Buffer, target: str, weight: str, y: str, acc: str
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """The weighted negative log-likelihood of ``logp`` (``[N, C, d...]``) at ``target``."""
    shape = logp.shape
    check_dtype(node, ctx, target, ("int32", "int64"))
    reduction = str_attr(node, "reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise unsupported(node, ctx, f"reduction={reduction!r}")
    names = ["n"] + [f"d{k}" for k in range(len(shape) - 2)]
    extents = (shape[0],) + tuple(shape[2:])
    at = tuple(var(n) for n in names)
    t = ir.Load(target, at, ctx.dtype(target))
    ignore = node.attr("ignore_index")
    skip = ir.binary("eq", t, ir.Const(int(ignore), t.dtype)) if ignore is not None else None
    cls: ir.Expr = t if skip is None else ir.Select(skip, ir.Const(0, t.dtype), t)
    w: ir.Expr = ir.Const(1.0, acc)
    if weight:
        w = _cast(ir.Load(weight, (cls,), ctx.dtype(weight)), acc)
    if skip is not None:
        w = ir.Select(skip, zero(acc), w)
    picked = _cast(ir.Load(logp.name, (at[0], cls, *at[1:]), logp.dtype), acc)
    loss = -(picked * w)
    dtype = ctx.dtype(y)
    if reduction == "none":
        return nest(
            list(zip(names, extents, strict=True)),
            (ir.Stmt("S", ir.Access(y, at), _cast(loss, dtype)),),
        ), []
    total = ir.Buffer(f"{node.name}__loss", acc, ())
    tot_at, tot_load = ir.Access(total.name, ()), ir.Load(total.name, (), acc)
    temps = [total]
    update = [ir.Stmt("S", tot_at, tot_load + loss)]
    init = [ir.Stmt("S", tot_at, zero(acc))]
    result: ir.Expr = tot_load
    if reduction == "mean":
        den = ir.Buffer(f"{node.name}__weight", acc, ())
        den_at, den_load = ir.Access(den.name, ()), ir.Load(den.name, (), acc)
        temps.append(den)
        init.append(ir.Stmt("S", den_at, zero(acc)))
        update.append(ir.Stmt("S", den_at, den_load + w))
        result = tot_load / den_load
    nests = (
        *init,
        *nest(list(zip(names, extents, strict=True)), update),
        ir.Stmt("S", ir.Access(y, ()), _cast(result, dtype)),
    )
    return nests, temps


def _loss_inputs(
    node: Node, ctx: LowerContext, what: str
) -> tuple[str, str, str, str, str, tuple[int, ...]]:
    """(X, target, weight, X's dtype, the accumulation dtype, X's shape) of a loss node,
    X (called ``what`` in errors) checked to be a float ``[N, C, ...]`` tensor."""
    x, target, weight = node.input(0), node.input(1), node.input(2)
    dtype = check_dtype(node, ctx, x, FLOATS)
    shape = ctx.shape(x)
    if len(shape) < 2:
        raise unsupported(node, ctx, f"{what} of rank {len(shape)} (needs [N, C, ...])")
    return x, target, weight, dtype, "float32" if dtype == "float16" else dtype, shape


@register("NegativeLogLikelihoodLoss")
def lower_nll_loss(node: Node, ctx: LowerContext) -> Lowered:
    """NegativeLogLikelihoodLoss: ``-input[n, target[n, d], d] * weight[target]``, reduced."""
    x, target, weight, dtype, acc, shape = _loss_inputs(node, ctx, "input")
    logp = ir.Buffer(x, dtype, shape, "input")
    nests, temps = _nll(node, ctx, logp, target, weight, node.outputs[0], acc)
    return Lowered(nests, tuple(temps))


@register("SoftmaxCrossEntropyLoss")
def lower_softmax_cross_entropy(node: Node, ctx: LowerContext) -> Lowered:
    """SoftmaxCrossEntropyLoss: log-softmax over the classes, then the NLL loss."""
    x, target, weight, dtype, acc, shape = _loss_inputs(node, ctx, "scores")
    log_prob = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
    logp = ir.Buffer(log_prob or f"{node.name}__log_prob", dtype if log_prob else acc, shape)
    softmax, temps = _log_softmax(node, shape, x, dtype, logp, acc)
    nests, loss_temps = _nll(node, ctx, logp, target, weight, node.outputs[0], acc)
    temps += loss_temps
    if not log_prob:
        temps.append(logp)
    return Lowered((*softmax, *nests), tuple(temps))
