"""Elementwise ops: unary math and activations, Clip, and broadcasting binary/variadic ops.

Every elementwise op is one statement in a perfect nest over the output shape (iterators
``i0..ik``); an input dimension of size 1 under a larger output dimension is read at index 0
(ONNX multidirectional broadcasting)::

    for i0, i1:
      S: Y[i0, i1] = (A[i0, i1] + B[0, i1])

float16 math is computed in float32 and rounded once at the store, as numpy (the reference)
does; every other type is computed in its own type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    broadcast_index,
    generic_iters,
    nest,
    opset,
    scalar_index,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register

Body = Callable[[Sequence[ir.Expr]], ir.Expr]

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
FLOATS = ir.FLOAT_DTYPES
NUMERIC = FLOATS + INTS
ALL = NUMERIC + ("bool",)


def elementwise(
    node: Node, ctx: LowerContext, inputs: Sequence[str], body: Body, upcast_half: bool = False
) -> tuple[ir.Node, ...]:
    """``Y[i...] = body(loads of inputs broadcast to Y)`` over the shape of the first output.

    With ``upcast_half``, float16 loads are widened to float32 before ``body`` and its float32
    result is rounded back to the output's float16.
    """
    y = node.outputs[0]
    out_shape = ctx.shape(y)
    iters = generic_iters(out_shape)
    names = [name for name, _ in iters]
    args: list[ir.Expr] = [
        ir.Load(name, broadcast_index(ctx.shape(name), out_shape, names), ctx.dtype(name))
        for name in inputs
    ]
    if upcast_half:
        args = [ir.Cast(a, "float32") if a.dtype == "float16" else a for a in args]
    value = body(args)
    if upcast_half and value.dtype == "float32" and ctx.dtype(y) == "float16":
        value = ir.Cast(value, "float16")
    if value.dtype != ctx.dtype(y):
        raise unsupported(node, ctx, f"computes {value.dtype} but output {y!r} is {ctx.dtype(y)}")
    stmt = ir.Stmt("S", ir.Access(y, tuple(var(n) for n in names)), value)
    return nest(iters, (stmt,))


def check_dtype(node: Node, ctx: LowerContext, name: str, allowed: Sequence[str]) -> str:
    """The dtype of input ``name``; UnsupportedOpError naming it when not in ``allowed``."""
    dtype = ctx.dtype(name)
    if dtype not in allowed:
        raise unsupported(
            node, ctx, f"input {name!r} has dtype {dtype}; supported: {', '.join(allowed)}"
        )
    return dtype


def const(value: float | int | bool, like: ir.Expr) -> ir.Const:
    """``value`` as a constant of ``like``'s dtype."""
    if like.dtype in FLOATS:
        return ir.Const(float(value), like.dtype)
    if like.dtype == "bool":
        return ir.Const(bool(value), like.dtype)
    return ir.Const(int(value), like.dtype)


def fattr(node: Node, name: str, default: float) -> float:
    return float(node.attr(name, default))


# --------------------------------------------------------------------------- unary ops


def _unary(
    op_type: str, make: Callable[[ir.Expr, Node], ir.Expr], dtypes: Sequence[str] = FLOATS
) -> None:
    def lower(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
        check_dtype(node, ctx, node.input(0), dtypes)
        return elementwise(node, ctx, node.inputs[:1], lambda a: make(a[0], node), upcast_half=True)

    lower.__name__ = f"lower_{op_type.lower()}"
    lower.__doc__ = f"{op_type}: one elementwise statement."
    register(op_type)(lower)


def _select_neg(x: ir.Expr, neg: ir.Expr, pos: ir.Expr | None = None) -> ir.Expr:
    """``x < 0 ? neg : pos`` (``pos`` defaults to ``x``)."""
    return ir.Select(ir.binary("lt", x, const(0, x)), neg, x if pos is None else pos)


def _leaky_relu(x: ir.Expr, node: Node) -> ir.Expr:
    return _select_neg(x, x * fattr(node, "alpha", 0.01))


def _elu(x: ir.Expr, node: Node) -> ir.Expr:
    alpha = fattr(node, "alpha", 1.0)
    return _select_neg(x, (ir.unary("exp", x) - 1.0) * alpha)


def _selu(x: ir.Expr, node: Node) -> ir.Expr:
    alpha = fattr(node, "alpha", 1.67326319217681884765625)
    gamma = fattr(node, "gamma", 1.05070102214813232421875)
    neg = (ir.unary("exp", x) * alpha - alpha) * gamma
    return ir.Select(ir.binary("le", x, 0.0), neg, x * gamma)


def _celu(x: ir.Expr, node: Node) -> ir.Expr:
    alpha = fattr(node, "alpha", 1.0)
    neg = (ir.unary("exp", x / alpha) - 1.0) * alpha
    return ir.maximum(x, 0.0) + ir.minimum(neg, 0.0)


def _softplus(x: ir.Expr) -> ir.Expr:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|)).
    return ir.maximum(x, 0.0) + ir.unary("log", ir.unary("exp", -ir.unary("abs", x)) + 1.0)


def _gelu(x: ir.Expr, node: Node) -> ir.Expr:
    approximate = node.attr("approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (ir.unary("tanh", inner) + 1.0)
    return x * 0.5 * (ir.unary("erf", x * (1.0 / math.sqrt(2.0))) + 1.0)


def _hard_sigmoid(x: ir.Expr, node: Node) -> ir.Expr:
    alpha, beta = fattr(node, "alpha", 0.2), fattr(node, "beta", 0.5)
    return ir.maximum(ir.minimum(x * alpha + beta, 1.0), 0.0)


def _hard_swish(x: ir.Expr, _: Node) -> ir.Expr:
    return x * ir.maximum(ir.minimum(x * (1.0 / 6.0) + 0.5, 1.0), 0.0)


def _shrink(x: ir.Expr, node: Node) -> ir.Expr:
    lambd, bias = fattr(node, "lambd", 0.5), fattr(node, "bias", 0.0)
    if x.dtype in FLOATS:
        lo, hi, b = const(-lambd, x), const(lambd, x), const(bias, x)
    else:  # integer inputs compare against the real-valued thresholds
        lo, hi, b = const(math.floor(-lambd), x), const(math.ceil(lambd), x), const(bias, x)
        below = ir.Select(
            ir.binary("lt", x, lo) if -lambd == math.floor(-lambd) else ir.binary("le", x, lo),
            ir.binary("add", x, b),
            zero(x.dtype),
        )
        return ir.Select(
            ir.binary("gt", x, hi) if lambd == math.ceil(lambd) else ir.binary("ge", x, hi),
            ir.binary("sub", x, b),
            below,
        )
    return ir.Select(
        ir.binary("lt", x, lo), x + b, ir.Select(ir.binary("gt", x, hi), x - b, zero(x.dtype))
    )


def _thresholded_relu(x: ir.Expr, node: Node) -> ir.Expr:
    return ir.Select(ir.binary("gt", x, fattr(node, "alpha", 1.0)), x, zero(x.dtype))


def _is_inf(x: ir.Expr, node: Node) -> ir.Expr:
    pos, neg = int(node.attr("detect_positive", 1)), int(node.attr("detect_negative", 1))
    if pos and neg:
        return ir.unary("isinf", x)
    if pos:
        return ir.unary("isposinf", x)
    if neg:
        return ir.unary("isneginf", x)
    return ir.Const(False, "bool")


def _relu(x: ir.Expr, _: Node) -> ir.Expr:
    return x if x.dtype in UNSIGNED else ir.maximum(x, zero(x.dtype))


def _swish(x: ir.Expr, node: Node) -> ir.Expr:
    return x * ir.unary("sigmoid", x * fattr(node, "alpha", 1.0))


for _op in sorted(ir.MATH_OPS):
    _unary(
        _op.capitalize(),
        # (mypy infers no type for a lambda with a default argument)
        lambda x, _, op=_op: ir.unary(op, x),  # type: ignore[misc]
    )

_unary("Relu", _relu, NUMERIC)
_unary("Neg", lambda x, _: -x, FLOATS + SIGNED)
_unary("Abs", lambda x, _: x if x.dtype in UNSIGNED else ir.unary("abs", x), NUMERIC)
_unary("Sign", lambda x, _: ir.unary("sign", x), NUMERIC)
_unary("Reciprocal", lambda x, _: const(1.0, x) / x)
_unary("LeakyRelu", _leaky_relu)
_unary("Elu", _elu)
_unary("Selu", _selu)
_unary("Celu", _celu)
_unary("Gelu", _gelu)
_unary("Mish", lambda x, _: x * ir.unary("tanh", _softplus(x)))
_unary("Softplus", lambda x, _: _softplus(x))
_unary("Softsign", lambda x, _: x / (ir.unary("abs", x) + 1.0))
_unary("HardSigmoid", _hard_sigmoid)
_unary("HardSwish", _hard_swish)
_unary("ThresholdedRelu", _thresholded_relu)
_unary("Shrink", _shrink, NUMERIC)
_unary("Swish", _swish)
_unary("IsNaN", lambda x, _: ir.unary("isnan", x))
_unary("IsInf", _is_inf)


def _bound(name: str, dtype: str, ctx: LowerContext) -> ir.Expr | None:
    """A Clip bound: none, the initializer's value, or a load of the scalar at run time."""
    if not name:
        return None
    value = ctx.constant(name)
    if value is not None and value.size == 1:
        item = value.reshape(()).item()
        return ir.Const(float(item) if dtype in FLOATS else int(item), dtype)
    return ir.Load(name, scalar_index(ctx, name), dtype)


@register("Clip")
def lower_clip(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Clip: ``min(max(x, lo), hi)``; bounds are attributes before opset 11, inputs after."""
    x = node.input(0)
    dtype = check_dtype(node, ctx, x, NUMERIC)
    if opset(ctx) < 11:
        check_dtype(node, ctx, x, FLOATS)
        lo: ir.Expr | None = (
            ir.Const(float(node.attr("min")), dtype) if node.has_attr("min") else None
        )
        hi: ir.Expr | None = (
            ir.Const(float(node.attr("max")), dtype) if node.has_attr("max") else None
        )
    else:
        # Bounds are scalars: constants when they are initializers (codegen's max and min
        # against a number that is not NaN take one instruction), else read from their
        # buffers at run time (they may be graph inputs).
        lo, hi = (_bound(node.input(k), dtype, ctx) for k in (1, 2))

    def body(args: Sequence[ir.Expr]) -> ir.Expr:
        value = args[0]
        if lo is not None:
            value = ir.maximum(value, lo)
        if hi is not None:
            value = ir.minimum(value, hi)
        return value

    return elementwise(node, ctx, (x,), body)


# --------------------------------------------------------------------------- binary / variadic


def _variadic(op_type: str, op: str, min_inputs: int, dtypes: Sequence[str] = NUMERIC) -> None:
    def lower(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
        inputs = [i for i in node.inputs if i]
        if len(inputs) < min_inputs:
            raise unsupported(node, ctx, f"needs at least {min_inputs} inputs")
        if opset(ctx) < 7 and node.has_attr("axis"):
            raise unsupported(node, ctx, "legacy broadcasting with 'axis'")
        for i in inputs:
            check_dtype(node, ctx, i, dtypes)

        def body(args: Sequence[ir.Expr]) -> ir.Expr:
            value = args[0]
            for a in args[1:]:
                value = ir.binary(op, value, a)
            if op_type == "Mean":
                value = value / float(len(args))
            return value

        return elementwise(node, ctx, inputs, body, upcast_half=op_type not in ("Max", "Min"))

    lower.__name__ = f"lower_{op_type.lower()}"
    lower.__doc__ = f"{op_type}: a left-to-right chain of ``{op}`` with broadcasting."
    register(op_type)(lower)


_variadic("Add", "add", 2)
_variadic("Sub", "sub", 2)
_variadic("Mul", "mul", 2)
_variadic("Div", "div", 2)
_variadic("Sum", "add", 1)
_variadic("Max", "max", 1)
_variadic("Min", "min", 1)
_variadic("Mean", "add", 1, FLOATS)


@register("Mod")
def lower_mod(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Mod: with ``fmod=1`` C's fmod (sign of the dividend), else Python's (of the divisor).

    The spec asks for ``fmod=1`` with floats; ``fmod=0`` floats get Python's rule, as numpy's.
    """
    a, b = node.input(0), node.input(1)
    check_dtype(node, ctx, a, NUMERIC)
    fmod = int(node.attr("fmod", 0))
    op = "fmod" if fmod else "mod"
    return elementwise(node, ctx, (a, b), lambda x: ir.binary(op, x[0], x[1]), upcast_half=True)


@register("PRelu")
def lower_prelu(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """PRelu: ``x < 0 ? slope * x : x``, the slope broadcast to X."""
    x, slope = node.input(0), node.input(1)
    check_dtype(node, ctx, x, NUMERIC)
    return elementwise(
        node, ctx, (x, slope), lambda a: _select_neg(a[0], a[0] * a[1]), upcast_half=True
    )


#: Constant integer exponents of a float Pow computed as products (by squaring); a negative
#: one as the reciprocal of such a product.
POW_BY_PRODUCTS = range(-2, 17)


@register("Pow")
def lower_pow(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Pow: ``pow(x, y)``; since opset 12 the exponent may have another type (cast to X's).

    A float base raised to one constant small integer (GELU's tanh form cubes, decomposed
    layer norms square) is a product of ``x`` (:data:`POW_BY_PRODUCTS`): LLVM has no vector
    ``pow`` and calls libm lane by lane, which made a GPT-2 MLP's GELU take as long as its
    MatMul."""
    x, e = node.input(0), node.input(1)
    dtype = check_dtype(node, ctx, x, FLOATS + ("int32", "int64"))
    check_dtype(node, ctx, e, NUMERIC)
    n = _small_integer(ctx.constant(e))
    if dtype in FLOATS and n is not None:
        return elementwise(node, ctx, (x,), lambda a: _power(a[0], n), upcast_half=True)

    def body(args: Sequence[ir.Expr]) -> ir.Expr:
        base, exponent = args
        if dtype in FLOATS:
            if exponent.dtype != base.dtype:
                exponent = ir.Cast(exponent, base.dtype)
            return ir.binary("pow", base, exponent)
        # Integer powers go through float64 (exact for the results int64 can hold).
        return ir.Cast(
            ir.binary("pow", ir.Cast(base, "float64"), ir.Cast(exponent, "float64")), dtype
        )

    return elementwise(node, ctx, (x, e), body, upcast_half=True)


def _small_integer(exponent: np.ndarray | None) -> int | None:
    """The exponent when it is one constant value in :data:`POW_BY_PRODUCTS`, else None."""
    if exponent is None or exponent.size != 1:
        return None
    value = float(exponent.reshape(-1)[0])
    n = int(value) if value.is_integer() else None
    return n if n in POW_BY_PRODUCTS else None


def _power(x: ir.Expr, n: int) -> ir.Expr:
    """``x ** n`` for an integer ``n``: by squaring, ``1 / x ** -n`` below zero."""
    if n < 0:
        return const(1.0, x) / _power(x, -n)
    out: ir.Expr | None = None
    square = x
    while n:
        if n & 1:
            out = square if out is None else out * square
        n >>= 1
        if n:
            square = square * square
    return const(1.0, x) if out is None else out
