"""Channel-blocked layout: convolutions and the element-wise ops between them on ``NC[HW]c``.

ONNX tensors are NCHW, but a convolution's inner loop wants output channels contiguous (one
vector of them per weight load) and its epilogue (bias, Relu, the residual Add) wants to run
on the tile it just computed. This pass rewrites every eligible ``Conv`` (1-D spatial or more,
constant weights, float32; ungrouped with output channels a multiple of ``block``, grouped with
the channels of each group whole blocks, or depthwise on a value that is blocked already) to
``polyonnx.ConvBlocked`` with output ``[N, C/block, spatial..., block]`` (its input blocked
too, unless its channels are not a multiple of ``block``: an image's three colours), and moves
the element-wise ops whose tensor inputs are all blocked, and MaxPools of blocked values
(``polyonnx.MaxPoolBlocked``), into the blocked domain with it. Layout
changes (``polyonnx.ToBlocked`` / ``polyonnx.FromBlocked``) are inserted only where a value
crosses between the domains, and at most once per value: in ResNet50 that is once, before the
final pooling, instead of a transpose per convolution.

Weights are repacked once, at compile time, to ``[OC/block, IC/block, kernel..., block_in,
block_out]`` (``[OC/block, IC, kernel..., block_out]`` for an unblocked input; a grouped conv's
``IC`` is its channels per group: each output block holds its own group's weights, the
block-diagonal part; a depthwise conv's ``[C/block, 1, kernel..., block]``): the block of
output channels is contiguous for each input channel and tap. The whole graph uses one block
size, the smaller of two when that blocks more of the convolutions' work.

Example:
    >>> g = blocked_layout(optimize(import_model("resnet50.onnx")), block=32)  # doctest: +SKIP
    >>> sorted({n.op_type for n in g.nodes if n.domain})                       # doctest: +SKIP
    ['ConvBlocked', 'FromBlocked', 'ToBlocked']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.fuse import ELEMENTWISE


def blocked_layout(graph: Graph, block: int, smallest: int | None = None) -> Graph:
    """``graph`` with its eligible convolutions (see the module docstring) on blocked tensors:
    blocks of ``block`` channels, or of ``smallest`` (a divisor of ``block``) when those move
    more of the convolutions' work into the blocked layout (channel counts such as 48 or 144
    that 32 does not divide).

    A graph with no eligible Conv is returned unchanged.
    """
    block = _graph_block(graph, block, smallest or block)
    if block < 2 or not any(_eligible(graph, n, block, False) for n in graph.nodes):
        return graph
    values = dict(graph.values)
    constants = dict(graph.constants)
    nodes: list[Node] = []
    blocked: dict[str, str] = {}  # NCHW value -> its blocked twin
    plain: set[str] = {v.name for v in graph.inputs} | set(graph.constants)  # NCHW available

    def twin_of(name: str) -> str:
        """The blocked twin of NCHW value ``name`` (declared, not yet produced)."""
        twin = f"{name}__blk"
        values[twin] = _blocked_value(values[name], twin, block)
        blocked[name] = twin
        return twin

    def to_blocked(name: str) -> str:
        if name not in blocked:
            nodes.append(
                Node(
                    f"{name}__to_blocked",
                    "ToBlocked",
                    (name,),
                    (twin_of(name),),
                    {"block": block},
                    DOMAIN,
                )
            )
        return blocked[name]

    def to_plain(name: str) -> str:
        if name not in plain:
            nodes.append(
                Node(
                    f"{name}__from_blocked",
                    "FromBlocked",
                    (blocked[name],),
                    (name,),
                    {"block": block},
                    DOMAIN,
                )
            )
            plain.add(name)
        return name

    for node in graph.nodes:
        if _eligible(graph, node, block, node.inputs[0] in blocked if node.inputs else False):
            x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
            # Too few input channels to block (an RGB image): read them as they are.
            plain_input = int(graph.value(x).shape[1]) % block != 0
            depthwise = _is_depthwise(graph, node)
            packed = f"{w}__blocked{block}{'dw' if depthwise else ''}"
            if packed not in constants:
                weights = graph.constants[w]
                constants[packed] = (
                    _pack_depthwise(weights, block)
                    if depthwise
                    else _pack_weights(weights, block, plain_input)
                )
                values[packed] = Value(packed, "float32", constants[packed].shape)
            attrs = {k: v for k, v in node.attrs if k != "group" or int(v) != 1}
            source = (
                to_plain(x)
                if plain_input and x in blocked
                else (x if plain_input else to_blocked(x))
            )
            nodes.append(
                Node(
                    node.name,
                    "ConvBlocked",
                    (source, packed, node.input(2)),
                    (twin_of(y),),
                    {**attrs, "block": block, "plain_input": int(plain_input)},
                    DOMAIN,
                )
            )
        elif _pool_follows_blocked(node, blocked):
            nodes.append(
                Node(
                    node.name,
                    "MaxPoolBlocked",
                    (blocked[node.inputs[0]],),
                    (twin_of(node.outputs[0]),),
                    node.attrs,
                    DOMAIN,
                )
            )
        elif _follows_blocked(graph, node, blocked):
            ins = tuple(blocked.get(i, i) for i in node.inputs)
            nodes.append(dataclasses.replace(node, inputs=ins, outputs=(twin_of(node.outputs[0]),)))
        else:
            ins = tuple(to_plain(i) if i in blocked else i for i in node.inputs)
            nodes.append(dataclasses.replace(node, inputs=ins))
            plain.update(o for o in node.outputs if o)
    for v in graph.outputs:
        if v.name in blocked:
            to_plain(v.name)
    used = {i for n in nodes for i in n.inputs} | {o for n in nodes for o in n.outputs}
    values = {k: v for k, v in values.items() if k in used or k in plain}
    return eliminate_dead_code(
        dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=constants)
    )


def _eligible(graph: Graph, node: Node, block: int, blocked_input: bool) -> bool:
    """Whether ``node`` is a Conv to run as ``ConvBlocked`` on blocks of ``block`` channels:
    ungrouped with whole output blocks, grouped with whole input and output blocks per group
    (its weights block-diagonal), or depthwise (one channel per group, whole blocks) when its
    input is blocked already (``blocked_input``: it does too little work per element to pay
    for a layout change)."""
    if not _conv_shapes_static(graph, node):
        return False
    channels = int(graph.value(node.inputs[0]).shape[1])
    out_channels = int(graph.constants[node.inputs[1]].shape[0])
    group = int(node.attr("group", 1))
    if group == 1:
        return out_channels % block == 0
    if _is_depthwise(graph, node):
        return channels % block == 0 and blocked_input
    return (channels // group) % block == 0 and (out_channels // group) % block == 0


def _conv_shapes_static(graph: Graph, node: Node) -> bool:
    """A float32 Conv of static shape with constant weights that agree with its input."""
    if node.op_type != "Conv" or node.domain:
        return False
    if len(node.inputs) < 2 or node.inputs[1] not in graph.constants:
        return False
    x, w = graph.value(node.inputs[0]), graph.constants[node.inputs[1]]
    if x.dtype != "float32" or w.dtype != np.float32 or not x.is_static or len(x.shape) < 3:
        return False
    group = int(node.attr("group", 1))
    return (
        len(w.shape) == len(x.shape)
        and group >= 1
        and int(w.shape[1]) * group == int(x.shape[1])
        and int(w.shape[0]) % group == 0
    )


def _is_depthwise(graph: Graph, node: Node) -> bool:
    """One input and one output channel per group."""
    w = graph.constants[node.inputs[1]]
    return int(w.shape[1]) == 1 and int(w.shape[0]) == int(node.attr("group", 1)) > 1


def _graph_block(graph: Graph, block: int, smallest: int) -> int:
    """``smallest`` if it covers more convolution work (multiply-adds) than ``block``, else
    ``block``: one block size for the whole graph, so every element-wise op between blocked
    values sees one layout."""

    def covered(b: int) -> int:
        return sum(
            int(np.prod(graph.value(n.outputs[0]).shape))
            * int(np.prod(graph.constants[n.inputs[1]].shape[1:]))
            for n in graph.nodes
            if _conv_shapes_static(graph, n)
            and graph.value(n.outputs[0]).is_static
            and _eligible(graph, n, b, True)
        )

    return smallest if smallest < block and covered(smallest) > covered(block) else block


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


def _pack_depthwise(w: np.ndarray, block: int) -> np.ndarray:
    """``[C, 1, k...]`` -> ``[C/b, 1, k..., b]``: a block of channels contiguous per tap."""
    c, _, *kernel = w.shape
    split = w.reshape(c // block, block, 1, *kernel)  # axes: cb, c, 1, kernel...
    return np.ascontiguousarray(split.transpose(0, 2, *range(3, 3 + len(kernel)), 1))


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
