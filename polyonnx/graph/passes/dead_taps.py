"""Convolution taps that only ever read padding are cut from the kernel.

A dilated convolution on a small feature map reaches past the input with its outer taps:
DeepLabV3's atrous pyramid runs 3x3 convolutions with dilations 12, 24 and 36 on a 14x14 map,
where every output reads only zeros through the outer taps of the last two (each tap reads
rows ``oh + (kh - 1) * d``, outside ``0..13`` for every ``oh`` when ``d >= 14``). Such a tap
adds exactly ``w * 0``: the Conv computes the same with its kernel sliced to the taps that
read the input somewhere, and the padding shrunk to match, which turns those two layers into
1x1 convolutions (a ninth of the work, and the 1x1 kernels' fast path).

Only the outermost dead taps of each spatial axis go (the kernel stays a box). A tap is kept
when its weights are not all finite (``inf * 0`` is NaN, which the full convolution yields),
and a Conv is left alone when the new padding would be negative.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", "float32", (1, 8, 14, 14)), Value("y", "float32", (1, 4, 14, 14))
    >>> w = np.ones((4, 8, 3, 3), "float32")
    >>> conv = Node("c", "Conv", ("x", "w"), ("y",), {"dilations": (24, 24),
    ...     "pads": (24, 24, 24, 24), "kernel_shape": (3, 3)})
    >>> g = Graph("g", (x,), (y,), (conv,), {"x": x, "y": y,
    ...     "w": Value("w", "float32", w.shape)}, {"w": w})
    >>> g = trim_dead_taps(g)
    >>> print(g.nodes[0]); g.constants[g.nodes[0].inputs[1]].shape
    c: y = Conv[dilations=(1, 1), kernel_shape=(1, 1), pads=(0, 0, 0, 0)](x, c_live_taps)
    (4, 8, 1, 1)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.graph.ir import Additions, Graph, Node


def trim_dead_taps(graph: Graph) -> Graph:
    """Every Conv with constant weights and static shapes, its kernel cut to the taps that
    read the input (see the module docstring)."""
    add = Additions(graph)
    nodes = []
    for n in graph.nodes:
        trimmed = _trimmed(n, graph)
        if trimmed is None:
            nodes.append(n)
            continue
        weights, attrs = trimmed
        inputs = (n.inputs[0], add.constant(f"{n.name}_live_taps", weights), *n.inputs[2:])
        nodes.append(Node(n.name, n.op_type, inputs, n.outputs, attrs, n.domain, n.guard))
    if len(add.constants) == len(graph.constants):
        return graph
    return dataclasses.replace(
        graph, nodes=tuple(nodes), values=add.values, constants=add.constants
    )


def _trimmed(n: Node, graph: Graph) -> tuple[np.ndarray, dict] | None:
    """The live weights and the new attributes of Conv ``n``, or None to keep it."""
    if n.op_type != "Conv" or n.domain or n.inputs[1] not in graph.constants:
        return None
    if n.attr("auto_pad", "NOTSET") != "NOTSET" or not n.attr("pads"):
        return None  # (SAME_* pad as little as the kernel needs; VALID reads no padding)
    x, y = graph.value(n.inputs[0]), graph.value(n.outputs[0])
    w = graph.constants[n.inputs[1]]
    rank = w.ndim - 2
    if not (x.is_static and y.is_static) or len(x.dims) != rank + 2 or rank < 1:
        return None
    strides = tuple(n.attr("strides", (1,) * rank))
    dilations = tuple(n.attr("dilations", (1,) * rank))
    pads = tuple(n.attr("pads"))
    live: list[tuple[int, int]] = []
    new_pads = [0] * (2 * rank)
    for i in range(rank):
        size, out, k = x.dims[2 + i], y.dims[2 + i], w.shape[2 + i]
        s, d, begin = int(strides[i]), int(dilations[i]), int(pads[i])
        reads = np.arange(out)[:, None] * s + np.arange(k)[None, :] * d - begin
        taps = np.flatnonzero(((reads >= 0) & (reads < size)).any(axis=0))
        if taps.size == 0:
            return None  # the output is the bias: rare enough to leave to the Conv
        lo, hi = int(taps[0]), int(taps[-1])
        # The padding that keeps the output size: the first output's first live tap reads
        # where it did, the last output's last live tap is the last padded element.
        new_begin = begin - lo * d
        end = (out - 1) * s + (hi - lo) * d + 1 - size - new_begin
        if new_begin < 0 or end <= -s:
            return None
        live.append((lo, hi))
        new_pads[i], new_pads[rank + i] = new_begin, max(end, 0)
    if all(lo == 0 and hi == w.shape[2 + i] - 1 for i, (lo, hi) in enumerate(live)):
        return None
    if not _dropped_finite(w, live):
        return None
    kept = w[(slice(None), slice(None), *(slice(lo, hi + 1) for lo, hi in live))]
    kernel = tuple(hi - lo + 1 for lo, hi in live)
    attrs = dict(n.attrs)
    attrs.update(
        kernel_shape=kernel,
        pads=tuple(new_pads),
        dilations=tuple(1 if k == 1 else int(d) for k, d in zip(kernel, dilations, strict=True)),
    )
    return np.ascontiguousarray(kept), attrs


def _dropped_finite(w: np.ndarray, live: list[tuple[int, int]]) -> bool:
    """Whether every weight outside the live box is finite (an inf or NaN there times the
    zero padding is a NaN the trimmed Conv would not produce)."""
    mask = np.ones(w.shape[2:], bool)
    mask[tuple(slice(lo, hi + 1) for lo, hi in live)] = False
    return bool(np.isfinite(w[..., mask]).all())
