"""StringSplit: each string cut into substrings, ``Y[..., k]`` the ``k``-th, ``Z`` how many.

As Python's ``str.split(delimiter, maxsplit)`` (``onnx.reference``): a non-empty ``delimiter``
cuts at its non-overlapping occurrences, left to right (consecutive ones give empty strings);
none (or ``""``) cuts at runs of whitespace (``str.isspace``) and drops the empty strings at
the ends. After ``maxsplit`` cuts the rest is one last substring (without a delimiter: its
leading whitespace dropped, its trailing kept). ``Y``'s last extent is the most substrings of
any string, the shorter lists padded with empty strings: known only at run time
(:class:`~polyonnx.krnl.lower.registry.DynamicOutput`) unless the input is a constant.

Writes stay affine. A sequential scan over each string's code points records at each
position ``w`` the piece that starts there (``s_ord``: its number, ``s_at``: where it starts)
and the piece that ends there (``e_ord``), -1 for none; every piece then *selects* its bounds
from those records, and copies its code points (delimiter ``d`` of length ``L``, ``M`` =
``maxsplit``)::

    for i:  S: n[i] = number of non-padding code points of x[i]
            S: cnt[i] = 0;  S: nxt[i] = 0
            for w:  S: eq[i] = 1
                    for l: S: eq[i] = w + l < W and x[i, w + l] == d[l] ? eq[i] : 0
                    S: e_ord[i, w] = eq[i] and w >= nxt[i] and cnt[i] < M ? cnt[i] : -1
                    S: s_ord[i, w] = e_ord[i, w] >= 0 ? cnt[i] + 1 : -1;  S: s_at[i, w] = w + L
                    S: nxt[i] = e_ord[i, w] >= 0 ? w + L : nxt[i]
                    S: cnt[i] = cnt[i] + (e_ord[i, w] >= 0)
            S: z[i] = cnt[i] + 1
            for k:  S: st[i, k] = 0;  S: en[i, k] = n[i]
                    for w: S: st[i, k] = s_ord[i, w] == k ? s_at[i, w] : st[i, k]
                           S: en[i, k] = e_ord[i, w] == k ? w : en[i, k]
            for k, j: S: y[i, k, j] = k < z[i] and j < en[i, k] - st[i, k] ? x[i, st[i, k] + j] : 0
    S: count = 0;  for i: S: count = max(count, z[i])

Without a delimiter the scan tracks whether the previous code point was whitespace instead:
a piece starts at a non-space after a space (or the start) while fewer than ``M + 1`` are
open, and ends at a space unless it is the last one ``maxsplit`` allows. ``O(W (L + K))`` per
string for ``K`` substrings at most (``W // L + 1`` or ``(W + 1) // 2``, and ``M + 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import generic_iters, nest, str_attr, unsupported, var
from polyonnx.krnl.lower.dfa import matching
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, register

I64 = "int64"
ZERO, ONE, NONE = ir.Const(0, I64), ir.Const(1, I64), ir.Const(-1, I64)
CLEAR = ir.Const(0, CODE_POINT)


def _and(*conds: ir.Expr) -> ir.Expr:
    out = conds[0]
    for c in conds[1:]:
        out = ir.Binary("and", out, c)
    return out


def _or(conds: list[ir.Expr]) -> ir.Expr:
    out = conds[0]
    for c in conds[1:]:
        out = ir.Binary("or", out, c)
    return out


def _is_space(cp: ir.Expr) -> ir.Expr:
    """Whether code point ``cp`` is whitespace as ``str.isspace`` says (intervals found at
    compile time)."""
    tests: list[ir.Expr] = []
    for lo, hi in matching(r"\s"):
        if hi == lo + 1:
            tests.append(ir.Binary("eq", cp, ir.Const(lo, CODE_POINT)))
        else:
            tests.append(
                ir.Binary(
                    "and",
                    ir.Binary("ge", cp, ir.Const(lo, CODE_POINT)),
                    ir.Binary("lt", cp, ir.Const(hi, CODE_POINT)),
                )
            )
    return _or(tests)


@dataclass(frozen=True)
class _Split:
    """One StringSplit's names and extents: the element index ``elem`` of each string, its
    width ``width``, the bound ``pieces`` on substrings, and its scratch buffers by role."""

    node: Node
    x: str
    elem: tuple[ir.Aff, ...]
    width: int
    pieces: int
    buffers: dict[str, ir.Buffer]

    def at(self, what: str, *extra: ir.AffLike) -> ir.Access:
        return ir.Access(self.buffers[what].name, (*self.elem, *extra))

    def ld(self, what: str, *extra: ir.Index) -> ir.Load:
        return ir.Load(self.buffers[what].name, (*self.elem, *extra), I64)

    def cp(self, w: ir.Index) -> ir.Load:
        return ir.Load(self.x, (*self.elem, w), CODE_POINT)

    def set(self, what: str, value: ir.Expr, *extra: ir.AffLike) -> ir.Stmt:
        return ir.Stmt("S", self.at(what, *extra), value)


def _length(s: _Split) -> tuple[ir.Node, ...]:
    """``n``: the number of code points of the string (its non-padding ones)."""
    inside = ir.Select(ir.Binary("ne", s.cp(var("w")), CLEAR), ONE, ZERO)
    return (
        s.set("n", ZERO),
        ir.Loop("w", 0, s.width, (s.set("n", s.ld("n") + inside),)),
    )


def _delimiter_scan(s: _Split, delimiter: str, maxsplit: int | None) -> tuple[ir.Node, ...]:
    """The records of the pieces cut at the occurrences of ``delimiter``, and ``z``."""
    size, w, l = len(delimiter), ir.Iter("w"), ir.Iter("l")
    table = f"{s.node.name}__delimiter"
    last = ir.Const(s.width - 1, I64)
    same = _and(
        ir.Binary("lt", w + l, ir.Const(s.width, I64)),
        ir.Binary("eq", s.cp(ir.minimum(w + l, last)), ir.Load(table, (var("l"),), CODE_POINT)),
    )
    take = [ir.Binary("ne", s.ld("eq"), ZERO), ir.Binary("ge", w, s.ld("nxt"))]
    if maxsplit is not None:
        take.append(ir.Binary("lt", s.ld("cnt"), ir.Const(maxsplit, I64)))
    taken = ir.Binary("ge", s.ld("e_ord", var("w")), ZERO)
    at_w = (var("w"),)
    step = (
        s.set("eq", ONE),
        ir.Loop("l", 0, size, (s.set("eq", ir.Select(same, s.ld("eq"), ZERO)),)),
        s.set("e_ord", ir.Select(_and(*take), s.ld("cnt"), NONE), *at_w),
        s.set("s_ord", ir.Select(taken, s.ld("cnt") + ONE, NONE), *at_w),
        s.set("s_at", w + ir.Const(size, I64), *at_w),
        s.set("nxt", ir.Select(taken, w + ir.Const(size, I64), s.ld("nxt"))),
        s.set("cnt", s.ld("cnt") + ir.Select(taken, ONE, ZERO)),
    )
    return (
        s.set("cnt", ZERO),
        s.set("nxt", ZERO),
        ir.Loop("w", 0, s.width, step),
        s.set("z", s.ld("cnt") + ONE),
    )


def _whitespace_scan(s: _Split, maxsplit: int | None) -> tuple[ir.Node, ...]:
    """The records of the runs of non-whitespace (the last one ``maxsplit`` allows running to
    the end of the string), and ``z``."""
    cp, w = s.cp(var("w")), ir.Iter("w")
    inside, space = ir.Binary("ne", cp, CLEAR), _is_space(cp)
    after_space = ir.Binary("ne", s.ld("prev"), ZERO)
    opens = [inside, ir.Unary("not", space), after_space]
    closes = [inside, space, ir.Unary("not", after_space)]
    if maxsplit is not None:  # (piece cnt - 1 is open; the one numbered maxsplit never ends)
        opens.append(ir.Binary("le", s.ld("cnt"), ir.Const(maxsplit, I64)))
        closes.append(ir.Binary("le", s.ld("cnt"), ir.Const(maxsplit, I64)))
    opened = ir.Binary("ge", s.ld("s_ord", var("w")), ZERO)
    at_w = (var("w"),)
    step = (
        s.set("s_ord", ir.Select(_and(*opens), s.ld("cnt"), NONE), *at_w),
        s.set("s_at", w, *at_w),
        s.set("e_ord", ir.Select(_and(*closes), s.ld("cnt") - ONE, NONE), *at_w),
        s.set("cnt", s.ld("cnt") + ir.Select(opened, ONE, ZERO)),
        s.set("prev", ir.Select(space, ONE, ZERO)),
    )
    return (
        s.set("cnt", ZERO),
        s.set("prev", ONE),  # (the start of the string counts as whitespace)
        ir.Loop("w", 0, s.width, step),
        s.set("z", s.ld("cnt")),
    )


def _pieces(s: _Split, y: str) -> tuple[ir.Node, ...]:
    """Each piece's bounds selected from the records, then its code points copied."""
    k, j = var("k"), var("j")
    ends = (
        s.set("st", ZERO, k),
        s.set("en", s.ld("n"), k),
        *nest(
            [("w", s.width)],
            (
                s.set(
                    "st",
                    ir.Select(
                        ir.Binary("eq", s.ld("s_ord", var("w")), ir.Iter("k")),
                        s.ld("s_at", var("w")),
                        s.ld("st", k),
                    ),
                    k,
                ),
                s.set(
                    "en",
                    ir.Select(
                        ir.Binary("eq", s.ld("e_ord", var("w")), ir.Iter("k")),
                        ir.Iter("w"),
                        s.ld("en", k),
                    ),
                    k,
                ),
            ),
        ),
    )
    start = s.ld("st", k)
    keep = _and(
        ir.Binary("lt", ir.Iter("k"), s.ld("z")),
        ir.Binary("lt", ir.Iter("j"), s.ld("en", k) - start),
    )
    # (The clamp keeps the read inside x where the select discards it.)
    source = s.cp(ir.minimum(start + ir.Iter("j"), ir.Const(s.width - 1, I64)))
    copy = ir.Stmt("S", ir.Access(y, (*s.elem, k, j)), ir.Select(keep, source, CLEAR))
    return (
        *nest([("k", s.pieces)], ends),
        *nest([("k", s.pieces), ("j", s.width)], (copy,)),
    )


@register("StringSplit", since=20)
def lower_string_split(node: Node, ctx: LowerContext) -> Lowered:
    """StringSplit (see the module docstring).

    Example: ``["a.b.c", "d"]`` with ``delimiter="."`` gives ``Y = [["a", "b", "c"],
    ["d", "", ""]]``, ``Z = [3, 1]``; with ``maxsplit=1``, ``Y = [["a", "b.c"], ["d", ""]]``.
    """
    x = node.input(0)
    y, z = (list(node.outputs) + ["", ""])[:2]
    width = string_width(ctx.dtype(x))
    if width is None:
        raise unsupported(node, ctx, f"input {x!r} of type {ctx.dtype(x)} (it takes strings)")
    delimiter = str_attr(node, "delimiter", "")
    limit = node.attr("maxsplit")
    maxsplit = None if limit is None or int(limit) < 0 else int(limit)  # (< 0: as Python)
    bound = width // len(delimiter) + 1 if delimiter else (width + 1) // 2
    if maxsplit is not None:
        bound = min(bound, maxsplit + 1)
    static = not y or ctx.is_static(y)
    if y and static:
        bound = ctx.shape(y)[-1]  # (a constant input: the most substrings, known)
    iters = generic_iters(ctx.shape(x))
    shape = tuple(e for _, e in iters)
    per_w, per_k = (*shape, width), (*shape, bound)
    scalars = ("n", "cnt", "nxt", "eq") if delimiter else ("n", "cnt", "prev")
    dims = {what: shape for what in (*scalars, "z")}
    dims |= {"s_ord": per_w, "s_at": per_w, "e_ord": per_w, "st": per_k, "en": per_k}
    buffers = {
        what: ir.Buffer(f"{node.name}__{what}", I64, d)
        for what, d in dims.items()
        if not (what == "z" and z)
    }
    s = _Split(node, x, tuple(var(n) for n, _ in iters), width, bound, buffers)
    if z:  # (the counts are written where Z is)
        s.buffers["z"] = ir.Buffer(z, I64, shape)
    tables: tuple[tuple[str, np.ndarray], ...] = ()
    if delimiter:
        scan = _delimiter_scan(s, delimiter, maxsplit)
        tables = ((f"{node.name}__delimiter", np.array([ord(c) for c in delimiter], np.uint32)),)
    else:
        scan = _whitespace_scan(s, maxsplit)
    body = (*_length(s), *scan, *(_pieces(s, y) if y else ()))
    nests = nest(iters, body)
    if not all(shape):  # no strings: one empty nest that names Y (the scheduler plans no more)
        clear = ir.Stmt("S", ir.Access(y, (*s.elem, var("k"), var("j"))), CLEAR)
        nests = nest([*iters, ("k", bound), ("j", width)], (clear,)) if y else ()
    temps = tuple(b for what, b in s.buffers.items() if b.name != z)
    if static:
        return Lowered(nests, temps, constants=tables)
    count = ir.Buffer(f"{node.name}__count", I64, (1,))
    c_at, c_ld = ir.Access(count.name, (0,)), ir.Load(count.name, (ir.Aff.lift(0),), I64)
    most = (
        ir.Stmt("S", c_at, ZERO),
        *(nest(iters, (ir.Stmt("S", c_at, ir.maximum(c_ld, s.ld("z"))),)) if all(shape) else ()),
    )
    counts = ("",) * len(shape) + (count.name, "")
    return Lowered(
        (*nests, *most),
        (*temps, count),
        constants=tables,
        dynamic=(DynamicOutput(y, (*per_k, width), counts),),
    )
