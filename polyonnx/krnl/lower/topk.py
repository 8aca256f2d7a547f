"""TopK. With a constant K the output shape is static; with K computed at run time the row is
ranked in full into buffers of the axis's length and K is the output's data-dependent extent
(see :mod:`polyonnx.krnl.lower.dynamic`).

A rank per element — how many elements of its row come before it in the order (larger first
for ``largest=1``, ties broken by the lower index) — goes to the temp ``<node>__rank``; the
element of rank ``p < K`` is then selected into output slot ``p``. Writes stay affine::

    for o.., i:
      S: rank[o, i] = 0
      for j:
        S: rank[o, i] = rank[o, i] + (X[o, j] before X[o, i] ? 1 : 0)
    for o.., p:
      S: Values[o, p] = 0;  S: Indices[o, p] = 0
      for i:
        S: Values[o, p]  = rank[o, i] == p ? X[o, i] : Values[o, p]
        S: Indices[o, p] = rank[o, i] == p ? i : Indices[o, p]

That is ``O(n^2)`` per row: fine for the small rows TopK usually sees, and free of
data-dependent writes.
"""

from __future__ import annotations

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, normalize_axis, opset, unsupported, var, zero
from polyonnx.krnl.lower.encoding import widen
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, register

I64 = "int64"


@register("TopK")
def lower_top_k(node: Node, ctx: LowerContext) -> Lowered:
    """TopK: rank every element of the row, then pick ranks ``0..K-1``."""
    x = node.input(0)
    values, indices = node.outputs[0], node.outputs[1] if len(node.outputs) > 1 else ""
    xs = ctx.shape(x)
    dtype = ctx.dtype(x)
    if dtype == "bool":
        raise unsupported(node, ctx, "bool input")
    axis = normalize_axis(node, int(node.attr("axis", -1)), len(xs))
    count: ir.Buffer | None = None
    if opset(ctx) < 10:
        k = int(node.attr("k"))
    else:
        kv = ctx.constant(node.input(1))
        if kv is None:
            # K known only at run time: the whole row is ranked into a buffer of the axis's
            # length and K is the extent the runtime returns (it checks 0 <= K <= length).
            if ctx.is_static(values):
                raise unsupported(node, ctx, "K computed at run time for a statically typed output")
            k = xs[axis]
            count = ir.Buffer(f"{node.name}__count", I64, (1,), "temp")
        else:
            k = int(np.asarray(kv).reshape(-1)[0])
    if not 0 <= k <= xs[axis] or (count is None and ctx.shape(values)[axis] != k):
        raise ShapeError(f"node {node.name!r} (TopK): K = {k} does not fit axis {axis} of {xs}")
    largest = bool(node.attr("largest", 1))
    names = [f"o{d}" for d in range(len(xs))]
    outer = [(names[d], xs[d]) for d in range(len(xs)) if d != axis]

    def at(name: str) -> tuple[ir.Aff, ...]:
        return tuple(var(name if d == axis else names[d]) for d in range(len(xs)))

    rank = ir.Buffer(f"{node.name}__rank", I64, tuple(xs))
    r_at = ir.Access(rank.name, at("i"))
    r_load = ir.Load(rank.name, at("i"), I64)
    xi, xj = ir.Load(x, at("i"), dtype), ir.Load(x, at("j"), dtype)
    # (bfloat16 compares its values, and moves its codes.)
    vi, vj = (widen(v) if dtype == "bfloat16" else v for v in (xi, xj))
    better = ir.Binary("gt" if largest else "lt", vj, vi)
    tie = ir.Binary("and", ir.Binary("eq", vj, vi), ir.Binary("lt", ir.Iter("j"), ir.Iter("i")))
    before = ir.Select(ir.Binary("or", better, tie), ir.Const(1, I64), ir.Const(0, I64))
    ranking = nest(
        outer + [("i", xs[axis])],
        (
            ir.Stmt("S", r_at, ir.Const(0, I64)),
            *nest([("j", xs[axis])], (ir.Stmt("S", r_at, r_load + before),)),
        ),
    )
    hit = ir.Binary("eq", r_load, ir.Iter("p"))
    v_at = ir.Access(values, at("p"))
    v_load = ir.Load(values, at("p"), dtype)
    picks: list[ir.Node] = [ir.Stmt("S", v_at, zero(dtype))]
    updates: list[ir.Node] = [ir.Stmt("S", v_at, ir.Select(hit, xi, v_load))]
    if indices:
        i_at = ir.Access(indices, at("p"))
        picks.append(ir.Stmt("S", i_at, ir.Const(0, I64)))
        updates.append(
            ir.Stmt("S", i_at, ir.Select(hit, ir.Iter("i"), ir.Load(indices, at("p"), I64)))
        )
    dynamic: tuple[DynamicOutput, ...] = ()
    counting: tuple[ir.Node, ...] = ()
    if count is not None:
        k_ld = ir.Load(node.input(1), (ir.Aff.lift(0),) * len(ctx.shape(node.input(1))), I64)
        counting = (ir.Stmt("S", ir.Access(count.name, (0,)), k_ld),)
        counts = tuple(count.name if d == axis else "" for d in range(len(xs)))
        dynamic = tuple(DynamicOutput(o, xs, counts) for o in (values, indices) if o)
    if k == 0 or any(e == 0 for _, e in outer):
        return Lowered(counting, (count,) if count else (), dynamic=dynamic)
    selecting = nest(outer + [("p", k)], (*picks, *nest([("i", xs[axis])], updates)))
    return Lowered(
        counting + ranking + selecting, (rank,) + ((count,) if count else ()), dynamic=dynamic
    )
