"""Remove pass-through nodes: Identity, and Dropout (which is the identity at inference).

A Dropout that may run in training mode with a non-zero ratio draws random numbers (the
reference uses numpy's generator): it is refused with UnsupportedOpError, never run as the
identity.

Consumers of a removed node's output read its input instead. Graph output names never change:
when the removed node's output is a graph output, the producer of its input is renamed to
produce it directly; an Identity is kept only when its input is a graph input, a constant or
another graph output (no node to rename).

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", (2,)) for n in "xty"}
    >>> g = Graph("g", (v["x"],), (v["y"],), (Node("a", "Relu", ("x",), ("t",)),
    ...                                        Node("b", "Identity", ("t",), ("y",))), v)
    >>> print(remove_identities(g))
    graph g(x: float32[2]) -> (y: float32[2])
      a: y = Relu(x)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node


def remove_identities(graph: Graph) -> Graph:
    """Drop Identity and inference-mode Dropout nodes (see the module docstring)."""
    consts = dict(graph.constants)
    graph_outputs = {v.name for v in graph.outputs}
    not_renamable = {v.name for v in graph.inputs} | set(consts) | graph_outputs
    alias: dict[str, str] = {}  # removed value -> the value that replaces it
    produce_as: dict[str, str] = {}  # producer output -> graph output name it is renamed to
    kept: list[Node] = []
    for n in graph.nodes:
        n = dataclasses.replace(n, inputs=tuple(alias.get(i, i) for i in n.inputs))
        if not _is_passthrough(n, consts):
            if n.op_type == "Dropout" and not n.domain:
                raise UnsupportedOpError(
                    "Dropout",
                    graph.opset,
                    n.name,
                    "training mode with a non-zero ratio (random masks), or a training_mode "
                    "or ratio input not known at compile time",
                )
            kept.append(n)
            continue
        src, dst = n.inputs[0], n.outputs[0]
        if n.op_type == "Dropout" and len(n.outputs) > 1 and n.outputs[1]:
            # Inference Dropout keeps every element: its mask is all true.
            mask = graph.value(n.outputs[1])
            consts[mask.name] = np.ones(mask.dims, dtype=mask.dtype)
        if dst not in graph_outputs:
            alias[dst] = src
        elif src not in not_renamable and src not in produce_as:
            produce_as[src] = dst
        else:
            kept.append(
                dataclasses.replace(n, op_type="Identity", inputs=(src,), outputs=(dst,), attrs=())
            )
    if produce_as:
        kept = [
            dataclasses.replace(
                n,
                inputs=tuple(produce_as.get(i, i) for i in n.inputs),
                outputs=tuple(produce_as.get(o, o) for o in n.outputs),
            )
            for n in kept
        ]
    gone = set(alias) | set(produce_as)
    values = {k: v for k, v in graph.values.items() if k not in gone}
    return dataclasses.replace(graph, nodes=tuple(kept), values=values, constants=consts)


def _is_passthrough(n: Node, consts: dict[str, np.ndarray]) -> bool:
    if n.domain:
        return False
    if n.op_type == "Identity":
        return True
    if n.op_type != "Dropout":
        return False
    # Dropout-12 takes training_mode as an input; it is the identity only when that is false.
    mode, ratio = n.input(2), n.input(1)
    if not mode or (mode in consts and not bool(np.asarray(consts[mode]).any())):
        return True
    # Training with ratio 0 keeps every element too.
    return bool(ratio) and ratio in consts and not bool(np.asarray(consts[ratio]).any())
