"""Elementwise ops: unary activations and math, Clip, and broadcasting binary/variadic ops.

Every elementwise op is one statement in a perfect nest over the output shape (iterators
``i0..ik``); an input dimension of size 1 under a larger output dimension is read at index 0
(ONNX multidirectional broadcasting)::

    for i0, i1:
      S: Y[i0, i1] = (A[i0, i1] + B[0, i1])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    broadcast_index,
    generic_iters,
    nest,
    opset,
    require_float,
    scalar_index,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register

Body = Callable[[Sequence[ir.Expr]], ir.Expr]


def elementwise(node: Node, ctx: LowerContext, inputs: Sequence[str], body: Body
                ) -> tuple[ir.Node, ...]:
    """``Y[i...] = body(loads of inputs broadcast to Y)`` over the shape of the first output."""
    y = node.outputs[0]
    out_shape = ctx.shape(y)
    iters = generic_iters(out_shape)
    names = [name for name, _ in iters]
    args = [ir.Load(name, broadcast_index(ctx.shape(name), out_shape, names), ctx.dtype(name))
            for name in inputs]
    value = body(args)
    if value.dtype != ctx.dtype(y):
        raise unsupported(node, ctx, f"computes {value.dtype} but output {y!r} is "
                          f"{ctx.dtype(y)}")
    stmt = ir.Stmt("S", ir.Access(y, tuple(var(n) for n in names)), value)
    return nest(iters, (stmt,))


def _unary(op_type: str, make: Callable[[ir.Expr, Node], ir.Expr], float_only: bool) -> None:
    def lower(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
        if float_only:
            require_float(node, ctx, node.input(0))
        elif ctx.dtype(node.input(0)) == "bool":
            raise unsupported(node, ctx, "bool input")
        return elementwise(node, ctx, node.inputs[:1], lambda a: make(a[0], node))

    lower.__name__ = f"lower_{op_type.lower()}"
    lower.__doc__ = f"{op_type}: one elementwise statement."
    register(op_type)(lower)


def _leaky_relu(x: ir.Expr, node: Node) -> ir.Expr:
    alpha = float(node.attr("alpha", 0.01))
    return ir.Select(ir.binary("lt", x, 0.0), x * alpha, x)


_unary("Relu", lambda x, _: ir.maximum(x, zero(x.dtype)), float_only=False)
_unary("LeakyRelu", _leaky_relu, float_only=True)
_unary("Sigmoid", lambda x, _: ir.unary("sigmoid", x), float_only=True)
_unary("Tanh", lambda x, _: ir.unary("tanh", x), float_only=True)
_unary("Exp", lambda x, _: ir.unary("exp", x), float_only=True)
_unary("Log", lambda x, _: ir.unary("log", x), float_only=True)
_unary("Sqrt", lambda x, _: ir.unary("sqrt", x), float_only=True)
_unary("Reciprocal", lambda x, _: ir.Const(1.0, x.dtype) / x, float_only=True)
_unary("Neg", lambda x, _: -x, float_only=False)
_unary("Abs", lambda x, _: ir.unary("abs", x), float_only=False)


@register("Clip")
def lower_clip(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Clip: ``min(max(x, lo), hi)``; bounds are attributes before opset 11, inputs after."""
    x = node.input(0)
    dtype = ctx.dtype(x)
    if dtype == "bool":
        raise unsupported(node, ctx, "bool input")
    if opset(ctx) < 11:
        require_float(node, ctx, x)
        lo = ir.Const(float(node.attr("min")), dtype) if node.has_attr("min") else None
        hi = ir.Const(float(node.attr("max")), dtype) if node.has_attr("max") else None
    else:
        # Bounds are scalars read from their buffers at run time (they may be graph inputs).
        lo = ir.Load(node.input(1), scalar_index(ctx, node.input(1)), dtype) \
            if node.input(1) else None
        hi = ir.Load(node.input(2), scalar_index(ctx, node.input(2)), dtype) \
            if node.input(2) else None

    def body(args: Sequence[ir.Expr]) -> ir.Expr:
        value = args[0]
        if lo is not None:
            value = ir.maximum(value, lo)
        if hi is not None:
            value = ir.minimum(value, hi)
        return value

    return elementwise(node, ctx, (x,), body)


def _variadic(op_type: str, op: str, min_inputs: int) -> None:
    def lower(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
        inputs = [i for i in node.inputs if i]
        if len(inputs) < min_inputs:
            raise unsupported(node, ctx, f"needs at least {min_inputs} inputs")
        if opset(ctx) < 7 and node.has_attr("axis"):
            raise unsupported(node, ctx, "legacy broadcasting with 'axis'")
        dtype = ctx.dtype(inputs[0])
        if dtype == "bool":
            raise unsupported(node, ctx, f"dtype {dtype}")

        def body(args: Sequence[ir.Expr]) -> ir.Expr:
            value = args[0]
            for a in args[1:]:
                value = ir.binary(op, value, a)
            return value

        return elementwise(node, ctx, inputs, body)

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


@register("Pow")
def lower_pow(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Pow: ``pow(x, y)``; since opset 12 the exponent may have another type (cast to X's)."""
    x, e = node.input(0), node.input(1)
    dtype = require_float(node, ctx, x)

    def body(args: Sequence[ir.Expr]) -> ir.Expr:
        base, exponent = args
        if exponent.dtype != dtype:
            exponent = ir.Cast(exponent, dtype)
        return ir.binary("pow", base, exponent)

    return elementwise(node, ctx, (x, e), body)

