"""What the ONNX-ML lowerings share: registration in the ``ai.onnx.ml`` domain, reading their
list-or-tensor attributes, and the score transforms of classifiers and regressors
(``post_transform``), written in place over a ``[rows, cols]`` score buffer::

    LOGISTIC      z = z < 0 ? 1 - 1 / (1 + exp(-|z|)) : 1 / (1 + exp(-|z|))
    SOFTMAX       m = max_c z;  z = exp(z - m);  s = sum_c z;  z = z / s
    SOFTMAX_ZERO  as SOFTMAX, but a score within 1e-7 of 0 becomes z * exp(-m), and a row
                  summing to 0 becomes 0.5 everywhere
    PROBIT        z = sqrt(2) * erfinv(2 z - 1)   (onnxruntime's and onnx.reference's
                  approximation of erfinv)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from polyonnx.graph.ir import ML_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, str_attr, unsupported, var
from polyonnx.krnl.lower.registry import LowerContext, Lowering, register

POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def register_ml(op_type: str) -> Callable[[Lowering], Lowering]:
    """Register the lowering of ONNX-ML op ``op_type`` (every ML opset: the lowering reads
    the attributes of each version)."""
    return register(op_type, 1, ML_DOMAIN)


def float_values(node: Node, name: str) -> np.ndarray | None:
    """Attribute ``name`` (a list of floats) or ``name_as_tensor`` (a tensor), flattened;
    None when the node has neither."""
    tensor = node.attr(f"{name}_as_tensor")
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)
    value = node.attr(name)
    return None if value is None else np.asarray(value, dtype=np.float32).reshape(-1)


def int_values(node: Node, name: str) -> np.ndarray | None:
    """Attribute ``name`` (ints, or an int tensor) flattened to int64; None when absent."""
    value = node.attr(name)
    return None if value is None else np.asarray(value, dtype=np.int64).reshape(-1)


def string_values(node: Node, name: str) -> list[str] | None:
    """Attribute ``name`` (strings, or a string tensor) as Python strings; None when absent."""
    value = node.attr(name)
    if value is None:
        return None
    items = value.reshape(-1).tolist() if isinstance(value, np.ndarray) else list(value)
    return [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in items]


def choice_attr(node: Node, name: str, default: str, choices: Sequence[str]) -> str:
    """A string attribute that must be one of ``choices``."""
    value = str_attr(node, name, default)
    if value not in choices:
        raise bad_attr(node, name, f"is {value!r}: one of {', '.join(choices)}")
    return value


def code_table(strings: Sequence[str], width: int) -> np.ndarray:
    """``strings`` as zero-padded code points, ``uint32[len(strings), width]``; a string
    longer than ``width`` is cut (the callers drop or never read such rows)."""
    table = np.zeros((len(strings), max(width, 1)), dtype=np.uint32)
    for k, s in enumerate(strings):
        cps = [ord(c) for c in s[:width]]
        table[k, : len(cps)] = cps
    return table


def post_transform_attr(node: Node, ctx: LowerContext) -> str:
    """The ``post_transform`` attribute of an older classifier or regressor (a string);
    UnsupportedOpError naming it for another value."""
    kind = str_attr(node, "post_transform", "NONE")
    if kind not in POST_TRANSFORMS:
        raise unsupported(node, ctx, f"attribute 'post_transform' = {kind!r}")
    return kind


def post_transform(
    node: Node, kind: str, z: str, rows: int, cols: int, dtype: str
) -> tuple[tuple[ir.Node, ...], tuple[ir.Buffer, ...]]:
    """Nests applying ``kind`` in place to the scores ``z[rows, cols]`` of ``dtype``, and the
    temps they use (see the module docstring)."""
    if kind == "NONE" or rows == 0 or cols == 0:
        return (), ()
    at = ir.Access(z, (var("r"), var("c")))
    zl = ir.Load(z, (var("r"), var("c")), dtype)

    def c(v: float) -> ir.Const:
        return ir.Const(v, dtype)

    def each(body: ir.Expr) -> tuple[ir.Node, ...]:
        return nest([("r", rows), ("c", cols)], (ir.Stmt("S", at, body),))

    if kind == "LOGISTIC":
        v = c(1.0) / (c(1.0) + ir.unary("exp", -ir.unary("abs", zl)))
        return each(ir.Select(ir.binary("lt", zl, c(0.0)), c(1.0) - v, v)), ()
    if kind == "PROBIT":
        return each(c(1.41421356) * _erf_inv(zl * c(2.0) - c(1.0))), ()
    top = ir.Buffer(f"{node.name}__max", dtype, (rows,))
    total = ir.Buffer(f"{node.name}__sum", dtype, (rows,))
    m_at, s_at = ir.Access(top.name, (var("r"),)), ir.Access(total.name, (var("r"),))
    m, s = ir.Load(top.name, (var("r"),), dtype), ir.Load(total.name, (var("r"),), dtype)
    exp: ir.Expr = ir.unary("exp", zl - m)
    if kind == "SOFTMAX_ZERO":
        far = ir.binary("or", ir.binary("gt", zl, c(1e-7)), ir.binary("lt", zl, c(-1e-7)))
        exp = ir.Select(far, exp, zl * ir.unary("exp", -m))
    scaled: ir.Expr = zl / s
    if kind == "SOFTMAX_ZERO":
        scaled = ir.Select(ir.binary("eq", s, c(0.0)), c(0.5), scaled)
    nests = nest(
        [("r", rows)],
        (
            ir.Stmt("S", m_at, ir.Load(z, (var("r"), ir.Aff.lift(0)), dtype)),
            *nest([("c", cols)], (ir.Stmt("S", m_at, ir.maximum(m, zl)),)),
            ir.Stmt("S", s_at, c(0.0)),
            *nest([("c", cols)], (ir.Stmt("S", at, exp), ir.Stmt("S", s_at, s + zl))),
            *nest([("c", cols)], (ir.Stmt("S", at, scaled),)),
        ),
    )
    return nests, (top, total)


def _erf_inv(x: ir.Expr) -> ir.Expr:
    """The inverse error function as onnxruntime approximates it (Winitzki, a = 0.147)."""
    dtype = x.dtype

    def c(v: float) -> ir.Const:
        return ir.Const(v, dtype)

    sign = ir.Select(ir.binary("lt", x, c(0.0)), c(-1.0), c(1.0))
    w = (c(1.0) - x) * (c(1.0) + x)
    log = ir.unary("log", w)
    v = c(2.0 / (math.pi * 0.147)) + c(0.5) * log
    v3 = ir.unary("sqrt", v * v - c(1.0 / 0.147) * log) - v
    return ir.Select(ir.binary("eq", w, c(0.0)), c(0.0), sign * ir.unary("sqrt", v3))
