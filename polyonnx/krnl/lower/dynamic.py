"""Ops whose output extent depends on the input data: NonZero, Compress, Unique.

Each lowering writes its result into a buffer of the *maximal* shape (NonZero: ``[rank,
numel]``; Compress: the input with the selected axis at its full length; Unique: one slot per
element or slice) and the real extent into a one-element int64 buffer ``<node>__count``; the
:class:`~polyonnx.krnl.lower.registry.DynamicOutput` records of the result tell the program
which dimensions that count sizes. The graph types such outputs with a symbolic dimension
(``<node>_count``, see :mod:`polyonnx.graph.dynamic`); they may only be graph outputs, and the
runtime returns the valid part once the kernel has run.

Writes stay affine. The position of each selected element is a running counter carried
through a sequential scan (a real dependence: isl keeps the loop in order); the element is then
*selected* into its slot, ``O(n^2)`` overall::

    NonZero (X of shape [a, b], n = a*b):
      S: count[0] = 0
      for i0, i1:
        S: pos[i0, i1] = count[0]
        S: count[0] = count[0] + (X[i0, i1] != 0 ? 1 : 0)
      for d, p: S: Y[d, p] = 0
      for p, i0, i1:
        S: Y[0, p] = X[i0, i1] != 0 and pos[i0, i1] == p ? i0 : Y[0, p]
        S: Y[1, p] = X[i0, i1] != 0 and pos[i0, i1] == p ? i1 : Y[1, p]

Unique compares every pair of elements (or slices along ``axis``, lexicographically) once,
``cmp[j, i]`` in {-1, 0, 1}; an element is kept if no earlier one equals it, and its slot is
the number of kept elements before it (``sorted=0``, a scan) or smaller than it (``sorted=1``).

When the data is constant the graph folds these ops before lowering, so reaching a lowering
means the shape really is data-dependent.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, normalize_axis, pairs, unsupported, var, zero
from polyonnx.krnl.lower.encoding import widen
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, register

I64 = "int64"
ONE, NONE = ir.Const(1, I64), ir.Const(0, I64)


def _count(node: Node) -> tuple[ir.Buffer, ir.Access, ir.Load]:
    """The one-element counter buffer of ``node``, its write access and its load."""
    buf = ir.Buffer(f"{node.name}__count", I64, (1,), "temp")
    return buf, ir.Access(buf.name, (0,)), ir.Load(buf.name, (ir.Aff.lift(0),), I64)


def _flag(cond: ir.Expr) -> ir.Expr:
    """1 if ``cond`` else 0, as int64."""
    return ir.Select(cond, ONE, NONE)


def _and(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary("and", a, b)


def _eq(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary("eq", a, b)


def _dynamic(value: str, shape: Sequence[int], dims: Sequence[int], count: str) -> DynamicOutput:
    return DynamicOutput(
        value, tuple(shape), tuple(count if d in dims else "" for d in range(len(shape)))
    )


def _check_dtype(node: Node, ctx: LowerContext, name: str) -> str:
    dtype = ctx.dtype(name)
    if dtype not in ir.DTYPES:
        raise unsupported(node, ctx, f"element type {dtype} of {name!r}")
    return dtype


def _axis_source(
    node: Node, ctx: LowerContext, x: str
) -> tuple[str, tuple[int, ...], int, tuple[tuple[ir.Buffer, str], ...]]:
    """What Compress and Unique select along: ``x`` and its ``axis`` attribute, or without
    one ``x`` read as one flat axis. (Buffer name, shape, axis, the views to declare.)"""
    xs = ctx.shape(x)
    if node.attr("axis") is not None:
        return x, xs, normalize_axis(node, int(node.attr("axis")), len(xs)), ()
    n = int(np.prod(xs, dtype=np.int64))
    if len(xs) == 1:
        return x, xs, 0, ()
    view = ir.Buffer(f"{node.name}__flat", ctx.dtype(x), (n,), "input")
    return view.name, (n,), 0, ((view, x),)


@register("NonZero", 9)
def lower_non_zero(node: Node, ctx: LowerContext) -> Lowered:
    """NonZero: the indices of the non-zero elements, ``[rank, count]`` in row-major order."""
    x, y = node.input(0), node.outputs[0]
    xs = ctx.shape(x)
    dtype = _check_dtype(node, ctx, x)
    if not xs:
        raise unsupported(node, ctx, "a scalar input (its rank-0 index set has no axis)")
    rank, n = len(xs), int(np.prod(xs, dtype=np.int64))
    count, c_at, c_ld = _count(node)
    pos = ir.Buffer(f"{node.name}__pos", I64, xs, "temp")
    its = [f"i{d}" for d in range(rank)]
    at = tuple(var(i) for i in its)
    nonzero = ir.Binary("ne", ir.Load(x, at, dtype), zero(dtype))
    scan = (
        ir.Stmt("S", c_at, NONE),
        *nest(
            pairs(its, xs),
            (
                ir.Stmt("S", ir.Access(pos.name, at), c_ld),
                ir.Stmt("S", c_at, c_ld + _flag(nonzero)),
            ),
        ),
    )
    hit = _and(nonzero, _eq(ir.Load(pos.name, at, I64), ir.Iter("p")))

    def y_at(d: int) -> tuple[ir.Aff, ...]:
        return (ir.Aff.lift(d), var("p"))

    init = nest([("d", rank), ("p", n)], (ir.Stmt("S", ir.Access(y, (var("d"), var("p"))), NONE),))
    select = nest(
        [("p", n), *pairs(its, xs)],
        tuple(
            ir.Stmt(
                "S",
                ir.Access(y, y_at(d)),
                ir.Select(hit, ir.Iter(its[d]), ir.Load(y, y_at(d), I64)),
            )
            for d in range(rank)
        ),
    )
    return Lowered(
        scan + init + select, (count, pos), dynamic=(_dynamic(y, (rank, n), (1,), count.name),)
    )


@register("Compress", 9)
def lower_compress(node: Node, ctx: LowerContext) -> Lowered:
    """Compress: the slices of X along ``axis`` (or elements of flattened X) whose condition
    is true; the condition may be shorter than the axis (the rest is dropped)."""
    x, cond, y = node.input(0), node.input(1), node.outputs[0]
    dtype = _check_dtype(node, ctx, x)
    if ctx.dtype(cond) != "bool" or len(ctx.shape(cond)) != 1:
        raise unsupported(node, ctx, f"condition {cond!r} must be a 1-D bool tensor")
    src, shape, axis, views = _axis_source(node, ctx, x)
    m = min(ctx.shape(cond)[0], shape[axis])
    count, c_at, c_ld = _count(node)
    pos = ir.Buffer(f"{node.name}__pos", I64, (m,), "temp")
    take = ir.Load(cond, (var("i"),), "bool")
    scan = (
        ir.Stmt("S", c_at, NONE),
        *nest(
            [("i", m)],
            (
                ir.Stmt("S", ir.Access(pos.name, (var("i"),)), c_ld),
                ir.Stmt("S", c_at, c_ld + _flag(take)),
            ),
        ),
    )
    out_shape = tuple(m if d == axis else e for d, e in enumerate(shape))
    names = [("p" if d == axis else f"c{d}") for d in range(len(shape))]

    def at(it: str) -> tuple[ir.Aff, ...]:
        return tuple(var(it if d == axis else names[d]) for d in range(len(shape)))

    y_at, y_ld = ir.Access(y, at("p")), ir.Load(y, at("p"), dtype)
    hit = _and(take, _eq(ir.Load(pos.name, (var("i"),), I64), ir.Iter("p")))
    select = nest(
        pairs(names, out_shape),
        (
            ir.Stmt("S", y_at, zero(dtype)),
            *nest(
                [("i", m)],
                (ir.Stmt("S", y_at, ir.Select(hit, ir.Load(src, at("i"), dtype), y_ld)),),
            ),
        ),
    )
    return Lowered(
        scan + select,
        (count, pos),
        views=views,
        dynamic=(_dynamic(y, out_shape, (axis,), count.name),),
    )


@register("Unique", 11)
def lower_unique(node: Node, ctx: LowerContext) -> Lowered:
    """Unique: distinct elements (or slices along ``axis``) with their first index, the
    inverse mapping and the counts; ``sorted=1`` (default) orders them ascending
    (lexicographically for slices), ``sorted=0`` by first occurrence."""
    x = node.input(0)
    outs = [node.outputs[k] if k < len(node.outputs) else "" for k in range(4)]
    y, first_index, inverse, counts = outs
    dtype = _check_dtype(node, ctx, x)
    if not ctx.shape(x):
        raise unsupported(node, ctx, "a scalar input")
    src, shape, axis, views = _axis_source(node, ctx, x)
    n = shape[axis]
    others = [(f"c{d}", e) for d, e in enumerate(shape) if d != axis]

    def at(it: str) -> tuple[ir.Aff, ...]:
        return tuple(var(it if d == axis else f"c{d}") for d in range(len(shape)))

    tmp = [
        ir.Buffer(f"{node.name}__{what}", I64, dims, "temp")
        for what, dims in (("cmp", (n, n)), ("dup", (n,)), ("mult", (n,)), ("slot", (n,)))
    ]
    cmp, dup, mult, slot = (b.name for b in tmp)
    count, c_at, c_ld = _count(node)

    def ld(buf: str, *index: str) -> ir.Load:
        return ir.Load(buf, tuple(var(i) for i in index), I64)

    def acc(buf: str, *index: str) -> ir.Access:
        return ir.Access(buf, tuple(var(i) for i in index))

    # cmp[j, i]: sign of (slice j - slice i), lexicographic over the other axes in order.
    xj, xi = ir.Load(src, at("j"), dtype), ir.Load(src, at("i"), dtype)
    # (bfloat16 compares its values, and moves its codes.)
    vj, vi = (widen(v) if dtype == "bfloat16" else v for v in (xj, xi))
    undecided = _and(_eq(ld(cmp, "j", "i"), NONE), ir.Binary("ne", vj, vi))
    sign = ir.Select(ir.Binary("lt", vj, vi), ir.Const(-1, I64), ONE)
    compare = nest(
        [("j", n), ("i", n)],
        (
            ir.Stmt("S", acc(cmp, "j", "i"), NONE),
            *nest(
                others,
                (ir.Stmt("S", acc(cmp, "j", "i"), ir.Select(undecided, sign, ld(cmp, "j", "i"))),),
            ),
        ),
    )
    same = _eq(ld(cmp, "j", "i"), NONE)
    earlier = ir.Binary("lt", ir.Iter("j"), ir.Iter("i"))
    tally = nest(
        [("i", n)],
        (
            ir.Stmt("S", acc(dup, "i"), NONE),
            ir.Stmt("S", acc(mult, "i"), NONE),
            *nest(
                [("j", n)],
                (
                    ir.Stmt("S", acc(dup, "i"), ld(dup, "i") + _flag(_and(earlier, same))),
                    ir.Stmt("S", acc(mult, "i"), ld(mult, "i") + _flag(same)),
                ),
            ),
        ),
    )
    first_i = _eq(ld(dup, "i"), NONE)
    if node.attr("sorted", 1):
        smaller = _and(_eq(ld(dup, "j"), NONE), _eq(ld(cmp, "j", "i"), ir.Const(-1, I64)))
        place = (
            ir.Stmt("S", c_at, NONE),
            *nest(
                [("i", n)],
                (
                    ir.Stmt("S", acc(slot, "i"), NONE),
                    *nest(
                        [("j", n)], (ir.Stmt("S", acc(slot, "i"), ld(slot, "i") + _flag(smaller)),)
                    ),
                    ir.Stmt("S", c_at, c_ld + _flag(first_i)),
                ),
            ),
        )
    else:
        place = (
            ir.Stmt("S", c_at, NONE),
            *nest(
                [("i", n)],
                (ir.Stmt("S", acc(slot, "i"), c_ld), ir.Stmt("S", c_at, c_ld + _flag(first_i))),
            ),
        )
    hit = _and(first_i, _eq(ld(slot, "i"), ir.Iter("p")))
    nests: list[ir.Node] = [*compare, *tally, *place]
    dynamic: list[DynamicOutput] = []
    if y:
        names = [("p" if d == axis else f"c{d}") for d in range(len(shape))]
        y_at, y_ld = ir.Access(y, at("p")), ir.Load(y, at("p"), dtype)
        nests += nest(
            pairs(names, shape),
            (
                ir.Stmt("S", y_at, zero(dtype)),
                *nest([("i", n)], (ir.Stmt("S", y_at, ir.Select(hit, xi, y_ld)),)),
            ),
        )
        dynamic.append(_dynamic(y, shape, (axis,), count.name))
    for out, value in ((first_index, ir.Iter("i")), (counts, ld(mult, "i"))):
        if out:
            nests += nest(
                [("p", n)],
                (
                    ir.Stmt("S", acc(out, "p"), NONE),
                    *nest(
                        [("i", n)],
                        (ir.Stmt("S", acc(out, "p"), ir.Select(hit, value, ld(out, "p"))),),
                    ),
                ),
            )
            dynamic.append(_dynamic(out, (n,), (0,), count.name))
    if inverse:
        match = _and(first_i, _eq(ld(cmp, "i", "k"), NONE))
        nests += nest(
            [("k", n)],
            (
                ir.Stmt("S", acc(inverse, "k"), NONE),
                *nest(
                    [("i", n)],
                    (
                        ir.Stmt(
                            "S",
                            acc(inverse, "k"),
                            ir.Select(match, ld(slot, "i"), ld(inverse, "k")),
                        ),
                    ),
                ),
            ),
        )
    return Lowered(tuple(nests), (*tmp, count), views=views, dynamic=tuple(dynamic))
