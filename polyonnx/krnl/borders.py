"""Zero-bordered storage: a padded convolution reads its input where the producer wrote it.

A convolution whose window reaches into the padding reads a zero-bordered copy of its input
(:func:`polyonnx.krnl.lower.conv.padded_input`): a copy of every element per conv, plus the
border. When the input is an intermediate value that only convolutions read, the copy is not
needed: the value is stored inside a larger buffer ``<value>__bordered`` whose border (the
widest padding its readers ask for) is zero, the kernel producing the value writes the
interior, and each convolution reads the buffer with its window shifted by the border. Only
channel-blocked convolutions (``ConvBlocked``) qualify as readers: ONNX's own Conv may read
its input through a reshaped view, which a border would break.

No kernel writes a border: the memory plan puts bordered buffers at the start of the
workspace (:attr:`polyonnx.krnl.memory.MemoryPlan.zeroed_size` bytes), zeroed once when the
workspace is allocated, and shares their bytes only with buffers of the same shape and border.

Example: ResNet50's ``Conv 1x1 -> Relu`` writes ``relu__bordered[n, c, h + 1, w + 1, i]``
(``[1, 2, 58, 58, 32]`` around a ``[1, 2, 56, 56, 32]`` value) and the 3x3 conv after it reads
``relu__bordered[n, c, oh + kh, ow + kw, i]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import replace

from polyonnx.graph.ir import INTERNAL_DOMAIN, Graph, Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import window
from polyonnx.krnl.lower.registry import LowerContext
from polyonnx.krnl.lower.winograd import input_pads


def zero_borders(graph: Graph, computed: Set[str]) -> dict[str, ir.Border]:
    """The values of ``graph`` to store zero-bordered, by name: those ``computed`` by a kernel
    (not graph inputs, outputs or constants; not views), with static shapes, read only as the
    input of channel-blocked convolutions (``ConvBlocked``), at least one of which pads it."""
    ctx = LowerContext(graph)
    outputs = {v.name for v in graph.outputs}
    borders: dict[str, ir.Border] = {}
    for name, readers in graph.consumers().items():
        if name not in computed or name in outputs or not graph.value(name).is_static:
            continue
        pads = [
            p
            for node in readers
            if node.inputs[0] == name
            and name not in node.inputs[1:]
            and (p := _input_pads(node, ctx)) is not None
        ]
        if len(pads) != len(readers):  # (some reader is not a ConvBlocked reading it as X)
            continue
        axes = range(len(graph.value(name).shape))
        begin = tuple(max(p[0][k] for p in pads) for k in axes)
        end = tuple(max(p[1][k] for p in pads) for k in axes)
        if any(begin) or any(end):
            borders[name] = ir.Border(name, begin, end)
    return borders


def _input_pads(node: Node, ctx: LowerContext) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The zero padding (before, after: one per axis of the input) that ``node``, a
    ConvBlocked or WinogradConv, reads around its input; None for any other reader."""
    if (node.domain, node.op_type) == (INTERNAL_DOMAIN, "WinogradConv"):
        begin, end = input_pads(node, ctx)
        return (0, 0, *begin, 0), (0, 0, *end, 0)
    if node.domain != INTERNAL_DOMAIN or node.op_type not in ("ConvBlocked", "ConvBlockedBytes"):
        return None
    xs, ws = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    rank = len(xs) - (2 if node.attr("plain_input", 0) else 3)
    win = window(node, ctx, xs[2 : 2 + rank], ws[2 : 2 + rank])
    rest = (0,) * (len(xs) - 2 - rank)
    return (0, 0, *win.pads_begin, *rest), (0, 0, *win.pads_end, *rest)


def store_bordered(kernel: ir.Kernel, borders: Mapping[str, ir.Border]) -> ir.Kernel:
    """``kernel`` with every access to a bordered value moved into its bordered buffer, which
    takes the value's place and kind in the argument list. (A convolution reading the buffer
    is never in the kernel writing it: convolutions start kernels of their own.)"""
    moved = {b.name: borders[b.name] for b in kernel.buffers if b.name in borders}
    if not moved:
        return kernel
    body = ir.move_buffers(
        kernel.body, {name: (border.buffer, border.begin) for name, border in moved.items()}
    )
    buffers = tuple(
        replace(b, name=moved[b.name].buffer, shape=moved[b.name].shape(b.shape))
        if b.name in moved
        else b
        for b in kernel.buffers
    )
    return replace(kernel, buffers=buffers, body=body)
