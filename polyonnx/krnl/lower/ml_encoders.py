"""ONNX-ML encoders: LabelEncoder (ML opsets 1 to 4), CategoryMapper (LabelEncoder's lookup
between its two category lists) and OneHotEncoder.

The keys are compile-time constants: a lookup is a loop over them that keeps the index of
the last key equal to the element (as ``dict(zip(keys, values))`` does), ``K`` (the default)
when none is; the output is then a table lookup by that index::

    for i..:  S: at[i..] = K
              for k:  S: at[i..] = x[i..] == keys[k] ? k : at[i..]
              S: y[i..] = values[at[i..]]         (values[K] is the default)

A float key NaN matches a NaN element. String keys are compared code point by code point
(see :mod:`polyonnx.krnl.lower.strings`): the key table is one code point wider than the
element, so a key longer than the element's width (its code point ``W`` is not padding)
never matches::

    S: same[i..] = keys[k, W] == 0
    for w:  S: same[i..] = x[i.., w] == keys[k, w] ? same[i..] : 0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, generic_iters, nest, unsupported, var
from polyonnx.krnl.lower.ml_common import code_table, int_values, register_ml, string_values
from polyonnx.krnl.lower.registry import LowerContext, Lowered

I64 = "int64"
ZERO, ONE = ir.Const(0, I64), ir.Const(1, I64)
CLEAR = ir.Const(0, CODE_POINT)

#: The spec's defaults of LabelEncoder's ``default_*`` attributes, by the values' kind.
DEFAULTS = {"string": "_Unused", "int": -1, "float": -0.0}


def _kind(values: object) -> str:
    arr = np.asarray(values)
    return "string" if arr.dtype.kind in "OUS" else "float" if arr.dtype.kind == "f" else "int"


def _listed(node: Node, name: str, raw: object) -> list[object]:
    """Keys or values: Python strings, or numpy scalars."""
    return (
        list(string_values(node, name) or []) if _kind(raw) == "string" else list(np.asarray(raw))
    )


def _label_encoder_map(node: Node) -> tuple[list[object], list[object], object, str]:
    """(keys, values, default, values' kind) from the attributes of any LabelEncoder version."""
    classes = string_values(node, "classes_strings")
    if classes is not None:  # ML opset 1: strings <-> their index
        return [], list(classes), None, "v1"
    keys: list[object] | None = None
    for name in ("keys_strings", "keys_int64s", "keys_floats", "keys_tensor"):
        if node.attr(name) is not None:
            raw = node.attr(name)
            keys = _listed(node, name, raw)
    values: list[object] | None = None
    kind = ""
    for name in ("values_strings", "values_int64s", "values_floats", "values_tensor"):
        if node.attr(name) is not None:
            raw = node.attr(name)
            kind = _kind(raw)
            values = _listed(node, name, raw)
    if keys is None or values is None:
        raise bad_attr(node, "keys_*", "and 'values_*' are required")
    if len(keys) != len(values):
        raise bad_attr(node, "values_*", f"has {len(values)} values for {len(keys)} keys")
    tensor = node.attr("default_tensor")
    if tensor is not None:
        default = np.asarray(tensor).reshape(-1)[0]
        default = default.decode() if isinstance(default, bytes) else default
    else:
        attr = {"string": "default_string", "int": "default_int64", "float": "default_float"}
        default = node.attr(attr[kind], DEFAULTS[kind])
    return keys, values, default, kind


@dataclass(frozen=True)
class _Element:
    """One element ``x[i..]`` of the encoded input, with the node's int64 scratch at it."""

    node: Node
    x: str
    dtype: str
    index: tuple[ir.Aff, ...]

    def temp(self, what: str) -> tuple[ir.Access, ir.Load]:
        name = f"{self.node.name}__{what}"
        return ir.Access(name, self.index), ir.Load(name, self.index, I64)


def _equal(e: _Element, keys: Sequence[object]) -> tuple[tuple[ir.Node, ...], ir.Expr, np.ndarray]:
    """Statements that run first at each key ``k``, the condition "element equals key
    ``k``" after them, and the key table (named ``<node>__keys``) they read."""
    name = f"{e.node.name}__keys"
    width = string_width(e.dtype)
    if width is not None:
        same_at, same = e.temp("same")
        cut = ir.Load(name, (var("k"), ir.Aff.lift(width)), CODE_POINT)
        point = ir.Binary(
            "eq",
            ir.Load(e.x, (*e.index, var("w")), CODE_POINT),
            ir.Load(name, (var("k"), var("w")), CODE_POINT),
        )
        first = (
            ir.Stmt("S", same_at, ir.Select(ir.Binary("eq", cut, CLEAR), ONE, ZERO)),
            *nest([("w", width)], (ir.Stmt("S", same_at, ir.Select(point, same, ZERO)),)),
        )
        return first, ir.Binary("ne", same, ZERO), code_table([str(s) for s in keys], width + 1)
    table = np.asarray(keys).astype(e.dtype)
    xl, key = ir.Load(e.x, e.index, e.dtype), ir.Load(name, (var("k"),), e.dtype)
    equal: ir.Expr = ir.binary("eq", xl, key)
    if table.dtype.kind == "f" and np.isnan(table).any():
        equal = ir.binary(
            "or", equal, ir.binary("and", ir.unary("isnan", xl), ir.unary("isnan", key))
        )
    return (), equal, table


def _temps(node: Node, ctx: LowerContext, whats: Sequence[str]) -> tuple[ir.Buffer, ...]:
    shape = ctx.shape(node.input(0))
    return tuple(ir.Buffer(f"{node.name}__{w}", I64, shape or (1,)) for w in whats)


@register_ml("LabelEncoder")
def lower_label_encoder(node: Node, ctx: LowerContext) -> Lowered:
    """LabelEncoder (see the module docstring); ML opset 1's ``classes_strings`` maps
    strings to their index and indices to their string."""
    return _lookup(node, ctx)


def _lookup(node: Node, ctx: LowerContext) -> Lowered:
    """The loops of LabelEncoder ``node`` (any version's attributes)."""
    x, y = node.input(0), node.outputs[0]
    keys, values, default, kind = _label_encoder_map(node)
    if kind == "v1":  # ML opset 1: strings <-> their index
        if string_width(ctx.dtype(x)) is not None:
            keys, values, default = values, list(range(len(values))), node.attr("default_int64", -1)
        else:
            keys, default = list(range(len(values))), node.attr("default_string", "_Unused")
    iters = generic_iters(ctx.shape(x))
    e = _Element(node, x, ctx.dtype(x), tuple(var(n) for n, _ in iters))
    at_w, at = e.temp("at")
    first, equal, key_table = _equal(e, keys)
    lookup: list[ir.Node] = [ir.Stmt("S", at_w, ir.Const(len(keys), I64))]
    if keys:
        lookup += nest(
            [("k", len(keys))], (*first, ir.Stmt("S", at_w, ir.Select(equal, ir.Iter("k"), at)))
        )
    table_name = f"{node.name}__values"
    width = string_width(ctx.dtype(y))
    if width is not None:
        table = code_table([str(v) for v in [*values, default]], width)
        out = nest(
            [("w", width)],
            (
                ir.Stmt(
                    "S",
                    ir.Access(y, (*e.index, var("w"))),
                    ir.Load(table_name, (at, var("w")), CODE_POINT),
                ),
            ),
        )
    else:
        table = np.asarray([*values, default]).astype(ctx.dtype(y))
        out = (ir.Stmt("S", ir.Access(y, e.index), ir.Load(table_name, (at,), ctx.dtype(y))),)
    constants = [(table_name, table)]
    if keys:
        constants.append((f"{node.name}__keys", key_table))
    temps = _temps(node, ctx, ("at", "same") if first else ("at",))
    return Lowered(nest(iters, (*lookup, *out)), temps, constants=tuple(constants))


@register_ml("CategoryMapper")
def lower_category_mapper(node: Node, ctx: LowerContext) -> Lowered:
    """``cats_strings[i] <-> cats_int64s[i]``: strings to int64 (``default_int64`` for a
    string not listed) or int64 to strings (``default_string``), by the input's type; the
    LabelEncoder lookup with those keys and values."""
    strings = string_values(node, "cats_strings") or []
    listed = int_values(node, "cats_int64s")
    ints = [] if listed is None else listed.tolist()
    if len(strings) != len(ints):
        raise bad_attr(
            node, "cats_int64s", f"has {len(ints)} categories for {len(strings)} strings"
        )
    if string_width(ctx.dtype(node.input(0))) is not None:
        attrs = {
            "keys_strings": tuple(strings),
            "values_int64s": tuple(ints),
            "default_int64": int(node.attr("default_int64", -1)),
        }
    else:
        attrs = {
            "keys_int64s": tuple(ints),
            "values_strings": tuple(strings),
            "default_string": node.attr("default_string", "_Unused"),
        }
    encoder = Node(node.name, "LabelEncoder", node.inputs, node.outputs, attrs, node.domain)
    return _lookup(encoder, ctx)


@register_ml("OneHotEncoder")
def lower_one_hot_encoder(node: Node, ctx: LowerContext) -> Lowered:
    """``Y[i.., c] = x[i..] == cats[c] ? 1 : 0``. With ``zeros=0`` an element in no category
    is an error at run time, as in onnxruntime: the node then reads a one-element table at
    index 1 (the runtime reports an index out of range in this node)."""
    x, y = node.input(0), node.outputs[0]
    ints, strings = int_values(node, "cats_int64s"), string_values(node, "cats_strings")
    cats: list[object]
    if ints is not None and len(ints):
        cats = ints.tolist()
        if string_width(ctx.dtype(x)) is not None:
            raise unsupported(node, ctx, "string input with 'cats_int64s'")
    elif strings:
        cats = list(strings)
        if string_width(ctx.dtype(x)) is None:
            raise unsupported(node, ctx, f"input of dtype {ctx.dtype(x)} with 'cats_strings'")
    else:
        raise bad_attr(node, "cats_int64s", "or 'cats_strings' is required")
    dtype = ctx.dtype(y)
    iters = generic_iters(ctx.shape(x))
    e = _Element(node, x, ctx.dtype(x), tuple(var(n) for n, _ in iters))
    if e.dtype in ("float32", "float64") and ints is not None:
        cats = [float(c) for c in ints.tolist()]  # (a float element equal to the integer)
    first, equal, key_table = _equal(e, cats)
    y_at = ir.Access(y, (*e.index, var("k")))
    hot = ir.Select(equal, ir.Const(1.0, dtype), ir.Const(0.0, dtype))
    body = nest([("k", len(cats))], (*first, ir.Stmt("S", y_at, hot)))
    constants = [(f"{node.name}__keys", key_table)]
    temps = list(_temps(node, ctx, ("same",) if first else ()))
    if not int(node.attr("zeros", 1)):
        count = ir.Buffer(f"{node.name}__hits", dtype, ctx.shape(x) or (1,))
        c_at, c = ir.Access(count.name, e.index), ir.Load(count.name, e.index, dtype)
        guard = ir.Load(
            f"{node.name}__known", (ir.Select(ir.binary("gt", c, 0.0), ZERO, ONE),), dtype
        )
        first_at = ir.Access(y, (*e.index, ir.Aff.lift(0)))
        body = (
            *body,
            ir.Stmt("S", c_at, ir.Const(0.0, dtype)),
            *nest([("k", len(cats))], (ir.Stmt("S", c_at, c + ir.Load(y, y_at.index, dtype)),)),
            ir.Stmt("S", first_at, ir.Load(y, first_at.index, dtype) * guard),
        )
        temps.append(count)
        constants.append((f"{node.name}__known", np.ones(1, dtype)))
    return Lowered(nest(iters, body), tuple(temps), constants=tuple(constants))
