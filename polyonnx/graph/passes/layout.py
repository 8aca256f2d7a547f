"""Channel-blocked layout: convolutions and the element-wise ops between them on ``NC[HW]c``.

ONNX tensors are NCHW, but a convolution's inner loop wants output channels contiguous (one
vector of them per weight load) and its epilogue (bias, Relu, the residual Add) wants to run
on the tile it just computed. This pass rewrites every eligible ``Conv`` (1-D spatial or more,
constant weights, float32; ungrouped with output channels a multiple of ``block``, grouped with
the channels of each group whole blocks, or depthwise on a value that is blocked already) to
``polyonnx.ConvBlocked`` with output ``[N, C/block, spatial..., block]`` (its input blocked
too, unless its channels are not a multiple of ``block``: an image's three colours), and moves
the element-wise ops that follow blocked values, MaxPools and AveragePools of blocked values
(``polyonnx.MaxPoolBlocked``, ``polyonnx.AveragePoolBlocked``) and their global pools (a
``ReduceMean`` or ``ReduceMax`` over the spatial axes, the block of channels still the
contiguous axis), ConvTransposes' overlap-adds (``polyonnx.OverlapAddBlocked``), Concats and
Splits along
the channels in whole blocks and Resizes of the spatial axes into the blocked domain with it.
An element-wise op follows when one input is a blocked value of its output's shape and the
others broadcast over the blocks: blocked values, one-element tensors, constants (a
per-channel scale, PRelu's slope: repacked once, at compile time) and computed per-channel
``[N, C, 1, 1]`` values (a squeeze-excitation gate: a small ``ToBlocked``). Layout changes
(``polyonnx.ToBlocked`` / ``polyonnx.FromBlocked``) are inserted only where a value crosses
between the domains, and at most once per value: in ResNet50 that is once, after the final
pooling, instead of a transpose per convolution.

Weights are repacked once, at compile time, to ``[OC/block, IC/block, kernel..., block_in,
block_out]`` (``[OC/block, IC, kernel..., block_out]`` for an unblocked input; a grouped conv's
``IC`` is its channels per group: each output block holds its own group's weights, the
block-diagonal part; a depthwise conv's ``[C/block, 1, kernel..., block]``): the block of
output channels is contiguous for each input channel and tap. The whole graph uses one block
size, the smaller of two when that blocks more of the convolutions' work.

**Padded blocks.** An ungrouped or depthwise conv whose channels are not whole blocks (72 in
blocks of 16 or 32: MobileNets, EfficientNets) is blocked all the same when the last block,
zero-padded, costs at most :data:`MAX_PAD_WASTE` times its channels' work: its twin has
``ceil(C/block)`` blocks, and its weights, bias and per-channel constants are zero-padded, so
a conv reading the padding multiplies it by zero weights. That is exact only if the padding
lanes hold finite numbers (``0 * inf`` is NaN), so the pass knows the number in them: a conv
or ``ToBlocked`` writes 0, pools keep their input's, and an element-wise op is evaluated on
its inputs' padding (constants are padded with 0); an op whose padding would not be finite
(``Log``, a division by a padded constant) or not known (a scalar computed at run time) does
not follow a padded value. ``FromBlocked`` drops the padding; Concat and Split move only
values of whole blocks.

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
import math
from typing import Any

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.fuse import ELEMENTWISE
from polyonnx.graph.passes.qlinear import byte_quads

MAX_PAD_WASTE = 1.5
"""The padded channels a blocked conv may compute per real channel (72 channels in blocks of
32: 96, 1.33x); beyond it the conv stays NCHW (16 channels in blocks of 32 would be 2x)."""


def _blocks(channels: int, block: int) -> int:
    """The blocks ``channels`` take, the last one maybe padded."""
    return -(-channels // block)


def _padded(channels: int, block: int) -> int:
    """``channels`` rounded up to whole blocks."""
    return _blocks(channels, block) * block


def _fits(channels: int, block: int) -> bool:
    """Whether ``channels`` go in blocks of ``block``: whole ones, or the last one padded at
    a cost of at most :data:`MAX_PAD_WASTE`."""
    return channels % block == 0 or _padded(channels, block) <= MAX_PAD_WASTE * channels


def _pad_channels(a: np.ndarray, axis: int, block: int) -> np.ndarray:
    """``a`` zero-padded along ``axis`` to whole blocks."""
    extra = _padded(a.shape[axis], block) - a.shape[axis]
    if not extra:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths)


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
    out = _Rewrite(graph, block)
    for node in graph.nodes:
        out.node(node)
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
        self.pads: dict[str, float] = {}  # padded blocked twin -> the number in its padding

    def node(self, node: Node) -> None:
        """``node`` in the layout its inputs and kind call for."""
        graph, block, blocked = self.graph, self.block, self.blocked
        if _eligible(graph, node, block, bool(node.inputs) and node.inputs[0] in blocked):
            self.conv(node)
        elif _pool_follows_blocked(node, blocked) and (pad := self.pool_padding(node)) is not None:
            self.nodes.append(
                Node(
                    node.name,
                    f"{node.op_type}Blocked",
                    (blocked[node.inputs[0]],),
                    (self.twin_of(node.outputs[0], pad),),
                    node.attrs,
                    DOMAIN,
                )
            )
        elif _global_pool_follows_blocked(node, blocked):
            self.nodes.append(self.reduce_blocked(node))
        elif _overlap_add_follows_blocked(graph, node, blocked, block):
            twin = self.twin_of(node.outputs[0])
            self.nodes.append(
                Node(node.name, "OverlapAddBlocked", (blocked[node.inputs[0]],), (twin,),
                     node.attrs, DOMAIN)
            )  # fmt: skip
        elif _moves_whole_blocks(graph, node, blocked, block):
            self.nodes.append(self.move_blocks(node))
        elif _follows_blocked(graph, node, blocked) and math.isfinite(
            pad := self.padding_after(node)
        ):
            ins = tuple(self.blocked_operand(i, node) for i in node.inputs)
            twin = self.twin_of(node.outputs[0], pad)
            self.nodes.append(dataclasses.replace(node, inputs=ins, outputs=(twin,)))
        else:
            ins = tuple(self.to_plain(i) if i in blocked else i for i in node.inputs)
            self.nodes.append(dataclasses.replace(node, inputs=ins))
            self.plain.update(o for o in node.outputs if o)

    def twin_of(self, name: str, pad: float | None = 0.0) -> str:
        """The blocked twin of NCHW value ``name`` (declared, not yet produced), whose padding
        (if its channels are not whole blocks) will hold ``pad``."""
        twin = f"{name}__blk"
        self.values[twin] = _blocked_value(self.values[name], twin, self.block)
        self.blocked[name] = twin
        if self.padded(name):
            assert pad is not None and math.isfinite(pad)  # (what padding_after checks)
            self.pads[twin] = pad
        return twin

    def pool_padding(self, node: Node) -> float | None:
        """The number a pool of a blocked value leaves in its output's padding: its input's
        (a max or a mean of that number), 0 without padding; None when it is not known (an
        average counting the window's taps in the spatial padding, which it does not read,
        of a non-zero number)."""
        pad = self.pads.get(self.blocked[node.inputs[0]])
        if pad is None:
            return 0.0
        counts_outside = node.op_type == "AveragePool" and bool(node.attr("count_include_pad", 0))
        return None if counts_outside and pad != 0.0 else pad

    def padded(self, name: str) -> bool:
        """Whether NCHW value ``name``'s channels are not whole blocks."""
        shape = self.values[name].shape
        return len(shape) > 1 and int(shape[1]) % self.block != 0

    def padding_after(self, node: Node) -> float:
        """The number element-wise ``node`` leaves in its blocked output's padding (0 when its
        output has none); NaN when it is not known or not finite (then the node does not
        follow into the blocked domain)."""
        out = node.outputs[0]
        if not self.padded(out):
            return 0.0
        shape = self.graph.value(out).shape
        operands: list[np.ndarray | None] = []
        for name in node.inputs:
            if not name:
                operands.append(None)
                continue
            kind = _operand_kind(self.graph, name, shape, self.blocked)
            if kind == "blocked":
                pad = self.pads.get(self.blocked[name], 0.0)  # (whole blocks: never read)
            elif kind == "as_is" and name in self.graph.constants:
                pad = float(self.graph.constants[name].reshape(-1)[0])
            elif kind == "to_blocked" or (
                kind == "repack" and _along_channels(shape, name, self.graph)
            ):
                pad = 0.0  # (zero-padded when repacked or converted)
            else:  # a one-element value computed at run time, or a constant that broadcasts
                return math.nan  # its values over the channels (and so into the padding)
            dtype = self.graph.value(name).dtype
            operands.append(np.array([pad], dtype))
        value = _evaluate(node, operands)
        return math.nan if value is None or not math.isfinite(value) else value

    def to_blocked(self, name: str) -> str:
        """``name``'s blocked twin, converted here the first time it is needed (its padding
        zeroed)."""
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
        """An eligible Conv as a ConvBlocked on its repacked weights (a PackedConvInteger as
        a ConvBlockedBytes)."""
        if node.domain == DOMAIN:
            self.byte_conv(node)
            return
        x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
        # Too few input channels to block (an RGB image): read them as they are; a value that
        # is blocked already is read with its padding (times zero weights).
        plain_input = self.padded(x) and x not in self.blocked
        depthwise = _is_depthwise(self.graph, node)
        packed = f"{w}__blocked{self.block}{'dw' if depthwise else ''}"
        if packed not in self.constants:
            weights = self.graph.constants[w]
            self.constants[packed] = (
                _pack_depthwise(weights, self.block)
                if depthwise
                else _pack_weights(weights, self.block, plain_input)
            )
            self.values[packed] = Value(packed, "float32", self.constants[packed].shape)
        attrs = {k: v for k, v in node.attrs if k != "group" or int(v) != 1}
        if depthwise:  # (one group per channel, padding included)
            attrs["group"] = _padded(int(node.attr("group")), self.block)
        source = x if plain_input else self.to_blocked(x)
        bias = node.input(2)
        if bias and self.padded(y):
            bias = self.constant(
                f"{bias}__padded{self.block}",
                _pad_channels(self.graph.constants[bias], 0, self.block),
            )
        self.nodes.append(
            Node(
                node.name,
                "ConvBlocked",
                (source, packed, bias),
                (self.twin_of(y),),
                {**attrs, "block": self.block, "plain_input": int(plain_input)},
                DOMAIN,
            )
        )

    def byte_conv(self, node: Node) -> None:
        """A PackedConvInteger as a ConvBlockedBytes: its int8 weights repacked to blocks, each
        four input channels' bytes one int32 (``[OC/b, IC/b, kernel..., b/4, b]``)."""
        x, w, init, y = (*node.inputs[:3], node.outputs[0])
        packed = f"{w}__bytes{self.block}"
        if packed not in self.constants:
            blocks = _pack_weights(self.graph.constants[w], self.block, False)
            self.constant(packed, byte_quads(blocks, -2))
        if self.padded(y):
            init = self.constant(
                f"{init}__padded{self.block}",
                _pad_channels(self.graph.constants[init], 0, self.block),
            )
        attrs = {**dict(node.attrs), "block": self.block}
        source = self.to_blocked(x)
        twin = self.twin_of(y)
        self.nodes.append(
            Node(node.name, "ConvBlockedBytes", (source, packed, init), (twin,), attrs, DOMAIN)
        )

    def constant(self, name: str, array: np.ndarray) -> str:
        """A new constant ``name`` holding ``array``."""
        self.constants[name] = array
        self.values[name] = Value(name, str(array.dtype), array.shape)
        return name

    def blocked_operand(self, name: str, node: Node) -> str:
        """The input ``name`` of element-wise ``node`` as its blocked twin reads it."""
        kind = _operand_kind(
            self.graph, name, self.graph.value(node.outputs[0]).shape, self.blocked
        )
        if kind == "blocked":
            return self.blocked[name]
        if kind == "repack":
            packed = f"{name}__blocked{self.block}"
            if packed not in self.constants:
                array = _pack_operand(
                    self.graph.constants[name], _rank(self.graph, node), self.block
                )
                self.constant(packed, array.astype(self.graph.constants[name].dtype, copy=False))
            return packed
        return self.to_blocked(name) if kind == "to_blocked" else name

    def reduce_blocked(self, node: Node) -> Node:
        """A global pool of a blocked value as the reduction of its twin over the spatial
        axes: the block of channels stays the contiguous (vector) axis."""
        x = self.blocked[node.inputs[0]]
        axes = list(range(2, len(self.values[x].shape) - 1))
        inputs: tuple[str, ...] = (x,)
        attrs: dict[str, Any] = {"keepdims": 1}
        if self.graph.opset >= _AXES_INPUT_SINCE:
            inputs = (x, self.constant(f"{x}__spatial_axes", np.array(axes, np.int64)))
        else:
            attrs["axes"] = axes
        reduce = _GLOBAL_POOLS[node.op_type]
        out = self.twin_of(node.outputs[0], self.pads.get(x))
        return Node(node.name, reduce, inputs, (out,), attrs)

    def move_blocks(self, node: Node) -> Node:
        """A Concat or Split along the channels, or a Resize of the spatial axes, on blocked
        twins (see :func:`_moves_whole_blocks`): the same copies, one block at a time."""
        graph, block = self.graph, self.block
        attrs = dict(node.attrs)
        ins = list(node.inputs)
        if node.op_type == "Concat":
            ins = [self.to_blocked(i) for i in ins]
            attrs["axis"] = 1
        elif node.op_type == "Split":
            ins = [self.blocked[ins[0]]]
            sizes = np.array([int(graph.value(o).shape[1]) // block for o in node.outputs])
            attrs.pop("num_outputs", None)
            if graph.opset >= _SPLIT_INPUT_SINCE:
                ins.append(self.constant(f"{node.name}__split_blocks", sizes.astype(np.int64)))
            else:
                attrs["split"] = [int(v) for v in sizes]
            attrs["axis"] = 1
        else:  # Resize: the block axis keeps its size
            ins[0] = self.blocked[ins[0]]
            if node.input(3):
                sizes = graph.constants[ins[3]].astype(np.int64)
                blocks = _blocks(int(sizes[1]), block)
                sizes = np.array([*sizes[:1], blocks, *sizes[2:], block], np.int64)
                ins[3] = self.constant(f"{node.name}__blocked_sizes", sizes)
            else:
                scales = graph.constants[ins[2]].astype(np.float32)
                scales = np.array([*scales, 1.0], np.float32)
                ins[2] = self.constant(f"{node.name}__blocked_scales", scales)
        # (Concat and Split move whole blocks only; a Resize keeps its input's padding.)
        pad = self.pads.get(ins[0]) if node.op_type == "Resize" else None
        outs = tuple(self.twin_of(o, pad) for o in node.outputs)
        return Node(node.name, node.op_type, tuple(ins), outs, attrs, node.domain)


def _byte_conv_eligible(graph: Graph, node: Node, block: int) -> bool:
    """A PackedConvInteger of static shape whose input and output channels fit blocks
    (:func:`_fits`; the padding is zero weights, as for a float conv) of a multiple of 4
    channels (four bytes of a pixel make one int32)."""
    if (node.domain, node.op_type) != (DOMAIN, "PackedConvInteger"):
        return False
    x, w = graph.value(node.inputs[0]), graph.constants.get(node.inputs[1])
    if w is None or not x.is_static or len(x.shape) < 3 or block % 4:
        return False
    return _fits(int(x.shape[1]), block) and _fits(int(w.shape[0]), block)


def _eligible(graph: Graph, node: Node, block: int, blocked_input: bool) -> bool:
    """Whether ``node`` is a Conv to run as ``ConvBlocked`` on blocks of ``block`` channels:
    ungrouped with output channels that fit blocks (:func:`_fits`), grouped with whole input
    and output blocks per group (its weights block-diagonal), or depthwise (one channel per
    group, channels that fit blocks) when its input is blocked already (``blocked_input``: it
    does too little work per element to pay for a layout change). Padded outputs need a
    constant bias (or none), padded with zeros."""
    if _byte_conv_eligible(graph, node, block):
        return True
    if not _conv_shapes_static(graph, node):
        return False
    channels = int(graph.value(node.inputs[0]).shape[1])
    out_channels = int(graph.constants[node.inputs[1]].shape[0])
    group = int(node.attr("group", 1))
    bias = node.input(2)
    if out_channels % block and bias and bias not in graph.constants:
        return False
    if group == 1:
        return _fits(out_channels, block)
    if _is_depthwise(graph, node):
        return _fits(channels, block) and blocked_input
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

    def covered(b: int) -> float:
        """The eligible convs' work, each scaled by its real share of its padded channels."""
        return sum(
            math.prod(graph.value(n.outputs[0]).dims)
            * int(np.prod(graph.constants[n.inputs[1]].shape[1:]))
            * int(graph.value(n.outputs[0]).shape[1])
            / _padded(int(graph.value(n.outputs[0]).shape[1]), b)
            for n in graph.nodes
            if _conv_shapes_static(graph, n)
            and graph.value(n.outputs[0]).is_static
            and _eligible(graph, n, b, True)
        )

    return smallest if smallest < block and covered(smallest) > covered(block) else block


def _pool_follows_blocked(node: Node, blocked: dict[str, str]) -> bool:
    """A MaxPool (without the Indices output, whose flat NCHW positions the blocked layout
    would have to recompute) or an AveragePool of a blocked value."""
    return (
        node.op_type in ("MaxPool", "AveragePool")
        and not node.domain
        and len(node.outputs) == 1
        and bool(node.inputs)
        and node.inputs[0] in blocked
    )


#: Global pools and the reductions over their blocked inputs' spatial axes that compute them.
_GLOBAL_POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}
#: The opset from which ReduceMean and ReduceMax take their axes as an input.
_AXES_INPUT_SINCE = 18


def _global_pool_follows_blocked(node: Node, blocked: dict[str, str]) -> bool:
    return node.op_type in _GLOBAL_POOLS and not node.domain and node.inputs[0] in blocked


def _overlap_add_follows_blocked(
    graph: Graph, node: Node, blocked: dict[str, str], block: int
) -> bool:
    """A ConvTranspose's overlap-add (:mod:`polyonnx.graph.passes.deconv`) of blocked columns
    whose groups' output channels are whole blocks: its columns are tap-major, so a block of
    columns is one tap of a block of output channels."""
    if node.domain != DOMAIN or node.op_type != "OverlapAdd" or node.inputs[0] not in blocked:
        return False
    channels = graph.value(node.outputs[0]).shape[1]
    group = int(node.attr("group", 1))
    return isinstance(channels, int) and channels % group == 0 and (channels // group) % block == 0


#: The opset from which Split takes its sizes as an input.
_SPLIT_INPUT_SINCE = 13


def _moves_whole_blocks(graph: Graph, node: Node, blocked: dict[str, str], block: int) -> bool:
    """A Concat with a blocked input or a Split of a blocked value, along the channels, every
    part whole blocks; or a Resize of a blocked value that keeps its channels (scales or
    sizes constant, no region of interest, no axes). Their copies run on the blocked twins,
    each block of channels a contiguous run: no layout change around them (YOLO's C2f and
    neck: Split, Concat of the parts, Resize, Concat)."""
    if node.domain or node.op_type not in ("Concat", "Split", "Resize") or not node.inputs:
        return False
    parts = [v for v in (node.inputs if node.op_type == "Concat" else node.outputs) if v]
    rank = len(graph.value(node.inputs[0]).shape)
    if rank < 3 or any(len(graph.value(v).shape) != rank for v in parts):
        return False
    if node.op_type == "Resize":
        return _resize_keeps_channels(graph, node) and node.inputs[0] in blocked
    if int(node.attr("axis", 1 if node.op_type == "Concat" else 0)) % rank != 1:
        return False
    if any(not isinstance(d, int) or d % block for d in (graph.value(v).shape[1] for v in parts)):
        return False
    if node.op_type == "Concat":
        return any(i in blocked for i in parts)
    return node.inputs[0] in blocked


def _resize_keeps_channels(graph: Graph, node: Node) -> bool:
    """A Resize (opset 11 on) scaling neither batch nor channels, by constant scales or sizes,
    without a region of interest or axes."""
    mode = node.attr("coordinate_transformation_mode", "half_pixel")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if graph.opset < 11 or node.has_attr("axes") or mode == "tf_crop_and_resize":
        return False
    x = graph.value(node.inputs[0])
    scales, sizes = node.input(2), node.input(3)
    if sizes:
        return sizes in graph.constants and tuple(graph.constants[sizes][:2]) == x.shape[:2]
    if not scales or scales not in graph.constants:
        return False
    return tuple(float(v) for v in graph.constants[scales][:2]) == (1.0, 1.0)


def _follows_blocked(graph: Graph, node: Node, blocked: dict[str, str]) -> bool:
    """An element-wise node with a blocked input of its output's shape whose other inputs
    broadcast over the blocks (see :func:`_operand_kind`)."""
    if node.domain or node.op_type not in ELEMENTWISE or len(node.outputs) != 1:
        return False
    shape = graph.value(node.outputs[0]).shape
    if not any(i in blocked and graph.value(i).shape == shape for i in node.inputs):
        return False
    return all(_operand_kind(graph, i, shape, blocked) is not None for i in node.inputs if i)


def _operand_kind(
    graph: Graph, name: str, shape: tuple[int | str, ...], blocked: dict[str, str]
) -> str | None:
    """How the blocked twin of an element-wise op with output ``shape`` reads input ``name``:
    ``"blocked"`` (its blocked twin: ``shape``, or per-channel ``[N|1, C, 1...]``), ``"as_is"``
    (one element, which broadcasts in either layout), ``"repack"`` (a constant that broadcasts
    to ``shape``, repacked once at compile time) or ``"to_blocked"`` (a computed per-channel
    value ``[N|1, C, 1...]``, a gate for instance: a small layout change); None when it would
    take a layout change of a full tensor."""
    value = graph.value(name)
    if name in blocked:
        return "blocked" if value.shape == shape or _per_channel(value.shape, shape) else None
    if all(d == 1 for d in value.shape):
        return "as_is"
    if name in graph.constants:
        return "repack" if _broadcasts(value.shape, shape) else None
    return "to_blocked" if _per_channel(value.shape, shape) else None


def _along_channels(shape: tuple[int | str, ...], name: str, graph: Graph) -> bool:
    """Whether constant ``name``, broadcast to ``shape``, has its own values per channel
    (so its repacked padding is its own zeros), not values shared by all channels."""
    operand = graph.constants[name].shape
    return len(operand) >= len(shape) - 1 and operand[1 - len(shape)] != 1


def _broadcasts(operand: tuple[int | str, ...], shape: tuple[int | str, ...]) -> bool:
    """Whether ``operand`` broadcasts to ``shape`` (ONNX's rule: aligned right, each dim 1 or
    equal)."""
    if len(operand) > len(shape):
        return False
    return all(d in (1, s) for d, s in zip(operand[::-1], shape[::-1], strict=False))


def _per_channel(operand: tuple[int | str, ...], shape: tuple[int | str, ...]) -> bool:
    """Whether ``operand`` is ``[N|1, C, 1...]`` for ``shape`` ``[N, C, spatial...]``."""
    return (
        len(operand) == len(shape)
        and operand[0] in (1, shape[0])
        and operand[1] == shape[1]
        and all(d == 1 for d in operand[2:])
    )


def _rank(graph: Graph, node: Node) -> int:
    return len(graph.value(node.outputs[0]).shape)


def _pack_operand(a: np.ndarray, rank: int, block: int) -> np.ndarray:
    """A constant broadcasting to an NCHW value of ``rank`` as it broadcasts to the value's
    blocked twin: ``[n, C, s...]`` -> ``[n, C/b, s..., b]`` (``[n, 1, s..., 1]`` for one
    channel)."""
    a = a.reshape((1,) * (rank - a.ndim) + a.shape)
    if a.shape[1] == 1:
        n, _, *spatial = a.shape
        return a.reshape(n, 1, *spatial, 1)
    a = _pad_channels(a, 1, block)
    n, c, *spatial = a.shape
    split = a.reshape(n, c // block, block, *spatial)
    return np.ascontiguousarray(split.transpose(0, 1, *range(3, 3 + len(spatial)), 2))


def _blocked_value(v: Value, name: str, block: int) -> Value:
    n, c, *spatial = v.shape
    return Value(name, v.dtype, (n, _blocks(int(c), block), *spatial, block))


def _pack_depthwise(w: np.ndarray, block: int) -> np.ndarray:
    """``[C, 1, k...]`` -> ``[C/b, 1, k..., b]``: a block of channels contiguous per tap (the
    channels zero-padded to whole blocks)."""
    w = _pad_channels(w, 0, block)
    c, _, *kernel = w.shape
    split = w.reshape(c // block, block, 1, *kernel)  # axes: cb, c, 1, kernel...
    return np.ascontiguousarray(split.transpose(0, 2, *range(3, 3 + len(kernel)), 1))


def _pack_weights(w: np.ndarray, block: int, plain_input: bool) -> np.ndarray:
    """``[OC, IC, k...]`` -> ``[OC/b, IC/b, k..., b_in, b_out]``, or with ``plain_input``
    ``[OC/b, IC, k..., b_out]`` (the channels zero-padded to whole blocks)."""
    w = _pad_channels(w, 0, block)
    if not plain_input:
        w = _pad_channels(w, 1, block)
    oc, ic, *kernel = w.shape
    r = len(kernel)
    if plain_input:
        split = w.reshape(oc // block, block, ic, *kernel)  # axes: ob, o, ic, kernel...
        return np.ascontiguousarray(split.transpose(0, 2, *range(3, 3 + r), 1))
    split = w.reshape(oc // block, block, ic // block, block, *kernel)
    # axes: 0 ob, 1 o, 2 ib, 3 i, 4.. kernel
    return np.ascontiguousarray(split.transpose(0, 2, *range(4, 4 + r), 3, 1))


def _evaluate(node: Node, operands: list[np.ndarray | None]) -> float | None:
    """Element-wise ``node`` on one-element ``operands`` (None: an input left out), by the
    ONNX reference implementation; None when it cannot say."""
    from onnx import helper, reference

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(operands)]
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in node.attrs}
    try:
        proto = helper.make_node(node.op_type, names, ["y"], **attrs)
        feeds = {n: a for n, a in zip(names, operands, strict=True) if a is not None}
        with np.errstate(all="ignore"):  # (an infinite or NaN padding is an answer: refused)
            (out,) = reference.ReferenceEvaluator(proto).run(None, feeds)
        return float(np.asarray(out, np.float64).reshape(-1)[0])
    except Exception:  # (an op or attribute the reference refuses: the node stays plain)
        return None
