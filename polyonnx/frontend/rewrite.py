"""Writing standard nodes in place of one node of a model (the contrib and preview ops).

Example:
    >>> from onnx import helper
    >>> w = NodeWriter(helper.make_node("Foo", ["x"], ["y"], name="foo"))
    >>> w.op("Relu", [w.op("Neg", ["x"])], "y")
    'y'
    >>> [(n.name, list(n.input), list(n.output)) for n in w.nodes]
    [('foo/Neg0', ['x'], ['y__neg0']), ('foo/Relu1', ['y__neg0'], ['y'])]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx
from onnx import helper


@dataclass
class NodeWriter:
    """The standard nodes (and initializers) replacing ``node``, named after it."""

    node: onnx.NodeProto
    nodes: list[onnx.NodeProto] = field(default_factory=list, init=False)
    initializers: list[onnx.TensorProto] = field(default_factory=list, init=False)

    def fresh(self, what: str) -> str:
        """A value name no other value of this expansion has."""
        return f"{self.node.output[0]}__{what}{len(self.nodes) + len(self.initializers)}"

    def op(self, op_type: str, inputs: Sequence[str], out: str = "", **attrs: Any) -> str:
        """Append an ``op_type`` node; the name of its (first) output."""
        out = out or self.fresh(op_type.lower())
        name = f"{self.node.name or self.node.output[0]}/{op_type}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def attr(self, name: str, default: Any = None) -> Any:
        """The replaced node's attribute ``name``, or ``default``."""
        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default


def with_nodes(
    model: onnx.ModelProto,
    nodes: Sequence[onnx.NodeProto],
    initializers: Sequence[onnx.TensorProto],
) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph has ``nodes`` and ``initializers`` more."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(initializers)
    return out
