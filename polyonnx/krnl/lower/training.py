"""The optimizer steps of the training domain (``ai.onnx.preview.training``): Adagrad, Adam,
Momentum.

Each takes a learning rate ``R`` and an update count ``T`` (scalars), then ``n`` tensors to
optimise ``X1..Xn``, their gradients ``G1..Gn`` and their optimizer states (Adagrad: the
accumulated squared gradients ``H``; Momentum: the momenta ``V``; Adam: both, ``V`` then
``H``), and returns the new tensors, then the new states in the same order. The step is
element-wise: one nest per tensor, a statement per output, the later ones reading the new
state the earlier ones wrote. With ``g = norm_coefficient * X + G`` (the gradient of the L2
regularisation added), as ``onnx.reference`` computes them::

    Adagrad   H' = H + g*g
              X' = X - R / (1 + T*decay_factor) * g / (sqrt(H') + epsilon)
    Momentum  V' = alpha*V + (T > 0 ? beta : 1) * g
              X' = X - R * V'                      (mode "standard")
              X' = X - R * (g + alpha*V')          (mode "nesterov")
    Adam      V' = alpha*V + (1 - alpha) * g
              H' = beta*H + (1 - beta) * g*g
              X' = (1 - norm_coefficient_post) * (X - r * V' / (sqrt(H') + epsilon))
              r  = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R

The scalar rate (``R / (1 + T*decay_factor)``, Adam's ``r``) is computed in float64, as the
reference computes it from the integer ``T``, then rounded to the tensors' type; the rest in
the tensors' type. A state output the model leaves unnamed goes to a temp buffer.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value, TRAINING_DOMAIN
    >>> vals = [Value("r", "float32", ()), Value("t", "int64", ())] + [
    ...     Value(n, "float32", (3,)) for n in ("x", "g", "v", "x2", "v2")]
    >>> node = Node("m", "Momentum", ("r", "t", "x", "g", "v"), ("x2", "v2"),
    ...             {"alpha": 0.9, "beta": 1.0, "mode": "standard", "norm_coefficient": 0.0},
    ...             TRAINING_DOMAIN)
    >>> graph = Graph("g", tuple(vals[:5]), tuple(vals[5:]), (node,), {v.name: v for v in vals})
    >>> from polyonnx.krnl.lower.registry import LowerContext, lower_node
    >>> [loop] = lower_node(node, LowerContext(graph)).nests
    >>> for s in loop.body: print(s)
    S: v2[i0] = ((0.9 * v[i0]) + (select(gt(t[], 0), 1.0, 1.0) * ((0.0 * x[i0]) + g[i0])))
    S: x2[i0] = (x[i0] - (r[] * v2[i0]))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import TRAINING_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    bad_attr,
    generic_iters,
    load,
    nest,
    require_float,
    scalar_index,
    str_attr,
    var,
)
from polyonnx.krnl.lower.registry import LowerContext, Lowered, Lowering, register

F64 = "float64"


def _register(op_type: str) -> Callable[[Lowering], Lowering]:
    """Register the lowering of training op ``op_type`` (its only version, 1)."""
    return register(op_type, 1, TRAINING_DOMAIN)


def _float_attr(node: Node, name: str, default: float | None) -> float:
    """A float attribute; its default is float32 too, as an attribute given is (and as the
    reference reads the schema's default)."""
    value = node.attr(name, None if default is None else np.float32(default))
    if value is None:
        raise bad_attr(node, name, "is required")
    return float(value)


class _Step:
    """The shared frame of one optimizer node: its scalars, its ``n`` tensor groups, and the
    nests and temps built so far."""

    def __init__(self, node: Node, ctx: LowerContext, per_tensor: int) -> None:
        self.node, self.ctx = node, ctx
        ins = node.inputs
        groups, left = divmod(len(ins) - 2, per_tensor)
        if len(ins) < 2 + per_tensor or left:
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): {len(ins)} inputs; it takes R, T and "
                f"{per_tensor} tensors per tensor optimised"
            )
        if len(node.outputs) != (per_tensor - 1) * groups:
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): {len(node.outputs)} outputs for "
                f"{groups} tensors optimised: it returns {per_tensor - 1} per tensor"
            )
        self.n = groups
        r, t = ins[0], ins[1]
        for name in (r, t):
            if not name or math.prod(ctx.shape(name)) != 1:
                raise ShapeError(
                    f"node {node.name!r} ({node.op_type}): input {name!r} must be a scalar"
                )
        if ctx.dtype(t) != "int64":
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): T {t!r} must be int64, not {ctx.dtype(t)}"
            )
        require_float(node, ctx, r)
        self.r = load(ctx, r, scalar_index(ctx, r))
        self.t = load(ctx, t, scalar_index(ctx, t))
        self.dtype = require_float(node, ctx, ins[2])
        self.nests: list[ir.Node] = []
        self.temps: list[ir.Buffer] = []

    def tensors(self, k: int) -> tuple[str, ...]:
        """The inputs of tensor ``k``: ``X``, ``G`` and its states, checked to share X's shape
        and dtype."""
        names = self.node.inputs[2 + k :: self.n]
        shape = self.ctx.shape(names[0])
        for name in names:
            if self.ctx.shape(name) != shape or self.ctx.dtype(name) != self.dtype:
                raise ShapeError(
                    f"node {self.node.name!r} ({self.node.op_type}): inputs "
                    f"{list(names)} of tensor {k} must share shape and dtype; {name!r} is "
                    f"{self.ctx.dtype(name)}{list(self.ctx.shape(name))}, the first "
                    f"{self.dtype}{list(shape)}"
                )
        return names

    def output(self, j: int, k: int, shape: tuple[int, ...]) -> str:
        """The buffer of output ``j`` (0: the new X, then the states) of tensor ``k``: the
        output itself, or a temp when the model leaves it unnamed."""
        name = self.node.outputs[j * self.n + k]
        if name:
            return name
        temp = ir.Buffer(f"{self.node.name}__out{j}_{k}", self.dtype, shape, "temp")
        self.temps.append(temp)
        return temp.name

    def const(self, value: float) -> ir.Const:
        return ir.Const(value, self.dtype)

    def rate(self, value: ir.Expr) -> ir.Expr:
        """A float64 scalar in the tensors' type."""
        return value if value.dtype == self.dtype else ir.Cast(value, self.dtype)

    def add(
        self,
        k: int,
        body: Callable[[Sequence[ir.Load], Sequence[ir.Load]], Sequence[ir.Expr]],
        n_out: int,
    ) -> None:
        """The nest of tensor ``k``: ``body(inputs, new)`` gives the values of the outputs in
        the order they are written, states first (``new[j]`` loads output ``j``, 0 the new
        X, for a state to be read after it is written)."""
        names = self.tensors(k)
        shape = self.ctx.shape(names[0])
        iters = generic_iters(shape)
        index = tuple(var(n) for n, _ in iters)
        outs = [self.output(j, k, shape) for j in range(n_out)]
        loads = [ir.Load(name, index, self.dtype) for name in names]
        new = [ir.Load(name, index, self.dtype) for name in outs]
        values = body(loads, new)
        order = [*range(1, n_out), 0]  # the states, then X
        stmts = [ir.Stmt("S", ir.Access(outs[j], index), values[j]) for j in order]
        self.nests.extend(nest(iters, stmts))

    def lowered(self) -> Lowered:
        return Lowered(tuple(self.nests), tuple(self.temps))


@_register("Adagrad")
def lower_adagrad(node: Node, ctx: LowerContext) -> Lowered:
    """Adagrad: inputs R, T, X.., G.., H..; outputs X'.., H'.. (see the module docstring)."""
    step = _Step(node, ctx, 3)
    decay = _float_attr(node, "decay_factor", 0.0)
    epsilon = _float_attr(node, "epsilon", 1e-6)
    norm = _float_attr(node, "norm_coefficient", 0.0)
    one = ir.Const(1.0, F64)
    rate = step.rate(ir.Cast(step.r, F64) / (one + ir.Cast(step.t, F64) * ir.Const(decay, F64)))

    def body(ins: Sequence[ir.Load], new: Sequence[ir.Load]) -> list[ir.Expr]:
        x, g, h = ins
        grad = step.const(norm) * x + g
        h_new = h + grad * grad
        x_new = x - rate * grad / (ir.unary("sqrt", new[1]) + step.const(epsilon))
        return [x_new, h_new]

    for k in range(step.n):
        step.add(k, body, 2)
    return step.lowered()


@_register("Momentum")
def lower_momentum(node: Node, ctx: LowerContext) -> Lowered:
    """Momentum: inputs R, T, X.., G.., V..; outputs X'.., V'.. (see the module docstring)."""
    step = _Step(node, ctx, 3)
    alpha = _float_attr(node, "alpha", None)
    beta = _float_attr(node, "beta", None)
    norm = _float_attr(node, "norm_coefficient", None)
    if node.attr("mode") is None:
        raise bad_attr(node, "mode", "is required")
    mode = str_attr(node, "mode", "")
    if mode not in ("standard", "nesterov"):
        raise bad_attr(node, "mode", f"is {mode!r}: one of standard, nesterov")
    first = ir.Binary("gt", step.t, ir.Const(0, "int64"))
    beta_now = ir.Select(first, step.const(beta), step.const(1.0))
    r = step.rate(step.r)

    def body(ins: Sequence[ir.Load], new: Sequence[ir.Load]) -> list[ir.Expr]:
        x, g, v = ins
        grad = step.const(norm) * x + g
        v_new = step.const(alpha) * v + beta_now * grad
        if mode == "standard":
            x_new = x - r * new[1]
        else:
            x_new = x - r * (grad + step.const(alpha) * new[1])
        return [x_new, v_new]

    for k in range(step.n):
        step.add(k, body, 2)
    return step.lowered()


@_register("Adam")
def lower_adam(node: Node, ctx: LowerContext) -> Lowered:
    """Adam: inputs R, T, X.., G.., V.., H..; outputs X'.., V'.., H'.. (see the module
    docstring)."""
    step = _Step(node, ctx, 4)
    alpha = _float_attr(node, "alpha", 0.9)
    beta = _float_attr(node, "beta", 0.999)
    epsilon = _float_attr(node, "epsilon", 1e-6)
    norm = _float_attr(node, "norm_coefficient", 0.0)
    post = _float_attr(node, "norm_coefficient_post", 0.0)
    one = ir.Const(1.0, F64)
    t = ir.Cast(step.t, F64)
    r = ir.Cast(step.r, F64)
    corrected = (
        r
        * ir.unary("sqrt", one - ir.binary("pow", ir.Const(beta, F64), t))
        / (one - ir.binary("pow", ir.Const(alpha, F64), t))
    )
    rate = step.rate(ir.Select(ir.Binary("gt", step.t, ir.Const(0, "int64")), corrected, r))

    def body(ins: Sequence[ir.Load], new: Sequence[ir.Load]) -> list[ir.Expr]:
        x, g, v, h = ins
        grad = step.const(norm) * x + g
        v_new = step.const(alpha) * v + step.const(1.0 - alpha) * grad
        h_new = step.const(beta) * h + step.const(1.0 - beta) * (grad * grad)
        h_sqrt = ir.unary("sqrt", new[2]) + step.const(epsilon)
        x_new = step.const(1.0 - post) * (x - rate * (new[1] / h_sqrt))
        return [x_new, v_new, h_new]

    for k in range(step.n):
        step.add(k, body, 3)
    return step.lowered()
