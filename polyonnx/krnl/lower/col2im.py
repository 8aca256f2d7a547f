"""Col2Im, and ConvTranspose's overlap-add: blocks of an image, one column each, summed back
into the image.

ONNX's Col2Im reads ``[N, C·K, L]`` (``K`` the elements of a block, ``L`` the blocks, both
row-major over the spatial axes). Image point ``p`` gets block offset ``k`` of block ``b``
when ``p = b·stride + k·dilation - pad``. Split by the residue ``r`` of ``p`` modulo the
stride (``p = q·stride + r``), the offsets that reach a residue are known at compile time,
and each one's block is affine in ``q``: one nest per residue (per axis), with one guarded
update per reaching offset, every index affine (no division, no select)::

    for each residue (r0, r1):                  # stride0 x stride1 nests
      for n, c, q0, q1:
        S: Y[n, c, q0·s0 + r0, q1·s1 + r1] = 0.0
        for each reaching offset (k0, k1), at block offsets (o0, o1):
          S: Y[..] = Y[..] + X[n, c·K + k0·K1 + k1, (q0 + o0)·B1 + q1 + o1]
               if 0 <= q0 + o0 < B0 and 0 <= q1 + o1 < B1

polyonnx's own ``OverlapAdd`` (made by :mod:`polyonnx.graph.passes.deconv`) is the same sum
over the columns of a ConvTranspose's 1x1 convolution, ``[N, G·K·M, spatial...]``: channel
``m`` of group ``g`` at tap ``k`` is column channel ``(g·K + k)·M + m`` (tap-major within a
group) and the blocks keep their spatial axes. ``OverlapAddBlocked`` (made by
:mod:`polyonnx.graph.passes.layout`) reads and writes channel-blocked tensors: tap-major, a
block of ``b`` output channels at one tap is one block of columns, so the block is the
contiguous vector axis of every load and store::

    Y[n, g·MB + mb, q·s + r, c] += X[n, (g·K + k)·MB + mb, q + o, c]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN, Node
from polyonnx.krnl import ir
from polyonnx.krnl.ir import Aff
from polyonnx.krnl.lower.common import (
    bad_attr,
    bound_guards,
    nest,
    require_float,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register

#: The column index of tap ``k`` (per axis) and block ``b`` (per axis), for channel iterators.
ColumnIndex = Callable[[Sequence[int], Sequence[Aff]], tuple[Aff, ...]]


def _ints(node: Node, name: str, n: int, default: int) -> list[int]:
    value = node.attr(name)
    out = [default] * n if value is None else [int(v) for v in value]
    if len(out) != n:
        raise bad_attr(
            node, name, f"has {len(out)} values for {n // (2 if name == 'pads' else 1)} axes"
        )
    return out


@dataclass(frozen=True)
class _Frame:
    """Where the blocks sit in the image: per axis, the image's and a block's extents, the
    stride, dilation and leading pad between them, and the number of blocks."""

    image: tuple[int, ...]
    block: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # begin and end per axis
    counts: tuple[int, ...]

    @staticmethod
    def of(node: Node, image: Sequence[int], block: Sequence[int]) -> _Frame:
        """The frame of ``node``'s attributes, checked."""
        rank = len(image)
        dil = _ints(node, "dilations", rank, 1)
        strides = _ints(node, "strides", rank, 1)
        pads = _ints(node, "pads", 2 * rank, 0)
        for attr, values in (("strides", strides), ("dilations", dil)):
            if min(values, default=1) < 1:
                raise bad_attr(node, attr, f"must be positive, got {values}")
        counts = [
            (image[d] + pads[d] + pads[rank + d] - (dil[d] * (block[d] - 1) + 1)) // strides[d] + 1
            for d in range(min(rank, len(block)))
        ]
        return _Frame(*(tuple(v) for v in (image, block, strides, dil, pads, counts)))

    def __str__(self) -> str:
        return (
            f"{list(self.block)} with image {list(self.image)}, strides {list(self.strides)}, "
            f"pads {list(self.pads)}, dilations {list(self.dilations)}"
        )


@register("Col2Im", since=18)
def lower_col2im(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Col2Im: see the module docstring."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    consts = [ctx.constant(node.input(k)) for k in (1, 2)]
    if any(c is None for c in consts):
        raise unsupported(node, ctx, "image_shape or block_shape known only at run time")
    image, block = ([int(v) for v in np.asarray(c).reshape(-1)] for c in consts if c is not None)
    rank = len(image)
    frame = _Frame.of(node, image, block)
    counts = frame.counts
    xs = ctx.shape(x)
    size = int(np.prod(block))
    if len(block) != rank or xs[2] != int(np.prod(counts)) or xs[1] % size or min(counts) < 1:
        raise bad_attr(node, "block_shape", f"{frame} does not fit an input of shape {list(xs)}")

    def column(taps: Sequence[int], blocks: Sequence[Aff]) -> tuple[Aff, ...]:
        channel, flat = var("c") * size, Aff.lift(0)
        for d in range(rank):
            channel = channel + taps[d] * int(np.prod(block[d + 1 :]))
            flat = flat * counts[d] + blocks[d]
        return (var("n"), channel, flat)

    channels = [("n", xs[0]), ("c", ctx.shape(y)[1])]
    out = (var("n"), var("c"))
    return _overlap_add(x, y, dtype, channels, out, [], column, frame)


@register("OverlapAdd", domain=INTERNAL_DOMAIN)
def lower_overlap_add(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """ConvTranspose's overlap-add on NCHW tensors: see the module docstring."""
    return _internal(node, ctx, blocked=False)


@register("OverlapAddBlocked", domain=INTERNAL_DOMAIN)
def lower_overlap_add_blocked(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """ConvTranspose's overlap-add on channel-blocked tensors: see the module docstring."""
    return _internal(node, ctx, blocked=True)


def _internal(node: Node, ctx: LowerContext, blocked: bool) -> tuple[ir.Node, ...]:
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs, ys = ctx.shape(x), ctx.shape(y)
    rank = len(ys) - 2 - blocked
    block = _ints(node, "kernel_shape", rank, 1)
    frame = _Frame.of(node, ys[2 : 2 + rank], block)
    group = int(node.attr("group", 1))
    taps = int(np.prod(block))
    per_group = ys[1] // group if group >= 1 else 0  # channels (blocks when blocked)
    inner = [("l", ys[-1])] if blocked else []  # the block's lanes
    if (
        per_group < 1
        or per_group * group != ys[1]
        or list(xs) != [ys[0], ys[1] * taps, *frame.counts, *(e for _, e in inner)]
    ):
        raise bad_attr(
            node,
            "kernel_shape",
            f"{frame}, group {group} does not fit columns of shape {list(xs)}",
        )
    lane = tuple(var(name) for name, _ in inner)

    def column(tap: Sequence[int], blocks: Sequence[Aff]) -> tuple[Aff, ...]:
        flat = 0
        for d in range(rank):
            flat = flat * block[d] + tap[d]
        channel = (var("g") * taps + flat) * per_group + var("m")
        return (var("n"), channel, *blocks, *lane)

    channels = [("n", ys[0]), ("g", group), ("m", per_group)]
    out = (var("n"), var("g") * per_group + var("m"))
    return _overlap_add(x, y, dtype, channels, out, inner, column, frame)


def _overlap_add(
    x: str,
    y: str,
    dtype: str,
    channels: list[tuple[str, int]],
    out: tuple[Aff, ...],
    inner: list[tuple[str, int]],
    column: ColumnIndex,
    frame: _Frame,
) -> tuple[ir.Node, ...]:
    """One nest per residue ``r`` of the image point modulo the stride (per axis), over the
    points ``p = q·stride + r``: zero, then one guarded update per tap that reaches them (a
    tap ``k`` does when ``r + pad - k·dilation`` is a multiple of the stride; its block is then
    ``b = q + (r + pad - k·dilation) / stride``, affine in ``q``, and the guards keep ``b``
    within the blocks). The loops ``channels`` are outside the image's, ``inner`` inside them;
    the output point is ``(*out, spatial..., *inner)``, the column ``column(taps, blocks)``."""
    rank = len(frame.image)
    qs = [var(f"q{d}") for d in range(rank)]
    nests: list[ir.Node] = []
    for residues in itertools.product(*(range(st) for st in frame.strides)):
        extents = [-(-(frame.image[d] - residues[d]) // frame.strides[d]) for d in range(rank)]
        if min(extents) <= 0:
            continue
        spatial = tuple(qs[d] * frame.strides[d] + residues[d] for d in range(rank))
        at = ir.Access(y, (*out, *spatial, *(var(name) for name, _ in inner)))
        reaching = [
            [
                (k, (residues[d] + frame.pads[d] - k * frame.dilations[d]) // frame.strides[d])
                for k in range(frame.block[d])
                if (residues[d] + frame.pads[d] - k * frame.dilations[d]) % frame.strides[d] == 0
            ]
            for d in range(rank)
        ]
        updates = []
        for taps in itertools.product(*reaching):
            blocks = [qs[d] + offset for d, (_, offset) in enumerate(taps)]
            guards = tuple(
                g
                for d, (_, offset) in enumerate(taps)
                for g in bound_guards(
                    blocks[d], offset, extents[d] - 1 + offset, 0, frame.counts[d]
                )
            )
            value = ir.Load(y, at.index, dtype) + ir.Load(
                x, column([k for k, _ in taps], blocks), dtype
            )
            updates.append(ir.Stmt("S", at, value, guards))
        iters = [*channels, *((f"q{d}", extents[d]) for d in range(rank)), *inner]
        nests += nest(iters, (ir.Stmt("S", at, zero(dtype)), *updates))
    return tuple(nests)
