"""ONNX-ML tree ensembles: TreeEnsemble (ML opset 5) and the older TreeEnsembleClassifier and
TreeEnsembleRegressor (what skl2onnx writes for random forests, gradient boosting and
decision trees).

The trees are attributes, so at compile time every version becomes one :class:`Forest`:
node tables (feature, threshold, comparison, where a missing value goes, the two successors)
and a dense leaf-weight table ``weights[leaf, target]``. A successor ``>= 0`` is a node, a
successor ``< 0`` is leaf ``-1 - successor``. A set-membership node (TreeEnsemble's
BRANCH_MEMBER) becomes a chain of equality nodes, one per member. Each sample walks each tree
``depth`` steps (the longest path: a bounded trip count), a leaf staying where it is::

    for s, t:  S: at[s, t] = root[t]
               for d in [0, depth):
                 S: at[s, t] = at[s, t] < 0 ? at[s, t]
                               : cmp(X[s, feature[n]], threshold[n]) ? true[n] : false[n]
                                                          (n = max(at[s, t], 0))
    for s:     for c:     S: Y[s, c] = base[c]        (0, or +-max for MIN / MAX)
               for t, c:  S: Y[s, c] = agg(Y[s, c], weights[-1 - at[s, t], c])

then the post transform (:mod:`polyonnx.krnl.lower.ml_common`) and, for a classifier, the
label of the first highest score. Results follow ``onnx.reference``: its binary case (one
class id: the scores become ``[1 - s, s]``, or ``[-s, s]`` after a transform) and a NaN
feature going where ``nodes_missing_value_tracks_true`` says (TreeEnsemble: a comparison
that holds goes true too). onnx.reference ignores TreeEnsemble's post_transform and refuses
the regressor's; polyonnx applies them as onnxruntime does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, unsupported, var
from polyonnx.krnl.lower.ml_common import (
    choice_attr,
    code_table,
    float_values,
    int_values,
    post_transform,
    post_transform_attr,
    register_ml,
    string_values,
)
from polyonnx.krnl.lower.registry import LowerContext, Lowered

I64 = "int64"
#: Comparisons by TreeEnsemble's code (the older ops name them ``BRANCH_<name>``).
MODES = ("LEQ", "LT", "GTE", "GT", "EQ", "NEQ", "MEMBER")
_COMPARE = ("le", "lt", "ge", "gt", "eq", "ne")
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")


@dataclass(frozen=True)
class Forest:
    """Trees as tables (see the module docstring); ``weights`` is ``[leaves, targets]``."""

    feature: np.ndarray
    threshold: np.ndarray
    mode: np.ndarray
    missing_true: np.ndarray
    true_next: np.ndarray
    false_next: np.ndarray
    roots: np.ndarray
    weights: np.ndarray
    depth: int


def _depth(node: Node, true_next: np.ndarray, false_next: np.ndarray, roots: np.ndarray) -> int:
    """The most nodes on a path from a root to a leaf; ModelError for a cycle or a
    successor that is no node."""
    m = len(true_next)
    depth = np.full(m, -1, dtype=np.int64)  # -1: not known, -2: on the current path
    for root in roots.tolist():
        stack = [(root, False)] if root >= 0 else []
        while stack:
            n, done = stack.pop()
            if not 0 <= n < m:
                raise bad_attr(node, "nodes_truenodeids", f"names node {n}, which does not exist")
            if done:
                below = [depth[c] if c >= 0 else 0 for c in (true_next[n], false_next[n])]
                depth[n] = 1 + max(below)
                continue
            if depth[n] == -2:
                raise bad_attr(node, "nodes_truenodeids", f"makes a cycle through node {n}")
            if depth[n] >= 0:
                continue
            depth[n] = -2
            stack.append((n, True))
            stack.extend((c, False) for c in (true_next[n], false_next[n]) if c >= 0)
    return int(max((depth[r] for r in roots.tolist() if r >= 0), default=0))


def _forest_v5(node: Node, n_targets: int) -> Forest:
    """TreeEnsemble's attributes (ML opset 5) as a :class:`Forest`."""
    modes = int_values(node, "nodes_modes")
    feature = int_values(node, "nodes_featureids")
    splits = node.attr("nodes_splits")
    names = ("nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs", "nodes_falseleafs")
    t_ids, f_ids, t_leaf, f_leaf = (int_values(node, n) for n in names)
    leaf_targets, leaf_weights = int_values(node, "leaf_targetids"), node.attr("leaf_weights")
    roots = int_values(node, "tree_roots")
    if any(v is None for v in (modes, feature, splits, t_ids, f_ids, t_leaf, f_leaf, roots)):
        raise bad_attr(node, "nodes_*", "tables and 'tree_roots' are required")
    if leaf_targets is None or leaf_weights is None:
        raise bad_attr(node, "leaf_targetids", "and 'leaf_weights' are required")
    assert modes is not None and feature is not None and roots is not None  # (for mypy)
    assert t_ids is not None and f_ids is not None and t_leaf is not None and f_leaf is not None
    m = len(modes)
    if any(len(a) != m for a in (feature, t_ids, f_ids, t_leaf, f_leaf, np.ravel(splits))):
        raise bad_attr(node, "nodes_*", f"tables must all have {m} entries")
    mtt = int_values(node, "nodes_missing_value_tracks_true")
    mtt = np.zeros(m, np.int64) if mtt is None else mtt
    thresholds = np.asarray(splits, dtype=np.float64).reshape(-1)
    true_next = np.where(t_leaf != 0, -1 - t_ids, t_ids)
    false_next = np.where(f_leaf != 0, -1 - f_ids, f_ids)
    # (onnx.reference: a root whose two successors are the same leaf is that leaf.)
    roots = np.array(
        [-1 - r if t_leaf[r] and f_leaf[r] and t_ids[r] == f_ids[r] else r for r in roots.tolist()],
        dtype=np.int64,
    )
    members = node.attr("membership_values")
    feats, ths, mds = feature.tolist(), thresholds.tolist(), modes.tolist()
    mts, tn, fn = mtt.tolist(), true_next.tolist(), false_next.tolist()
    if (modes == 6).any():
        if members is None:
            raise bad_attr(node, "membership_values", "is required for BRANCH_MEMBER nodes")
        sets: list[list[float]] = []
        current: list[float] = []
        for v in np.asarray(members, dtype=np.float64).reshape(-1).tolist():
            if np.isnan(v):
                sets.append(current)
                current = []
            else:
                current.append(v)
        if len(sets) != int((modes == 6).sum()):
            raise bad_attr(node, "membership_values", "needs one NaN-ended set per member node")
        for i, members_i in zip(np.flatnonzero(modes == 6).tolist(), sets, strict=True):
            # x in {a, b, ..}: x == a, else x == b, ...: the same true successor throughout.
            chain = members_i or [float("nan")]
            mds[i], ths[i] = 4, chain[0]
            last_false = fn[i]
            prev = i
            for v in chain[1:]:
                feats.append(feature[i])
                ths.append(v)
                mds.append(4)
                mts.append(mtt[i])
                tn.append(true_next[i])
                fn.append(last_false)
                fn[prev] = len(feats) - 1
                prev = len(feats) - 1
    weights = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    if (
        len(weights) != len(leaf_targets)
        or ((leaf_targets < 0) | (leaf_targets >= n_targets)).any()
    ):
        raise bad_attr(node, "leaf_targetids", f"must name targets in [0, {n_targets})")
    table = np.zeros((max(len(weights), 1), n_targets), np.float64)
    table[np.arange(len(weights)), leaf_targets] = weights
    forest = Forest(
        np.array(feats, np.int64),
        np.array(ths, np.float64),
        np.array(mds, np.int64),
        np.array(mts, np.int64),
        np.array(tn, np.int64),
        np.array(fn, np.int64),
        roots,
        table,
        0,
    )
    _check_leaves(node, forest, len(weights))
    depth = _depth(node, forest.true_next, forest.false_next, forest.roots)
    return Forest(**{**forest.__dict__, "depth": depth})


def _check_leaves(node: Node, forest: Forest, leaves: int) -> None:
    every = np.concatenate([forest.true_next, forest.false_next, forest.roots])
    if (every < -leaves).any():
        raise bad_attr(node, "nodes_truenodeids", f"names a leaf past the {leaves} leaves")


def _forest_v3(node: Node, targets: str, n_targets: int, aggregate: str) -> Forest:
    """TreeEnsembleClassifier's or TreeEnsembleRegressor's attributes (``targets``:
    ``class`` or ``target``) as a :class:`Forest`, weights combined by ``aggregate``."""
    tree_ids, node_ids = int_values(node, "nodes_treeids"), int_values(node, "nodes_nodeids")
    modes = string_values(node, "nodes_modes")
    feature = int_values(node, "nodes_featureids")
    t_ids, f_ids = int_values(node, "nodes_truenodeids"), int_values(node, "nodes_falsenodeids")
    values = float_values(node, "nodes_values")
    if any(v is None for v in (tree_ids, node_ids, modes, feature, t_ids, f_ids, values)):
        raise bad_attr(node, "nodes_*", "tables are required")
    assert tree_ids is not None and node_ids is not None and modes is not None
    assert feature is not None and t_ids is not None and f_ids is not None and values is not None
    n = len(tree_ids)
    if any(len(a) != n for a in (node_ids, modes, feature, t_ids, f_ids, values)):
        raise bad_attr(node, "nodes_*", f"tables must all have {n} entries")
    mtt = int_values(node, "nodes_missing_value_tracks_true")
    mtt = np.zeros(n, np.int64) if mtt is None or not len(mtt) else mtt
    position: dict[tuple[int, int], int] = {}
    internal: list[int] = []
    leaf_of: dict[int, int] = {}
    for i, (t, nid, mode) in enumerate(
        zip(tree_ids.tolist(), node_ids.tolist(), modes, strict=True)
    ):
        position.setdefault((t, nid), i)
        if mode == "LEAF":
            leaf_of[i] = len(leaf_of)
        elif mode.startswith("BRANCH_") and mode[7:] in MODES[:6]:
            internal.append(i)
        else:
            raise bad_attr(node, "nodes_modes", f"has {mode!r}")
    slot = {i: k for k, i in enumerate(internal)}

    def encoded(i: int) -> int:
        return -1 - leaf_of[i] if i in leaf_of else slot[i]

    def successor(t: int, nid: int) -> int:
        if (t, nid) not in position:
            raise bad_attr(node, "nodes_truenodeids", f"names node {nid} of tree {t}: none")
        return encoded(position[t, nid])

    tree_order = sorted(set(tree_ids.tolist()))
    roots = np.array([encoded(tree_ids.tolist().index(t)) for t in tree_order], np.int64)
    weights = _leaf_weights(node, targets, n_targets, aggregate, position, leaf_of)
    true_next = [successor(int(tree_ids[i]), int(t_ids[i])) for i in internal]
    false_next = [successor(int(tree_ids[i]), int(f_ids[i])) for i in internal]
    tn, fn = np.array(true_next, np.int64), np.array(false_next, np.int64)
    return Forest(
        feature[internal],
        values.astype(np.float64)[internal],
        np.array([MODES.index(modes[i][7:]) for i in internal], np.int64),
        mtt[internal],
        tn,
        fn,
        roots,
        weights,
        _depth(node, tn, fn, roots),
    )


def _leaf_weights(
    node: Node,
    targets: str,
    n_targets: int,
    aggregate: str,
    position: dict[tuple[int, int], int],
    leaf_of: dict[int, int],
) -> np.ndarray:
    """``weights[leaf, target]`` from the ``<targets>_*`` entries: summed, or the least or
    greatest for MIN / MAX (a target a leaf has no entry for: the aggregate's identity)."""
    tids, nids = int_values(node, f"{targets}_treeids"), int_values(node, f"{targets}_nodeids")
    ids, ws = int_values(node, f"{targets}_ids"), float_values(node, f"{targets}_weights")
    if tids is None or nids is None or ids is None or ws is None:
        raise bad_attr(node, f"{targets}_ids", f"and the other '{targets}_*' are required")
    fill = {"MIN": np.inf, "MAX": -np.inf}.get(aggregate, 0.0)
    table = np.full((max(len(leaf_of), 1), n_targets), fill, np.float64)
    for t, nid, k, w in zip(tids.tolist(), nids.tolist(), ids.tolist(), ws.tolist(), strict=True):
        leaf = leaf_of.get(position.get((t, nid), -1), -1)
        if leaf < 0 or not 0 <= k < n_targets:
            raise bad_attr(node, f"{targets}_ids", f"entry ({t}, {nid}, {k}) names no leaf/target")
        if aggregate == "MIN":
            table[leaf, k] = min(table[leaf, k], w)
        elif aggregate == "MAX":
            table[leaf, k] = max(table[leaf, k], w)
        else:
            table[leaf, k] += w
    return table


@dataclass(frozen=True)
class _Walk:
    """How the walk compares: in ``dtype``, and onnx.reference's rule for a NaN feature of
    TreeEnsemble (``modern``: a comparison that holds goes true too) or of the older ops."""

    dtype: str
    modern: bool


def _walk(
    node: Node, ctx: LowerContext, forest: Forest, how: _Walk
) -> tuple[tuple[ir.Node, ...], ir.Buffer, list[tuple[str, np.ndarray]]]:
    """The nests leaving each sample's leaf of each tree in ``<node>__at[s, t]`` (encoded
    as ``-1 - leaf``), that buffer, and the tables they read."""
    x = node.input(0)
    rows, cols = ctx.shape(x)
    trees = len(forest.roots)
    if len(forest.feature) and (forest.feature.min() < 0 or forest.feature.max() >= cols):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): a node reads feature "
            f"{int(forest.feature.max())} of input {x!r}, which has {cols}"
        )
    p = f"{node.name}__"
    at = ir.Buffer(f"{p}at", I64, (rows, trees))
    a_w, a = ir.Access(at.name, (var("s"), var("t"))), ir.Load(at.name, (var("s"), var("t")), I64)
    tables = [(f"{p}roots", forest.roots)]
    nests: list[ir.Node] = [ir.Stmt("S", a_w, ir.Load(f"{p}roots", (var("t"),), I64))]
    if len(forest.feature) and forest.depth:
        n = ir.maximum(a, ir.Const(0, I64))
        tables += [
            (f"{p}feature", forest.feature),
            (f"{p}threshold", forest.threshold.astype(how.dtype)),
            (f"{p}true", forest.true_next),
            (f"{p}false", forest.false_next),
        ]
        xv: ir.Expr = ir.Load(x, (var("s"), ir.Load(f"{p}feature", (n,), I64)), ctx.dtype(x))
        xv = xv if xv.dtype == how.dtype else ir.Cast(xv, how.dtype)
        th = ir.Load(f"{p}threshold", (n,), how.dtype)
        used = sorted(set(forest.mode.tolist()))
        cond: ir.Expr = ir.binary(_COMPARE[used[-1]], xv, th)
        if len(used) > 1:
            tables.append((f"{p}mode", forest.mode))
            mode = ir.Load(f"{p}mode", (n,), I64)
            for code in reversed(used[:-1]):
                is_code = ir.binary("eq", mode, ir.Const(code, I64))
                cond = ir.Select(is_code, ir.binary(_COMPARE[code], xv, th), cond)
        if forest.missing_true.any() or (not how.modern and 5 in used):
            tables.append((f"{p}missing", forest.missing_true))
            missing = ir.binary("ne", ir.Load(f"{p}missing", (n,), I64), ir.Const(0, I64))
            nan = ir.unary("isnan", xv)
            if how.modern:
                cond = ir.binary("or", cond, ir.binary("and", missing, nan))
            else:
                cond = ir.Select(nan, missing, cond)
        step = ir.Select(
            ir.binary("lt", a, ir.Const(0, I64)),
            a,
            ir.Select(cond, ir.Load(f"{p}true", (n,), I64), ir.Load(f"{p}false", (n,), I64)),
        )
        nests.append(ir.Loop("d", 0, forest.depth, (ir.Stmt("S", a_w, step),)))
    return nest([("s", rows), ("t", trees)], nests), at, tables


def _aggregate(
    node: Node,
    forest: Forest,
    at: ir.Buffer,
    out: str,
    dtype: str,
    aggregate: str,
    base: np.ndarray,
) -> tuple[tuple[ir.Node, ...], list[tuple[str, np.ndarray]]]:
    """``out[s, c] = base[c]``, then each tree's leaf weights combined in by ``aggregate``
    (AVERAGE: summed; the caller scales)."""
    rows, trees = at.shape
    targets = forest.weights.shape[1]
    p = f"{node.name}__"
    big = float(np.finfo(dtype).max)
    weights = np.nan_to_num(forest.weights, posinf=big, neginf=-big).astype(dtype)
    o_at = ir.Access(out, (var("s"), var("c")))
    o = ir.Load(out, (var("s"), var("c")), dtype)
    leaf = ir.Const(-1, I64) - ir.Load(at.name, (var("s"), var("t")), I64)
    w = ir.Load(f"{p}weights", (leaf, var("c")), dtype)
    combined = {"MIN": ir.minimum(o, w), "MAX": ir.maximum(o, w)}.get(aggregate, o + w)
    nests = nest(
        [("s", rows)],
        (
            *nest([("c", targets)], (ir.Stmt("S", o_at, ir.Load(f"{p}base", (var("c"),), dtype)),)),
            *nest([("t", trees), ("c", targets)], (ir.Stmt("S", o_at, combined),)),
        ),
    )
    return nests, [(f"{p}weights", weights), (f"{p}base", base.astype(dtype))]


def _scaled(
    node: Node, out: str, rows: int, cols: int, dtype: str, factor: float, base: np.ndarray
) -> tuple[tuple[ir.Node, ...], list[tuple[str, np.ndarray]]]:
    """``out[s, c] = out[s, c] * factor + base[c]`` (the older regressor's AVERAGE and base)."""
    name = f"{node.name}__added"
    at = (var("s"), var("c"))
    value = ir.Load(out, at, dtype) * ir.Const(factor, dtype) + ir.Load(name, (var("c"),), dtype)
    return nest([("s", rows), ("c", cols)], (ir.Stmt("S", ir.Access(out, at), value),)), [
        (name, base.astype(dtype))
    ]


def _base(node: Node, n_targets: int) -> np.ndarray:
    base = float_values(node, "base_values")
    if base is None or not len(base):
        return np.zeros(n_targets)
    if len(base) not in (1, n_targets):
        raise bad_attr(node, "base_values", f"has {len(base)} values for {n_targets} targets")
    return np.broadcast_to(base.astype(np.float64), (n_targets,)).copy()


def _compare_dtype(ctx: LowerContext, x: str, node: Node) -> str:
    """Thresholds are float32 unless given as doubles; an integer feature compares in float32."""
    doubles = (
        node.attr("nodes_values_as_tensor") is not None
        and np.asarray(node.attr("nodes_values_as_tensor")).dtype == np.float64
    )
    return "float64" if ctx.dtype(x) == "float64" or doubles else "float32"


def _check_input(node: Node, ctx: LowerContext, allowed: tuple[str, ...]) -> str:
    x = node.input(0)
    if ctx.dtype(x) not in allowed:
        raise unsupported(node, ctx, f"input {x!r} of dtype {ctx.dtype(x)}")
    if len(ctx.shape(x)) != 2:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): input {x!r} must be [N, F], "
            f"is {list(ctx.shape(x))}"
        )
    return x


@register_ml("TreeEnsemble")
def lower_tree_ensemble(node: Node, ctx: LowerContext) -> Lowered:
    """TreeEnsemble (ML opset 5): ``Y[N, n_targets]``, aggregated leaf weights."""
    x = _check_input(node, ctx, ("float32", "float64", "float16"))
    y = node.outputs[0]
    n_targets = int(node.attr("n_targets", 0))
    aggregate = (
        AGGREGATES[int(node.attr("aggregate_function", 1))]
        if 0 <= int(node.attr("aggregate_function", 1)) < 4
        else ""
    )
    if not aggregate:
        raise unsupported(
            node, ctx, f"attribute 'aggregate_function' = {node.attr('aggregate_function')}"
        )
    transform_code = int(node.attr("post_transform", 0))
    if not 0 <= transform_code < 5:
        raise unsupported(node, ctx, f"attribute 'post_transform' = {transform_code}")
    transform = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")[transform_code]
    forest = _forest_v5(node, n_targets)
    dtype = ctx.dtype(y)
    work = "float32" if dtype == "float16" else dtype
    rows = ctx.shape(x)[0]
    if ctx.shape(y) != (rows, n_targets):
        raise ShapeError(f"node {node.name!r} (TreeEnsemble): output shape {list(ctx.shape(y))}")
    trees = len(forest.roots)
    if aggregate == "AVERAGE" and trees:
        forest = Forest(**{**forest.__dict__, "weights": forest.weights / trees})
    if aggregate in ("MIN", "MAX"):
        # (targets a leaf does not reach keep the start value: the reference's +-max)
        hit = np.zeros_like(forest.weights, dtype=bool)
        leaf_targets = int_values(node, "leaf_targetids")
        assert leaf_targets is not None
        hit[np.arange(len(leaf_targets)), leaf_targets] = True
        fill = np.inf if aggregate == "MIN" else -np.inf
        forest = Forest(**{**forest.__dict__, "weights": np.where(hit, forest.weights, fill)})
    walks, at, tables = _walk(
        node, ctx, forest, _Walk(work if work != "float16" else "float32", True)
    )
    big = float(np.finfo(work).max)
    start = {"MIN": big, "MAX": -big}.get(aggregate, 0.0)
    out = y if work == dtype else f"{node.name}__scores"
    temps = [at]
    if out != y:
        temps.append(ir.Buffer(out, work, (rows, n_targets)))
    sums, more = _aggregate(node, forest, at, out, work, aggregate, np.full(n_targets, start))
    transformed, t_temps = post_transform(node, transform, out, rows, n_targets, work)
    nests = [*walks, *sums, *transformed]
    if out != y:
        at_ = (var("s"), var("c"))
        nests += nest(
            [("s", rows), ("c", n_targets)],
            (ir.Stmt("S", ir.Access(y, at_), ir.Cast(ir.Load(out, at_, work), dtype)),),
        )
    return Lowered(tuple(nests), (*temps, *t_temps), constants=tuple(tables + more))


@register_ml("TreeEnsembleRegressor")
def lower_tree_ensemble_regressor(node: Node, ctx: LowerContext) -> Lowered:
    """TreeEnsembleRegressor: ``Y[N, n_targets]``; AVERAGE divides the sum by the number of
    trees, then ``base_values`` are added."""
    x = _check_input(node, ctx, ("float32", "float64", "int64", "int32"))
    y = node.outputs[0]
    n_targets = int(node.attr("n_targets", 1))
    aggregate = choice_attr(node, "aggregate_function", "SUM", AGGREGATES)
    transform = post_transform_attr(node, ctx)
    forest = _forest_v3(node, "target", n_targets, aggregate)
    dtype = ctx.dtype(y)
    rows = ctx.shape(x)[0]
    walks, at, tables = _walk(node, ctx, forest, _Walk(_compare_dtype(ctx, x, node), False))
    big = float(np.finfo(dtype).max)
    start = {"MIN": big, "MAX": -big}.get(aggregate, 0.0)
    sums, more = _aggregate(node, forest, at, y, dtype, aggregate, np.full(n_targets, start))
    trees = len(forest.roots)
    factor = 1.0 / trees if aggregate == "AVERAGE" and trees else 1.0
    scaled, added = _scaled(node, y, rows, n_targets, dtype, factor, _base(node, n_targets))
    transformed, t_temps = post_transform(node, transform, y, rows, n_targets, dtype)
    return Lowered(
        (*walks, *sums, *scaled, *transformed),
        (at, *t_temps),
        constants=tuple(tables + more + added),
    )


@register_ml("TreeEnsembleClassifier")
def lower_tree_ensemble_classifier(node: Node, ctx: LowerContext) -> Lowered:
    """TreeEnsembleClassifier: scores ``Z[N, classes]`` (``base_values`` plus the leaves'
    class weights, onnx.reference's binary case, the post transform) and labels ``Y[N]``."""
    x = _check_input(node, ctx, ("float32", "float64", "int64", "int32"))
    labels_int = int_values(node, "classlabels_int64s")
    labels_str = string_values(node, "classlabels_strings")
    classes = (
        len(labels_int) if labels_int is not None and len(labels_int) else len(labels_str or [])
    )
    if classes < 2:
        raise unsupported(node, ctx, f"{classes} class label(s) (at least 2)")
    transform = post_transform_attr(node, ctx)
    forest = _forest_v3(node, "class", classes, "SUM")
    rows = ctx.shape(x)[0]
    z = node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else f"{node.name}__z"
    dtype = ctx.dtype(z) if z in node.outputs else "float32"
    temps: list[ir.Buffer] = [] if z in node.outputs else [ir.Buffer(z, dtype, (rows, classes))]
    walks, at, tables = _walk(node, ctx, forest, _Walk(_compare_dtype(ctx, x, node), False))
    sums, more = _aggregate(node, forest, at, z, dtype, "SUM", _base(node, classes))
    nests: list[ir.Node] = [*walks, *sums]
    class_ids = int_values(node, "class_ids")
    if class_ids is not None and len(set(class_ids.tolist())) == 1:
        # onnx.reference's binary case: column 1 takes column 0, column 0 its complement.
        first, second = ir.Access(z, (var("s"), 0)), ir.Access(z, (var("s"), 1))
        s1 = ir.Load(z, second.index, dtype)
        other = (ir.Const(1.0, dtype) - s1) if transform in ("NONE", "PROBIT") else -s1
        nests += nest(
            [("s", rows)],
            (ir.Stmt("S", second, ir.Load(z, first.index, dtype)), ir.Stmt("S", first, other)),
        )
    transformed, t_temps = post_transform(node, transform, z, rows, classes, dtype)
    nests += transformed
    labels, l_temps, l_tables = _labels(node, ctx, z, dtype, rows, classes, labels_int, labels_str)
    nests += labels
    return Lowered(
        tuple(nests), (at, *temps, *t_temps, *l_temps), constants=tuple(tables + more + l_tables)
    )


def _labels(
    node: Node,
    ctx: LowerContext,
    z: str,
    dtype: str,
    rows: int,
    classes: int,
    labels_int: np.ndarray | None,
    labels_str: list[str] | None,
) -> tuple[tuple[ir.Node, ...], tuple[ir.Buffer, ...], list[tuple[str, np.ndarray]]]:
    """``Y[s]``: the label of the first highest score of row ``s``."""
    y = node.outputs[0]
    p = f"{node.name}__"
    best = ir.Buffer(f"{p}best", dtype, (rows,))
    arg = ir.Buffer(f"{p}argmax", I64, (rows,))
    b_at, b = ir.Access(best.name, (var("s"),)), ir.Load(best.name, (var("s"),), dtype)
    i_at, i = ir.Access(arg.name, (var("s"),)), ir.Load(arg.name, (var("s"),), I64)
    zl = ir.Load(z, (var("s"), var("c")), dtype)
    higher = ir.binary("gt", zl, b)
    body: list[ir.Node] = [
        ir.Stmt("S", b_at, ir.Load(z, (var("s"), ir.Aff.lift(0)), dtype)),
        ir.Stmt("S", i_at, ir.Const(0, I64)),
        ir.Loop(
            "c",
            1,
            classes,
            (
                ir.Stmt("S", i_at, ir.Select(higher, ir.Iter("c"), i)),
                ir.Stmt("S", b_at, ir.Select(higher, zl, b)),
            ),
        ),
    ]
    name = f"{p}labels"
    width = string_width(ctx.dtype(y))
    if width is not None:
        table = code_table(labels_str or [], width)
        body += nest(
            [("w", width)],
            (
                ir.Stmt(
                    "S",
                    ir.Access(y, (var("s"), var("w"))),
                    ir.Load(name, (i, var("w")), CODE_POINT),
                ),
            ),
        )
    else:
        if labels_int is None or not len(labels_int):
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): string labels into a {ctx.dtype(y)} output"
            )
        table = labels_int.astype(ctx.dtype(y))
        body.append(ir.Stmt("S", ir.Access(y, (var("s"),)), ir.Load(name, (i,), ctx.dtype(y))))
    return nest([("s", rows)], body), (best, arg), [(name, table)]
