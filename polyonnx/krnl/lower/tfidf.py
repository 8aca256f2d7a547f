"""TfIdfVectorizer: how often each n-gram of a pool occurs in each row of tokens, weighted.

The pool, its lengths and the output column of each of its n-grams are attributes, so they
are compile-time tables: each n-gram of a length within ``[min_gram_length,
max_gram_length]`` gets a count slot ``p`` and a row ``pool[p, :n]`` of its tokens. An
n-gram of length ``n`` is counted at every start ``i`` and every skip distance ``s`` (``1 ..
max_skip_count + 1``) whose tokens ``x[i], x[i + s], ..., x[i + (n - 1) s]`` lie in the row;
a unigram is counted once, whatever the skips (as onnx.reference and onnxruntime count).
Each length has its own nest, so ``k * s`` is a constant times an iterator (affine)::

    for r:
      for p <= P:  S: cnt[r, p] = 0                      (slot P stays 0)
      for p in the n-grams of length n, s in [1, S_n], i in [0, C - (n - 1) s):
        S: cnt[r, p] = cnt[r, p] + (x[r, i] == pool[p, 0] and ...
                                     x[r, i + (n-1) s] == pool[p, n-1] ? 1 : 0)
      for j < out:
        S: y[r, j] = sum over k of float(cnt[r, slots[j, k]])   (the n-grams of column j)
        S: y[r, j] = TF: y    IDF: y > 0 ? w[j] : 0    TFIDF: y * w[j]

``slots`` (a constant) lists the count slots of each output column, padded with ``P``. The
pool's integers are compared in int64 (an int32 row never equals a pool value beyond int32's
range). String tokens are first numbered: ``tok[r, i]`` is the index of the pool string equal
to ``x[r, i]`` (compared code point by code point, as LabelEncoder's keys are), -1 for none,
and the pool's rows hold those indices.

A pool n-gram listed twice counts only at its last place (the reference's n-gram tree keeps
the last id), in the column of that place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, str_attr, unsupported, var
from polyonnx.krnl.lower.ml_common import code_table, int_values, string_values
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"
ZERO, ONE = ir.Const(0, I64), ir.Const(1, I64)
MODES = ("TF", "IDF", "TFIDF")

Gram = tuple[object, ...]


def _int_attr(node: Node, name: str) -> int:
    """Required int attribute ``name``."""
    value = node.attr(name)
    if value is None:
        raise bad_attr(node, name, "is required")
    return int(value)


def _pool(node: Node, ctx: LowerContext, x: str) -> list[object]:
    """The pool's tokens (ints or strings), matching the input's type."""
    ints, strings = node.attr("pool_int64s"), node.attr("pool_strings")
    if ints is not None and strings is not None:
        raise bad_attr(node, "pool_int64s", "and 'pool_strings' are both given (one of them)")
    if ints is None and strings is None:
        raise bad_attr(node, "pool_int64s", "or 'pool_strings' is required")
    text = string_width(ctx.dtype(x)) is not None
    if strings is not None:
        if not text:
            raise unsupported(node, ctx, f"input of dtype {ctx.dtype(x)} with 'pool_strings'")
        return list(string_values(node, "pool_strings") or [])
    if text:
        raise unsupported(node, ctx, "string input with 'pool_int64s'")
    values = int_values(node, "pool_int64s")
    return [] if values is None else values.tolist()


def _grams(node: Node, ctx: LowerContext, x: str) -> tuple[dict[int, dict[Gram, int]], int]:
    """The n-grams counted, by length: each one's output column (a later duplicate replaces
    an earlier one); and the output's width, ``max(ngram_indexes) + 1``."""
    pool = _pool(node, ctx, x)
    low = _int_attr(node, "min_gram_length")
    high = _int_attr(node, "max_gram_length")
    if low < 1:
        raise bad_attr(node, "min_gram_length", f"must be positive, got {low}")
    if high < low:
        raise bad_attr(node, "max_gram_length", f"= {high} is below min_gram_length {low}")
    counts = int_values(node, "ngram_counts")
    indexes = int_values(node, "ngram_indexes")
    if counts is None:
        raise bad_attr(node, "ngram_counts", "is required")
    if indexes is None or not len(indexes):
        raise bad_attr(node, "ngram_indexes", "is required")
    if (indexes < 0).any():
        raise bad_attr(node, "ngram_indexes", f"must be non-negative, got {indexes.tolist()}")
    bounds = [*counts.tolist(), len(pool)]
    if any(not 0 <= a <= b <= len(pool) for a, b in zip(bounds, bounds[1:], strict=False)):
        raise bad_attr(
            node, "ngram_counts", f"= {counts.tolist()} must rise within the pool ({len(pool)})"
        )
    grams: dict[int, dict[Gram, int]] = {}
    ordinal = 0  # the n-gram's place in the pool, all lengths counted
    for level, (start, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        n = level + 1
        for g in range((end - start) // n):
            if low <= n <= high:
                if ordinal >= len(indexes):
                    raise bad_attr(
                        node, "ngram_indexes", f"has {len(indexes)} values, too few for the pool"
                    )
                tokens = tuple(pool[start + g * n : start + (g + 1) * n])
                grams.setdefault(n, {})[tokens] = int(indexes[ordinal])
            ordinal += 1
    return grams, int(indexes.max()) + 1


def _weights(node: Node, width: int) -> np.ndarray | None:
    """The weight of each output column, None when the node gives none (all ones)."""
    value = node.attr("weights")
    if value is None or not len(value):
        return None
    weights = np.asarray(value, dtype=np.float32).reshape(-1)
    if len(weights) < width:
        raise bad_attr(node, "weights", f"has {len(weights)} values for {width} output columns")
    return weights[:width]


@dataclass(frozen=True)
class _Rows:
    """The node's input as rows of ``cols`` tokens, and its output."""

    node: Node
    x: str
    dtype: str
    rows: int
    cols: int
    lead: tuple[ir.Aff, ...]  # the row's index in x and y: (r,), or () for a [C] input
    y: str
    out_dtype: str

    @property
    def text(self) -> bool:
        return string_width(self.dtype) is not None

    def token(self, at: ir.Aff) -> ir.Expr:
        """The token at column ``at`` of row ``r``, as an int64 (a string's number)."""
        if self.text:
            return ir.Load(f"{self.node.name}__tokens", (var("r"), at), I64)
        value = ir.Load(self.x, (*self.lead, at), self.dtype)
        return value if self.dtype == I64 else ir.Cast(value, I64)


def _rows(node: Node, ctx: LowerContext, width: int) -> _Rows:
    x, y = node.input(0), node.outputs[0]
    dtype = ctx.dtype(x)
    if dtype not in ("int32", "int64") and string_width(dtype) is None:
        raise unsupported(
            node, ctx, f"input {x!r} has dtype {dtype}; supported: int32, int64, string"
        )
    xs = ctx.shape(x)
    if len(xs) not in (1, 2):
        raise ShapeError(
            f"node {node.name!r} (TfIdfVectorizer): input {x!r} has shape {list(xs)}; "
            "it must be [N, C] or [C]"
        )
    want = (width,) if len(xs) == 1 else (xs[0], width)
    if ctx.shape(y) != want:
        raise ShapeError(
            f"node {node.name!r} (TfIdfVectorizer): output shape {list(ctx.shape(y))}, "
            f"expected {list(want)}"
        )
    out_dtype = ctx.dtype(y)
    if out_dtype not in ir.FLOAT_DTYPES:
        raise unsupported(node, ctx, f"output of dtype {out_dtype}")
    rows, cols = (1, xs[0]) if len(xs) == 1 else xs
    lead = () if len(xs) == 1 else (var("r"),)
    return _Rows(node, x, dtype, rows, cols, lead, y, out_dtype)


@register("TfIdfVectorizer", since=9)
def lower_tfidf_vectorizer(node: Node, ctx: LowerContext) -> Lowered:
    """TfIdfVectorizer over ``[C]`` or ``[N, C]`` tokens (int32, int64 or strings): see the
    module docstring."""
    mode = str_attr(node, "mode", "")
    if mode not in MODES:
        raise bad_attr(node, "mode", f"is {mode!r}: one of {', '.join(MODES)}")
    grams, width = _grams(node, ctx, node.input(0))
    skips = _int_attr(node, "max_skip_count")
    if skips < 0:
        raise bad_attr(node, "max_skip_count", f"must be non-negative, got {skips}")
    weights = _weights(node, width)
    t = _rows(node, ctx, width)
    if not grams or not t.cols or not t.rows:  # nothing to count: every count is 0
        zero = ir.Stmt("S", ir.Access(t.y, (*t.lead, var("j"))), ir.Const(0.0, t.out_dtype))
        return Lowered(nest([("r", t.rows), ("j", width)], (zero,)) if t.rows else ())

    # Compile-time tables: each counted n-gram's slot, tokens and output column (strings as
    # their number in the vocabulary).
    vocab = sorted({str(w) for g in grams.values() for gram in g for w in gram}) if t.text else []
    number = {w: k for k, w in enumerate(vocab)}
    entries = [(gram, col) for n in sorted(grams) for gram, col in grams[n].items()]
    table = np.zeros((len(entries), max(grams)), np.int64)
    slots_of: list[list[int]] = [[] for _ in range(width)]
    for p, (gram, col) in enumerate(entries):
        table[p, : len(gram)] = np.asarray([number[str(w)] for w in gram] if t.text else gram)
        slots_of[col].append(p)
    slots = np.full((width, max(map(len, slots_of))), len(entries), np.int64)  # slot P: 0
    for col, s in enumerate(slots_of):
        slots[col, : len(s)] = s

    name = node.name
    cnt = ir.Buffer(f"{name}__counts", I64, (t.rows, len(entries) + 1))
    temps: list[ir.Buffer] = [cnt]
    constants = [(f"{name}__pool", table), (f"{name}__slots", slots)]
    body: list[ir.Node] = []
    if t.text:
        body += _numbered(t, vocab, temps, constants)
    body += _counting(t, grams, skips, cnt.name)
    body += _columns(t, mode, weights, slots, cnt.name, constants)
    return Lowered(nest([("r", t.rows)], body), tuple(temps), constants=tuple(constants))


def _counting(
    t: _Rows, grams: dict[int, dict[Gram, int]], skips: int, cnt: str
) -> tuple[ir.Node, ...]:
    """Row ``r``'s count of each n-gram of the pool: ``cnt[r, p]``, slot ``P`` left 0."""
    pool = f"{t.node.name}__pool"
    p_at = ir.Access(cnt, (var("r"), var("p")))
    count = ir.Load(cnt, p_at.index, I64)
    slots = sum(len(g) for g in grams.values())
    body = list(nest([("p", slots + 1)], (ir.Stmt("S", p_at, ZERO),)))
    first = 0
    for n in sorted(grams):
        last = first + len(grams[n])
        # Skip distances at which an n-gram still fits in a row (unigrams: one).
        reach = 1 if n == 1 else min(skips + 1, (t.cols - 1) // (n - 1))
        if reach >= 1:
            s = var("s") if n > 1 else ir.Aff.lift(0)
            match: ir.Expr = ir.Const(True, "bool")
            for k in range(n):
                want = ir.Load(pool, (var("p"), ir.Aff.lift(k)), I64)
                same = ir.binary("eq", t.token(var("i") + s * k), want)
                match = same if k == 0 else ir.binary("and", match, same)
            bump = ir.Stmt("S", p_at, count + ir.Select(match, ONE, ZERO))
            starts = ir.Loop("i", 0, ir.Aff.lift(t.cols) - s * (n - 1), (bump,))
            inner: ir.Node = starts if n == 1 else ir.Loop("s", 1, reach + 1, (starts,))
            body.append(ir.Loop("p", first, last, (inner,)))
        first = last
    return tuple(body)


def _columns(
    t: _Rows,
    mode: str,
    weights: np.ndarray | None,
    slots: np.ndarray,
    cnt: str,
    constants: list[tuple[str, np.ndarray]],
) -> tuple[ir.Node, ...]:
    """Row ``r`` of the output: each column's counts summed, weighted as ``mode`` says."""
    name, dtype = t.node.name, t.out_dtype
    y_at = ir.Access(t.y, (*t.lead, var("j")))
    y_now = ir.Load(t.y, y_at.index, dtype)

    def counted(k: ir.AffLike) -> ir.Expr:
        slot = ir.Load(f"{name}__slots", (var("j"), ir.Aff.lift(k)), I64)
        return ir.Cast(ir.Load(cnt, (var("r"), slot), I64), dtype)

    total: ir.Expr = counted(0)
    column: tuple[ir.Node, ...] = ()
    if slots.shape[1] > 1:  # (a column with several n-grams)
        total = y_now
        column = (
            ir.Stmt("S", y_at, ir.Const(0.0, dtype)),
            *nest([("k", slots.shape[1])], (ir.Stmt("S", y_at, y_now + counted(var("k"))),)),
        )
    weight: ir.Expr = ir.Const(1.0, dtype)
    if weights is not None:
        weight = ir.Load(f"{name}__weights", (var("j"),), dtype)
        constants.append((f"{name}__weights", weights.astype(dtype)))
    value = total
    if mode == "IDF":
        value = ir.Select(
            ir.binary("gt", total, ir.Const(0.0, dtype)), weight, ir.Const(0.0, dtype)
        )
    elif mode == "TFIDF" and weights is not None:
        value = total * weight
    return nest([("j", slots.shape[0])], (*column, ir.Stmt("S", y_at, value)))


def _numbered(
    t: _Rows,
    vocab: Sequence[object],
    temps: list[ir.Buffer],
    constants: list[tuple[str, np.ndarray]],
) -> tuple[ir.Node, ...]:
    """In row ``r``: ``tok[r, i]``, the index in ``vocab`` of string ``x[r, i]``, -1 for
    none. The table of words is one code point wider than the input's strings: a word longer
    than them (its code point ``W`` is not padding) never matches."""
    name, x = t.node.name, t.x
    x_width = string_width(t.dtype) or 0
    tok = ir.Buffer(f"{name}__tokens", I64, (t.rows, t.cols))
    same_b = ir.Buffer(f"{name}__same", I64, (t.rows, t.cols))
    temps += [tok, same_b]
    words = f"{name}__words"
    constants.append((words, code_table([str(v) for v in vocab], x_width + 1)))
    at = (var("r"), var("i"))
    tok_at, tok_now = ir.Access(tok.name, at), ir.Load(tok.name, at, I64)
    same_at, same = ir.Access(same_b.name, at), ir.Load(same_b.name, at, I64)
    cut = ir.Load(words, (var("u"), ir.Aff.lift(x_width)), CODE_POINT)
    point = ir.binary(
        "eq",
        ir.Load(x, (*t.lead, var("i"), var("w")), CODE_POINT),
        ir.Load(words, (var("u"), var("w")), CODE_POINT),
    )
    per_word = (
        ir.Stmt("S", same_at, ir.Select(ir.binary("eq", cut, ir.Const(0, CODE_POINT)), ONE, ZERO)),
        *nest([("w", x_width)], (ir.Stmt("S", same_at, ir.Select(point, same, ZERO)),)),
        ir.Stmt("S", tok_at, ir.Select(ir.binary("ne", same, ZERO), ir.Iter("u"), tok_now)),
    )
    return nest(
        [("i", t.cols)],
        (ir.Stmt("S", tok_at, ir.Const(-1, I64)), *nest([("u", len(vocab))], per_word)),
    )
