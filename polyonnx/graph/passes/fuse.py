"""Fusion grouping: which nodes become one kernel.

Rule: every node is its own group, except that an elementwise op joins a group that produces
one of its inputs when the group's first node (its anchor) is a Conv, Gemm, MatMul or
elementwise op and the op's output has the anchor's shape: every value of a group then has
that shape, so the op reads the group's values point for point and the kernel's nests
collapse into one epilogue (:mod:`polyonnx.krnl.inline`). Values of the group may have several
consumers inside it (``x * Sigmoid(x)``, GELU's ``0.5 * x * (1 + Erf(x / sqrt 2))``) and
outside it; those used outside, or graph outputs, become the kernel's outputs. The op's other
inputs (constants, values of other groups) are the kernel's inputs. So ``Conv -> Relu``,
``Conv -> Add(residual) -> Relu`` and ``Conv -> Sigmoid -> Mul`` are one group each.

Among the groups it could join, an op prefers one where every consumer of the values it reads
from the group is then inside the group (those values never reach memory), then the earliest
input. View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity) always stand alone. A join
that would make the graph of groups cyclic is never made.

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
from polyonnx.graph.loops import LOOP_EXIT, is_loop_op, run_time_loops

#: Elementwise ops (one output, shaped like the broadcast of the inputs) that may join a group.
ELEMENTWISE = frozenset(
    {
        "Abs",
        "Add",
        "Cast",
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
        "Round",
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
INTERNAL_ANCHORS = frozenset(
    {"ConvBlocked", "ConvBlockedBytes", "PackedConvInteger", "PackedMatMulInteger", "WinogradConv"}
)


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
        target = next(
            (
                k
                for k in _join_candidates(n, graph, consumers, graph_outputs, members, group_of)
                # Joining ``k`` is acyclic unless another input's group depends on ``k``.
                if not any(h != k and nx.has_path(dag, k, h) for h in preds)
            ),
            None,
        )
        if target is None:
            target = len(members)
            members.append([])
            dag.add_node(target)
        members[target].append(n)
        dag.add_edges_from((h, target) for h in preds if h != target)
        group_of.update((o, target) for o in n.outputs if o)
    _keep_loops_whole(graph, members, group_of, dag)
    if not nx.is_directed_acyclic_graph(dag):
        raise ModelError(f"graph {graph.name!r}: fusion produced cyclic groups")
    order = nx.lexicographical_topological_sort(dag, key=lambda k: k)
    return [Group(members[k][0].name, tuple(members[k])) for k in order]


def _keep_loops_whole(
    graph: Graph, members: list[list[Node]], group_of: dict[str, int], dag: nx.DiGraph
) -> None:
    """Edges that keep each run-time loop's groups (:mod:`polyonnx.graph.loops`) together
    in the order: the entry point runs them as one loop, so every other group goes before
    its LoopEnter (those the loop reads, directly or not) or after its LoopExit."""
    for running in run_time_loops(graph.nodes):
        enter = group_of[running]
        region = {k for k, group in enumerate(members) if (running, True) in group[0].guard}
        leave = next(
            k
            for k in region
            if is_loop_op(members[k][0], LOOP_EXIT) and members[k][0].inputs[0] == running
        )
        before = set().union(*(nx.ancestors(dag, k) for k in region)) - region - {enter}
        dag.add_edges_from((k, enter) for k in before)
        dag.add_edges_from((enter, k) for k in region)
        dag.add_edges_from((k, leave) for k in region - {leave})
        dag.add_edges_from((leave, k) for k in set(dag) - region - before - {enter})


def _join_candidates(
    n: Node,
    graph: Graph,
    consumers: dict[str, list[Node]],
    graph_outputs: set[str],
    members: list[list[Node]],
    group_of: dict[str, int],
) -> list[int]:
    """The groups ``n`` may join, best first (see the module docstring)."""
    if n.domain or n.op_type not in ELEMENTWISE or len(n.outputs) != 1:
        return []
    shape = graph.value(n.outputs[0]).shape
    groups = dict.fromkeys(group_of[i] for i in n.inputs if i in group_of)
    fits = [
        k
        for k in groups
        if _anchors(members[k][0])
        and _shape(graph, members[k]) == shape
        and members[k][0].guard == n.guard  # a kernel runs under one guard (an If's branch)
    ]

    def leaks(k: int) -> bool:
        """Whether a value ``n`` reads from group ``k`` is still used outside it after."""
        inside = {m.name for m in members[k]} | {n.name}
        return any(
            i in graph_outputs or any(c.name not in inside for c in consumers[i])
            for i in n.inputs
            if group_of.get(i) == k
        )

    return sorted(fits, key=leaks)


def _anchors(anchor: Node) -> bool:
    """Whether elementwise consumers may join the group ``anchor`` starts."""
    if anchor.domain == INTERNAL_DOMAIN:
        return anchor.op_type in INTERNAL_ANCHORS
    return not anchor.domain and anchor.op_type in ANCHORS


def _shape(graph: Graph, group: list[Node]) -> tuple[int | str, ...]:
    """The shape of every value a group makes (its anchor's output)."""
    return graph.value(group[0].outputs[0]).shape
