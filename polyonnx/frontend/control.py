"""Control flow: an ``If`` node becomes the nodes of its branches, guarded by its condition.

The branches' nodes join the graph (their values renamed ``<If node>/then/<name>`` and
``<If node>/else/<name>``, so names stay unique), so every stage after the frontend sees plain
nodes and compiles each branch through the normal pipeline. How the condition decides:

- known at compile time (a constant, or computed from shapes): only the branch it picks is
  inlined, its outputs renamed to the If's by Identity nodes;
- known only at run time: the nodes of the then branch carry the guard ``(cond, True)``, those
  of the else branch ``(cond, False)`` (:attr:`polyonnx.graph.ir.Node.guard`); the entry point
  runs a guarded kernel only when its guard holds. Each If output is then
  ``Where(cond, then_output, else_output)``: it reads the branch that ran (the other branch's
  buffer is never read for the result), so both branches must give the same shape and type.

Values of the enclosing graph that a branch reads (outer-scope values) keep their names.

Example:
    >>> from onnx import helper, TensorProto
    >>> then = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "then", [],
    ...     [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    >>> other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "else", [],
    ...     [helper.make_tensor_value_info("n", TensorProto.FLOAT, [2])])
    >>> e = expand_if("if0", "c", ("y",), then, other, None, ())
    >>> [(p.op_type, list(p.output), g) for p, g in e.nodes][:2]
    [('Relu', ['if0/then/r'], (('c', True),)), ('Neg', ['if0/else/n'], (('c', False),))]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from polyonnx.errors import ModelError

Guard = tuple[tuple[str, bool], ...]


@dataclass(frozen=True)
class Expansion:
    """What replaces an If node: nodes (each with its guard), in order, and the branches'
    initializers; ``merges`` names the Where nodes joining the two branches' outputs."""

    nodes: tuple[tuple[onnx.NodeProto, Guard], ...]
    initializers: tuple[onnx.TensorProto, ...]
    merges: frozenset[str] = frozenset()


def expand_if(
    name: str,
    cond: str,
    outputs: Sequence[str],
    then_branch: onnx.GraphProto,
    else_branch: onnx.GraphProto,
    cond_value: np.ndarray | None,
    guard: Guard,
) -> Expansion:
    """The nodes replacing If node ``name`` (see the module docstring). ``cond_value`` is the
    condition's value when known at compile time; ``guard`` the If's own guard (an If inside
    a branch of another)."""
    for label, branch in (("then_branch", then_branch), ("else_branch", else_branch)):
        if len(branch.output) != len(outputs):
            raise ModelError(
                f"If node {name!r}: {label} has {len(branch.output)} outputs, the node "
                f"{len(outputs)}"
            )
    if cond_value is not None:
        if np.asarray(cond_value).size != 1:
            raise ModelError(f"If node {name!r}: the condition must have one element")
        taken = bool(np.asarray(cond_value).reshape(-1)[0])
        label = "then" if taken else "else"
        nodes, inits, results = inline(then_branch if taken else else_branch, f"{name}/{label}/")
        nodes += [
            helper.make_node("Identity", [r], [o], name=f"{name}/{label}/out{k}")
            for k, (r, o) in enumerate(zip(results, outputs, strict=True))
        ]
        return Expansion(tuple((n, guard) for n in nodes), tuple(inits))
    then_nodes, then_inits, then_results = inline(then_branch, f"{name}/then/")
    else_nodes, else_inits, else_results = inline(else_branch, f"{name}/else/")
    scalar_shape = numpy_helper.from_array(np.zeros(0, np.int64), f"{name}/scalar_shape")
    flag = f"{name}/cond"
    merge = [helper.make_node("Reshape", [cond, scalar_shape.name], [flag], name=flag)]
    merge += [
        helper.make_node("Where", [flag, t, e], [o], name=f"{name}/merge{k}")
        for k, (t, e, o) in enumerate(zip(then_results, else_results, outputs, strict=True))
    ]
    return Expansion(
        (
            *((n, (*guard, (cond, True))) for n in then_nodes),
            *((n, (*guard, (cond, False))) for n in else_nodes),
            *((n, guard) for n in merge),
        ),
        (*then_inits, *else_inits, scalar_shape),
        frozenset(n.name for n in merge[1:]),
    )


def inline(
    branch: onnx.GraphProto, prefix: str
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]:
    """A subgraph's nodes and initializers with every name it defines prefixed (also where
    subgraphs nested in it read them), and the names of its outputs after renaming."""
    if len(branch.input):
        raise ModelError(f"If branch {branch.name!r} must have no inputs, has {len(branch.input)}")
    local = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    renames = {v: prefix + v for v in local}
    nodes = [_renamed(n, renames, prefix, k) for k, n in enumerate(branch.node)]
    inits = []
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = renames[t.name]
        inits.append(copy)
    return nodes, inits, [renames.get(o.name, o.name) for o in branch.output]


def _renamed(
    node: onnx.NodeProto, renames: Mapping[str, str], prefix: str, index: int
) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = prefix + (node.name or f"{node.op_type}_{index}")
    _rename_list(out.input, renames)
    _rename_list(out.output, renames)
    for a in out.attribute:
        if a.HasField("g"):
            _rename_reads(a.g, renames)
        for g in a.graphs:
            _rename_reads(g, renames)
    return out


def _rename_list(names: Iterable[str], renames: Mapping[str, str]) -> None:
    seq = names  # a protobuf repeated field, edited in place
    for k, v in enumerate(list(seq)):
        if v in renames:
            seq[k] = renames[v]  # type: ignore[index]


def _rename_reads(graph: onnx.GraphProto, renames: Mapping[str, str]) -> None:
    """Rename, in a nested subgraph (in place), its reads of values of an enclosing scope."""
    own = (
        {o for n in graph.node for o in n.output if o}
        | {t.name for t in graph.initializer}
        | {i.name for i in graph.input}
    )
    visible = {k: v for k, v in renames.items() if k not in own}
    for n in graph.node:
        _rename_list(n.input, visible)
        for a in n.attribute:
            if a.HasField("g"):
                _rename_reads(a.g, visible)
            for g in a.graphs:
                _rename_reads(g, visible)
    for o in graph.output:
        if o.name in visible:
            o.name = visible[o.name]
