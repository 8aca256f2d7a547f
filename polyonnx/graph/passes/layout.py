"""Channel-blocked layout: convolutions and the element-wise ops between them on ``NC[HW]c``.

ONNX tensors are NCHW, but a convolution's inner loop wants output channels contiguous (one
vector of them per weight load) and its epilogue (bias, Relu, the residual Add) wants to run
on the tile it just computed. This pass rewrites every eligible ``Conv`` (2-D spatial or more,
``group == 1``, constant weights, float32, output channels a multiple of ``block``) to
``polyonnx.ConvBlocked`` with output ``[N, C/block, spatial..., block]`` (its input blocked
too, unless its channels are not a multiple of ``block``: an image's three colours), and moves
the element-wise ops whose tensor inputs are all blocked, and MaxPools of blocked values
(``polyonnx.MaxPoolBlocked``), into the blocked domain with it. Layout
changes (``polyonnx.ToBlocked`` / ``polyonnx.FromBlocked``) are inserted only where a value
crosses between the domains, and at most once per value: in ResNet50 that is once, before the
final pooling, instead of a transpose per convolution.

Weights are repacked once, at compile time, to ``[OC/block, IC/block, kernel..., block_in,
block_out]`` (``[OC/block, IC, kernel..., block_out]`` for an unblocked input): the block of
output channels is contiguous for each input channel and tap.

Example:
    >>> from polyonnx.frontend import import_model
    >>> from polyonnx.graph.passes import optimize
    >>> from polyonnx.testing.examples import conv_model
    >>> g = blocked_layout(optimize(import_model(conv_model(channels=8))), block=8)
    >>> [n.op_type for n in g.nodes]
    ['ToBlocked', 'ConvBlocked', 'Relu', 'FromBlocked']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.fuse import ELEMENTWISE


def blocked_layout(graph: Graph, block: int) -> Graph:
    """``graph`` with its eligible convolutions (see the module docstring) on blocked tensors.

    A graph with no eligible Conv is returned unchanged.
    """
    if block < 2 or not any(_eligible(graph, n, block) for n in graph.nodes):
        return graph
    out = _Rewrite(graph, block)
    for node in graph.nodes:
        if _eligible(graph, node, block):
            out.conv(node)
        elif _pool_follows_blocked(node, out.blocked):
            out.nodes.append(
                Node(
                    node.name,
                    "MaxPoolBlocked",
                    (out.blocked[node.inputs[0]],),
                    (out.twin_of(node.outputs[0]),),
                    node.attrs,
                    DOMAIN,
                )
            )
        elif _follows_blocked(graph, node, out.blocked):
            ins = tuple(out.blocked.get(i, i) for i in node.inputs)
            twin = out.twin_of(node.outputs[0])
            out.nodes.append(dataclasses.replace(node, inputs=ins, outputs=(twin,)))
        else:
            ins = tuple(out.to_plain(i) if i in out.blocked else i for i in node.inputs)
            out.nodes.append(dataclasses.replace(node, inputs=ins))
            out.plain.update(o for o in node.outputs if o)
    for v in graph.outputs:
        if v.name in out.blocked:
            out.to_plain(v.name)
    used = {i for n in out.nodes for i in n.inputs} | {o for n in out.nodes for o in n.outputs}
    values = {k: v for k, v in out.values.items() if k in used or k in out.plain}
    return eliminate_dead_code(
        dataclasses.replace(graph, nodes=tuple(out.nodes), values=values, constants=out.constants)
    )


class _Rewrite:
    """The graph being rewritten, node by node: its nodes so far, and which values exist in
    which layout."""

    def __init__(self, graph: Graph, block: int) -> None:
        self.graph, self.block = graph, block
        self.values = dict(graph.values)
        self.constants = dict(graph.constants)
        self.nodes: list[Node] = []
        self.blocked: dict[str, str] = {}  # NCHW value -> its blocked twin
        self.plain: set[str] = {v.name for v in graph.inputs} | set(graph.constants)

    def twin_of(self, name: str) -> str:
        """The blocked twin of NCHW value ``name`` (declared, not yet produced)."""
        twin = f"{name}__blk"
        self.values[twin] = _blocked_value(self.values[name], twin, self.block)
        self.blocked[name] = twin
        return twin

    def to_blocked(self, name: str) -> str:
        """``name``'s blocked twin, converted here the first time it is needed."""
        if name not in self.blocked:
            self.nodes.append(
                Node(
                    f"{name}__to_blocked",
                    "ToBlocked",
                    (name,),
                    (self.twin_of(name),),
                    {"block": self.block},
                    DOMAIN,
                )
            )
        return self.blocked[name]

    def to_plain(self, name: str) -> str:
        """``name`` in NCHW, converted back here the first time it is needed."""
        if name not in self.plain:
            self.nodes.append(
                Node(
                    f"{name}__from_blocked",
                    "FromBlocked",
                    (self.blocked[name],),
                    (name,),
                    {"block": self.block},
                    DOMAIN,
                )
            )
            self.plain.add(name)
        return name

    def conv(self, node: Node) -> None:
        """An eligible Conv as a ConvBlocked on its repacked weights."""
        x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
        # Too few input channels to block (an RGB image): read them as they are.
        plain_input = int(self.graph.value(x).shape[1]) % self.block != 0
        packed = f"{w}__blocked{self.block}"
        if packed not in self.constants:
            self.constants[packed] = _pack_weights(self.graph.constants[w], self.block, plain_input)
            self.values[packed] = Value(packed, "float32", self.constants[packed].shape)
        attrs = {k: v for k, v in node.attrs if k != "group"}
        if not plain_input:
            source = self.to_blocked(x)
        else:
            source = self.to_plain(x) if x in self.blocked else x
        self.nodes.append(
            Node(
                node.name,
                "ConvBlocked",
                (source, packed, node.input(2)),
                (self.twin_of(y),),
                {**attrs, "block": self.block, "plain_input": int(plain_input)},
                DOMAIN,
            )
        )


def _eligible(graph: Graph, node: Node, block: int) -> bool:
    if node.op_type != "Conv" or node.domain or int(node.attr("group", 1)) != 1:
        return False
    if len(node.inputs) < 2 or node.inputs[1] not in graph.constants:
        return False
    x, w = graph.value(node.inputs[0]), graph.constants[node.inputs[1]]
    if x.dtype != "float32" or w.dtype != np.float32 or not x.is_static or len(x.shape) < 4:
        return False
    if len(w.shape) != len(x.shape) or w.shape[1] != x.shape[1]:
        return False
    return int(w.shape[0]) % block == 0


def _pool_follows_blocked(node: Node, blocked: dict[str, str]) -> bool:
    """A MaxPool of a blocked value, without the Indices output (whose flat NCHW positions
    the blocked layout would have to recompute)."""
    return (
        node.op_type == "MaxPool"
        and not node.domain
        and len(node.outputs) == 1
        and bool(node.inputs)
        and node.inputs[0] in blocked
    )


def _follows_blocked(graph: Graph, node: Node, blocked: dict[str, str]) -> bool:
    """An element-wise node whose tensor inputs are all blocked values of its output's shape
    (other inputs: one-element constants, such as Clip's bounds)."""
    if node.domain or node.op_type not in ELEMENTWISE or len(node.outputs) != 1:
        return False
    shape = graph.value(node.outputs[0]).shape
    tensors = [i for i in node.inputs if i and i in blocked]
    if not tensors or any(graph.value(i).shape != shape for i in tensors):
        return False
    others = [i for i in node.inputs if i and i not in blocked]
    return all(i in graph.constants and graph.constants[i].size == 1 for i in others)


def _blocked_value(v: Value, name: str, block: int) -> Value:
    n, c, *spatial = v.shape
    return Value(name, v.dtype, (n, int(c) // block, *spatial, block))


def _pack_weights(w: np.ndarray, block: int, plain_input: bool) -> np.ndarray:
    """``[OC, IC, k...]`` -> ``[OC/b, IC/b, k..., b_in, b_out]``, or with ``plain_input``
    ``[OC/b, IC, k..., b_out]``."""
    oc, ic, *kernel = w.shape
    r = len(kernel)
    if plain_input:
        split = w.reshape(oc // block, block, ic, *kernel)  # axes: ob, o, ic, kernel...
        return np.ascontiguousarray(split.transpose(0, 2, *range(3, 3 + r), 1))
    split = w.reshape(oc // block, block, ic // block, block, *kernel)
    # axes: 0 ob, 1 o, 2 ib, 3 i, 4.. kernel
    return np.ascontiguousarray(split.transpose(0, 2, *range(4, 4 + r), 3, 1))
