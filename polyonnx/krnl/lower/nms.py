"""NonMaxSuppression: greedy selection of boxes per batch and class, in descending score order.

The output, rows ``(batch, class, box)``, has a data-dependent extent: the lowering writes a
buffer of the maximal ``[B * C * min(max_boxes, N), 3]`` rows plus the real count (see
:mod:`polyonnx.krnl.lower.dynamic`), and the value may only be a graph output.

As the ONNX reference (and onnxruntime): the candidates of a class are its boxes whose score
passes ``score_threshold`` (strictly greater, when given), visited by descending score (ties:
the lower box index first); a candidate is kept while fewer than ``max_output_boxes_per_class``
were kept and no kept box overlaps it with an IoU strictly above ``iou_threshold`` (boxes of
zero area never overlap). Rows come by batch, class, then selection order. The three optional
scalars are compile-time constants or run-time inputs.

Every write is affine. Per batch ``b`` and class ``c``, with temps ``rank``, ``order``,
``kept``, ``slot`` (``[B, C, N]``) and ``n_kept`` (``[B, C]``)::

    for b, c, i:            S: rank[b, c, i] = #{j : s[j] > s[i] or (s[j] == s[i] and j < i)}
    for b, c, p, i:         S: order[b, c, p] = rank[b, c, i] == p ? i : order[b, c, p]
    for b, c:
      S: n_kept[b, c] = 0
      for p:                (sequential: each step reads the boxes kept before it)
        S: hit[b, c] = 0
        for q in [0, p):    S: hit[b, c] |= kept[b, c, q] and iou(order[q], order[p]) > t
        S: kept[b, c, p] = passes(order[p]) and n_kept[b, c] < max and not hit[b, c]
        S: slot[b, c, p] = n_kept[b, c]
        S: n_kept[b, c] = n_kept[b, c] + kept[b, c, p]
    for b, c, k, p:         S: chosen[b, c, k] = kept[p] and slot[p] == k ? order[p] : ...
    S: count = 0; for b, c: S: first[b, c] = count;  S: count = count + n_kept[b, c]
    for r:                  the last (b, c) with first[b, c] <= r owns row r:
      Y[r] = (b, c, chosen[b, c, r - first[b, c]])

``O(B C N^2)`` for the ranking and the greedy pass, ``O(R B C)`` to place the ``R`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, require_float, var
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, register

I64 = "int64"
ZERO, ONE = ir.Const(0, I64), ir.Const(1, I64)


def _and(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = ir.Binary("and", out, t)
    return out


def _scalar(ctx: LowerContext, name: str) -> tuple[np.ndarray | None, ir.Load | None]:
    """An optional scalar input: its compile-time value, or a load of its one element, or
    (None, None) when the input is absent or empty (the op's default then applies)."""
    if not name or int(np.prod(ctx.shape(name), dtype=np.int64)) == 0:
        return None, None
    value = ctx.constant(name)
    if value is not None:
        return np.asarray(value).reshape(-1)[:1], None
    return None, ir.Load(name, (ir.Aff.lift(0),) * len(ctx.shape(name)), ctx.dtype(name))


def _extent(box: Sequence[ir.Expr], center: bool, axis: int) -> tuple[ir.Expr, ir.Expr]:
    """(min, max) of a box along ``axis`` (0: x, 1: y), as the reference computes them."""
    if center:  # [x_center, y_center, width, height]
        mid, half = box[axis], box[2 + axis] / ir.Const(2.0, box[0].dtype)
        return mid - half, mid + half
    a, b = (box[1], box[3]) if axis == 0 else (box[0], box[2])  # [y1, x1, y2, x2]
    return ir.minimum(a, b), ir.maximum(a, b)


def _overlaps(
    one: Sequence[ir.Expr], two: Sequence[ir.Expr], center: bool, threshold: ir.Expr
) -> ir.Expr:
    """Whether two boxes' IoU is above ``threshold`` (bool), with the reference's early outs
    (no intersection, an empty box) folded into one conjunction."""
    x1, x2 = _extent(one, center, 0), _extent(two, center, 0)
    y1, y2 = _extent(one, center, 1), _extent(two, center, 1)
    ix = (ir.maximum(x1[0], x2[0]), ir.minimum(x1[1], x2[1]))
    iy = (ir.maximum(y1[0], y2[0]), ir.minimum(y1[1], y2[1]))
    inter = (ix[1] - ix[0]) * (iy[1] - iy[0])
    area1 = (x1[1] - x1[0]) * (y1[1] - y1[0])
    area2 = (x2[1] - x2[0]) * (y2[1] - y2[0])
    union = area1 + area2 - inter
    zero = ir.Const(0.0, inter.dtype)
    return _and(
        ir.Binary("gt", ix[1], ix[0]),
        ir.Binary("gt", iy[1], iy[0]),
        ir.Binary("gt", inter, zero),
        ir.Binary("gt", area1, zero),
        ir.Binary("gt", area2, zero),
        ir.Binary("gt", union, zero),
        ir.Binary("gt", inter / union, threshold),
    )


@register("NonMaxSuppression", since=10)
def lower_non_max_suppression(node: Node, ctx: LowerContext) -> Lowered:
    """NonMaxSuppression (opset 10, 11): ``selected_indices[count, 3]`` (see the module
    docstring).

    Example: boxes ``[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3]]`` scored ``0.9, 0.8, 0.7``
    with ``iou_threshold = 0.5``: box 1 overlaps box 0 (IoU 0.82) and is suppressed, giving
    rows ``[0, 0, 0], [0, 0, 2]``.
    """
    boxes, scores, y = node.input(0), node.input(1), node.outputs[0]
    ins = [node.inputs[k] if k < len(node.inputs) else "" for k in range(5)]
    dtype = require_float(node, ctx, boxes)
    if ctx.dtype(scores) != dtype:
        raise ShapeError(
            f"node {node.name!r} (NonMaxSuppression): scores {scores!r} are "
            f"{ctx.dtype(scores)}, boxes {boxes!r} {dtype}"
        )
    bs, ss = ctx.shape(boxes), ctx.shape(scores)
    if len(bs) != 3 or bs[2] != 4 or len(ss) != 3 or ss[0] != bs[0] or ss[2] != bs[1]:
        raise ShapeError(
            f"node {node.name!r} (NonMaxSuppression): boxes {boxes!r} {list(bs)} and scores "
            f"{scores!r} {list(ss)} must be [batches, boxes, 4] and [batches, classes, boxes]"
        )
    nb, n, nc = bs[0], bs[1], ss[1]
    center = bool(node.attr("center_point_box", 0))
    count = ir.Buffer(f"{node.name}__count", I64, (1,), "temp")
    c_at, c_ld = ir.Access(count.name, (0,)), ir.Load(count.name, (ir.Aff.lift(0),), I64)

    max_const, max_load = _scalar(ctx, ins[2])
    iou_const, iou_load = _scalar(ctx, ins[3])
    score_const, score_load = _scalar(ctx, ins[4])
    if max_load is None:
        per_class = 0 if max_const is None else max(int(max_const[0]), 0)
        limit: ir.Expr = ir.Const(min(per_class, n), I64)
    else:
        per_class = n
        limit = ir.Cast(max_load, I64) if max_load.dtype != I64 else max_load
    per_class = min(per_class, n)
    rows = nb * nc * per_class
    if rows == 0:
        # Nothing can be selected. (One zeroed row keeps the output a buffer some statement
        # writes; the count returns none of it.)
        empty = (DynamicOutput(y, (1, 3), (count.name, "")),)
        clear = nest([("j", 3)], (ir.Stmt("S", ir.Access(y, (0, var("j"))), ZERO),))
        return Lowered((ir.Stmt("S", c_at, ZERO), *clear), (count,), dynamic=empty)
    dynamic = (DynamicOutput(y, (rows, 3), (count.name, "")),)

    def threshold(const: np.ndarray | None, loaded: ir.Load | None) -> ir.Expr | None:
        if loaded is not None:
            return loaded if loaded.dtype == dtype else ir.Cast(loaded, dtype)
        return None if const is None else ir.Const(float(const[0]), dtype)

    iou_t = threshold(iou_const, iou_load) or ir.Const(0.0, dtype)
    score_t = threshold(score_const, score_load)

    temps = {
        what: ir.Buffer(f"{node.name}__{what}", I64, shape)
        for what, shape in (
            ("rank", (nb, nc, n)),
            ("order", (nb, nc, n)),
            ("kept", (nb, nc, n)),
            ("slot", (nb, nc, n)),
            ("chosen", (nb, nc, per_class)),
            ("n_kept", (nb, nc)),
            ("hit", (nb, nc)),
            ("first", (nb, nc)),
            ("row_b", (rows,)),
            ("row_c", (rows,)),
        )
    }

    def at(what: str, *index: str) -> ir.Access:
        return ir.Access(temps[what].name, (var("b"), var("c"), *(var(i) for i in index)))

    def ld(what: str, *index: ir.Index | str) -> ir.Load:
        idx = tuple(var(i) if isinstance(i, str) else i for i in index)
        return ir.Load(temps[what].name, (var("b"), var("c"), *idx), I64)

    def score(i: ir.Index) -> ir.Load:
        return ir.Load(scores, (var("b"), var("c"), i), dtype)

    def box(i: ir.Index) -> tuple[ir.Expr, ...]:
        return tuple(ir.Load(boxes, (var("b"), i, ir.Aff.lift(k)), dtype) for k in range(4))

    def flag(cond: ir.Expr) -> ir.Expr:
        return ir.Select(cond, ONE, ZERO)

    # rank[i]: the boxes visited before box i (higher score, or equal and a lower index).
    sj, si = score(var("j")), score(var("i"))
    before = ir.Binary(
        "or",
        ir.Binary("gt", sj, si),
        _and(ir.Binary("eq", sj, si), ir.Binary("lt", ir.Iter("j"), ir.Iter("i"))),
    )
    ranking = nest(
        [("b", nb), ("c", nc), ("i", n)],
        (
            ir.Stmt("S", at("rank", "i"), ZERO),
            *nest([("j", n)], (ir.Stmt("S", at("rank", "i"), ld("rank", "i") + flag(before)),)),
        ),
    )
    ordering = nest(
        [("b", nb), ("c", nc), ("p", n)],
        (
            ir.Stmt("S", at("order", "p"), ZERO),
            *nest(
                [("i", n)],
                (
                    ir.Stmt(
                        "S",
                        at("order", "p"),
                        ir.Select(
                            ir.Binary("eq", ld("rank", "i"), ir.Iter("p")),
                            ir.Iter("i"),
                            ld("order", "p"),
                        ),
                    ),
                ),
            ),
        ),
    )
    cur, prev = ld("order", "p"), ld("order", "q")
    overlap = _and(
        ir.Binary("ne", ld("kept", "q"), ZERO), _overlaps(box(prev), box(cur), center, iou_t)
    )
    passes: list[ir.Expr] = [] if score_t is None else [ir.Binary("gt", score(cur), score_t)]
    keep = _and(
        *passes,
        ir.Binary("lt", ld("n_kept"), limit),
        ir.Binary("eq", ld("hit"), ZERO),
    )
    greedy = nest(
        [("b", nb), ("c", nc)],
        (
            ir.Stmt("S", at("n_kept"), ZERO),
            ir.Loop(
                "p",
                0,
                n,
                (
                    ir.Stmt("S", at("hit"), ZERO),
                    ir.Loop(
                        "q",
                        0,
                        var("p"),
                        (ir.Stmt("S", at("hit"), ir.Select(overlap, ONE, ld("hit"))),),
                    ),
                    ir.Stmt("S", at("kept", "p"), flag(keep)),
                    ir.Stmt("S", at("slot", "p"), ld("n_kept")),
                    ir.Stmt("S", at("n_kept"), ld("n_kept") + ld("kept", "p")),
                ),
            ),
        ),
    )
    taken = _and(
        ir.Binary("ne", ld("kept", "p"), ZERO), ir.Binary("eq", ld("slot", "p"), ir.Iter("k"))
    )
    compacting = nest(
        [("b", nb), ("c", nc), ("k", per_class)],
        (
            ir.Stmt("S", at("chosen", "k"), ZERO),
            *nest(
                [("p", n)],
                (
                    ir.Stmt(
                        "S",
                        at("chosen", "k"),
                        ir.Select(taken, ld("order", "p"), ld("chosen", "k")),
                    ),
                ),
            ),
        ),
    )
    offsets = (
        ir.Stmt("S", c_at, ZERO),
        *nest(
            [("b", nb), ("c", nc)],
            (
                ir.Stmt("S", at("first"), c_ld),
                ir.Stmt("S", c_at, c_ld + ld("n_kept")),
            ),
        ),
    )
    r = var("r")
    row_b, row_c = temps["row_b"].name, temps["row_c"].name
    owns = ir.Binary("le", ld("first"), ir.Iter("r"))
    owners = nest(
        [("r", rows)],
        (
            ir.Stmt("S", ir.Access(row_b, (r,)), ZERO),
            ir.Stmt("S", ir.Access(row_c, (r,)), ZERO),
            *nest(
                [("b", nb), ("c", nc)],
                (
                    ir.Stmt(
                        "S",
                        ir.Access(row_b, (r,)),
                        ir.Select(owns, ir.Iter("b"), ir.Load(row_b, (r,), I64)),
                    ),
                    ir.Stmt(
                        "S",
                        ir.Access(row_c, (r,)),
                        ir.Select(owns, ir.Iter("c"), ir.Load(row_c, (r,), I64)),
                    ),
                ),
            ),
        ),
    )
    rb, rc = ir.Load(row_b, (r,), I64), ir.Load(row_c, (r,), I64)
    first = ir.Load(temps["first"].name, (rb, rc), I64)
    # (Rows past the count are never returned; the clamp keeps their reads inside `chosen`.)
    k = ir.minimum(ir.maximum(ir.Iter("r") - first, ZERO), ir.Const(per_class - 1, I64))
    writing = nest(
        [("r", rows)],
        (
            ir.Stmt("S", ir.Access(y, (r, 0)), rb),
            ir.Stmt("S", ir.Access(y, (r, 1)), rc),
            ir.Stmt("S", ir.Access(y, (r, 2)), ir.Load(temps["chosen"].name, (rb, rc, k), I64)),
        ),
    )
    return Lowered(
        (*ranking, *ordering, *greedy, *compacting, *offsets, *owners, *writing),
        (*temps.values(), count),
        dynamic=dynamic,
    )
