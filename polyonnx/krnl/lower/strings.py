"""StringNormalizer, StringConcat and Equal of strings: loops over code points, strings held
as :mod:`polyonnx.graph.strings` says (``x[..., c, w]``: the ``w``-th code point of string
``c``, zero-padded to the width ``W``).

Case change maps each code point through a table built at compile time (a weight): Python's
``str.lower`` / ``str.upper`` of each code point of the Basic Multilingual Plane whose mapping
is one code point; others (``ß``, whose upper case is ``SS``; code points past the BMP) stay
as they are. No accents are stripped (onnxruntime strips none; ``onnx.reference`` does).

Stopwords are removed as whole strings, compared code point by code point: as they are when
``is_case_sensitive``, otherwise both sides lower-cased by the table. A stopword longer than
``W`` matches nothing and is dropped at compile time; the others are a constant
``stop[K, W]``, zero-padded as the input is. With stopwords the output's extent is known only
at run time (:class:`~polyonnx.krnl.lower.registry.DynamicOutput`); the kept strings move to
the front in order, and an input whose every string is removed gives one empty string::

    for c:        S: hit[c] = 0
                  for s: S: same[c] = 1
                         for w: S: same[c] = fold(x[c, w]) == stop[s, w] ? same[c] : 0
                         S: hit[c] = same[c] != 0 ? 1 : hit[c]
    S: count = 0
    for c:        S: slot[c] = count;  S: count = count + 1 - hit[c]   (sequential)
    for r:        S: src[r] = 0
                  for c: S: src[r] = hit[c] == 0 and slot[c] == r ? c : src[r]
    for r, w:     S: y[r, w] = r < count ? case(x[src[r], w]) : 0
    S: count = max(count, 1)

``O(C K W)`` to match, ``O(C^2)`` to compact (every write affine).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    bad_attr,
    broadcast_index,
    generic_iters,
    nest,
    str_attr,
    unsupported,
    var,
)
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, register

I64 = "int64"
ZERO, ONE = ir.Const(0, I64), ir.Const(1, I64)
CLEAR = ir.Const(0, CODE_POINT)  # the padding after a string's last code point
#: The code points the case tables cover: the Basic Multilingual Plane.
TABLE_SIZE = 1 << 16


@cache
def case_table(action: str) -> np.ndarray:
    """``table[cp]``: code point ``cp`` lower- or upper-cased (``action`` ``LOWER`` or
    ``UPPER``) when that gives one code point, else ``cp``.

    Example:
        >>> t = case_table("UPPER")
        >>> chr(t[ord("é")]), chr(t[ord("ß")]), chr(t[ord("1")])
        ('É', 'ß', '1')
    """
    change = str.lower if action == "LOWER" else str.upper
    table = np.arange(TABLE_SIZE, dtype=np.uint32)
    for cp in range(TABLE_SIZE):
        mapped = change(chr(cp))
        if len(mapped) == 1:
            table[cp] = ord(mapped)
    table.flags.writeable = False
    return table


def _mapped(table: str, cp: ir.Expr) -> ir.Expr:
    """``cp`` through the case table named ``table`` (code points past it unchanged)."""
    last = ir.Const(TABLE_SIZE - 1, CODE_POINT)
    inside = ir.Binary("le", cp, last)
    # (The clamp keeps the load inside the table for the code points the select discards.)
    at = ir.Cast(ir.minimum(cp, last), I64)
    return ir.Select(inside, ir.Load(table, (at,), CODE_POINT), cp)


def _stop_table(stopwords: list[str], width: int, fold: np.ndarray | None) -> np.ndarray:
    """The stopwords that fit ``width``, folded through ``fold`` (None: as they are), as a
    zero-padded ``uint32[K, width]``, duplicates removed."""
    rows = []
    for word in dict.fromkeys(stopwords):
        if len(word) > width:
            continue  # longer than any input string: it matches nothing
        cps = np.array([ord(ch) for ch in word], dtype=np.uint32)
        if fold is not None:
            cps = np.where(cps < TABLE_SIZE, fold[np.minimum(cps, TABLE_SIZE - 1)], cps)
        rows.append(np.pad(cps, (0, width - len(word))))
    return np.array(rows, dtype=np.uint32).reshape(len(rows), width)


@dataclass(frozen=True)
class _Temps:
    """A node's int64 scratch vectors (``what`` -> buffer), loaded and stored by iterator."""

    buffers: dict[str, ir.Buffer]

    def at(self, what: str, i: str = "") -> ir.Access:
        return ir.Access(self.buffers[what].name, (var(i) if i else ir.Aff.lift(0),))

    def ld(self, what: str, i: ir.Index | str = "") -> ir.Load:
        index = var(i) if isinstance(i, str) and i else (i or ir.Aff.lift(0))
        return ir.Load(self.buffers[what].name, (index,), I64)


def _matching(t: _Temps, equal: ir.Expr, stopwords: int, width: int) -> tuple[ir.Node, ...]:
    """``hit[c]``: whether string ``c`` equals one of the stopwords (``equal``: code point
    ``w`` of string ``c`` equals that of stopword ``s``)."""
    same = ir.Select(equal, t.ld("same", "c"), ZERO)
    hit = ir.Select(ir.Binary("ne", t.ld("same", "c"), ZERO), ONE, t.ld("hit", "c"))
    return (
        ir.Stmt("S", t.at("hit", "c"), ZERO),
        *nest(
            [("s", stopwords)],
            (
                ir.Stmt("S", t.at("same", "c"), ONE),
                *nest([("w", width)], (ir.Stmt("S", t.at("same", "c"), same),)),
                ir.Stmt("S", t.at("hit", "c"), hit),
            ),
        ),
    )


def _compaction(t: _Temps, n: int) -> tuple[ir.Node, ...]:
    """``count``, the strings not hit, and ``src[r]``: the index of the ``r``-th of them."""
    kept = ir.Binary("eq", t.ld("hit", "c"), ZERO)
    slot_r = ir.Binary("and", kept, ir.Binary("eq", t.ld("slot", "c"), ir.Iter("r")))
    return (
        ir.Stmt("S", t.at("count"), ZERO),
        *nest(
            [("c", n)],
            (
                ir.Stmt("S", t.at("slot", "c"), t.ld("count")),
                ir.Stmt("S", t.at("count"), t.ld("count") + ONE - t.ld("hit", "c")),
            ),
        ),
        *nest(
            [("r", n)],
            (
                ir.Stmt("S", t.at("src", "r"), ZERO),
                *nest(
                    [("c", n)],
                    (
                        ir.Stmt(
                            "S",
                            t.at("src", "r"),
                            ir.Select(slot_r, ir.Iter("c"), t.ld("src", "r")),
                        ),
                    ),
                ),
            ),
        ),
    )


@register("StringNormalizer", since=10)
def lower_string_normalizer(node: Node, ctx: LowerContext) -> Lowered:
    """StringNormalizer (see the module docstring): case change and stopword removal.

    Example: ``["Monday", "tuesday"]`` with ``case_change_action="UPPER"`` and stopword
    ``"monday"`` (case-insensitive) gives ``["TUESDAY"]``.
    """
    x, y = node.input(0), node.outputs[0]
    width = string_width(ctx.dtype(x))
    if width is None:
        raise unsupported(node, ctx, f"input {x!r} of type {ctx.dtype(x)} (it takes strings)")
    xs = ctx.shape(x)
    if len(xs) not in (1, 2) or (len(xs) == 2 and xs[0] != 1):
        raise ShapeError(
            f"node {node.name!r} (StringNormalizer): input {x!r} has shape {list(xs)}; "
            "it must be [C] or [1, C]"
        )
    action = str_attr(node, "case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        raise bad_attr(node, "case_change_action", f"is {action!r}: NONE, LOWER or UPPER")
    stopwords = [w.decode() if isinstance(w, bytes) else str(w) for w in node.attr("stopwords", ())]
    n, lead = xs[-1], (ir.Aff.lift(0),) * (len(xs) - 1)
    tables = {f"{node.name}__{a.lower()}": case_table(a) for a in (action,) if a != "NONE"}

    def code(c: ir.Index, w: ir.Index) -> ir.Load:
        return ir.Load(x, (*lead, c, w), CODE_POINT)

    def changed(cp: ir.Expr) -> ir.Expr:
        return cp if action == "NONE" else _mapped(f"{node.name}__{action.lower()}", cp)

    def out(r: ir.Aff) -> ir.Access:
        return ir.Access(y, (*lead, r, var("w")))

    if not stopwords:
        body = (ir.Stmt("S", out(var("c")), changed(code(var("c"), var("w")))),)
        return Lowered(nest([("c", n), ("w", width)], body), constants=tuple(tables.items()))
    counts = ("",) * len(lead) + (f"{node.name}__count", "")
    if n == 0:  # (the spec's rule below, with nothing to read)
        count = ir.Buffer(counts[-2], I64, (1,), "temp")
        return Lowered(
            (
                ir.Stmt("S", ir.Access(count.name, (0,)), ONE),
                *nest([("w", width)], (ir.Stmt("S", out(ir.Aff.lift(0)), CLEAR),)),
            ),
            (count,),
            dynamic=(DynamicOutput(y, (*xs[:-1], 1, width), counts),),
        )
    fold = None if node.attr("is_case_sensitive", 0) else case_table("LOWER")
    stops = _stop_table(stopwords, width, fold)
    t = _Temps(
        {
            what: ir.Buffer(f"{node.name}__{what}", I64, (1,) if what == "count" else (n,))
            for what in ("hit", "same", "slot", "src", "count")
        }
    )
    matching: tuple[ir.Node, ...] = (ir.Stmt("S", t.at("hit", "c"), ZERO),)
    if len(stops):
        tables[f"{node.name}__stopwords"] = stops
        folded: ir.Expr = code(var("c"), var("w"))
        if fold is not None:
            tables[f"{node.name}__lower"] = fold
            folded = _mapped(f"{node.name}__lower", folded)
        stop = ir.Load(f"{node.name}__stopwords", (var("s"), var("w")), CODE_POINT)
        matching = _matching(t, ir.Binary("eq", folded, stop), len(stops), width)
    kept = ir.Select(
        ir.Binary("lt", ir.Iter("r"), t.ld("count")),
        changed(code(t.ld("src", "r"), var("w"))),
        CLEAR,
    )
    nests = (
        *nest([("c", n)], matching),
        *_compaction(t, n),
        *nest([("r", n), ("w", width)], (ir.Stmt("S", out(var("r")), kept),)),
        # The spec's rule: an input whose every string is removed gives one empty string.
        ir.Stmt("S", t.at("count"), ir.maximum(t.ld("count"), ONE)),
    )
    return Lowered(
        nests,
        tuple(t.buffers.values()),
        constants=tuple(tables.items()),
        dynamic=(DynamicOutput(y, (*xs, width), counts),),
    )


def _broadcast_strings(
    node: Node, ctx: LowerContext
) -> tuple[list[tuple[str, int]], tuple[tuple[ir.Aff, ...], ...], tuple[int, ...]]:
    """The element loops of a broadcasting op over two string inputs: (loops, each input's
    element index, each input's width). UnsupportedOpError for an input that is no string."""
    out_shape = ctx.shape(node.outputs[0])
    iters = generic_iters(out_shape)
    names = [name for name, _ in iters]
    index, widths = [], []
    for name in node.inputs[:2]:
        width = string_width(ctx.dtype(name))
        if width is None:
            raise unsupported(node, ctx, f"input {name!r} of type {ctx.dtype(name)} with strings")
        index.append(broadcast_index(ctx.shape(name), out_shape, names))
        widths.append(width)
    return iters, tuple(index), tuple(widths)


def string_equal(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Equal of two string tensors (broadcast): equal code points over the common width, and
    the longer input's code points past it all padding::

        for i:  S: y[i] = True
                for w in [0, min(Wa, Wb)):  S: y[i] = a[i, w] == b[i, w] ? y[i] : False
                for w in [Wb, Wa):          S: y[i] = a[i, w] == 0 ? y[i] : False
    """
    iters, (ia, ib), (wa, wb) = _broadcast_strings(node, ctx)
    a, b, y = node.input(0), node.input(1), node.outputs[0]
    at = ir.Access(y, tuple(var(n) for n, _ in iters))
    same = ir.Load(y, at.index, "bool")

    def unless(cond: ir.Expr) -> ir.Stmt:
        return ir.Stmt("S", at, ir.Select(cond, same, ir.Const(False, "bool")))

    def point(name: str, index: tuple[ir.Aff, ...]) -> ir.Load:
        return ir.Load(name, (*index, var("w")), CODE_POINT)

    common = min(wa, wb)
    body: list[ir.Node] = [
        ir.Stmt("S", at, ir.Const(True, "bool")),
        ir.Loop("w", 0, common, (unless(ir.Binary("eq", point(a, ia), point(b, ib))),)),
    ]
    longer, index, width = (a, ia, wa) if wa > wb else (b, ib, wb)
    if width > common:
        body.append(
            ir.Loop("w", common, width, (unless(ir.Binary("eq", point(longer, index), CLEAR)),))
        )
    return nest(iters, body)


@register("StringConcat", since=20)
def lower_string_concat(node: Node, ctx: LowerContext) -> Lowered:
    """StringConcat (broadcast): ``b``'s code points after ``a``'s, where ``a``'s end is
    counted at run time (its non-padding code points)::

        for i:  S: n[i] = 0
                for w in [0, Wa):       S: n[i] = n[i] + (a[i, w] != 0)
                for w in [0, Wa + Wb):  S: y[i, w] = w < n[i] ? a[i, min(w, Wa - 1)]
                                                   : w - n[i] < Wb ? b[i, w - n[i]] : 0
    """
    iters, (ia, ib), (wa, wb) = _broadcast_strings(node, ctx)
    a, b, y = node.input(0), node.input(1), node.outputs[0]
    shape = ctx.shape(y)
    length = ir.Buffer(f"{node.name}__length", I64, shape)
    elem = tuple(var(n) for n, _ in iters)
    n_at, n = ir.Access(length.name, elem), ir.Load(length.name, elem, I64)
    w = ir.Iter("w")
    into_b = w - n
    # (Clamps keep the reads inside a and b where the selects discard them.)
    from_a = ir.Load(a, (*ia, ir.minimum(w, ir.Const(wa - 1, I64))), CODE_POINT)
    from_b = ir.Load(
        b, (*ib, ir.minimum(ir.maximum(into_b, ZERO), ir.Const(wb - 1, I64))), CODE_POINT
    )
    value = ir.Select(
        ir.Binary("lt", w, n),
        from_a,
        ir.Select(ir.Binary("lt", into_b, ir.Const(wb, I64)), from_b, CLEAR),
    )
    counted = ir.Select(ir.Binary("ne", ir.Load(a, (*ia, var("w")), CODE_POINT), CLEAR), ONE, ZERO)
    body = (
        ir.Stmt("S", n_at, ZERO),
        ir.Loop("w", 0, wa, (ir.Stmt("S", n_at, n + counted),)),
        ir.Loop("w", 0, wa + wb, (ir.Stmt("S", ir.Access(y, (*elem, var("w"))), value),)),
    )
    return Lowered(nest(iters, body), (length,))
