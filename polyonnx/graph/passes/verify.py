"""Whole-graph invariants, checked between passes in tests.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", "float32", (2,)), Value("y", "float32", (2,))
    >>> verify(Graph("g", (x,), (y,), (Node("r", "Relu", ("x",), ("y",)),), {"x": x, "y": y}))
"""

from __future__ import annotations

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Graph


def verify(graph: Graph) -> None:
    """Raise ModelError/ShapeError unless ``graph`` is well formed.

    Checks: node names unique; every value defined once (input, constant or node output) and
    before its first use; every graph output defined; every value typed with a static shape;
    constants agree with their types.
    """
    defined = _defined_in_order(graph)
    for v in graph.outputs:
        if v.name not in defined:
            raise ModelError(f"graph output {v.name!r} is not defined")
    for name in defined - {""}:
        v = graph.value(name)
        if not v.is_static:
            raise ShapeError(f"value {name!r} has a non-static shape {v.shape}")
    for name, arr in graph.constants.items():
        v = graph.value(name)
        if (arr.dtype.name, tuple(arr.shape)) != (v.dtype, v.shape):
            raise ShapeError(
                f"constant {name!r} is {arr.dtype.name}{list(arr.shape)} but its "
                f"value is typed {v.dtype}{list(v.shape)}"
            )


def _defined_in_order(graph: Graph) -> set[str]:
    """Every value the graph defines (inputs, constants, node outputs), each checked to be
    defined once and, for a node's inputs, before the node."""
    defined: set[str] = set()
    for v in graph.inputs:
        if v.name in defined:
            raise ModelError(f"graph input {v.name!r} is listed twice")
        defined.add(v.name)
    for name in graph.constants:
        if name in defined:
            raise ModelError(f"constant {name!r} is also a graph input")
        defined.add(name)
    names: set[str] = set()
    for n in graph.nodes:
        if not n.name or n.name in names:
            raise ModelError(f"node name {n.name!r} is empty or not unique")
        names.add(n.name)
        for i in n.inputs:
            if i and i not in defined:
                raise ModelError(f"node {n.name!r} reads {i!r} before it is defined")
        for o in n.outputs:
            if o and o in defined:
                raise ModelError(f"node {n.name!r} redefines {o!r}")
            defined.add(o)
    return defined
