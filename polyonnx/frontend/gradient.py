"""The training op ``Gradient`` (domain ``ai.onnx.preview.training``) as plain nodes.

A ``Gradient`` node names a target ``y`` and the tensors ``xs`` (and ``zs``) it is a function
of; its output ``i`` is the derivative of ``y`` with respect to ``xs[i]``. polyonnx has no
lowering for it: at import time :func:`expand_gradients` replaces the node by the nodes of
reverse-mode automatic differentiation over the forward graph between ``xs`` and ``y``, which
then compile through the normal pipeline (nothing is differentiated or computed at run time
by a library). How:

- the *active* values are the floating-point values that depend on an ``x``; only they get
  gradients (an integer or bool value, e.g. from ``Shape`` or ``Greater``, is a constant for
  differentiation, as ``zs`` are);
- the seed is ``dY = ones`` of ``y``'s shape: when ``y`` is not a scalar, the gradient is that
  of ``ReduceSum(y)``, the sum of its elements;
- the nodes are visited from ``y`` back, in reverse topological order; each node with a
  gradient at an output applies its derivative rule (:data:`RULES`), giving gradient
  contributions for its active inputs; a value reached by several paths sums them;
- broadcasting is undone: an operand's contribution is summed over the axes it was broadcast
  along (``ReduceSum``), then reshaped to the operand's shape (shapes are static here);
- an ``x`` that ``y`` does not depend on gets a gradient of zeros of its shape;
- a forward node with no rule on a path from ``xs`` to ``y`` is an
  :class:`~polyonnx.errors.UnsupportedOpError` naming the op, its node and the Gradient node.

The Gradient's inputs are the values at which to differentiate (``xs``' values, then
``zs``'). When an input is the tensor its ``xs``/``zs`` entry names (as when ``xs`` are graph
inputs, the usual case), the graph's own forward nodes are differentiated. Otherwise the
forward nodes between ``xs``/``zs`` and ``y`` are first copied with the inputs in their
place, and the copy is differentiated.

Example:
    >>> from onnx import helper, TensorProto
    >>> from polyonnx.frontend.importer import import_model
    >>> v = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
    >>> grad = helper.make_node("Gradient", ["a", "b"], ["da", "db"], xs=["a", "b"], y="c",
    ...                         domain=TRAINING_DOMAIN)
    >>> m = helper.make_model(helper.make_graph(
    ...     [helper.make_node("Mul", ["a", "b"], ["c"]), grad], "g",
    ...     [v("a", [2, 3]), v("b", [3])], [v("c", [2, 3]), v("da", None), v("db", None)]),
    ...     opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING_DOMAIN, 1)])
    >>> print(import_model(m))  # doctest: +NORMALIZE_WHITESPACE
    graph g(a: float32[2, 3], b: float32[3])
      -> (c: float32[2, 3], da: float32[2, 3], db: float32[3])
      const Gradient_1/one: float32[]
      const Gradient_1/shape: int64[2]
      const Gradient_1/axes: int64[1]
      const Gradient_1/shape_1: int64[1]
      Mul_0: c = Mul(a, b)
      Gradient_1/Expand: Gradient_1/t = Expand(Gradient_1/one, Gradient_1/shape)
      Gradient_1/Mul: Gradient_1/t_1 = Mul(Gradient_1/t, b)
      Gradient_1/Mul_1: Gradient_1/t_2 = Mul(Gradient_1/t, a)
      Gradient_1/ReduceSum: Gradient_1/t_3 = ReduceSum[keepdims=1](Gradient_1/t_2, Gradient_1/axes)
      Gradient_1/Reshape: Gradient_1/t_4 = Reshape(Gradient_1/t_3, Gradient_1/shape_1)
      Gradient_1/Identity: da = Identity(Gradient_1/t_1)
      Gradient_1/Identity_1: db = Identity(Gradient_1/t_4)

    ``db`` is ``a`` times the seed, summed over the axis ``b`` was broadcast along.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import helper

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import (
    TRAINING_DOMAIN,
    Graph,
    Node,
    Value,
    fresh_name,
    topological_order,
)

Shape = tuple[int, ...]


def is_gradient(n: Node) -> bool:
    """Whether ``n`` is a ``Gradient`` node of the training domain."""
    return n.op_type == "Gradient" and n.domain == TRAINING_DOMAIN


def gradient_output_types(n: Node, values: Mapping[str, Value]) -> tuple[Value, ...]:
    """The types of a Gradient node's outputs, () for another node: output ``i`` is typed like
    input ``i`` (the value of ``xs[i]``). ONNX has no shape inference for the op.

    Example:
        >>> n = Node("g", "Gradient", ("a",), ("da",), {"xs": ("a",), "y": "c"}, TRAINING_DOMAIN)
        >>> gradient_output_types(n, {"a": Value("a", "float32", (2,))})
        (Value(name='da', dtype='float32', shape=(2,)),)
    """
    if not is_gradient(n):
        return ()
    return tuple(
        Value(o, values[i].dtype, values[i].shape)
        for o, i in zip(n.outputs, n.inputs, strict=False)
        if o and i in values
    )


def expand_gradients(graph: Graph) -> Graph:
    """``graph`` with every Gradient node replaced by the nodes computing its outputs (see the
    module docstring); ``graph`` itself when it has none."""
    while True:
        node = next((n for n in graph.nodes if is_gradient(n)), None)
        if node is None:
            return graph
        graph = _expand(graph, node)


# --------------------------------------------------------------------------- the expansion


@dataclass
class _Builder:
    """Emits the backward nodes of one Gradient node, typing each value it makes."""

    prefix: str
    opset: int
    values: dict[str, Value]
    constants: dict[str, np.ndarray]
    taken: set[str]
    nodes: list[Node] = field(default_factory=list)
    _scalars: dict[tuple[float, str], str] = field(default_factory=dict)

    def shape(self, name: str) -> Shape:
        return self.values[name].dims

    def dtype(self, name: str) -> str:
        return self.values[name].dtype

    def fresh(self, base: str) -> str:
        return fresh_name(f"{self.prefix}/{base}", self.taken)

    def const(self, arr: np.ndarray, base: str) -> str:
        name = self.fresh(base)
        self.constants[name] = arr
        self.values[name] = Value(name, arr.dtype.name, tuple(int(d) for d in arr.shape))
        return name

    def scalar(self, x: float, dtype: str) -> str:
        """A scalar constant (one per value and type)."""
        key = (x, dtype)
        if key not in self._scalars:
            base = {0.0: "zero", 1.0: "one"}.get(x, "c")
            self._scalars[key] = self.const(np.array(x, dtype=dtype), base)
        return self._scalars[key]

    def ints(self, xs: Iterable[int], base: str) -> str:
        return self.const(np.array(list(xs), dtype=np.int64), base)

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        shape: Shape,
        dtype: str,
        out: str | None = None,
        **attrs: Any,
    ) -> str:
        """One node; its output (named ``out``, or fresh) is typed ``dtype[shape]``."""
        out = out or self.fresh("t")
        self.nodes.append(Node(self.fresh(op_type), op_type, inputs, (out,), attrs))
        self.values[out] = Value(out, dtype, tuple(shape))
        return out

    def binary(self, op_type: str, a: str, b: str) -> str:
        """An elementwise op of two values, broadcast."""
        shape = tuple(int(d) for d in np.broadcast_shapes(self.shape(a), self.shape(b)))
        return self.op(op_type, (a, b), shape, self.dtype(a))

    def reshape(self, g: str, shape: Shape) -> str:
        if self.shape(g) == shape:
            return g
        return self.op("Reshape", (g, self.ints(shape, "shape")), shape, self.dtype(g))

    def expand(self, g: str, shape: Shape) -> str:
        if self.shape(g) == shape:
            return g
        return self.op("Expand", (g, self.ints(shape, "shape")), shape, self.dtype(g))

    def reduce_sum(self, g: str, axes: Sequence[int]) -> str:
        """``g`` summed over ``axes``, kept as dimensions of 1."""
        if not axes:
            return g
        shape = tuple(1 if k in axes else d for k, d in enumerate(self.shape(g)))
        if self.opset < 13:  # (axes became an input at opset 13)
            return self.op("ReduceSum", (g,), shape, self.dtype(g), axes=tuple(axes), keepdims=1)
        return self.op("ReduceSum", (g, self.ints(axes, "axes")), shape, self.dtype(g), keepdims=1)

    def unbroadcast(self, g: str, shape: Shape) -> str:
        """``g`` (of a broadcast result's shape) summed back to an operand of ``shape``."""
        out = self.shape(g)
        lead = len(out) - len(shape)
        axes = [*range(lead), *(lead + k for k, d in enumerate(shape) if d == 1 != out[lead + k])]
        return self.reshape(self.reduce_sum(g, axes), shape)

    def transpose(self, g: str, perm: Sequence[int]) -> str:
        shape = tuple(self.shape(g)[p] for p in perm)
        return self.op("Transpose", (g,), shape, self.dtype(g), perm=tuple(perm))

    def total(self, parts: list[str]) -> str:
        """The sum of a value's gradient contributions."""
        if len(parts) == 1:
            return parts[0]
        return self.op("Sum", parts, self.shape(parts[0]), self.dtype(parts[0]))


def _expand(graph: Graph, grad: Node) -> Graph:
    """``graph`` with Gradient node ``grad`` replaced by its backward nodes."""
    xs, zs, y = _attributes(graph, grad)
    values = dict(graph.values)
    constants = dict(graph.constants)
    taken = set(values) | {n.name for n in graph.nodes}
    b = _Builder(grad.name, graph.opset, values, constants, taken)
    nodes = [n for n in graph.nodes if n is not grad]
    xs, y = _bind_inputs(b, grad, nodes, xs, zs, y)
    for n in b.nodes:  # forward copies, when the Gradient's inputs are other tensors
        nodes.append(n)
    b.nodes.clear()
    grads = _differentiate(b, grad, nodes, xs, y)
    for x, out in zip(xs, grad.outputs, strict=False):
        if out:
            _define_output(b, grad, x, out, grads.get(x))
    at = graph.nodes.index(grad)
    nodes[at:at] = b.nodes
    # (Ordered again: the backward nodes read values that forward nodes listed after the
    # Gradient node may define.)
    return Graph(
        graph.name,
        graph.inputs,
        tuple(values[v.name] for v in graph.outputs),
        tuple(
            topological_order(
                nodes,
                {v.name for v in graph.inputs} | set(constants),
                "the graph with its Gradient nodes expanded",
            )
        ),
        values,
        constants,
        graph.opset,
    )


def _attributes(graph: Graph, grad: Node) -> tuple[list[str], list[str], str]:
    """``xs``, ``zs`` and ``y`` of ``grad``, checked against the graph."""
    if grad.guard:
        raise UnsupportedOpError(
            "Gradient", 1, grad.name, "a Gradient in a branch of an If known only at run time"
        )
    xs, zs, y = list(grad.attr("xs") or ()), list(grad.attr("zs") or ()), grad.attr("y")
    if not xs or not y:
        raise ModelError(f"Gradient node {grad.name!r}: attributes 'xs' and 'y' are required")
    if len(grad.inputs) != len(xs) + len(zs):
        raise ModelError(
            f"Gradient node {grad.name!r} has {len(grad.inputs)} inputs; its xs and zs name "
            f"{len(xs) + len(zs)}"
        )
    if len(grad.outputs) > len(xs):
        raise ModelError(
            f"Gradient node {grad.name!r} has {len(grad.outputs)} outputs, more than its "
            f"{len(xs)} xs"
        )
    for name in (*xs, *zs, y, *grad.inputs):
        if name not in graph.values:
            raise ModelError(f"Gradient node {grad.name!r}: {name!r} is not a tensor of the graph")
    for x in (*xs, y):
        if not np.issubdtype(np.dtype(graph.values[x].dtype), np.floating):
            raise UnsupportedOpError(
                "Gradient",
                1,
                grad.name,
                f"{x!r} is {graph.values[x].dtype}; gradients are of floating-point tensors",
            )
    return xs, zs, y


def _bind_inputs(
    b: _Builder, grad: Node, nodes: list[Node], xs: list[str], zs: list[str], y: str
) -> tuple[list[str], str]:
    """The tensors to differentiate ``y`` with respect to, and ``y``: ``xs`` and ``y`` when
    the Gradient's inputs are ``xs`` and ``zs`` themselves; else the Gradient's inputs and a
    copy of the forward nodes reading them (emitted into ``b``)."""
    bound = dict(zip((*xs, *zs), grad.inputs, strict=True))
    if all(k == v for k, v in bound.items()):
        return xs, y
    for k, v in bound.items():
        if (b.values[k].dtype, b.values[k].shape) != (b.values[v].dtype, b.values[v].shape):
            raise ShapeError(
                f"Gradient node {grad.name!r}: input {v!r} is {b.values[v]}, but the tensor "
                f"it gives a value to, {k!r}, is {b.values[k]}"
            )
    renamed = {k: v for k, v in bound.items() if k != v}
    needed = _ancestors(nodes, y)
    for n in nodes:
        if id(n) not in needed or not any(i in renamed for i in n.inputs):
            continue
        if any(o in bound for o in n.outputs):  # (a source's producer is not re-run)
            continue
        outs = tuple(b.fresh(f"forward/{o}") if o else "" for o in n.outputs)
        for o, new in zip(n.outputs, outs, strict=True):
            if o:
                renamed[o] = new
                b.values[new] = Value(new, b.values[o].dtype, b.values[o].shape)
        ins = tuple(renamed.get(i, i) for i in n.inputs)
        name = b.fresh(f"forward/{n.name}")
        b.nodes.append(Node(name, n.op_type, ins, outs, n.attrs, n.domain, n.guard))
    return [bound[x] for x in xs], renamed.get(y, y)


def _ancestors(nodes: Sequence[Node], y: str) -> set[int]:
    """The ids of the nodes ``y`` depends on."""
    producer = {o: n for n in nodes for o in n.outputs if o}
    out: set[int] = set()
    stack = [y]
    while stack:
        n = producer.get(stack.pop())
        if n is not None and id(n) not in out:
            out.add(id(n))
            stack.extend(i for i in n.inputs if i)
    return out


def _active(b: _Builder, grad: Node, nodes: Sequence[Node], xs: Sequence[str]) -> set[str]:
    """The floating-point values that depend on ``xs`` (``xs`` included)."""
    active = set(xs)
    for n in nodes:
        if not any(i in active for i in n.inputs):
            continue
        for o in n.outputs:
            if o in xs:
                raise ModelError(
                    f"Gradient node {grad.name!r}: x {o!r} depends on another x (xs must be "
                    "independent inputs of the differentiated graph)"
                )
            if o and np.issubdtype(np.dtype(b.values[o].dtype), np.floating):
                active.add(o)
    return active


def _differentiate(
    b: _Builder, grad: Node, nodes: Sequence[Node], xs: Sequence[str], y: str
) -> dict[str, str]:
    """Reverse mode from ``y``: the gradient of each active value ``y`` depends on."""
    active = _active(b, grad, nodes, xs)
    if y not in active:
        return {}
    parts: dict[str, list[str]] = {y: [_seed(b, y)]}
    for n in reversed(nodes):
        if not any(o in parts for o in n.outputs) or any(o in xs for o in n.outputs):
            continue
        rule = None if n.domain else RULES.get(n.op_type)
        if rule is None or n.guard:
            why = "no derivative rule" if rule is None else "it runs under a run-time condition"
            raise UnsupportedOpError(
                n.op_type,
                b.opset,
                n.name,
                f"{why}, and it lies on the path from xs to {y!r} of Gradient node {grad.name!r}",
            )
        douts = [b.total(parts[o]) if o in parts else None for o in n.outputs]
        wanted = [bool(i) and i in active for i in n.inputs]
        for i, d in zip(n.inputs, rule(b, n, douts, wanted), strict=False):
            if d is not None and i in active:
                parts.setdefault(i, []).append(d)
    return {x: b.total(parts[x]) for x in xs if x in parts}


def _seed(b: _Builder, y: str) -> str:
    """dY: ones of ``y``'s shape (the gradient of the sum of ``y``'s elements)."""
    return b.expand(b.scalar(1.0, b.dtype(y)), b.shape(y))


def _define_output(b: _Builder, grad: Node, x: str, out: str, d: str | None) -> None:
    """Output ``out`` of ``grad``: the gradient ``d`` of ``x``, or zeros of its shape when
    ``y`` does not depend on ``x``."""
    declared = b.values.get(out)
    want = b.values[x]
    if declared is not None and (declared.dtype, declared.shape) != (want.dtype, want.shape):
        raise ShapeError(
            f"Gradient node {grad.name!r}: output {out!r} is declared {declared}, but the "
            f"gradient of {x!r} is {want.dtype}{list(want.shape)}"
        )
    if d is None:
        d = b.expand(b.scalar(0.0, want.dtype), want.dims)
    b.op("Identity", (d,), want.dims, want.dtype, out=out)


# --------------------------------------------------------------------------- derivative rules

#: A derivative rule: (builder, node, the gradient of each output or None, whether each input
#: wants a gradient) -> each input's gradient contribution (None: none).
Rule = Callable[[_Builder, Node, list[str | None], list[bool]], list[str | None]]


def _unary(f: Callable[[_Builder, Node, str], str]) -> Rule:
    """A rule for an op of one differentiable input, from ``f(b, node, dY) -> dX``."""

    def rule(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
        assert d[0] is not None
        return [f(b, n, d[0]) if wanted[0] else None]

    return rule


def _positive(b: _Builder, x: str) -> str:
    return b.op("Greater", (x, b.scalar(0.0, b.dtype(x))), b.shape(x), "bool")


def _relu(b: _Builder, n: Node, g: str) -> str:
    x = n.inputs[0]
    return b.op("Where", (_positive(b, x), g, b.scalar(0.0, b.dtype(g))), b.shape(g), b.dtype(g))


def _leaky_relu(b: _Builder, n: Node, g: str) -> str:
    x, alpha = n.inputs[0], float(n.attr("alpha", 0.01))
    scaled = b.binary("Mul", g, b.scalar(alpha, b.dtype(g)))
    return b.op("Where", (_positive(b, x), g, scaled), b.shape(g), b.dtype(g))


def _sigmoid(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dY/dX = Y (1 - Y)
    return b.binary("Mul", b.binary("Mul", g, y), b.binary("Sub", b.scalar(1.0, b.dtype(y)), y))


def _tanh(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dY/dX = 1 - Y^2
    return b.binary("Mul", g, b.binary("Sub", b.scalar(1.0, b.dtype(y)), b.binary("Mul", y, y)))


def _sqrt(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dY/dX = 1 / (2 Y)
    return b.binary("Div", g, b.binary("Mul", y, b.scalar(2.0, b.dtype(y))))


def _reciprocal(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dY/dX = -Y^2
    return b.op("Neg", (b.binary("Mul", b.binary("Mul", g, y), y),), b.shape(g), b.dtype(g))


def _abs(b: _Builder, n: Node, g: str) -> str:
    x = n.inputs[0]
    return b.binary("Mul", g, b.op("Sign", (x,), b.shape(x), b.dtype(x)))


def _cast(b: _Builder, n: Node, g: str) -> str:
    return _cast_to(b, g, b.dtype(n.inputs[0]))


def _same_shape(b: _Builder, n: Node, g: str) -> str:
    """Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes the input's shape back."""
    return b.reshape(g, b.shape(n.inputs[0]))


def _transpose(b: _Builder, n: Node, g: str) -> str:
    rank = len(b.shape(n.inputs[0]))
    perm = list(n.attr("perm") or reversed(range(rank)))
    inverse = [0] * rank
    for k, p in enumerate(perm):
        inverse[p % rank] = k
    return b.transpose(g, inverse)


def _softmax_axes(b: _Builder, n: Node) -> list[int]:
    """The axes a Softmax or LogSoftmax normalises over: one from opset 13, before it every
    axis from ``axis`` on (the input seen as a matrix)."""
    rank = len(b.shape(n.inputs[0]))
    if b.opset >= 13:
        return [int(n.attr("axis", -1)) % rank]
    return list(range(int(n.attr("axis", 1)) % rank, rank))


def _softmax(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dX = Y (dY - sum(dY Y))
    gy = b.binary("Mul", g, y)
    return b.binary("Mul", y, b.binary("Sub", g, b.reduce_sum(gy, _softmax_axes(b, n))))


def _log_softmax(b: _Builder, n: Node, g: str) -> str:
    y = n.outputs[0]  # dX = dY - exp(Y) sum(dY)
    p = b.op("Exp", (y,), b.shape(y), b.dtype(y))
    return b.binary("Sub", g, b.binary("Mul", p, b.reduce_sum(g, _softmax_axes(b, n))))


def _reduction_axes(b: _Builder, n: Node) -> list[int] | None:
    """The axes a ReduceSum/ReduceMean node reduces (sorted, non-negative); None when it
    reduces none (empty axes with ``noop_with_empty_axes``)."""
    rank = len(b.shape(n.inputs[0]))
    axes: Iterable[int] | None = n.attr("axes")
    if len(n.inputs) > 1 and n.inputs[1]:
        if n.inputs[1] not in b.constants:
            raise UnsupportedOpError(
                n.op_type, b.opset, n.name, f"axes {n.inputs[1]!r} known only at run time"
            )
        axes = b.constants[n.inputs[1]].reshape(-1).tolist()
    axes = sorted({int(a) % rank for a in axes or ()})
    if not axes:
        return None if n.attr("noop_with_empty_axes", 0) else list(range(rank))
    return axes


def _reduce(b: _Builder, n: Node, g: str) -> str:
    x = n.inputs[0]
    axes = _reduction_axes(b, n)
    if axes is None:
        return g
    kept = tuple(1 if k in axes else d for k, d in enumerate(b.shape(x)))
    d = b.expand(b.reshape(g, kept), b.shape(x))
    if n.op_type == "ReduceMean":
        count = math.prod(b.shape(x)[a] for a in axes)
        d = b.binary("Mul", d, b.scalar(1.0 / max(count, 1), b.dtype(d)))
    return d


def _linear(*signs: int) -> Rule:
    """Add, Sub, Sum: input ``i`` gets ``signs[i] * dY`` (Sum: +1 for all), unbroadcast."""

    def rule(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
        g = d[0]
        assert g is not None
        out: list[str | None] = []
        for k, (x, w) in enumerate(zip(n.inputs, wanted, strict=True)):
            gk = g if (signs[k] if k < len(signs) else 1) > 0 else b.op("Neg", (g,), *_t(b, g))
            out.append(b.unbroadcast(gk, b.shape(x)) if w else None)
        return out

    return rule


def _t(b: _Builder, g: str) -> tuple[Shape, str]:
    """The shape and type of ``g``, as :meth:`_Builder.op` takes them."""
    return b.shape(g), b.dtype(g)


def _broadcast(b: _Builder, *names: str) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*(b.shape(x) for x in names)))


def _mul(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    (g,), (x0, x1) = d, n.inputs
    assert g is not None
    return [
        b.unbroadcast(b.binary("Mul", g, x1), b.shape(x0)) if wanted[0] else None,
        b.unbroadcast(b.binary("Mul", g, x0), b.shape(x1)) if wanted[1] else None,
    ]


def _div(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    (g,), (x0, x1), y = d, n.inputs, n.outputs[0]
    assert g is not None
    q = b.binary("Div", g, x1)
    dx1 = None  # d(a/b)/db = -(a/b)/b
    if wanted[1]:
        dx1 = b.unbroadcast(b.op("Neg", (b.binary("Mul", q, y),), *_t(b, q)), b.shape(x1))
    return [b.unbroadcast(q, b.shape(x0)) if wanted[0] else None, dx1]


def _pow(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    (g,), (base, exp), y = d, n.inputs, n.outputs[0]
    assert g is not None
    out: list[str | None] = [None, None]
    if wanted[0]:  # dY/dA = B A^(B-1); the exponent may have another type
        e1 = b.binary("Sub", exp, b.scalar(1.0, b.dtype(exp)))
        p = b.op("Pow", (base, e1), _broadcast(b, base, e1), b.dtype(base))
        e = exp if b.dtype(exp) == b.dtype(g) else _cast_to(b, exp, b.dtype(g))
        out[0] = b.unbroadcast(b.binary("Mul", b.binary("Mul", g, e), p), b.shape(base))
    if wanted[1]:  # dY/dB = Y log(A); 0 where A == 0 (as frameworks define it)
        log = b.op("Log", (base,), b.shape(base), b.dtype(base))
        full = b.binary("Mul", b.binary("Mul", g, y), log)
        zero = b.scalar(0.0, b.dtype(base))
        at_zero = b.op("Equal", (base, zero), b.shape(base), "bool")
        masked = b.op("Where", (at_zero, zero, full), b.shape(full), b.dtype(full))
        out[1] = b.unbroadcast(masked, b.shape(exp))
    return out


def _cast_to(b: _Builder, x: str, dtype: str) -> str:
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return b.op("Cast", (x,), b.shape(x), dtype, to=int(code))


def _where(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    (g,), (cond, x0, x1) = d, n.inputs
    assert g is not None
    zero = b.scalar(0.0, b.dtype(g))
    out: list[str | None] = [None, None, None]
    if wanted[1]:
        out[1] = b.unbroadcast(b.op("Where", (cond, g, zero), *_t(b, g)), b.shape(x0))
    if wanted[2]:
        out[2] = b.unbroadcast(b.op("Where", (cond, zero, g), *_t(b, g)), b.shape(x1))
    return out


def _matmul(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    """Y = A @ B with NumPy's rules: a 1-D A is a row, a 1-D B a column, batch axes
    broadcast. dA = dY @ B^T and dB = A^T @ dY on the matrix forms, unbroadcast."""
    (g,), (a, bb) = d, n.inputs
    assert g is not None
    sa, sb = b.shape(a), b.shape(bb)
    a2 = sa if len(sa) >= 2 else (1, *sa)
    b2 = sb if len(sb) >= 2 else (*sb, 1)
    batch = tuple(int(k) for k in np.broadcast_shapes(a2[:-2], b2[:-2]))
    g2 = b.reshape(g, (*batch, a2[-2], b2[-1]))
    out: list[str | None] = [None, None]
    if wanted[0]:
        bt = b.transpose(b.reshape(bb, b2), _swap(b2))
        da = b.op("MatMul", (g2, bt), (*batch, *a2[-2:]), b.dtype(g))
        out[0] = b.reshape(b.unbroadcast(da, a2), sa)
    if wanted[1]:
        at = b.transpose(b.reshape(a, a2), _swap(a2))
        db = b.op("MatMul", (at, g2), (*batch, *b2[-2:]), b.dtype(g))
        out[1] = b.reshape(b.unbroadcast(db, b2), sb)
    return out


def _swap(shape: Shape) -> list[int]:
    """The permutation exchanging the last two axes."""
    r = len(shape)
    return [*range(r - 2), r - 1, r - 2]


def _gemm(b: _Builder, n: Node, d: list[str | None], wanted: list[bool]) -> list[str | None]:
    """Y = alpha A' B' + beta C (A' = A or A^T, B' = B or B^T): each operand's gradient is a
    Gemm of dY with the other operand, the transpositions arranged so that it comes out in
    the operand's own layout."""
    (g,), (a, bb, c) = d, (*n.inputs, "")[:3]
    assert g is not None
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    ta, tb = int(n.attr("transA", 0)), int(n.attr("transB", 0))
    dt = b.dtype(g)
    out: list[str | None] = [None, None, None]
    if wanted[0]:  # dA' = alpha dY B'^T; dA = dA' or its transpose
        ins, flags = ((bb, g), (tb, 1)) if ta else ((g, bb), (0, 1 - tb))
        out[0] = b.op("Gemm", ins, b.shape(a), dt, alpha=alpha, transA=flags[0], transB=flags[1])
    if wanted[1]:  # dB' = alpha A'^T dY; dB = dB' or its transpose
        ins, flags = ((g, a), (1, ta)) if tb else ((a, g), (1 - ta, 0))
        out[1] = b.op("Gemm", ins, b.shape(bb), dt, alpha=alpha, transA=flags[0], transB=flags[1])
    if len(wanted) > 2 and wanted[2] and c:
        gc = g if beta == 1.0 else b.binary("Mul", g, b.scalar(beta, dt))
        out[2] = b.unbroadcast(gc, b.shape(c))
    return out


RULES: dict[str, Rule] = {
    "Abs": _unary(_abs),
    "Add": _linear(1, 1),
    "Cast": _unary(_cast),
    "Div": _div,
    "Exp": _unary(lambda b, n, g: b.binary("Mul", g, n.outputs[0])),
    "Flatten": _unary(_same_shape),
    "Gemm": _gemm,
    "Identity": _unary(lambda b, n, g: g),
    "LeakyRelu": _unary(_leaky_relu),
    "Log": _unary(lambda b, n, g: b.binary("Div", g, n.inputs[0])),
    "LogSoftmax": _unary(_log_softmax),
    "MatMul": _matmul,
    "Mul": _mul,
    "Neg": _unary(lambda b, n, g: b.op("Neg", (g,), *_t(b, g))),
    "Pow": _pow,
    "Reciprocal": _unary(_reciprocal),
    "ReduceMean": _unary(_reduce),
    "ReduceSum": _unary(_reduce),
    "Relu": _unary(_relu),
    "Reshape": _unary(_same_shape),
    "Sigmoid": _unary(_sigmoid),
    "Softmax": _unary(_softmax),
    "Sqrt": _unary(_sqrt),
    "Squeeze": _unary(_same_shape),
    "Sub": _linear(1, -1),
    "Sum": _linear(),
    "Tanh": _unary(_tanh),
    "Transpose": _unary(_transpose),
    "Unsqueeze": _unary(_same_shape),
    "Where": _where,
}
"""The ops the Gradient expansion differentiates, each with its derivative rule."""
