"""A zero Pad in front of convolutions becomes their padding.

Keras pads explicitly before a strided convolution (``ZeroPadding2D``, then a ``valid`` conv:
MobileNetV2's depthwise layers, ResNet50's stem), and tf2onnx exports that as ``Pad`` then
``Conv``. A conv reads its padding as zeros anyway, so a constant-mode Pad of zeros on the
spatial axes only is folded into the ``pads`` of every Conv that reads it: the Pad's pass over
memory goes, and the conv stays in the channel-blocked layout (a Pad between two blocked
convolutions took the value out of it and back, and left the conv on the generic path).

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "float32", s) for n, s in
    ...      [("x", (1, 2, 6, 6)), ("p", (1, 2, 7, 7)), ("y", (1, 2, 3, 3))]}
    >>> v["pads"] = Value("pads", "int64", (8,))
    >>> v["w"] = Value("w", "float32", (2, 1, 3, 3))
    >>> g = Graph("g", (v["x"],), (v["y"],), (
    ...     Node("pad", "Pad", ("x", "pads"), ("p",)),
    ...     Node("conv", "Conv", ("p", "w"), ("y",), {"group": 2, "strides": (2, 2)})), v,
    ...     {"pads": np.array([0, 0, 0, 0, 0, 0, 1, 1]), "w": np.ones((2, 1, 3, 3), "float32")})
    >>> [str(n) for n in fold_pads_into_convs(g).nodes]
    ['conv: y = Conv[group=2, pads=(0, 0, 1, 1), strides=(2, 2)](x, w)']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.graph.ir import Graph, Node
from polyonnx.graph.pads import spread_pads


def fold_pads_into_convs(graph: Graph) -> Graph:
    """Every zero Pad read only by Convs folded into their padding (see the module docstring)."""
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    folded: dict[str, tuple[str, tuple[int, ...]]] = {}  # pad output -> (its input, pads)
    for n in graph.nodes:
        pads = _zero_spatial_pads(n, graph)
        if pads is None or n.outputs[0] in outputs:
            continue
        readers = consumers.get(n.outputs[0], [])
        if readers and all(_takes_padding(r, n.outputs[0]) for r in readers):
            folded[n.outputs[0]] = (n.inputs[0], pads)
    if not folded:
        return graph
    nodes = []
    for n in graph.nodes:
        if n.op_type == "Pad" and n.outputs[0] in folded:
            continue
        if n.op_type == "Conv" and n.inputs[0] in folded:
            source, extra = folded[n.inputs[0]]
            rank = len(extra) // 2
            own = tuple(n.attr("pads", (0,) * (2 * rank)))
            attrs = dict(n.attrs)
            attrs["pads"] = tuple(int(a) + int(b) for a, b in zip(own, extra, strict=True))
            attrs.pop("auto_pad", None)
            n = Node(
                n.name, n.op_type, (source, *n.inputs[1:]), n.outputs, attrs, n.domain, n.guard
            )
        nodes.append(n)
    values = {k: v for k, v in graph.values.items() if k not in folded}
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values)


def _zero_spatial_pads(n: Node, graph: Graph) -> tuple[int, ...] | None:
    """The spatial pads (begins, then ends) of a constant-mode, zero-valued Pad of the axes
    after the first two, with its pads (and value, axes) constant; None for any other node."""
    if n.op_type != "Pad" or n.domain or n.attr("mode", "constant") != "constant":
        return None
    if len(n.inputs) < 2 or n.inputs[1] not in graph.constants or n.attr("pads") is not None:
        return None
    value = n.input(2)
    if value and (value not in graph.constants or np.any(graph.constants[value] != 0)):
        return None
    rank = len(graph.value(n.inputs[0]).shape)
    if rank < 3:
        return None
    axes_name = n.input(3)
    if axes_name and axes_name not in graph.constants:
        return None
    axes = [int(a) for a in graph.constants[axes_name]] if axes_name else None
    given = [int(p) for p in np.asarray(graph.constants[n.inputs[1]]).reshape(-1)]
    spread = spread_pads(given, axes, rank)
    if spread is None:
        return None  # (the Pad's own lowering names what is wrong)
    begins, ends = spread
    if any(p < 0 for p in begins + ends) or any(begins[:2]) or any(ends[:2]):
        return None
    return tuple(begins[2:] + ends[2:])


def _takes_padding(reader: Node, value: str) -> bool:
    """Whether ``reader`` is a Conv that reads ``value`` as its input only and pads explicitly
    (``NOTSET`` or ``VALID``: SAME_* pads depend on the input's size)."""
    return (
        reader.op_type == "Conv"
        and not reader.domain
        and reader.inputs[0] == value
        and value not in reader.inputs[1:]
        and reader.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")
    )
