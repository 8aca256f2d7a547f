"""ConvTranspose as a 1x1 convolution and an overlap-add (what im2col-based libraries run).

A transposed convolution adds, for every input pixel ``i`` and tap ``k``, the product of
the pixel's channels with the tap's weights into output pixel ``i*stride + k*dilation -
pad``. Computed as written it is a scatter, on the generic path at a few GFLOP/s (a
DCGAN-style 4x4 stride-2 layer took 53x onnxruntime's time). Split in two, the same
multiply-adds run in the fast path:

1. a 1x1 Conv from the ``C`` input channels to ``M * K`` channels (``K`` the taps), the
   weights regrouped at compile time: ``Z[n, (m, k), i] = sum_c X[n, c, i] * W[c, m, k]``
   (grouped convolutions stay grouped, each group's channels ordered ``(m, k)``);
2. the overlap-add of ``Z``'s columns into the image (polyonnx's ``OverlapAdd``: ONNX's
   Col2Im with the ConvTranspose's strides, pads and dilations, on columns ordered ``(k, m)``
   per group, see :mod:`polyonnx.krnl.lower.col2im`), then the bias. When the taps never overlap
   (2-D, kernel = stride, no pads, no output padding: U-Net's up-convolutions) it is a
   DepthToSpace, and the bias goes into the Conv.

Applied to ConvTransposes with constant weights and explicit pads (or ``VALID``), whose
``output_padding`` is below the stride (as ONNX requires) and whose intermediate fits in
:data:`MAX_COLUMN_BYTES`; the others keep their own lowering.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", s) for n, s in [("x", (1, 4, 5, 5)), ("y", (1, 2, 10, 10))]}
    >>> v["w"] = Value("w", "float32", (4, 2, 2, 2))
    >>> g = Graph("g", (v["x"],), (v["y"],), (Node("up", "ConvTranspose", ("x", "w"), ("y",),
    ...     {"strides": (2, 2)}),), v, {"w": np.ones((4, 2, 2, 2), "float32")})
    >>> [n.op_type for n in deconv_as_columns(g).nodes]
    ['Conv', 'DepthToSpace']
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from polyonnx.graph.ir import INTERNAL_DOMAIN, Additions, Graph, Node, Value

MAX_COLUMN_BYTES = 256 << 20
"""The largest 1x1 convolution output (``M * K`` channels at the input's size) the rewrite
makes; past it the ConvTranspose keeps its scatter, which needs no intermediate."""


def deconv_as_columns(graph: Graph) -> Graph:
    """Every ConvTranspose that qualifies rewritten (see the module docstring)."""
    nodes: list[Node] = []
    add = Additions(graph)
    changed = False
    for n in graph.nodes:
        plan = _plan(n, graph)
        if plan is None:
            nodes.append(n)
            continue
        changed = True
        nodes.extend(plan.rewrite(n, add))
    if not changed:
        return graph
    return dataclasses.replace(
        graph, nodes=tuple(nodes), values=add.values, constants=add.constants
    )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What a qualifying ConvTranspose's attributes and shapes come to."""

    group: int
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    x: Value
    y: Value
    weights: np.ndarray

    @property
    def blocks(self) -> bool:
        """Whether the taps never overlap and nothing is cut: a DepthToSpace."""
        rank = len(self.kernel)
        return (
            rank == 2
            and self.kernel[0] == self.kernel[1] == self.strides[0] == self.strides[1]
            and not any(self.pads)
            and all(d == 1 for d in self.dilations)
            and tuple(self.y.dims[2:])
            == tuple(d * s for d, s in zip(self.x.dims[2:], self.strides, strict=True))
        )

    def rewrite(self, n: Node, add: Additions) -> list[Node]:
        batch, channels, *spatial = self.x.dims
        out_channels = self.y.dims[1]
        taps = math.prod(self.kernel)
        cg, mg = channels // self.group, out_channels // self.group
        # W[c, m, k] with c = (g, c'), regrouped to the 1x1 conv's [(g, m, k), c', 1...] for
        # DepthToSpace, [(g, k, m), c', 1...] for OverlapAdd (tap-major: a block of channels
        # at one tap is a block of columns when the layout is channel-blocked).
        order = (0, 2, 3, 1) if self.blocks else (0, 3, 2, 1)
        w = self.weights.reshape(self.group, cg, mg, taps).transpose(order)
        w = np.ascontiguousarray(w.reshape(out_channels * taps, cg, *([1] * len(spatial))))

        bias, dtype = n.input(2), self.y.dtype
        columns = add.value(
            f"{n.outputs[0]}_columns", dtype, (batch, out_channels * taps, *spatial)
        )
        conv_inputs = [n.inputs[0], add.constant(f"{n.inputs[1]}_columns", w)]
        if self.blocks and bias:
            conv_inputs.append(
                add.constant(f"{bias}_columns", np.repeat(add.constants[bias], taps))
            )
        attrs = {"group": self.group, "kernel_shape": (1,) * len(spatial)}
        conv = Node(add.name(f"{n.name}_gemm"), "Conv", conv_inputs, (columns,), attrs)
        if self.blocks:
            d2s = Node(
                n.name, "DepthToSpace", (columns,), n.outputs,
                {"blocksize": self.kernel[0], "mode": "CRD"},
            )  # fmt: skip
            return [conv, d2s]
        summed = add.value(f"{n.outputs[0]}_summed", dtype, self.y.dims) if bias else n.outputs[0]
        overlap_add = Node(
            n.name if not bias else add.name(f"{n.name}_overlap_add"),
            "OverlapAdd",
            (columns,),
            (summed,),
            {
                "kernel_shape": self.kernel,
                "dilations": self.dilations,
                "pads": self.pads,
                "strides": self.strides,
                "group": self.group,
            },
            INTERNAL_DOMAIN,
        )
        out = [conv, overlap_add]
        if bias:  # (a constant: _plan refuses a run-time bias)
            channel_bias = add.constants[bias].reshape(1, out_channels, *([1] * len(spatial)))
            shaped = add.constant(f"{bias}_channels", channel_bias)
            out.append(Node(n.name, "Add", (summed, shaped), n.outputs))
        return out


def _plan(n: Node, graph: Graph) -> _Plan | None:
    if n.op_type != "ConvTranspose" or n.domain or n.guard or len(n.inputs) < 2:
        return None
    x, y = graph.value(n.inputs[0]), graph.value(n.outputs[0])
    if not (x.is_static and y.is_static) or len(x.shape) < 3 or x.dtype not in _FLOATS:
        return None
    if n.inputs[1] not in graph.constants or (n.input(2) and n.input(2) not in graph.constants):
        return None
    weights = np.asarray(graph.constants[n.inputs[1]])
    rank = len(x.shape) - 2
    group = int(n.attr("group", 1))
    channels, out_channels = x.dims[1], y.dims[1]
    if weights.ndim != rank + 2 or group < 1 or channels % group or weights.shape[0] != channels:
        return None  # (the ConvTranspose's own lowering names what is wrong)
    if weights.shape[1] * group != out_channels or y.dims[0] != x.dims[0]:
        return None
    auto_pad = n.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID") or n.has_attr("output_shape"):
        return None
    kernel = tuple(int(k) for k in weights.shape[2:])
    strides = tuple(int(s) for s in n.attr("strides", (1,) * rank))
    dilations = tuple(int(d) for d in n.attr("dilations", (1,) * rank))
    pads = (0,) * (2 * rank) if auto_pad == "VALID" else tuple(n.attr("pads", (0,) * (2 * rank)))
    padding = tuple(int(p) for p in n.attr("output_padding", (0,) * rank))
    if not (len(strides) == len(dilations) == len(padding) == rank and len(pads) == 2 * rank):
        return None
    if min((*strides, *dilations)) < 1 or min(pads) < 0 or min(kernel) < 1:
        return None
    if any(not 0 <= p < s for p, s in zip(padding, strides, strict=True)):
        return None
    expected = tuple(
        s * (i - 1) + p + (k - 1) * d + 1 - pads[a] - pads[rank + a]
        for a, (i, k, s, d, p) in enumerate(
            zip(x.dims[2:], kernel, strides, dilations, padding, strict=True)
        )
    )
    if expected != tuple(y.dims[2:]) or min(expected) < 1 or min(x.dims) < 1:
        return None
    columns = x.dims[0] * out_channels * math.prod(kernel) * math.prod(x.dims[2:])
    if columns * np.dtype(x.dtype).itemsize > MAX_COLUMN_BYTES:
        return None
    return _Plan(group, kernel, strides, dilations, tuple(int(p) for p in pads), x, y, weights)


# (float16 would round the columns before they are summed: its ConvTranspose keeps its nest)
_FLOATS = frozenset({"float32", "float64"})
