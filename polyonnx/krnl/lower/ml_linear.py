"""ONNX-ML linear models: LinearClassifier and LinearRegressor (what skl2onnx writes for
logistic regression, linear SVMs, ridge, lasso...). The scores are a GEMM-like nest over
``[N, F]`` features and ``[C, F]`` coefficients::

    for s, c:  S: Z[s, c] = 0
               for f:  S: Z[s, c] = Z[s, c] + X[s, f] * W[c, f]
               S: Z[s, c] = Z[s, c] + b[c]

in float32 (float64 for a float64 input; an integer input is converted), then the post
transform (:mod:`polyonnx.krnl.lower.ml_common`) and, for a classifier, the label of the first
highest score. Results follow onnxruntime:

- A classifier's label comes from the raw scores, before the transform.
- A classifier with one coefficient row and two labels (binary): the label is the second
  when the score ``s`` is above 0, else the first; the scores are ``[1 - s, s]`` (NONE,
  SOFTMAX, SOFTMAX_ZERO: no transform) or ``[logistic(-s), logistic(s)]`` (LOGISTIC).
  onnx.reference writes ``[-s, s]`` and then transforms them; PROBIT is refused (onnxruntime
  leaves the second score unset).
- A regressor with one target applies only PROBIT (onnxruntime's one-score rule); several
  targets take every transform. onnx.reference implements NONE only.
"""

from __future__ import annotations

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, unsupported, var
from polyonnx.krnl.lower.ml_common import (
    float_values,
    int_values,
    post_transform,
    post_transform_attr,
    register_ml,
    string_values,
)
from polyonnx.krnl.lower.ml_trees import _labels
from polyonnx.krnl.lower.registry import LowerContext, Lowered

NUMBERS = ("float32", "float64", "int64", "int32")


def features(node: Node, ctx: LowerContext) -> tuple[str, int, int, str]:
    """The ``[N, F]`` input of a linear model or SVM: (name, N, F, the dtype its scores are
    computed in: float64 for a float64 input, else float32)."""
    x = node.input(0)
    if ctx.dtype(x) not in NUMBERS:
        raise unsupported(node, ctx, f"input {x!r} of dtype {ctx.dtype(x)}")
    shape = ctx.shape(x)
    if len(shape) != 2:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): input {x!r} must be [N, F], is {list(shape)}"
        )
    work = "float64" if ctx.dtype(x) == "float64" else "float32"
    return x, shape[0], shape[1], work


def x_load(ctx: LowerContext, x: str, work: str) -> ir.Expr:
    """``X[s, f]`` in ``work``."""
    value: ir.Expr = ir.Load(x, (var("s"), var("f")), ctx.dtype(x))
    return value if value.dtype == work else ir.Cast(value, work)


def gemm_scores(
    node: Node,
    ctx: LowerContext,
    x: str,
    weights: np.ndarray,
    bias: np.ndarray,
    out: str,
    work: str,
    tag: str = "",
) -> tuple[tuple[ir.Node, ...], list[tuple[str, np.ndarray]]]:
    """``out[s, c] = sum_f X[s, f] * weights[c, f] + bias[c]`` (``out`` of ``work``), and the
    tables it reads."""
    rows, cols = ctx.shape(x)
    classes = weights.shape[0]
    w_name, b_name = f"{node.name}__{tag}coef", f"{node.name}__{tag}bias"
    at = ir.Access(out, (var("s"), var("c")))
    o = ir.Load(out, (var("s"), var("c")), work)
    w = ir.Load(w_name, (var("c"), var("f")), work)
    body: list[ir.Node] = [ir.Stmt("S", at, ir.Const(0.0, work))]
    if cols:
        body += nest([("f", cols)], (ir.Stmt("S", at, o + x_load(ctx, x, work) * w),))
    body.append(ir.Stmt("S", at, o + ir.Load(b_name, (var("c"),), work)))
    tables = [(w_name, weights.astype(work)), (b_name, bias.astype(work))]
    return nest([("s", rows), ("c", classes)], body), tables


def cast_copy(src: str, dst: str, rows: int, cols: int, src_dtype: str, dtype: str) -> ir.Node:
    """``dst[s, c] = src[s, c]`` converted to ``dtype``."""
    at = (var("s"), var("c"))
    value: ir.Expr = ir.Load(src, at, src_dtype)
    value = value if src_dtype == dtype else ir.Cast(value, dtype)
    return nest([("s", rows), ("c", cols)], (ir.Stmt("S", ir.Access(dst, at), value),))[0]


def _coefficients(node: Node, cols: int, name: str = "coefficients") -> np.ndarray:
    """``coefficients`` as ``[C, F]`` (F = ``cols``); ModelError when absent or not a
    multiple of F."""
    coef = float_values(node, name)
    if coef is None or not len(coef):
        raise bad_attr(node, name, "is required")
    if cols == 0 or len(coef) % cols:
        raise bad_attr(node, name, f"has {len(coef)} values, not a multiple of {cols} features")
    return coef.astype(np.float64).reshape(-1, cols)


def _intercepts(node: Node, count: int) -> np.ndarray:
    given = float_values(node, "intercepts")
    if given is None or not len(given):
        return np.zeros(count)
    if len(given) != count:
        raise bad_attr(node, "intercepts", f"has {len(given)} values for {count} rows")
    return given.astype(np.float64)


def class_labels(node: Node, ctx: LowerContext) -> tuple[np.ndarray | None, list[str] | None, int]:
    """The classifier's labels (int64s or strings, one of them) and how many there are;
    ModelError when neither is given."""
    ints = int_values(node, "classlabels_ints")
    strings = string_values(node, "classlabels_strings")
    if ints is not None and len(ints):
        return ints, None, len(ints)
    if strings:
        return None, strings, len(strings)
    raise bad_attr(node, "classlabels_ints", "or 'classlabels_strings' is required")


@register_ml("LinearClassifier")
def lower_linear_classifier(node: Node, ctx: LowerContext) -> Lowered:
    """LinearClassifier: labels ``Y[N]`` and scores ``Z[N, C]`` (see the module docstring)."""
    x, rows, cols, work = features(node, ctx)
    coef = _coefficients(node, cols)
    classes = coef.shape[0]
    given = float_values(node, "intercepts")
    if given is None or not len(given):  # (onnxruntime and ONNX's shape inference count by it)
        raise bad_attr(node, "intercepts", "is required: one per coefficient row")
    bias = _intercepts(node, classes)
    labels_int, labels_str, n_labels = class_labels(node, ctx)
    binary = classes == 1 and n_labels == 2
    if not binary and n_labels != classes:
        raise bad_attr(
            node, "coefficients", f"has {classes} row(s) of {cols} for {n_labels} class labels"
        )
    transform = post_transform_attr(node, ctx)
    if binary and transform == "PROBIT":
        raise unsupported(node, ctx, "post_transform 'PROBIT' with one coefficient row")
    p = f"{node.name}__"
    raw = ir.Buffer(f"{p}raw", work, (rows, classes))
    temps: list[ir.Buffer] = [raw]
    nests, tables = gemm_scores(node, ctx, x, coef, bias, raw.name, work)
    nests_l: list[ir.Node] = list(nests)
    decide, dcols = raw.name, classes
    if binary:  # (the label of [0, s]'s first highest score: the second iff s > 0)
        pair = ir.Buffer(f"{p}pair", work, (rows, 2))
        temps.append(pair)
        s_at = (var("s"), ir.Aff.lift(0))
        nests_l += nest(
            [("s", rows)],
            (
                ir.Stmt("S", ir.Access(pair.name, s_at), ir.Const(0.0, work)),
                ir.Stmt(
                    "S",
                    ir.Access(pair.name, (var("s"), 1)),
                    ir.Load(raw.name, s_at, work),
                ),
            ),
        )
        decide, dcols = pair.name, 2
    labels, l_temps, l_tables = _labels(
        node, ctx, decide, work, rows, dcols, labels_int, labels_str
    )
    nests_l += labels
    temps += l_temps
    tables += l_tables
    z = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
    if z:
        dtype = ctx.dtype(z)
        width = 2 if binary else classes
        if ctx.shape(z) != (rows, width):
            raise ShapeError(
                f"node {node.name!r} (LinearClassifier): output {z!r} has shape "
                f"{list(ctx.shape(z))}, not {[rows, width]}"
            )
        if binary:
            s = ir.Load(raw.name, (var("s"), ir.Aff.lift(0)), work)
            first = -s if transform == "LOGISTIC" else ir.Const(1.0, work) - s
            nests_l += nest(
                [("s", rows)],
                (
                    ir.Stmt("S", ir.Access(z, (var("s"), 0)), _as(first, dtype)),
                    ir.Stmt("S", ir.Access(z, (var("s"), 1)), _as(s, dtype)),
                ),
            )
            transform = "LOGISTIC" if transform == "LOGISTIC" else "NONE"
        else:
            nests_l.append(cast_copy(raw.name, z, rows, classes, work, dtype))
        transformed, t_temps = post_transform(node, transform, z, rows, width, dtype)
        nests_l += transformed
        temps += t_temps
    return Lowered(tuple(nests_l), tuple(temps), constants=tuple(tables))


def _as(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


@register_ml("LinearRegressor")
def lower_linear_regressor(node: Node, ctx: LowerContext) -> Lowered:
    """LinearRegressor: ``Y[N, targets] = X W^T + intercepts``, then the post transform
    (one target: PROBIT only, as onnxruntime)."""
    x, rows, cols, work = features(node, ctx)
    y = node.outputs[0]
    targets = int(node.attr("targets", 1))
    coef = _coefficients(node, cols)
    if targets < 1 or coef.shape[0] != targets:
        raise bad_attr(
            node, "coefficients", f"has {coef.shape[0]} row(s) of {cols} for {targets} target(s)"
        )
    bias = _intercepts(node, targets)
    transform = post_transform_attr(node, ctx)
    if targets == 1 and transform != "PROBIT":
        transform = "NONE"
    dtype = ctx.dtype(y)
    if ctx.shape(y) != (rows, targets):
        raise ShapeError(
            f"node {node.name!r} (LinearRegressor): output {y!r} has shape "
            f"{list(ctx.shape(y))}, not {[rows, targets]}"
        )
    temps: list[ir.Buffer] = []
    out = y
    if dtype != work:
        out = f"{node.name}__raw"
        temps.append(ir.Buffer(out, work, (rows, targets)))
    nests, tables = gemm_scores(node, ctx, x, coef, bias, out, work)
    all_nests = list(nests)
    if out != y:
        all_nests.append(cast_copy(out, y, rows, targets, work, dtype))
    transformed, t_temps = post_transform(node, transform, y, rows, targets, dtype)
    all_nests += transformed
    return Lowered(tuple(all_nests), (*temps, *t_temps), constants=tuple(tables))
