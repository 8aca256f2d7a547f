"""The graph IR: typed values, nodes in topological order, and constant tensors.

The frontend builds a :class:`Graph` from an ONNX model; passes return new graphs. Shapes are
static tuples of ints once the frontend has specialised symbolic dimensions.

Example:
    >>> x, y = Value("x", "float32", (2,)), Value("y", "float32", (2,))
    >>> g = Graph("g", inputs=(x,), outputs=(y,), nodes=(Node("relu0", "Relu", ("x",), ("y",)),),
    ...           values={"x": x, "y": y})
    >>> print(g)
    graph g(x: float32[2]) -> (y: float32[2])
      relu0: y = Relu(x)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import ml_dtypes  # noqa: F401 - registers bfloat16, float8_*, int4... as numpy dtype names
import numpy as np

from polyonnx.errors import ModelError, ShapeError

ENCODED_DTYPES: dict[str, str] = {
    "bfloat16": "uint16",
    "float8_e4m3fn": "uint8",
    "float8_e4m3fnuz": "uint8",
    "float8_e5m2": "uint8",
    "float8_e5m2fnuz": "uint8",
    "float8_e8m0fnu": "uint8",
    "float4_e2m1fn": "uint8",
    "int4": "uint8",
    "uint4": "uint8",
    "int2": "uint8",
    "uint2": "uint8",
}
"""Types without machine arithmetic, held as their bit patterns in the integer type that has
their numpy (ml_dtypes) item size (an int4 element is a byte, its low nibble the code). No
arithmetic is done on them: a :class:`polyonnx.krnl.ir.Bitcast` to that integer type gives the
code, which Cast's lowering decodes and encodes bit by bit."""

INTERNAL_DOMAIN = "polyonnx"
"""The domain of the operators polyonnx's graph passes introduce (never in a user's model)."""

ML_DOMAIN = "ai.onnx.ml"
"""The domain of ONNX-ML, the operators of classical machine learning (scikit-learn's)."""

TRAINING_DOMAIN = "ai.onnx.preview.training"
"""The domain of ONNX's training operators (Gradient, Adagrad, Adam, Momentum)."""


@dataclass(frozen=True, slots=True)
class Value:
    """A tensor-typed value: name, numpy dtype name and shape (ints, or str for symbolic dims)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def dims(self) -> tuple[int, ...]:
        """The shape of a static value (:attr:`is_static`), every dimension an int."""
        if not self.is_static:
            raise ShapeError(f"value {self.name!r} has no static shape: {list(self.shape)}")
        return cast(tuple[int, ...], self.shape)

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


@dataclass(frozen=True, slots=True, init=False)
class Node:
    """One ONNX operator application. Missing optional inputs are ``""``. ``attrs`` may be
    given as a mapping (stored sorted by name, lists as tuples).

    ``guard``: the node runs only when each ``(value, flag)`` holds, the value being a
    one-element bool tensor equal to ``flag`` (a branch of an If, see
    :mod:`polyonnx.frontend.control`); empty for a node that always runs.
    """

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    domain: str = ""
    guard: tuple[tuple[str, bool], ...] = ()

    def __init__(
        self,
        name: str,
        op_type: str,
        inputs: Iterable[str],
        outputs: Iterable[str],
        attrs: Mapping[str, Any] | tuple[tuple[str, Any], ...] = (),
        domain: str = "",
        guard: Iterable[tuple[str, bool]] = (),
    ) -> None:
        if isinstance(attrs, Mapping):
            attrs = tuple(sorted((k, _freeze(v)) for k, v in attrs.items()))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "op_type", op_type)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "domain", domain)
        object.__setattr__(self, "guard", tuple(guard))

    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    def has_attr(self, name: str) -> bool:
        return any(k == name for k, _ in self.attrs)

    def input(self, i: int) -> str:
        """The i-th input name, or ``""`` when absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in self.attrs)
        attrs = f"[{attrs}]" if attrs else ""
        when = " if " + " and ".join(c if f else f"not {c}" for c, f in self.guard)
        return (
            f"{self.name}: {', '.join(self.outputs)} = {self.op_type}{attrs}"
            f"({', '.join(self.inputs)}){when if self.guard else ''}"
        )


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor<{v.dtype}{list(v.shape)}>"
    return repr(v)


def topological_order(nodes: list[Node], defined: set[str], graph: str = "the graph") -> list[Node]:
    """``nodes`` in a topological order, stable (Kahn's algorithm with a min-heap on the
    original index: nodes already in order keep it exactly); ``defined``: the values no node
    computes. A cycle is a ModelError naming its nodes (``graph`` says whose).

    Example:
        >>> a, b = Node("a", "Relu", ("t",), ("y",)), Node("b", "Neg", ("x",), ("t",))
        >>> [n.name for n in topological_order([a, b], {"x"})]
        ['b', 'a']
    """
    users: dict[str, list[int]] = {}
    missing = []
    for k, n in enumerate(nodes):
        deps = {i for i in n.inputs if i and i not in defined}
        missing.append(len(deps))
        for i in deps:
            users.setdefault(i, []).append(k)
    heap = [k for k, m in enumerate(missing) if m == 0]
    order: list[Node] = []
    while heap:
        n = nodes[heapq.heappop(heap)]
        order.append(n)
        for o in n.outputs:
            for k in users.get(o, ()) if o else ():
                missing[k] -= 1
                if missing[k] == 0:
                    heapq.heappush(heap, k)
    if len(order) < len(nodes):
        placed = {id(n) for n in order}
        names = ", ".join(repr(n.name) for n in nodes if id(n) not in placed)
        raise ModelError(f"{graph} has a cycle through nodes {names[:300]}")
    return order


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2`` ... : the first not in ``taken``, which it joins.

    Example:
        >>> taken = {"w", "w_1"}
        >>> fresh_name("w", taken), fresh_name("w", taken)
        ('w_2', 'w_3')
    """
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


class Additions:
    """Copies of a graph's value and constant tables, for a pass to add to: each new value,
    constant or node name is fresh (:func:`fresh_name`: no value, constant or node of the graph
    has it, nor anything added before).

    Example:
        >>> g = Graph("g", (), (), (), {"w": Value("w", "float32", (2,))})
        >>> add = Additions(g)
        >>> add.constant("w", np.zeros(3, "float32")), add.value("w", "int64", (4,))
        ('w_1', 'w_2')
        >>> add.values["w_1"].shape, add.constants["w_1"].shape
        ((3,), (3,))
    """

    def __init__(self, graph: Graph) -> None:
        self.values: dict[str, Value] = dict(graph.values)
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        self.taken = set(self.values) | set(self.constants) | {n.name for n in graph.nodes}

    def name(self, base: str) -> str:
        """A fresh name (for a node)."""
        return fresh_name(base, self.taken)

    def value(self, base: str, dtype: str, shape: tuple[int | str, ...]) -> str:
        """A fresh value, typed."""
        name = fresh_name(base, self.taken)
        self.values[name] = Value(name, dtype, tuple(shape))
        return name

    def constant(self, base: str, array: np.ndarray) -> str:
        """A fresh constant holding ``array``."""
        name = self.value(base, array.dtype.name, tuple(array.shape))
        self.constants[name] = array
        return name


@dataclass(frozen=True)
class Graph:
    """A model's graph. ``values`` types every value; ``constants`` holds initializers."""

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    values: Mapping[str, Value] = field(default_factory=dict)
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    opset: int = 21

    def value(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise ModelError(f"value {name!r} has no type (is it defined?)") from None

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def __str__(self) -> str:
        ins = ", ".join(str(v) for v in self.inputs)
        outs = ", ".join(str(v) for v in self.outputs)
        lines = [f"graph {self.name}({ins}) -> ({outs})"]
        for name, c in self.constants.items():
            lines.append(f"  const {name}: {c.dtype}[{', '.join(map(str, c.shape))}]")
        lines.extend(f"  {n}" for n in self.nodes)
        return "\n".join(lines)
