"""Common-subexpression elimination: a node computing what an earlier node computes (same op,
attributes, guard and inputs) is dropped, and its outputs' readers read the earlier node's;
a constant equal to an earlier one (type, shape, bytes) is read as that one.

Exporters and graph rewrites repeat work: the same Shape/Gather chain per layer, one
DequantizeLinear of a shared input per quantized MatMul (:mod:`~polyonnx.graph.passes.qlinear`
writes one per op). Inputs are compared after renaming, so chains of repeats collapse too. Ops
whose results differ per run (RandomNormal ...), ops with subgraphs and polyonnx's own (a
run-time loop's enter and exit) are never merged; a node whose output is a graph output keeps
it.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", (2,)) for n in ("x", "a", "b", "y")}
    >>> g = Graph("g", (v["x"],), (v["y"],), (Node("n1", "Relu", ("x",), ("a",)),
    ...     Node("n2", "Relu", ("x",), ("b",)), Node("n3", "Add", ("a", "b"), ("y",))), v)
    >>> [str(n) for n in eliminate_common_subexpressions(g).nodes]
    ['n1: a = Relu(x)', 'n3: y = Add(a, a)']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import onnx

from polyonnx.graph.ir import INTERNAL_DOMAIN, Graph, Node
from polyonnx.graph.passes.fold import NONDETERMINISTIC


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Drop repeated nodes (see the module docstring)."""
    outputs = {v.name for v in graph.outputs}
    alias = _equal_constants(graph.constants, outputs)
    seen: dict[tuple, Node] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        inputs = tuple(alias.get(i, i) for i in n.inputs)
        guard = tuple((alias.get(c, c), flag) for c, flag in n.guard)
        if (inputs, guard) != (n.inputs, n.guard):
            n = dataclasses.replace(n, inputs=inputs, guard=guard)
        key = (n.op_type, n.domain, n.inputs, n.attrs, n.guard, tuple(map(bool, n.outputs)))
        if not _mergeable(n, key) or any(o in outputs for o in n.outputs):
            nodes.append(n)
            continue
        first = seen.setdefault(key, n)
        if first is n:
            nodes.append(n)
        else:
            alias.update((o, f) for o, f in zip(n.outputs, first.outputs, strict=True) if o)
    if not alias:
        return graph
    values = {k: v for k, v in graph.values.items() if k not in alias}
    constants = {k: v for k, v in graph.constants.items() if k not in alias}
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=constants)


def _equal_constants(constants: Mapping[str, np.ndarray], keep: set[str]) -> dict[str, str]:
    """Each constant equal to an earlier one (type, shape and bytes) -> that one's name.
    Constants are grouped by a fingerprint of a few of their elements first, so that only
    look-alikes are compared whole (hashing every byte of VGG19's 548 MB of weights took
    0.3 s and a temporary copy of them)."""
    first: dict[tuple, list[np.ndarray]] = {}
    names: dict[int, str] = {}
    alias: dict[str, str] = {}
    for name, array in constants.items():
        if name in keep:
            continue
        a = np.asarray(array)
        a = a if a.flags.c_contiguous else a.copy()  # (ascontiguousarray makes a 0-d array 1-d)
        group = first.setdefault(_fingerprint(a), [])
        same = next((f for f in group if _same_bytes(f, a)), None)
        if same is None:
            group.append(a)
            names[id(a)] = name
        else:
            alias[name] = names[id(same)]
    return alias


#: Elements of a constant its fingerprint reads, spread evenly over it.
_FINGERPRINT_ELEMENTS = 64


def _fingerprint(a: np.ndarray) -> tuple:
    """Type, shape and a sample of the bytes: equal constants have equal fingerprints."""
    flat = a.reshape(-1)
    sample = flat[:: max(1, flat.size // _FINGERPRINT_ELEMENTS)]
    if a.dtype == object:  # strings: their values, not the addresses of their objects
        return (a.dtype.str, a.shape, repr(sample.tolist()), repr(flat[-1:].tolist()))
    return (a.dtype.str, a.shape, sample.tobytes(), flat[-1:].tobytes())


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two contiguous arrays of one type and shape hold the same bytes (-0.0 is not
    0.0, and a NaN is a NaN: a constant is replaced only by an identical one)."""
    if a.dtype == object:
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


def _mergeable(n: Node, key: tuple) -> bool:
    """Whether ``n`` may be merged: deterministic, no subgraph, attributes that compare by
    value (a tensor attribute does not hash: such nodes stay)."""
    if n.op_type in NONDETERMINISTIC or any(isinstance(v, onnx.GraphProto) for _, v in n.attrs):
        return False
    if n.domain == INTERNAL_DOMAIN:  # (a run-time loop's enter and exit mark its region)
        return False
    try:
        hash(key)
    except TypeError:
        return False
    return True
