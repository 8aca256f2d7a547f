"""Winograd convolutions: blocked 3x3 stride-1 convolutions as ``polyonnx.WinogradConv`` where
fewer operations pay for the transforms.

``F(m x m, 3 x 3)`` (:mod:`polyonnx.krnl.lower.winograd`) computes an ``m x m`` output tile
with ``(m + 2)^2`` multiply-adds per pair of channels instead of ``9 m^2``: 2.25x fewer for
``m = 2``, 4x for ``m = 4``, paid for by transforming input tiles (per input channel) and
output tiles (per output channel), and by tiles that overhang a ragged output. The choice is
arithmetic on the layer's shape: the products' multiply-adds plus the transforms' additions
(weighted as memory-bound vector work) against the direct convolution's, for each tile size;
a layer takes the cheapest when it saves at least a quarter. So few-channel layers (where the
transforms dominate) and small maps (where ragged tiles waste work) stay direct.

The lowering transforms the weights once, at compile time (``G w G^T`` in float64, stored in
the weights' type). ``F(4, 3)``'s transforms grow rounding errors by about ten times a direct sum's
(relative errors ~1e-6 in float32), well within the ONNX suite's tolerances; but a quantized
convolution computed as an exact float sum of integers (:mod:`~polyonnx.graph.passes.qlinear`)
must stay exact, so it stays direct.

Example:
    >>> winograd_tile(56, 56, 64, 64), winograd_tile(14, 14, 256, 256)
    (4, 2)
    >>> winograd_tile(7, 7, 512, 512), winograd_tile(56, 56, 3, 64)
    (None, None)
"""

from __future__ import annotations

import dataclasses
import math

from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Graph, Node
from polyonnx.graph.passes.qlinear import EXACT_ATTR

#: Tile sizes tried, with the additions of their input and output transforms per tile and
#: channel (two passes of ``a`` rows, each term of ``B^T`` / ``A^T`` once).
_TRANSFORMS = {2: (2 * 4 * 8, (4 + 2) * 7), 4: (2 * 6 * 22, (6 + 4) * 18)}
#: A transform's addition costs this many multiply-adds of the products: it is streamed
#: through memory (a temp written and read back), the products run from registers.
_TRANSFORM_WEIGHT = 3.0
#: The saving a layer must show to leave the direct convolution.
_MIN_SAVING = 0.75


def winograd_tile(
    out_h: int, out_w: int, in_channels: int, out_channels: int, lanes: int = 16
) -> int | None:
    """The output tile size ``m`` of the cheapest Winograd form of a 3x3 stride-1 conv with
    this output size and channels, or None when the direct convolution is as cheap.

    Each form costs its arithmetic plus the streaming of its weights from memory
    (``(m + 2)^2 / 9`` times the direct weights), in multiply-adds of one core: with
    ``lanes`` float lanes per vector and two FMA pipes against about eight bytes per cycle
    from memory, a byte of weights costs ``lanes / 4`` multiply-adds. So a small map with
    many channels (ResNet's 7x7 layers: few tiles, a 512x512 kernel's weights 4x larger
    transformed) stays direct."""
    per_byte = lanes / 4
    weights = 4 * in_channels * out_channels * per_byte
    direct = 9 * out_h * out_w * in_channels * out_channels + 9 * weights
    best: tuple[float, int] | None = None
    for m, (per_input, per_output) in _TRANSFORMS.items():
        tiles = math.ceil(out_h / m) * math.ceil(out_w / m)
        products = tiles * (m + 2) ** 2 * in_channels * out_channels
        transforms = tiles * (per_input * in_channels + per_output * out_channels)
        cost = products + _TRANSFORM_WEIGHT * transforms + (m + 2) ** 2 * weights
        if best is None or cost < best[0]:
            best = (cost, m)
    assert best is not None
    return best[1] if best[0] <= _MIN_SAVING * direct else None


def winograd_convs(graph: Graph, lanes: int) -> Graph:
    """Every blocked 3x3 stride-1 convolution for which :func:`winograd_tile` picks a tile
    (``lanes``: float32 lanes of the target's vectors), as ``WinogradConv`` (same inputs and
    attributes, and the tile size)."""
    nodes = tuple(_rewritten(n, graph, lanes) for n in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes)


def _rewritten(n: Node, graph: Graph, lanes: int) -> Node:
    m = _tile_for(n, graph, lanes)
    if m is None:
        return n
    attrs = {k: v for k, v in n.attrs if k not in ("plain_input", "group")}
    return Node(
        n.name,
        "WinogradConv",
        n.inputs,
        n.outputs,
        {**attrs, "kernel_shape": (3, 3), "tile": m},
        DOMAIN,
        n.guard,
    )


def _tile_for(n: Node, graph: Graph, lanes: int) -> int | None:
    """The tile size for ConvBlocked ``n``, or None when it stays direct."""
    if (n.domain, n.op_type) != (DOMAIN, "ConvBlocked") or n.inputs[1] not in graph.constants:
        return None
    if int(n.attr("plain_input", 0)) or int(n.attr("group", 1)) != 1:
        return None
    if int(n.attr(EXACT_ATTR, 0)):  # (an integer sum, which the transforms would round)
        return None
    w = graph.constants[n.inputs[1]]
    x, y = graph.value(n.inputs[0]), graph.value(n.outputs[0])
    if w.ndim != 6 or w.shape[2:4] != (3, 3) or x.dtype != "float32" or len(x.shape) != 5:
        return None
    if any(int(s) != 1 for s in (*n.attr("strides", ()), *n.attr("dilations", ()))):
        return None
    if not (x.is_static and y.is_static):
        return None
    _, out_blocks, out_h, out_w, block = y.dims
    return winograd_tile(out_h, out_w, x.dims[1] * block, out_blocks * block, lanes)
