"""Dead-code elimination: drop nodes, constants and values that no graph output depends on.

Graph inputs are kept even when unused: callers still feed them.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", (2,)) for n in "xyz"}
    >>> g = Graph("g", (v["x"],), (v["y"],), (Node("a", "Relu", ("x",), ("y",)),
    ...                                        Node("b", "Neg", ("x",), ("z",))), v)
    >>> [n.name for n in eliminate_dead_code(g).nodes]
    ['a']
"""

from __future__ import annotations

import dataclasses

from polyonnx.graph.ir import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    """Keep only what reaches a graph output (see the module docstring)."""
    live = {v.name for v in graph.outputs}
    kept = []
    for n in reversed(graph.nodes):
        if any(o in live for o in n.outputs if o):
            kept.append(n)
            live.update(i for i in n.inputs if i)
    nodes = tuple(reversed(kept))
    live.update(v.name for v in graph.inputs)
    live.update(o for n in nodes for o in n.outputs if o)
    return dataclasses.replace(
        graph,
        nodes=nodes,
        values={k: v for k, v in graph.values.items() if k in live},
        constants={k: c for k, c in graph.constants.items() if k in live},
    )
