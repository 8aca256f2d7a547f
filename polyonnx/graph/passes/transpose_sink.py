"""Transposes sunk below the ops that read them, until they meet their inverse and cancel.

Converters from channels-last frameworks (tf2onnx, from Keras and TensorFlow) wrap every
convolution in Transposes: NHWC to NCHW before it, back after it. tf2onnx's own optimiser
removes most pairs but not those around the ops it does not push a Transpose through (Keras'
MobileNetV3-Small keeps 106, around its hard-swish, squeeze-excitation and residual blocks).
Each is a pass over memory, and it keeps the convolutions on either side out of the
channel-blocked layout.

One sweep in topological order moves a Transpose below the op that reads it, when every
other operand of that op is a Transpose by the same permutation, a constant (permuted here to
match) or a single element: elementwise ops, reductions and ArgMax/ArgMin, Softmax (opset 13
on), Concat, Pad and Slice (their axes and pads mapped through the permutation). A Transpose
of a Transpose becomes one Transpose, or none when the two are inverse (a Transpose that keeps
the order of the axes is a copy, and goes). The result is kept
only if it moves fewer elements through Transposes than the graph it came from.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", s) for n, s in [("x", (1, 3, 4, 5)), ("t", (1, 4, 5, 3)),
    ...      ("a", (1, 4, 5, 3)), ("y", (1, 3, 4, 5))]}
    >>> v["b"] = Value("b", "float32", (3,))
    >>> g = Graph("g", (v["x"],), (v["y"],), (
    ...     Node("nhwc", "Transpose", ("x",), ("t",), {"perm": (0, 2, 3, 1)}),
    ...     Node("bias", "Add", ("t", "b"), ("a",)),
    ...     Node("nchw", "Transpose", ("a",), ("y",), {"perm": (0, 3, 1, 2)})), v,
    ...     {"b": np.arange(3, dtype="float32")})
    >>> sunk = sink_transposes(g)
    >>> [str(n) for n in sunk.nodes], sunk.constants["b_nchw"].shape
    (['bias: y = Add(x, b_nchw)'], (1, 3, 1, 1))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from polyonnx.graph.ir import Additions, Graph, Node, Value
from polyonnx.graph.pads import spread_pads
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.fuse import ELEMENTWISE
from polyonnx.graph.passes.simplify import remove_identities

Perm = tuple[int, ...]

#: Ops computed element by element on broadcast operands: a permutation of the operands'
#: axes permutes the output's the same way.
BROADCAST_OPS = ELEMENTWISE | {
    "And",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "Cos",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "IsInf",
    "IsNaN",
    "Less",
    "LessOrEqual",
    "Mod",
    "Not",
    "Or",
    "Shrink",
    "Sign",
    "Sin",
    "ThresholdedRelu",
    "Where",
    "Xor",
}

REDUCE_OPS = frozenset(
    {
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
    }
)

SOFTMAX_OPS = frozenset({"Hardmax", "LogSoftmax", "Softmax"})


def sink_transposes(graph: Graph) -> Graph:
    """Transposes moved below the ops that read them and cancelled in pairs (see the module
    docstring); ``graph`` itself when that moves no fewer elements."""
    sunk = _Sweep(graph).run()
    if sunk is None:
        return graph
    sunk = eliminate_dead_code(remove_identities(sunk))
    return sunk if _transposed(sunk) < _transposed(graph) else graph


def _transposed(graph: Graph) -> tuple[int, int]:
    """(elements written by Transposes, number of Transposes); a symbolic dimension counts 1."""
    sizes = [
        math.prod(d if isinstance(d, int) else 1 for d in graph.value(n.outputs[0]).shape)
        for n in graph.nodes
        if n.op_type == "Transpose" and not n.domain
    ]
    return sum(sizes), len(sizes)


def inverse(perm: Perm) -> Perm:
    """The permutation that undoes ``perm``: ``x.transpose(perm).transpose(inverse(perm))``
    is ``x``.

    Example:
        >>> inverse((0, 2, 3, 1))
        (0, 3, 1, 2)
    """
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class _Pushed:
    """An op rewritten to read the Transposes' sources: its output is the op's original
    output with its axes in source order, which a Transpose by ``perm`` turns back."""

    node: Node
    perm: Perm


class _Sweep(Additions):
    """One pass over the nodes in order; the state it carries is what it has rewritten."""

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph)
        self.graph = graph
        self.transposed: dict[str, tuple[str, Perm]] = {}  # value -> (source, perm)
        self.alias: dict[str, str] = {}  # a value equal to another (a cancelled pair)
        self.nodes: list[Node] = []
        self.changed = False

    def run(self) -> Graph | None:
        outputs = {v.name for v in self.graph.outputs}
        for n in self.graph.nodes:
            n = dataclasses.replace(n, inputs=tuple(self.alias.get(i, i) for i in n.inputs))
            if n.domain or n.guard or len(n.outputs) != 1:
                self.nodes.append(n)
            elif n.op_type == "Transpose":
                self._transpose(n, outputs)
            else:
                pushed = _push(n, self)
                if pushed is None:
                    self.nodes.append(n)
                else:
                    self._emit(n.outputs[0], pushed)
        if not self.changed:
            return None
        return dataclasses.replace(
            self.graph, nodes=tuple(self.nodes), values=self.values, constants=self.constants
        )

    def _transpose(self, n: Node, outputs: set[str]) -> None:
        perm = _perm(n, self.values)
        source, out = n.inputs[0], n.outputs[0]
        if source in self.transposed:
            source, first = self.transposed[source]
            perm = tuple(first[p] for p in perm)
            n = Node(n.name, "Transpose", (source,), (out,), {"perm": perm})
            self.changed = True
        if perm == tuple(range(len(perm))):  # a copy
            if out in outputs:
                self.nodes.append(Node(n.name, "Identity", (source,), (out,)))
            else:
                self.alias[out] = source
            self.changed = True
            return
        self.transposed[out] = (source, perm)
        self.nodes.append(n)

    def _emit(self, out: str, pushed: _Pushed) -> None:
        self.changed = True
        node, perm = pushed.node, pushed.perm
        if perm == tuple(range(len(perm))):
            self.nodes.append(dataclasses.replace(node, outputs=(out,)))
            return
        shape = self.values[out].shape
        inner = self.value(f"{out}_untransposed", self.values[out].dtype, _permuted(shape, perm))
        self.nodes.append(dataclasses.replace(node, outputs=(inner,)))
        name = self.name(f"{node.name}_transpose")
        self.nodes.append(Node(name, "Transpose", (inner,), (out,), {"perm": perm}))
        self.transposed[out] = (inner, perm)

    def ints(self, name: str) -> list[int] | None:
        """A constant int tensor's elements; None when ``name`` is not a constant."""
        if name not in self.constants:
            return None
        return [int(a) for a in np.asarray(self.constants[name]).reshape(-1)]


def _perm(n: Node, values: dict[str, Value]) -> Perm:
    perm = n.attr("perm")
    if perm is None:
        return tuple(reversed(range(len(values[n.inputs[0]].shape))))
    return tuple(int(p) for p in perm)


def _permuted(shape: Sequence[int | str], perm: Perm) -> tuple[int | str, ...]:
    """The shape of ``y`` when ``Transpose(y, perm)`` has ``shape``."""
    return tuple(shape[i] for i in inverse(perm))


def _push(n: Node, sweep: _Sweep) -> _Pushed | None:
    """``n`` rewritten to read the sources of its transposed operands, or None."""
    rule = _RULES.get(n.op_type) or (_broadcast if n.op_type in BROADCAST_OPS else None)
    first = next((i for i in n.inputs if i in sweep.transposed), None)
    if rule is None or first is None:
        return None
    return rule(n, sweep, sweep.transposed[first][1])


def _operand(name: str, perm: Perm, sweep: _Sweep) -> str | None:
    """What an op's operand becomes below a Transpose by ``perm``: the source of a Transpose
    by the same permutation, a constant permuted the other way (its axes first broadcast to
    the rank), a single element as it is; None for anything else."""
    if not name:
        return name
    if name in sweep.transposed:
        source, own = sweep.transposed[name]
        return source if own == perm else None
    rank = len(perm)
    shape = sweep.values[name].shape
    if len(shape) > rank:
        return None
    if all(d == 1 for d in shape):
        return name
    if name not in sweep.constants:
        return None
    array = np.asarray(sweep.constants[name])
    array = array.reshape((1,) * (rank - array.ndim) + array.shape)
    return sweep.constant(f"{name}_nchw", np.ascontiguousarray(array.transpose(inverse(perm))))


def _operands(n: Node, perm: Perm, sweep: _Sweep, count: int) -> tuple[str, ...] | None:
    """The first ``count`` inputs of ``n`` through :func:`_operand`, the rest as they are."""
    moved = [_operand(i, perm, sweep) for i in n.inputs[:count]]
    if any(m is None for m in moved):
        return None
    return (*(m for m in moved if m is not None), *n.inputs[count:])


def _broadcast(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    if len(sweep.values[n.outputs[0]].shape) != len(perm):
        return None
    inputs = _operands(n, perm, sweep, len(n.inputs))
    return None if inputs is None else _Pushed(dataclasses.replace(n, inputs=inputs), perm)


def _with_attrs(n: Node, **attrs: object) -> Node:
    """``n`` with these attributes set."""
    return Node(
        n.name, n.op_type, n.inputs, n.outputs, {**dict(n.attrs), **attrs}, n.domain, n.guard
    )


def _axis_map(axes: Sequence[int], perm: Perm) -> list[int] | None:
    """Axes of a Transpose's output as axes of its input; None when one is out of range."""
    rank = len(perm)
    if any(not -rank <= a < rank for a in axes):
        return None  # (the op's own lowering names the bad axis)
    return [perm[a % rank] for a in axes]


def _with_axes(n: Node, sweep: _Sweep, index: int, attr: str, axes: list[int]) -> Node:
    """``n`` with its axes operand (input ``index``, or attribute ``attr``) replaced."""
    if n.input(index):
        inputs = list(n.inputs)
        inputs[index] = sweep.constant(f"{n.inputs[index]}_nchw", np.array(axes, np.int64))
        return dataclasses.replace(n, inputs=tuple(inputs))
    return _with_attrs(n, **{attr: tuple(axes)})


def _reduce(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    """A reduction: the reduced axes mapped; without keepdims the kept axes stay in their
    order in the source, so the output's permutation is ``perm`` restricted to them."""
    rank = len(perm)
    if sweep.transposed.get(n.inputs[0], ("", ()))[1] != perm:
        return None
    n = dataclasses.replace(n, inputs=(sweep.transposed[n.inputs[0]][0], *n.inputs[1:]))
    if n.op_type in ("ArgMax", "ArgMin"):
        axes: list[int] | None = [int(n.attr("axis", 0))]
    elif n.input(1):
        axes = sweep.ints(n.input(1))
        if axes is None:
            return None
    else:
        axes = list(n.attr("axes") or ())
    if not axes:
        if n.attr("noop_with_empty_axes", 0):
            return _Pushed(n, perm)
        axes = list(range(rank))
    mapped = _axis_map(axes, perm)
    if mapped is None:
        return None
    if n.op_type in ("ArgMax", "ArgMin"):
        n = _with_attrs(n, axis=mapped[0])
    else:
        n = _with_axes(n, sweep, 1, "axes", sorted(set(mapped)))
    if n.attr("keepdims", 1):
        return _Pushed(n, perm)
    reduced = {a % rank for a in axes}
    kept = [i for i in range(rank) if i not in reduced]
    order = sorted(perm[i] for i in kept)
    return _Pushed(n, tuple(order.index(perm[i]) for i in kept))


def _softmax(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    # Before opset 13 these flatten the axes from `axis` on: not a per-axis op.
    if sweep.graph.opset < 13 or n.inputs[0] not in sweep.transposed:
        return None
    mapped = _axis_map([int(n.attr("axis", -1))], perm)
    inputs = _operands(n, perm, sweep, 1)
    if mapped is None or inputs is None:
        return None
    return _Pushed(_with_attrs(dataclasses.replace(n, inputs=inputs), axis=mapped[0]), perm)


def _concat(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    mapped = _axis_map([int(n.attr("axis", 0))], perm)
    if mapped is None or any(len(sweep.values[i].shape) != len(perm) for i in n.inputs):
        return None
    inputs = _operands(n, perm, sweep, len(n.inputs))
    if inputs is None:
        return None
    return _Pushed(_with_attrs(dataclasses.replace(n, inputs=inputs), axis=mapped[0]), perm)


def _pad(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    given = sweep.ints(n.input(1)) if n.input(1) else n.attr("pads")
    axes = sweep.ints(n.input(3)) if n.input(3) else list(range(len(perm)))
    mapped = None if axes is None else _axis_map(axes, perm)
    spread = None if given is None or mapped is None else spread_pads(given, mapped, len(perm))
    if n.inputs[0] not in sweep.transposed or spread is None:
        return None
    inputs = _operands(n, perm, sweep, 1)
    if inputs is None:
        return None
    pads = tuple(spread[0] + spread[1])
    if not n.input(1):
        return _Pushed(_with_attrs(dataclasses.replace(n, inputs=inputs), pads=pads), perm)
    new_pads = sweep.constant(f"{n.inputs[1]}_nchw", np.array(pads, np.int64))
    return _Pushed(dataclasses.replace(n, inputs=(inputs[0], new_pads, n.input(2))), perm)


def _slice(n: Node, sweep: _Sweep, perm: Perm) -> _Pushed | None:
    if n.inputs[0] not in sweep.transposed:
        return None
    axes: list[int] | None
    if len(n.inputs) == 1:  # opset < 10: starts, ends and axes are attributes
        starts = n.attr("starts") or ()
        axes = list(n.attr("axes") or range(len(starts)))
    elif n.input(3):
        axes = sweep.ints(n.input(3))
    else:
        count = sweep.values[n.inputs[1]].shape
        if len(count) != 1 or not isinstance(count[0], int):
            return None
        axes = list(range(count[0]))
    mapped = None if axes is None else _axis_map(axes, perm)
    inputs = _operands(n, perm, sweep, 1)
    if mapped is None or inputs is None:
        return None
    n = dataclasses.replace(n, inputs=inputs)
    if len(n.inputs) == 1:
        return _Pushed(_with_attrs(n, axes=tuple(mapped)), perm)
    axes_name = sweep.constant(f"{n.input(3) or 'axes'}_nchw", np.array(mapped, np.int64))
    return _Pushed(dataclasses.replace(n, inputs=(*n.inputs[:3], axes_name, *n.inputs[4:5])), perm)


_RULES: dict[str, Callable[[Node, _Sweep, Perm], _Pushed | None]] = {
    **dict.fromkeys(REDUCE_OPS | {"ArgMax", "ArgMin"}, _reduce),
    **dict.fromkeys(SOFTMAX_OPS, _softmax),
    "Concat": _concat,
    "Pad": _pad,
    "Slice": _slice,
}
