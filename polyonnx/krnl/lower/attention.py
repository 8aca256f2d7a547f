"""Attention (opset 23-25): scaled dot-product attention as explicit loop nests.

Keys and values are first copied into the present caches (``past`` followed by the new
tokens; the ``present_key`` / ``present_value`` outputs, or temps). Then, per batch ``b``,
kv head ``hk``, query head within the group ``r`` (query head ``hk * reps + r``, so grouped
query attention stays affine) and query ``i``::

    for j: bias[j] = mask / causal / window / padding terms (-inf where not attended)
    for j: S[j] = sum_d (Q * sqrt(scale)) * (K * sqrt(scale)); softcap; S[j] += bias[j]
    max, exp and sum over j (a fully masked row gives zeros, not NaN)
    for v: Y[b, h, i, v] = sum_j S[j] * V[b, hk, j, v]

Everything follows the ONNX reference implementation: bias rows that are entirely ``-inf``
zero the probabilities, a mask shorter than the key length is padded with ``-inf``, the
causal frontier is offset by the past length or ``nonpad_kv_seqlen - q_len``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import Aff, bad_attr, nest, unsupported, var
from polyonnx.krnl.lower.encoding import encode, round_bfloat16, widen
from polyonnx.krnl.lower.gather import as_int64
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"


def _cast(e: ir.Expr, dtype: str) -> ir.Expr:
    """``e`` as ``dtype``: a float computed in ``cdt`` stored (a bfloat16 encoded), or a
    loaded float read in ``cdt`` (a bfloat16 decoded)."""
    if dtype == "bfloat16":
        return encode(e if e.dtype == "float32" else ir.Cast(e, "float32"), dtype, saturate=False)
    if e.dtype == "bfloat16":
        return widen(e, dtype)
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def _to_bfloat16(value: float) -> float:
    """``value`` rounded to bfloat16 from float64, as the reference's ``Q.dtype.type(x)``."""
    return float(ml_dtypes.bfloat16(np.float64(value)))


@dataclass(frozen=True, slots=True)
class _Shapes:
    """The sizes of one Attention: ``hq`` query heads in groups of ``reps`` per kv head,
    ``sq`` queries, ``skv`` new keys after ``past`` cached ones (``total``), head widths
    ``dq`` (queries and keys) and ``dv`` (values); ``three_d`` inputs keep the heads in their
    last axis."""

    three_d: bool
    batch: int
    hq: int
    hkv: int
    sq: int
    skv: int
    dq: int
    dv: int
    past: int

    @property
    def reps(self) -> int:
        return self.hq // self.hkv

    @property
    def total(self) -> int:
        return self.past + self.skv


def _shapes(node: Node, ctx: LowerContext) -> _Shapes:
    q, k, v, past_k = node.input(0), node.input(1), node.input(2), node.input(4)
    qs, ks, vs = ctx.shape(q), ctx.shape(k), ctx.shape(v)
    three_d = len(qs) == 3
    if three_d:
        hq, hkv = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if hq is None or hkv is None:
            raise bad_attr(node, "q_num_heads", "and kv_num_heads are required for 3-D inputs")
        hq, hkv = int(hq), int(hkv)
        batch, sq = qs[0], qs[1]
        skv = ks[1]
        dq, dv = qs[2] // hq, vs[2] // hkv
    else:
        batch, hq, sq, dq = qs
        hkv, skv, dv = ks[1], ks[2], vs[3]
    if hq % hkv:
        raise ShapeError(
            f"node {node.name!r} (Attention): {hq} query heads are not a multiple of {hkv} kv heads"
        )
    past = ctx.shape(past_k)[2] if past_k else 0
    return _Shapes(three_d, batch, hq, hkv, sq, skv, dq, dv, past)


@register("Attention", since=23)
def lower_attention(node: Node, ctx: LowerContext) -> Lowered:
    """Attention with GQA/MQA, 3-D or 4-D inputs, masks, causal/window, caches, softcap."""
    q, y = node.input(0), node.outputs[0]
    qk_out = node.outputs[3] if len(node.outputs) > 3 else ""
    dtype = ctx.dtype(q)
    if dtype not in (*ir.FLOAT_DTYPES, "bfloat16"):
        raise unsupported(node, ctx, f"dtype {dtype}")
    precision = int(node.attr("softmax_precision", 0) or 0)
    cdt = "float64" if dtype == "float64" or precision == 11 else "float32"
    sh = _shapes(node, ctx)
    scale_attr = node.attr("scale")
    scale = float(scale_attr) if scale_attr is not None else 1 / math.sqrt(sh.dq)
    root = math.sqrt(scale)
    softcap = float(node.attr("softcap", 0.0) or 0.0)
    # bfloat16 computes in float32, rounded where the function body has a bfloat16 tensor:
    # the scale and softcap constants, Q and K scaled, the scores (a MatMul), each step of the
    # softcap, the biased scores, the softmax's steps (unless softmax_precision computes it
    # in another type) and its result. Sums accumulate in float32, as MatMul's reference does.
    bf16 = dtype == "bfloat16"

    def rnd(e: ir.Expr) -> ir.Expr:
        return widen(round_bfloat16(e), cdt) if bf16 else e

    soft_rnd = rnd if precision in (0, 16) else lambda e: e
    if bf16:
        root, softcap = _to_bfloat16(root), _to_bfloat16(softcap)
    mode = int(node.attr("qk_matmul_output_mode", 0))
    temps: list[ir.Buffer] = []

    def temp(what: str, shape: tuple[int, ...], dt: str = cdt) -> str:
        buf = ir.Buffer(f"{node.name}__{what}", dt, shape)
        temps.append(buf)
        return buf.name

    nests, key, value = _present_caches(node, ctx, sh, temp)
    bias = _bias(node, ctx, sh, cdt, rnd)

    b_, hk_, i_, j_, d_ = (var(n) for n in ("b", "hk", "i", "j", "d"))
    h_ = hk_ * sh.reps + var("r")
    total = sh.total
    neg_inf, zero = ir.Const(float("-inf"), cdt), ir.Const(0.0, cdt)
    row = temp("bias", (total,))
    s = temp("scores", (total,))
    stats = temp("stats", (3,))  # max of bias, max of scores, sum
    acc = temp("acc", (sh.dv,))
    j_at = ir.Access(row, (j_,))
    s_at = ir.Access(s, (j_,))
    s_load = ir.Load(s, (j_,), cdt)
    bias_load = ir.Load(row, (j_,), cdt)
    bm_at, m_at, z_at = (ir.Access(stats, (n,)) for n in (0, 1, 2))
    bm, m, z = (ir.Load(stats, (Aff.lift(n),), cdt) for n in (0, 1, 2))
    q_index = (b_, i_, h_ * sh.dq + d_) if sh.three_d else (b_, h_, i_, d_)
    q_load = rnd(_cast(ir.Load(q, q_index, dtype), cdt) * root)
    k_load = rnd(_cast(ir.Load(key, (b_, hk_, j_, d_), dtype), cdt) * root)
    qk_at = ir.Access(qk_out, (b_, h_, i_, j_)) if qk_out else None

    def qk_write(when: int, e: ir.Expr) -> tuple[ir.Stmt, ...]:
        if qk_at is None or mode != when:
            return ()
        return (ir.Stmt("S", qk_at, _cast(e, ctx.dtype(qk_out))),)

    if mode not in (0, 1, 2, 3):
        raise bad_attr(node, "qk_matmul_output_mode", f"must be 0-3, got {mode}")
    score_body: list[ir.Node] = [
        ir.Stmt("S", s_at, zero),
        *nest([("d", sh.dq)], (ir.Stmt("S", s_at, s_load + q_load * k_load),)),
    ]
    if bf16:
        score_body.append(ir.Stmt("S", s_at, rnd(s_load)))
    if softcap > 0:
        capped = rnd(rnd(ir.unary("tanh", rnd(s_load / softcap))) * softcap)
        score_body.append(ir.Stmt("S", s_at, capped))
    score_body += [
        *qk_write(0, s_load),
        *qk_write(1, s_load),
        ir.Stmt("S", s_at, rnd(s_load + bias_load)),
        *qk_write(2, s_load),
    ]
    is_neg_inf = ir.Binary("eq", m, neg_inf)
    safe_max = ir.Select(is_neg_inf, zero, m)
    z_rounded = soft_rnd(z)
    safe_sum = ir.Select(ir.Binary("eq", z_rounded, zero), ir.Const(1.0, cdt), z_rounded)
    prob = ir.Select(ir.Binary("eq", bm, neg_inf), zero, rnd(soft_rnd(s_load / safe_sum)))
    v_load = _cast(ir.Load(value, (b_, hk_, j_, var("v")), dtype), cdt)
    acc_at = ir.Access(acc, (var("v"),))
    acc_load = ir.Load(acc, (var("v"),), cdt)
    y_index = (b_, i_, h_ * sh.dv + var("v")) if sh.three_d else (b_, h_, i_, var("v"))
    body = (
        *nest([("j", total)], (ir.Stmt("S", j_at, bias),)),
        ir.Stmt("S", bm_at, neg_inf),
        *nest([("j", total)], (ir.Stmt("S", bm_at, ir.maximum(bm, bias_load)),)),
        *nest([("j", total)], score_body),
        ir.Stmt("S", m_at, neg_inf),
        *nest([("j", total)], (ir.Stmt("S", m_at, ir.maximum(m, s_load)),)),
        ir.Stmt("S", z_at, zero),
        *nest(
            [("j", total)],
            (
                ir.Stmt("S", s_at, soft_rnd(ir.unary("exp", soft_rnd(s_load - safe_max)))),
                ir.Stmt("S", z_at, z + s_load),
            ),
        ),
        *nest([("j", total)], (ir.Stmt("S", s_at, prob), *qk_write(3, s_load))),
        *nest(
            [("v", sh.dv)],
            (
                ir.Stmt("S", acc_at, zero),
                *nest([("j", total)], (ir.Stmt("S", acc_at, acc_load + s_load * v_load),)),
                ir.Stmt("S", ir.Access(y, y_index), _cast(acc_load, ctx.dtype(y))),
            ),
        ),
    )
    nests += nest([("b", sh.batch), ("hk", sh.hkv), ("r", sh.reps), ("i", sh.sq)], body)
    return Lowered(tuple(nests), tuple(temps))


def _present_caches(
    node: Node, ctx: LowerContext, sh: _Shapes, temp: Callable[[str, tuple[int, ...], str], str]
) -> tuple[list[ir.Node], str, str]:
    """The copies into the present key and value caches (``past`` followed by the new
    tokens: the ``present_key`` / ``present_value`` outputs, or temps), and their names."""
    k, v, past_k, past_v = node.input(1), node.input(2), node.input(4), node.input(5)
    present_k_out = node.outputs[1] if len(node.outputs) > 1 else ""
    present_v_out = node.outputs[2] if len(node.outputs) > 2 else ""
    dtype = ctx.dtype(node.input(0))
    b_, hk_, j_, d_ = (var(n) for n in ("b", "hk", "j", "d"))
    nests: list[ir.Node] = []
    caches = []
    for new, old, out, width, what in (
        (k, past_k, present_k_out, sh.dq, "key"),
        (v, past_v, present_v_out, sh.dv, "value"),
    ):
        name = out or temp(what, (sh.batch, sh.hkv, sh.total, width), dtype)
        caches.append(name)
        iters = [("b", sh.batch), ("hk", sh.hkv)]
        if old:
            nests += nest(
                iters + [("j", sh.past), ("d", width)],
                (
                    ir.Stmt(
                        "S",
                        ir.Access(name, (b_, hk_, j_, d_)),
                        ir.Load(old, (b_, hk_, j_, d_), dtype),
                    ),
                ),
            )
        src = (b_, j_, hk_ * width + d_) if sh.three_d else (b_, hk_, j_, d_)
        nests += nest(
            iters + [("j", sh.skv), ("d", width)],
            (ir.Stmt("S", ir.Access(name, (b_, hk_, j_ + sh.past, d_)), ir.Load(new, src, dtype)),),
        )
    return nests, caches[0], caches[1]


def _bias(
    node: Node, ctx: LowerContext, sh: _Shapes, cdt: str, rnd: Callable[[ir.Expr], ir.Expr]
) -> ir.Expr:
    """The bias of key ``j`` for query ``i``: the float mask's value (or 0; ``rnd``: as
    Q's type holds it), and ``-inf`` where a boolean mask, the causal frontier, the window
    or the padding leaves it out."""
    mask, past_k, nonpad = node.input(3), node.input(4), node.input(6)
    causal = bool(node.attr("is_causal", 0))
    left = int(node.attr("left_window_size", -1))
    right = int(node.attr("right_window_size", -1))
    jj, ii = ir.Iter("j"), ir.Iter("i")
    terms: list[ir.Expr] = []
    bias: ir.Expr = ir.Const(0.0, cdt)
    float_mask = _mask_terms(node, ctx, sh, cdt, terms) if mask else None
    if float_mask is not None:
        bias = rnd(float_mask)
    offset: ir.Expr
    if past_k:
        offset = ir.Const(sh.past, I64)
    elif nonpad:
        offset = as_int64(ir.Load(nonpad, (var("b"),), ctx.dtype(nonpad))) - ir.Const(sh.sq, I64)
    else:
        offset = ir.Const(0, I64)
    position = ii + offset
    if causal:
        terms.append(ir.Binary("le", jj, position))
    if left >= 0:
        terms.append(ir.Binary("le", position - jj, ir.Const(left, I64)))
    if right >= 0:
        terms.append(ir.Binary("le", jj - position, ir.Const(right, I64)))
    if nonpad:
        terms.append(ir.Binary("lt", jj, as_int64(ir.Load(nonpad, (var("b"),), ctx.dtype(nonpad)))))
    if not terms:
        return bias
    allowed = terms[0]
    for cond in terms[1:]:
        allowed = ir.Binary("and", allowed, cond)
    return ir.Select(allowed, bias, ir.Const(float("-inf"), cdt))


def _mask_terms(
    node: Node, ctx: LowerContext, sh: _Shapes, cdt: str, terms: list[ir.Expr]
) -> ir.Expr | None:
    """The attention mask: appends its conditions to ``terms`` (a boolean mask; positions past
    a mask shorter than the keys) and returns a float mask's value as the bias, else None."""
    mask = node.input(3)
    ms = ctx.shape(mask)
    jj = ir.Iter("j")
    full = (sh.batch, sh.hq, sh.sq, sh.total)
    names = (var("b"), var("hk") * sh.reps + var("r"), var("i"), var("j"))
    idx: list[Aff] = []
    for pos, size in enumerate(ms):
        axis = 4 - len(ms) + pos
        idx.append(Aff.lift(0) if size == 1 and full[axis] != 1 and axis != 3 else names[axis])
    length = ms[-1]
    short = length < sh.total
    if short:
        terms.append(ir.Binary("lt", jj, ir.Const(length, I64)))
        idx[-1] = Aff.lift(0) if length == 0 else idx[-1]
    # Clamp the read so positions past a short mask stay in range.
    index: tuple[ir.Index, ...] = (
        (*idx[:-1], ir.minimum(jj, ir.Const(length - 1, I64))) if short else tuple(idx)
    )
    if ctx.dtype(mask) == "bool":
        terms.append(ir.Load(mask, index, "bool"))
        return None
    return _cast(ir.Load(mask, index, ctx.dtype(mask)), cdt)
