"""ONNX-ML support vector machines: SVMClassifier and SVMRegressor (what skl2onnx writes for
SVC, NuSVC, SVR, NuSVR and OneClassSVM). With support vectors the kernel of each sample and
each vector is a nest over the features, then the decision values a GEMM-like nest over the
vectors::

    for s, v:  S: K[s, v] = 0
               for f:  S: K[s, v] = K[s, v] + X[s, f] * SV[v, f]     (RBF: (X - SV)^2)
               S: K[s, v] = kernel(K[s, v])
                 LINEAR  k      POLY  (gamma k + coef0)^degree
                 RBF     exp(-gamma k)    SIGMOID  tanh(gamma k + coef0)
    for s, c:  S: D[s, c] = sum_v W[c, v] * K[s, v] + rho[c]

Without support vectors (the liblinear form) the scores are ``X coefficients^T + rho[0]``.

SVMClassifier's one-vs-one classifiers ``c = (i, j)``, ``i < j``, read their two classes'
vectors: ``W[c]`` holds row ``j - 1`` of the coefficients on class ``i``'s vectors and row
``i`` on class ``j``'s, zero elsewhere (a dense table built at compile time). A positive
decision votes for ``i``, else for ``j``; the label is the first class with the most votes.
With ``prob_a``/``prob_b`` the scores are Platt's pairwise probabilities
``clamp(1 - logistic(D * a + b), 1e-7, 1 - 1e-7)`` coupled into class probabilities by
libsvm's iterative method (Wu, Lin and Weng 2004: at most 100 rounds, stopping when every
``|Qp_i - pQp| < 0.005 / classes``; a stopped row keeps its values through the remaining
rounds, each a bounded loop). Results follow onnxruntime, whose float32 arithmetic this
follows (decision sums in float64 as it does):

- scores without probabilities: the ``classes (classes - 1) / 2`` decision values; with two
  classes ``[-d, d]`` (NONE), ``[logistic(-d), logistic(d)]`` (LOGISTIC) or ``[1 - d, d]``
  (SOFTMAX, SOFTMAX_ZERO: onnxruntime does not apply them there); PROBIT is refused there
  (onnxruntime leaves the second score unset).
- the liblinear form with two classes labels by onnxruntime's rule: the second class when the
  top score is above 0 (0.5 when every coefficient is >= 0), else the top class.
- onnx.reference differs: its coupling multiplies a row by a column where libsvm multiplies
  elementwise, and it transforms the two-class scores.

SVMRegressor: ``Y[N, 1]``; ``one_class`` maps a positive value to 1, the rest to -1; a
post_transform other than NONE is refused (onnxruntime ignores it, onnx.reference refuses it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, str_attr, unsupported, var
from polyonnx.krnl.lower.ml_common import (
    choice_attr,
    float_values,
    int_values,
    post_transform,
    post_transform_attr,
    register_ml,
)
from polyonnx.krnl.lower.ml_linear import (
    cast_copy,
    class_labels,
    features,
    gemm_scores,
    x_load,
)
from polyonnx.krnl.lower.ml_trees import _labels
from polyonnx.krnl.lower.registry import LowerContext, Lowered

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
I64 = "int64"
#: onnxruntime's coupling: at most this many rounds.
ROUNDS = 100


def _floats(node: Node, name: str) -> np.ndarray:
    values = float_values(node, name)
    return np.zeros(0) if values is None else values.astype(np.float64)


def _kernel_params(node: Node) -> tuple[float, float, float]:
    params = _floats(node, "kernel_params")
    if not len(params):
        return 0.0, 0.0, 0.0
    if len(params) != 3:
        raise bad_attr(node, "kernel_params", f"has {len(params)} values: gamma, coef0, degree")
    return float(params[0]), float(params[1]), float(params[2])


def _kernels(
    node: Node, ctx: LowerContext, x: str, vectors: np.ndarray, kernel: str, work: str
) -> tuple[tuple[ir.Node, ...], ir.Buffer, list[tuple[str, np.ndarray]]]:
    """``K[s, v]``, the kernel of sample ``s`` and support vector ``v`` (module docstring)."""
    rows, cols = ctx.shape(x)
    count = vectors.shape[0]
    gamma, coef0, degree = _kernel_params(node)
    p = f"{node.name}__"
    k = ir.Buffer(f"{p}kernel", work, (rows, count))
    at = ir.Access(k.name, (var("s"), var("v")))
    kl = ir.Load(k.name, (var("s"), var("v")), work)
    sv = ir.Load(f"{p}vectors", (var("v"), var("f")), work)
    xv = x_load(ctx, x, work)

    def c(value: float) -> ir.Const:
        return ir.Const(value, work)

    term = (xv - sv) * (xv - sv) if kernel == "RBF" else xv * sv
    final: ir.Expr | None = None
    if kernel == "RBF":
        final = ir.unary("exp", c(-gamma) * kl)
    elif kernel in ("POLY", "SIGMOID"):
        base = c(gamma) * kl + c(coef0)
        if kernel == "SIGMOID":
            final = ir.unary("tanh", base)
        elif degree == int(degree) and 0 <= degree <= 16:
            final = c(1.0)
            for _ in range(int(degree)):
                final = base if isinstance(final, ir.Const) else final * base
        else:
            final = ir.binary("pow", base, c(degree))
    body: list[ir.Node] = [ir.Stmt("S", at, c(0.0))]
    if cols:
        body += nest([("f", cols)], (ir.Stmt("S", at, kl + term),))
    if final is not None:
        body.append(ir.Stmt("S", at, final))
    return nest([("s", rows), ("v", count)], body), k, [(f"{p}vectors", vectors.astype(work))]


def _vectors(node: Node, count: int, cols: int) -> np.ndarray:
    vectors = _floats(node, "support_vectors")
    if len(vectors) != count * cols:
        raise bad_attr(
            node,
            "support_vectors",
            f"has {len(vectors)} values for {count} vectors of {cols} features",
        )
    return vectors.reshape(count, cols)


def _decisions(
    node: Node,
    kernels: ir.Buffer,
    weights: np.ndarray,
    rho: np.ndarray,
    out: str,
    work: str,
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer], list[tuple[str, np.ndarray]]]:
    """``out[s, c] = sum_v weights[c, v] * K[s, v] + rho[c]``, summed in float64 (float32
    products, as onnxruntime)."""
    rows, count = kernels.shape
    p = f"{node.name}__"
    acc = ir.Buffer(f"{p}acc", "float64", (rows,))
    a_at, a = ir.Access(acc.name, (var("s"),)), ir.Load(acc.name, (var("s"),), "float64")
    product = ir.Load(f"{p}dual", (var("c"), var("v")), work) * ir.Load(
        kernels.name, (var("s"), var("v")), work
    )
    product64 = product if work == "float64" else ir.Cast(product, "float64")
    rho_c: ir.Expr = ir.Load(f"{p}rho", (var("c"),), work)
    rho_c = rho_c if work == "float64" else ir.Cast(rho_c, "float64")
    total: ir.Expr = a + rho_c
    body: list[ir.Node] = [
        ir.Stmt("S", a_at, ir.Const(0.0, "float64")),
        *nest([("v", count)], (ir.Stmt("S", a_at, a + product64),)),
        ir.Stmt(
            "S",
            ir.Access(out, (var("s"), var("c"))),
            total if work == "float64" else ir.Cast(total, work),
        ),
    ]
    tables = [(f"{p}dual", weights.astype(work)), (f"{p}rho", rho.astype(work))]
    return nest([("s", rows), ("c", weights.shape[0])], body), [acc], tables


def _check_kernel(node: Node) -> str:
    return choice_attr(node, "kernel_type", "LINEAR", KERNELS)


@register_ml("SVMRegressor")
def lower_svm_regressor(node: Node, ctx: LowerContext) -> Lowered:
    """SVMRegressor: ``Y[N, 1]`` (see the module docstring)."""
    x, rows, cols, work = features(node, ctx)
    y = node.outputs[0]
    kernel = _check_kernel(node)
    if post_transform_attr(node, ctx) != "NONE":
        raise unsupported(node, ctx, f"post_transform {str_attr(node, 'post_transform', '')!r}")
    if int(node.attr("n_targets", 1)) != 1:
        raise unsupported(node, ctx, f"n_targets = {node.attr('n_targets')} (one target only)")
    coef = _floats(node, "coefficients")
    rho = _floats(node, "rho")
    if not len(rho):
        raise bad_attr(node, "rho", "is required")
    if ctx.shape(y) != (rows, 1):
        raise ShapeError(
            f"node {node.name!r} (SVMRegressor): output {y!r} has shape {list(ctx.shape(y))}"
        )
    count = int(node.attr("n_supports", 0))
    p = f"{node.name}__"
    raw = ir.Buffer(f"{p}raw", work, (rows, 1))
    temps: list[ir.Buffer] = [raw]
    if count > 0:
        if len(coef) != count:
            raise bad_attr(node, "coefficients", f"has {len(coef)} values for {count} vectors")
        kern, k, tables = _kernels(node, ctx, x, _vectors(node, count, cols), kernel, work)
        dec, more, t2 = _decisions(node, k, coef.reshape(1, count), rho[:1], raw.name, work)
        nests, temps, tables = [*kern, *dec], [*temps, k, *more], tables + t2
    else:
        if len(coef) != cols:
            raise bad_attr(node, "coefficients", f"has {len(coef)} values for {cols} features")
        lin, tables = gemm_scores(node, ctx, x, coef.reshape(1, cols), rho[:1], raw.name, work)
        nests = list(lin)
    if int(node.attr("one_class", 0)):
        at = (var("s"), ir.Aff.lift(0))
        value = ir.Load(raw.name, at, work)
        sign = ir.Select(
            ir.binary("gt", value, ir.Const(0.0, work)), ir.Const(1.0, work), ir.Const(-1.0, work)
        )
        nests += nest([("s", rows)], (ir.Stmt("S", ir.Access(raw.name, at), sign),))
    nests.append(cast_copy(raw.name, y, rows, 1, work, ctx.dtype(y)))
    return Lowered(tuple(nests), tuple(temps), constants=tuple(tables))


def _pairs(classes: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(classes) for j in range(i + 1, classes)]


@dataclass
class _Parts:
    """What a lowering collects: nests, temps and constant tables."""

    nests: list[ir.Node] = field(default_factory=list)
    temps: list[ir.Buffer] = field(default_factory=list)
    tables: list[tuple[str, np.ndarray]] = field(default_factory=list)

    def add(
        self,
        nests: Sequence[ir.Node],
        temps: Sequence[ir.Buffer] = (),
        tables: Sequence[tuple[str, np.ndarray]] = (),
    ) -> None:
        self.nests += nests
        self.temps += temps
        self.tables += tables


@dataclass(frozen=True)
class _Classifier:
    """SVMClassifier's attributes, checked."""

    labels_int: np.ndarray | None
    labels_str: list[str] | None
    classes: int
    coef: np.ndarray
    rho: np.ndarray
    prob_a: np.ndarray
    prob_b: np.ndarray
    per_class: np.ndarray

    @property
    def with_prob(self) -> bool:
        return len(self.prob_a) > 0


def _classifier_attrs(node: Node, ctx: LowerContext) -> _Classifier:
    labels_int, labels_str, classes = class_labels(node, ctx)
    if classes < 2:
        raise unsupported(node, ctx, f"{classes} class label (at least 2)")
    coef, rho = _floats(node, "coefficients"), _floats(node, "rho")
    prob_a, prob_b = _floats(node, "prob_a"), _floats(node, "prob_b")
    if len(prob_a) != len(prob_b):
        raise bad_attr(node, "prob_a", f"has {len(prob_a)} values, 'prob_b' {len(prob_b)}")
    if not len(coef):
        raise bad_attr(node, "coefficients", "is required")
    if not len(rho):
        raise bad_attr(node, "rho", "is required")
    per_class = int_values(node, "vectors_per_class")
    per_class = np.zeros(0, np.int64) if per_class is None else per_class
    return _Classifier(labels_int, labels_str, classes, coef, rho, prob_a, prob_b, per_class)


@register_ml("SVMClassifier")
def lower_svm_classifier(node: Node, ctx: LowerContext) -> Lowered:
    """SVMClassifier: labels ``Y[N]`` and scores ``Z`` (see the module docstring)."""
    x, rows, _, work = features(node, ctx)
    kernel = _check_kernel(node)
    transform = post_transform_attr(node, ctx)
    a = _classifier_attrs(node, ctx)
    out = _Parts()
    if len(a.per_class) and int(a.per_class.sum()) > 0:
        scores, width = _one_vs_one(node, ctx, x, a, kernel, work, out)
    else:
        scores, width = _liblinear(node, ctx, x, a, work, out)
    z = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
    if z:
        _write_scores(node, ctx, z, (scores, rows, width), transform, work, out)
    return Lowered(tuple(out.nests), tuple(out.temps), constants=tuple(out.tables))


def _one_vs_one(
    node: Node, ctx: LowerContext, x: str, a: _Classifier, kernel: str, work: str, out: _Parts
) -> tuple[str, int]:
    """The kernels, decisions, votes, labels and (with prob_a) probabilities of the
    support-vector form; the scores' buffer and width."""
    rows, cols = ctx.shape(x)
    classes, per_class, coef = a.classes, a.per_class, a.coef
    count = int(per_class.sum())
    pairs = _pairs(classes)
    if len(per_class) != classes or (per_class < 0).any():
        raise bad_attr(node, "vectors_per_class", f"needs one count per class ({classes})")
    if len(coef) < (classes - 1) * count:
        raise bad_attr(
            node, "coefficients", f"has {len(coef)} values, needs {(classes - 1) * count}"
        )
    if len(a.rho) < len(pairs):
        raise bad_attr(node, "rho", f"has {len(a.rho)} values for {len(pairs)} classifiers")
    if a.with_prob and len(a.prob_a) < len(pairs):
        raise bad_attr(node, "prob_a", f"has {len(a.prob_a)} values for {len(pairs)} pairs")
    p = f"{node.name}__"
    dual = coef[: (classes - 1) * count].reshape(classes - 1, count)
    start = np.concatenate([[0], np.cumsum(per_class)]).tolist()
    weights = np.zeros((len(pairs), count))
    vote_i = np.zeros((len(pairs), classes), np.int64)
    vote_j = np.zeros((len(pairs), classes), np.int64)
    for c, (i, j) in enumerate(pairs):
        weights[c, start[i] : start[i + 1]] = dual[j - 1, start[i] : start[i + 1]]
        weights[c, start[j] : start[j + 1]] = dual[i, start[j] : start[j + 1]]
        vote_i[c, i] = vote_j[c, j] = 1
    kern, k, t1 = _kernels(node, ctx, x, _vectors(node, count, cols), kernel, work)
    d = ir.Buffer(f"{p}decision", work, (rows, len(pairs)))
    dec, more, t2 = _decisions(node, k, weights, a.rho[: len(pairs)], d.name, work)
    votes = ir.Buffer(f"{p}votes", I64, (rows, classes))
    v_at = ir.Access(votes.name, (var("s"), var("k")))
    positive = ir.binary("gt", ir.Load(d.name, (var("s"), var("c")), work), ir.Const(0.0, work))
    vote = ir.Select(
        positive,
        ir.Load(f"{p}vote_i", (var("c"), var("k")), I64),
        ir.Load(f"{p}vote_j", (var("c"), var("k")), I64),
    )
    counting = nest(
        [("s", rows), ("k", classes)],
        (
            ir.Stmt("S", v_at, ir.Const(0, I64)),
            *nest(
                [("c", len(pairs))],
                (ir.Stmt("S", v_at, ir.Load(votes.name, v_at.index, I64) + vote),),
            ),
        ),
    )
    out.add([*kern, *dec, *counting], [k, *more, d, votes], t1 + t2)
    out.tables += [(f"{p}vote_i", vote_i), (f"{p}vote_j", vote_j)]
    out.add(*_labels(node, ctx, votes.name, I64, rows, classes, a.labels_int, a.labels_str))
    if not a.with_prob:
        return d.name, len(pairs)
    prob, p_temps, p_tables = _coupling(node, d.name, rows, classes, a.prob_a, a.prob_b, work)
    out.add(prob, p_temps, p_tables)
    return p_temps[0].name, classes


def _liblinear(
    node: Node, ctx: LowerContext, x: str, a: _Classifier, work: str, out: _Parts
) -> tuple[str, int]:
    """Scores ``X coefficients^T + rho[0]`` and labels; the scores' buffer and width."""
    rows, cols = ctx.shape(x)
    classes, coef = a.classes, a.coef
    if len(coef) != classes * cols:
        raise bad_attr(
            node, "coefficients", f"has {len(coef)} values for {classes} x {cols} (liblinear)"
        )
    raw = ir.Buffer(f"{node.name}__raw", work, (rows, classes))
    bias = np.full(classes, a.rho[0])
    lin, t1 = gemm_scores(node, ctx, x, coef.reshape(classes, cols), bias, raw.name, work)
    out.add(lin, [raw], t1)
    decide = raw.name
    if classes == 2 and not a.with_prob:
        decide = _binary_linear_choice(node, raw, rows, work, bool((coef >= 0).all()), out.nests)
        out.temps.append(ir.Buffer(decide, work, (rows, 2)))
    out.add(*_labels(node, ctx, decide, work, rows, classes, a.labels_int, a.labels_str))
    return raw.name, classes


def _write_scores(
    node: Node,
    ctx: LowerContext,
    z: str,
    scores_shape: tuple[str, int, int],
    transform: str,
    work: str,
    out: _Parts,
) -> None:
    """``Z`` from the scores (one column: the two-class forms of the module docstring), then
    the post transform."""
    scores, rows, width = scores_shape
    dtype = ctx.dtype(z)
    two = width == 1
    if ctx.shape(z) != (rows, 2 if two else width):
        raise ShapeError(
            f"node {node.name!r} (SVMClassifier): output {z!r} has shape "
            f"{list(ctx.shape(z))}, not {[rows, 2 if two else width]}"
        )
    if not two:
        out.nests.append(cast_copy(scores, z, rows, width, work, dtype))
        out.add(*post_transform(node, transform, z, rows, width, dtype))
        return
    if transform == "PROBIT":
        raise unsupported(node, ctx, "post_transform 'PROBIT' with two classes")
    s = ir.Load(scores, (var("s"), ir.Aff.lift(0)), work)
    first = -s if transform in ("NONE", "LOGISTIC") else ir.Const(1.0, work) - s
    out.add(
        nest(
            [("s", rows)],
            (
                ir.Stmt("S", ir.Access(z, (var("s"), 0)), _as(first, dtype)),
                ir.Stmt("S", ir.Access(z, (var("s"), 1)), _as(s, dtype)),
            ),
        )
    )
    if transform == "LOGISTIC":
        out.add(*post_transform(node, transform, z, rows, 2, dtype))


def _as(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def _binary_linear_choice(
    node: Node, raw: ir.Buffer, rows: int, work: str, all_positive: bool, nests: list[ir.Node]
) -> str:
    """onnxruntime's two-class liblinear label as the first highest of a ``[rows, 2]`` pair:
    ``[1, 0]`` (the top class is the first and stays), or ``[0, 1]`` when the top score
    passes the threshold or the second class is on top."""
    pair = f"{node.name}__pair"
    a, b = (ir.Load(raw.name, (var("s"), ir.Aff.lift(k)), work) for k in (0, 1))
    top = ir.Select(ir.binary("gt", b, a), b, a)
    threshold = ir.Const(0.5 if all_positive else 0.0, work)
    passes = ir.binary("ge" if all_positive else "gt", top, threshold)
    second = ir.binary("or", passes, ir.binary("gt", b, a))
    one, zero = ir.Const(1.0, work), ir.Const(0.0, work)
    nests += nest(
        [("s", rows)],
        (
            ir.Stmt("S", ir.Access(pair, (var("s"), 0)), ir.Select(second, zero, one)),
            ir.Stmt("S", ir.Access(pair, (var("s"), 1)), ir.Select(second, one, zero)),
        ),
    )
    return pair


def _coupling(
    node: Node,
    decision: str,
    rows: int,
    classes: int,
    prob_a: np.ndarray,
    prob_b: np.ndarray,
    work: str,
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer], list[tuple[str, np.ndarray]]]:
    """Class probabilities ``P[s, k]`` from the pairwise decisions (module docstring); the
    first temp is ``P``."""
    p = f"{node.name}__"
    k = classes
    pair_of = np.zeros((k, k), np.int64)
    for n, (a, b) in enumerate(_pairs(k)):
        pair_of[a, b] = pair_of[b, a] = n
    n_pairs = len(_pairs(k))
    buf = {
        "prob": (rows, k),
        "r": (rows, k, k),
        "q": (rows, k, k),
        "qp": (rows, k),
        "pqp": (rows,),
        "err": (rows,),
        "done": (rows,),
        "diff": (rows,),
    }
    temps = [ir.Buffer(f"{p}{name}", work, shape) for name, shape in buf.items()]

    def c(v: float) -> ir.Const:
        return ir.Const(v, work)

    def ld(name: str, *index: ir.AffLike) -> ir.Load:
        return ir.Load(f"{p}{name}", tuple(ir.Aff.lift(i) for i in index), work)

    def st(name: str, index: tuple[ir.AffLike, ...], value: ir.Expr) -> ir.Stmt:
        return ir.Stmt("S", ir.Access(f"{p}{name}", index), value)

    s, i, j = var("s"), var("i"), var("j")
    pc = ir.Load(f"{p}pair_of", (i, j), I64)
    score = ir.Load(decision, (s, pc), work)
    val = score * ir.Load(f"{p}prob_a", (pc,), work) + ir.Load(f"{p}prob_b", (pc,), work)
    v = c(1.0) / (c(1.0) + ir.unary("exp", -ir.unary("abs", val)))
    logistic = ir.Select(ir.binary("lt", val, c(0.0)), c(1.0) - v, v)
    clamped = ir.minimum(ir.maximum(c(1.0) - logistic, c(1e-7)), c(1.0 - 1e-7))
    below, above = (
        ir.binary("lt", ir.Iter("i"), ir.Iter("j")),
        ir.binary("gt", ir.Iter("i"), ir.Iter("j")),
    )
    r_value = ir.Select(below, clamped, ir.Select(above, c(1.0) - clamped, c(0.0)))
    q_value = ir.Select(
        ir.binary("eq", ir.Iter("i"), ir.Iter("j")), c(0.0), -ld("r", s, j, i) * ld("r", s, i, j)
    )
    diag = (s, i, i)
    setup: list[ir.Node] = [
        *nest([("i", k), ("j", k)], (st("r", (s, i, j), r_value),)),
        *nest([("i", k), ("j", k)], (st("q", (s, i, j), q_value),)),
        *nest(
            [("i", k), ("j", k)],
            (st("q", diag, ld("q", *diag) + ld("r", s, j, i) * ld("r", s, j, i)),),
        ),
        *nest([("i", k)], (st("prob", (s, i), c(1.0 / k)),)),
        st("done", (s,), c(0.0)),
    ]
    pqp, qp_i, q_ii, diff = ld("pqp", s), ld("qp", s, i), ld("q", *diag), ld("diff", s)
    one_plus = c(1.0) + diff
    round_body: list[ir.Node] = [
        st("pqp", (s,), c(0.0)),
        *nest(
            [("i", k)],
            (
                st("qp", (s, i), c(0.0)),
                *nest(
                    [("j", k)],
                    (st("qp", (s, i), qp_i + ld("q", s, i, j) * ld("prob", s, j)),),
                ),
                st("pqp", (s,), pqp + ld("prob", s, i) * qp_i),
            ),
        ),
        st("err", (s,), c(0.0)),
        *nest(
            [("i", k)],
            (
                st(
                    "err",
                    (s,),
                    ir.Select(
                        ir.binary("gt", ir.unary("abs", qp_i - pqp), ld("err", s)),
                        ir.unary("abs", qp_i - pqp),
                        ld("err", s),
                    ),
                ),
            ),
        ),
        st(
            "done",
            (s,),
            ir.Select(ir.binary("lt", ld("err", s), c(0.005 / k)), c(1.0), ld("done", s)),
        ),
        *nest(
            [("i", k)],
            (
                st(
                    "diff",
                    (s,),
                    ir.Select(ir.binary("ne", ld("done", s), c(0.0)), c(0.0), (-qp_i + pqp) / q_ii),
                ),
                st("prob", (s, i), ld("prob", s, i) + diff),
                st(
                    "pqp",
                    (s,),
                    (pqp + diff * (diff * q_ii + c(2.0) * qp_i)) / one_plus / one_plus,
                ),
                *nest(
                    [("j", k)],
                    (
                        st("qp", (s, j), (ld("qp", s, j) + diff * ld("q", s, i, j)) / one_plus),
                        st("prob", (s, j), ld("prob", s, j) / one_plus),
                    ),
                ),
            ),
        ),
    ]
    body = (*setup, ir.Loop("t", 0, ROUNDS, tuple(round_body)))
    tables = [
        (f"{p}pair_of", pair_of),
        (f"{p}prob_a", prob_a[:n_pairs].astype(work)),
        (f"{p}prob_b", prob_b[:n_pairs].astype(work)),
    ]
    return nest([("s", rows)], body), temps, tables
