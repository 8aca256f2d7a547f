"""Fusion grouping: which nodes become one kernel.

Rule: every node is its own group, except that an elementwise op joins the group of the node
producing one of its inputs when that producer is a Conv, Gemm, MatMul or elementwise op, the
input is read by this node only (and is not a graph output), and the op's output has the shape
of the group's anchor (its first node). So ``Conv → Relu`` and ``Conv → Add(residual) → Relu``
are one group each. View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity) always stand
alone. A join that would make the graph of groups cyclic is never made.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", (1, 2)) for n in ("x", "w", "a", "y")}
    >>> g = Graph("g", (v["x"], v["w"]), (v["y"],), (Node("mm", "MatMul", ("x", "w"), ("a",)),
    ...           Node("act", "Relu", ("a",), ("y",))), v)
    >>> [(grp.name, [n.name for n in grp.nodes]) for grp in fuse(g)]
    [('mm', ['mm', 'act'])]
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from polyonnx.errors import ModelError
from polyonnx.graph.ir import INTERNAL_DOMAIN, Graph, Node

#: Elementwise ops (one output, shaped like the broadcast of the inputs) that may join a group.
ELEMENTWISE = frozenset(
    {
        "Abs",
        "Add",
        "Ceil",
        "Celu",
        "Clip",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "Gelu",
        "HardSigmoid",
        "HardSwish",
        "LeakyRelu",
        "Log",
        "Max",
        "Mean",
        "Min",
        "Mish",
        "Mul",
        "Neg",
        "Pow",
        "PRelu",
        "Reciprocal",
        "Relu",
        "Selu",
        "Sigmoid",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Sub",
        "Sum",
        "Tanh",
    }
)

#: Ops whose group elementwise consumers may join. View ops are in neither set, so they always
#: form a group of their own.
ANCHORS = ELEMENTWISE | {"Conv", "Gemm", "MatMul"}
#: polyonnx's own operators (see :mod:`polyonnx.graph.passes.layout`) that may anchor a group.
INTERNAL_ANCHORS = frozenset({"ConvBlocked"})


@dataclass(frozen=True)
class Group:
    """Nodes compiled into one kernel, in a valid execution order; named after its first node."""

    name: str
    nodes: tuple[Node, ...]

    def boundary(self, graph: Graph) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(values read from outside the group, values used outside it or graph outputs).

        Inputs include constants; both tuples keep first-use order without repeats.
        """
        made = {o for n in self.nodes for o in n.outputs if o}
        inputs = dict.fromkeys(i for n in self.nodes for i in n.inputs if i and i not in made)
        mine = {n.name for n in self.nodes}
        used_outside = {i for n in graph.nodes if n.name not in mine for i in n.inputs}
        used_outside.update(v.name for v in graph.outputs)
        outputs = dict.fromkeys(o for n in self.nodes for o in n.outputs if o and o in used_outside)
        return tuple(inputs), tuple(outputs)


def fuse(graph: Graph) -> list[Group]:
    """Partition ``graph.nodes`` into groups (see the module docstring), in execution order."""
    consumers = graph.consumers()
    graph_outputs = {v.name for v in graph.outputs}
    members: list[list[Node]] = []
    group_of: dict[str, int] = {}  # value name -> index of the group producing it
    dag = nx.DiGraph()  # group -> group data dependences
    for n in graph.nodes:
        # A guarded node (in an If's branch) runs after its condition is computed.
        reads = (*n.inputs, *(cond for cond, _ in n.guard))
        preds = {group_of[i] for i in reads if i in group_of}
        target = _join_target(n, graph, consumers, graph_outputs, members, group_of)
        # Joining ``target`` is acyclic unless another input's group depends on ``target``.
        if target is not None and any(h != target and nx.has_path(dag, target, h) for h in preds):
            target = None
        if target is None:
            target = len(members)
            members.append([])
            dag.add_node(target)
        members[target].append(n)
        dag.add_edges_from((h, target) for h in preds if h != target)
        group_of.update((o, target) for o in n.outputs if o)
    if not nx.is_directed_acyclic_graph(dag):
        raise ModelError(f"graph {graph.name!r}: fusion produced cyclic groups")
    order = nx.lexicographical_topological_sort(dag, key=lambda k: k)
    return [Group(members[k][0].name, tuple(members[k])) for k in order]


def _join_target(
    n: Node,
    graph: Graph,
    consumers: dict[str, list[Node]],
    graph_outputs: set[str],
    members: list[list[Node]],
    group_of: dict[str, int],
) -> int | None:
    """The group ``n`` may join, or None."""
    if n.domain or n.op_type not in ELEMENTWISE or len(n.outputs) != 1:
        return None
    shape = graph.value(n.outputs[0]).shape
    for i in n.inputs:
        if not i or i not in group_of or i in graph_outputs:
            continue
        if {c.name for c in consumers.get(i, ())} != {n.name}:
            continue
        k = group_of[i]
        producer, anchor = members[k][-1], members[k][0]
        if producer.guard != n.guard:  # a kernel runs under one guard (an If's branch)
            continue
        anchors = (
            INTERNAL_ANCHORS
            if producer.domain == INTERNAL_DOMAIN
            else (ANCHORS if not producer.domain else frozenset())
        )
        if producer.op_type not in anchors or i not in producer.outputs:
            continue
        if graph.value(anchor.outputs[0]).shape == shape:
            return k
    return None
