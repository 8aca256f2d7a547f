"""ONNX-ML feature transforms: ArrayFeatureExtractor, Binarizer, Normalizer, Scaler, Imputer,
FeatureVectorizer. Each is an elementwise or row-wise nest over ``[N, C]`` features::

    ArrayFeatureExtractor   Y[a.., j] = X[a.., idx[j]]          (idx flattened, read at run time)
    Binarizer               Y[i..] = X[i..] > threshold ? 1 : 0
    Normalizer              n[r] = max|x|, sum|x| or sqrt(sum x^2) over row r
                            Y[r, c] = X[r, c] / max(n[r], 1e-30)
    Scaler                  Y[r, c] = (X[r, c] - offset[c]) * scale[c]
    Imputer                 Y[r, c] = X[r, c] == replaced (or isnan) ? imputed[c] : X[r, c]
    FeatureVectorizer       Y[r, off_k + j] = j < C_k ? X_k[r, j] : 0   (inputs side by side)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, generic_iters, nest, unsupported, var
from polyonnx.krnl.lower.elementwise import FLOATS, check_dtype
from polyonnx.krnl.lower.gather import wrap_negative
from polyonnx.krnl.lower.ml_common import choice_attr, float_values, int_values, register_ml
from polyonnx.krnl.lower.registry import LowerContext, Lowered

NUMBERS = ("float32", "float64", "int64", "int32")
_Body = Callable[[ir.Expr, dict[str, ir.Load]], ir.Expr]


def _vars(names: list[str]) -> tuple[ir.Aff, ...]:
    return tuple(var(n) for n in names)


def _as(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


def _rows(node: Node, ctx: LowerContext, x: str) -> tuple[int, int, tuple[ir.Aff, ...]]:
    """A ``[N, C]`` or ``[C]`` input as rows: (N, C, the index of ``x[r, c]``)."""
    shape = ctx.shape(x)
    if len(shape) == 2:
        return shape[0], shape[1], (var("r"), var("c"))
    if len(shape) == 1:
        return 1, shape[0], (var("c"),)
    raise ShapeError(
        f"node {node.name!r} ({node.op_type}): input {x!r} has shape {list(shape)}; "
        "it must be [N, C] or [C]"
    )


@register_ml("ArrayFeatureExtractor")
def lower_array_feature_extractor(node: Node, ctx: LowerContext) -> Lowered:
    """``Y[a.., j] = X[a.., idx[j]]`` over the flattened indices (a 1-D ``X`` gives one row,
    as onnxruntime does). An index out of range is a run-time error; a negative one counts
    from the end, as numpy (onnx.reference) reads it."""
    x, idx, y = node.input(0), node.input(1), node.outputs[0]
    check_dtype(node, ctx, idx, ("int64",))
    xs, n = ctx.shape(x), int(np.prod(ctx.shape(idx), dtype=np.int64))
    lead = [f"a{d}" for d in range(len(xs) - 1)]
    ys = ctx.shape(y)
    if ys[-1] != n:
        raise ShapeError(f"node {node.name!r} (ArrayFeatureExtractor): output shape {list(ys)}")
    known = ctx.constant(idx)
    flat = idx
    views: tuple[tuple[ir.Buffer, str], ...] = ()
    constants: tuple[tuple[str, np.ndarray], ...] = ()
    if known is not None and n:  # (skl2onnx writes the indices as an initializer)
        flat = f"{node.name}__indices"
        constants = ((flat, np.asarray(known, np.int64).reshape(-1)),)
    elif len(ctx.shape(idx)) != 1 and n:
        view = ir.Buffer(f"{node.name}__indices", "int64", (n,), "input")
        flat, views = view.name, ((view, idx),)
    pick = wrap_negative(ir.Load(flat, (var("j"),), "int64"), xs[-1])
    out_lead = _vars(lead) if len(xs) > 1 else (ir.Aff.lift(0),)
    iters = [*zip(lead, xs[:-1], strict=True), ("j", n)]
    width = string_width(ctx.dtype(x))
    if width is None:
        value: ir.Expr = ir.Load(x, (*_vars(lead), pick), ctx.dtype(x))
        body = (ir.Stmt("S", ir.Access(y, (*out_lead, var("j"))), value),)
    else:
        iters.append(("w", width))
        value = ir.Load(x, (*_vars(lead), pick, var("w")), CODE_POINT)
        body = (ir.Stmt("S", ir.Access(y, (*out_lead, var("j"), var("w"))), value),)
    return Lowered(nest(iters, body) if n else (), views=views, constants=constants)


@register_ml("Binarizer")
def lower_binarizer(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y = X > threshold ? 1 : 0`` in ``X``'s type (NaN gives 0)."""
    x, y = node.input(0), node.outputs[0]
    dtype = check_dtype(node, ctx, x, NUMBERS)
    threshold = float(node.attr("threshold", 0.0))
    iters = generic_iters(ctx.shape(y))
    at = _vars([n for n, _ in iters])
    xl = ir.Load(x, at, dtype)
    one, zero = (ir.Const(1.0, dtype), ir.Const(0.0, dtype))
    if dtype not in FLOATS:
        one, zero = ir.Const(1, dtype), ir.Const(0, dtype)
        above = ir.binary("gt", ir.Cast(xl, "float64"), ir.Const(threshold, "float64"))
    else:
        above = ir.binary("gt", xl, ir.Const(threshold, dtype))
    return nest(iters, (ir.Stmt("S", ir.Access(y, at), ir.Select(above, one, zero)),))


@register_ml("Normalizer")
def lower_normalizer(node: Node, ctx: LowerContext) -> Lowered:
    """Each row divided by its norm (MAX, L1 or L2), a zero norm read as 1e-30."""
    x, y = node.input(0), node.outputs[0]
    check_dtype(node, ctx, x, NUMBERS)
    norm = choice_attr(node, "norm", "MAX", ("MAX", "L1", "L2"))
    rows, cols, at = _rows(node, ctx, x)
    dtype = ctx.dtype(y)
    work = "float64" if ctx.dtype(x) == "float64" else "float32"
    xl = _as(ir.Load(x, at, ctx.dtype(x)), work)
    acc = ir.Buffer(f"{node.name}__norm", work, (rows,))
    a_at, a = ir.Access(acc.name, (var("r"),)), ir.Load(acc.name, (var("r"),), work)
    step = {
        "MAX": ir.maximum(a, ir.unary("abs", xl)),
        "L1": a + ir.unary("abs", xl),
        "L2": a + xl * xl,
    }[norm]
    total: ir.Expr = ir.unary("sqrt", a) if norm == "L2" else a
    divided = xl / ir.maximum(total, ir.Const(1e-30, work))
    nests = nest(
        [("r", rows)],
        (
            ir.Stmt("S", a_at, ir.Const(0.0, work)),
            *nest([("c", cols)], (ir.Stmt("S", a_at, step),)),
            *nest([("c", cols)], (ir.Stmt("S", ir.Access(y, at), _as(divided, dtype)),)),
        ),
    )
    return Lowered(nests, (acc,))


def _per_column(node: Node, name: str, values: np.ndarray, cols: int) -> np.ndarray:
    """An attribute with one value, or one per column, as one per column."""
    if len(values) == 1:
        return np.repeat(values, cols)
    if len(values) != cols:
        raise bad_attr(node, name, f"has {len(values)} values for {cols} columns (1 or {cols})")
    return values


def _columns(
    node: Node, ctx: LowerContext, x: str, tables: dict[str, np.ndarray], value: _Body
) -> Lowered:
    """``Y[.., c] = value(X[.., c], {what: table[c]})``: one value per column from each
    table (a constant, one entry per column), over every element of ``X``."""
    y, shape = node.outputs[0], ctx.shape(x)
    iters = generic_iters(shape)
    at = _vars([n for n, _ in iters])
    column = at[-1] if at else ir.Aff.lift(0)
    loads = {
        what: ir.Load(
            f"{node.name}__{what}", (column,), ctx.dtype(y) if t.dtype.kind == "f" else "int64"
        )
        for what, t in tables.items()
    }
    body = ir.Stmt("S", ir.Access(y, at), value(ir.Load(x, at, ctx.dtype(x)), loads))
    constants = tuple(
        (f"{node.name}__{what}", t.astype(ctx.dtype(y) if t.dtype.kind == "f" else np.int64))
        for what, t in tables.items()
    )
    return Lowered(nest(iters, (body,)), constants=constants)


@register_ml("Scaler")
def lower_scaler(node: Node, ctx: LowerContext) -> Lowered:
    """``Y[r, c] = (X[r, c] - offset[c]) * scale[c]`` in float (offset and scale: one value,
    or one per column)."""
    x, y = node.input(0), node.outputs[0]
    check_dtype(node, ctx, x, NUMBERS)
    shape = ctx.shape(x)
    cols = shape[-1] if shape else 1
    given = {what: float_values(node, what) for what in ("offset", "scale")}
    tables = {
        what: _per_column(node, what, np.full(1, float(what == "scale")) if v is None else v, cols)
        for what, v in given.items()
    }
    dtype = ctx.dtype(y)
    return _columns(node, ctx, x, tables, lambda xl, t: (_as(xl, dtype) - t["offset"]) * t["scale"])


@register_ml("Imputer")
def lower_imputer(node: Node, ctx: LowerContext) -> Lowered:
    """``Y[r, c] = X[r, c] == replaced ? imputed[c] : X[r, c]`` (``isnan`` for a NaN
    ``replaced_value_float``)."""
    x = node.input(0)
    dtype = check_dtype(node, ctx, x, ("float32", "float64", "int64"))
    floats = float_values(node, "imputed_value_floats")
    ints = int_values(node, "imputed_value_int64s")
    replaced: float | int
    if floats is not None and len(floats):
        imputed, replaced = floats, float(node.attr("replaced_value_float", 0.0))
    elif ints is not None and len(ints):
        imputed, replaced = ints, int(node.attr("replaced_value_int64", 0))
    else:
        raise bad_attr(node, "imputed_value_floats", "or 'imputed_value_int64s' is required")
    if (dtype in FLOATS) != isinstance(replaced, float):
        raise unsupported(node, ctx, f"input of dtype {dtype} with the other type's attributes")
    shape = ctx.shape(x)
    imputed = _per_column(node, "imputed_value", imputed, shape[-1] if shape else 1)

    def value(xl: ir.Expr, t: dict[str, ir.Load]) -> ir.Expr:
        hit: ir.Expr
        if isinstance(replaced, float) and np.isnan(replaced):
            hit = ir.unary("isnan", xl)
        else:
            hit = ir.binary("eq", xl, ir.Const(replaced, dtype))
        return ir.Select(hit, t["imputed"], xl)

    return _columns(node, ctx, x, {"imputed": imputed}, value)


@register_ml("FeatureVectorizer")
def lower_feature_vectorizer(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """The inputs side by side: input ``k`` (``[N, C_k]``, or ``[N]`` as one column) cut or
    zero-padded to ``inputdimensions[k]`` columns."""
    y = node.outputs[0]
    dims = int_values(node, "inputdimensions")
    inputs = [i for i in node.inputs if i]
    if dims is None or len(dims) != len(inputs) or (dims < 0).any():
        raise bad_attr(node, "inputdimensions", f"needs one size per input ({len(inputs)})")
    rows, dtype = ctx.shape(y)[0], ctx.dtype(y)
    if ctx.shape(y) != (rows, int(dims.sum())):
        raise ShapeError(f"node {node.name!r} (FeatureVectorizer): output {list(ctx.shape(y))}")
    nests: list[ir.Node] = []
    offset = 0
    for name, size in zip(inputs, dims.tolist(), strict=True):
        check_dtype(node, ctx, name, NUMBERS)
        shape = ctx.shape(name)
        if len(shape) not in (1, 2) or shape[0] != rows:
            raise ShapeError(
                f"node {node.name!r} (FeatureVectorizer): input {name!r} has shape "
                f"{list(shape)}; it must be [{rows}, C] or [{rows}]"
            )
        have = shape[1] if len(shape) == 2 else 1
        index = (var("r"), var("j")) if len(shape) == 2 else (var("r"),)
        copied = _as(ir.Load(name, index, ctx.dtype(name)), dtype)
        at = ir.Access(y, (var("r"), var("j") + offset))
        nests += nest([("r", rows), ("j", min(have, size))], (ir.Stmt("S", at, copied),))
        if size > have:
            pad = ir.Stmt("S", ir.Access(y, (var("r"), var("j"))), ir.Const(0.0, dtype))
            nests.append(
                ir.Loop("r", 0, rows, (ir.Loop("j", offset + have, offset + size, (pad,)),))
            )
        offset += size
    return tuple(nests)
