"""Node forms of old opsets that ONNX no longer defines, or that its version converter
upgrades unfaithfully, rewritten so that later stages see standard ops that mean the same.

* The experimental ops ONNX dropped and onnxruntime still runs (``ImageScaler``, which
  tiny-YOLOv2 and other zoo models of opsets 7-9 start with, ``Scale``, ``Affine``,
  ``ScaledTanh``, ``ParametricSoftplus``, ``Crop``) become the standard ops they are made
  of: ImageScaler's ``y = scale * x + bias[c]`` is ``Mul`` then ``Add`` of Constant nodes.
* ``Hardmax`` before opset 13 works on its input coerced to 2-D, which the converter forgets
  (:func:`flatten_hardmax`).
* Binary ops before opset 7 broadcast only when told (``broadcast=1``), aligning B with A
  from ``axis`` on (from the end without it); ONNX's converter appends B's missing axes
  whatever ``axis`` says (a [C] bias added at axis 1 of [N, C, H, W] became [C, 1, 1, 1]).
  :func:`explicit_broadcasts` unsqueezes B to end where A ends, as numpy's rule then reads it.
* Before opset 22 ONNX's shape inference keeps a last ``ceil_mode`` pooling window that
  starts in the end padding; onnxruntime (and ONNX from 22) drops it, and so do polyonnx's
  loops. :func:`drop_windows_in_padding` trims such end pads to where the last kept window
  ends, which changes no value (the trimmed padding is read by no kept window) and makes
  inference count what runs.
* ``Upsample`` and ``Resize`` before opset 11 map output to input coordinates asymmetrically
  (``x_in = x_out / scale``) and round nearest taps down when enlarging, up when shrinking
  (onnxruntime's reading); ONNX's converter writes the Resize-11 it makes of them without
  ``coordinate_transformation_mode``, whose default (``half_pixel``) moves every linear tap.
  :func:`keep_resize_semantics` writes the modes out on the converted nodes.

Example:
    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])
    >>> n = helper.make_node("ImageScaler", ["x"], ["y"], scale=0.5, bias=[1.0, 2.0, 3.0])
    >>> g = helper.make_graph([n], "g", [x], [x])
    >>> replace_experimental(g, 8)
    >>> for n in g.node:
    ...     print(n.op_type, list(n.input), list(n.output))
    Constant [] ['y__ImageScaler_0']
    Mul ['x', 'y__ImageScaler_0'] ['y__ImageScaler_3']
    Constant [] ['y__ImageScaler_2']
    Add ['y__ImageScaler_3', 'y__ImageScaler_2'] ['y']
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from polyonnx.errors import ModelError, UnsupportedOpError


def replace_experimental(graph: onnx.GraphProto, opset: int) -> None:
    """Each default-domain node of an experimental op ONNX dropped (in ``graph`` and its
    subgraphs) becomes the standard ops computing the same at ``opset`` (see
    :data:`_EXPERIMENTAL`)."""
    for op_type, steps in _EXPERIMENTAL.items():

        def rewrite(n: onnx.NodeProto, steps: _Steps = steps) -> list[onnx.NodeProto]:
            if len(n.input) != 1 or len(n.output) != 1:
                raise ModelError(
                    f"{n.op_type} node {n.name!r} has {len(n.input)} inputs and "
                    f"{len(n.output)} outputs; it takes one tensor and gives one"
                )
            chain = _Chain(n)
            steps(chain, n, opset)
            return chain.nodes

        _rewrite(graph, op_type, rewrite)


class _Chain:
    """The nodes computing one node's output from its input step by step: each step reads
    the previous one's output; the last writes the node's own output under its name."""

    def __init__(self, node: onnx.NodeProto) -> None:
        self.node = node
        self.nodes: list[onnx.NodeProto] = []
        self._last: onnx.NodeProto | None = None

    def _fresh(self) -> str:
        return f"{self.node.output[0]}__{self.node.op_type}_{len(self.nodes)}"

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        name = self._fresh()
        self.nodes.append(_constant(name, np.asarray(value, dtype)))
        return name

    def then(self, op_type: str, *operands: str, **attrs: Any) -> _Chain:
        value = self.node.input[0]
        if self._last is not None:  # (it wrote the node's output: it now feeds this step)
            self._last.output[0] = value = self._fresh()
            self._last.name = f"{self.node.name}_{len(self.nodes)}"
        self._last = helper.make_node(
            op_type, [value, *operands], [self.node.output[0]], self.node.name, **attrs
        )
        self.nodes.append(self._last)
        return self


_Steps = Callable[[_Chain, onnx.NodeProto, int], object]


def _crop(c: _Chain, n: onnx.NodeProto, opset: int) -> None:
    """Crop's ``border`` is [left, top, right, bottom]; ``scale`` (height, width), when
    given, fixes the size from the top-left corner instead."""
    border = list(_attr(n, "border", []))
    if len(border) != 4:
        raise ModelError(f"Crop node {n.name!r}: 'border' must hold 4 values, got {border}")
    left, top, right, bottom = border
    scale = list(_attr(n, "scale", []))
    ends = (
        [top + scale[0], left + scale[1]]
        if scale
        else [-bottom if bottom else _END, -right if right else _END]
    )
    if opset < 10:
        c.then("Slice", axes=[2, 3], starts=[top, left], ends=ends)
        return
    c.then("Slice", *(c.const(v, np.int64) for v in ([top, left], ends, [2, 3])))


_END = 2**63 - 1

#: The experimental ops (ONNX's schemas before opset 10; onnxruntime runs them) and the
#: standard steps each is made of.
_EXPERIMENTAL: dict[str, _Steps] = {
    "ImageScaler": lambda c, n, _: c.then("Mul", c.const(_attr(n, "scale", 1.0))).then(
        "Add", c.const(np.reshape(_attr(n, "bias", []), (-1, 1, 1)))
    ),
    "Scale": lambda c, n, _: c.then("Mul", c.const(_attr(n, "scale", 1.0))),
    "Affine": lambda c, n, _: c.then("Mul", c.const(_attr(n, "alpha", 1.0))).then(
        "Add", c.const(_attr(n, "beta", 0.0))
    ),
    "ScaledTanh": lambda c, n, _: (
        c.then("Mul", c.const(_attr(n, "beta", 1.0)))
        .then("Tanh")
        .then("Mul", c.const(_attr(n, "alpha", 1.0)))
    ),
    "ParametricSoftplus": lambda c, n, _: (
        c.then("Mul", c.const(_attr(n, "beta", 1.0)))
        .then("Softplus")
        .then("Mul", c.const(_attr(n, "alpha", 1.0)))
    ),
    "Crop": _crop,
}


def flatten_hardmax(graph: onnx.GraphProto) -> None:
    """Hardmax before opset 13 works on its input coerced to 2-D at ``axis`` (default 1), and
    ONNX's version converter upgrades it without changing it (so a later opset would take the
    maximum along ``axis`` alone): each becomes ``Reshape(Hardmax(Flatten(x, axis), axis=1),
    Shape(x))``, which means the same at every opset."""

    def rewrite(n: onnx.NodeProto) -> list[onnx.NodeProto]:
        x, y, tag = n.input[0], n.output[0], f"{n.output[0]}__hardmax"
        return [
            helper.make_node("Flatten", [x], [f"{tag}_2d"], axis=_attr(n, "axis", 1)),
            helper.make_node("Hardmax", [f"{tag}_2d"], [f"{tag}_max"], n.name, axis=1),
            helper.make_node("Shape", [x], [f"{tag}_shape"]),
            helper.make_node("Reshape", [f"{tag}_max", f"{tag}_shape"], [y]),
        ]

    _rewrite(graph, "Hardmax", rewrite)


def _rewrite(
    graph: onnx.GraphProto,
    op_type: str,
    rewrite: Callable[[onnx.NodeProto], list[onnx.NodeProto]],
) -> None:
    """Each default-domain ``op_type`` node of ``graph`` and its subgraphs replaced by the
    nodes ``rewrite`` makes of it."""
    nodes: list[onnx.NodeProto] = []
    for n in graph.node:
        for body in subgraphs(n):
            _rewrite(body, op_type, rewrite)
        same = n.op_type == op_type and n.domain in ("", "ai.onnx")
        nodes += rewrite(n) if same else [n]
    del graph.node[:]
    graph.node.extend(nodes)


#: The ops that took ``broadcast`` and ``axis`` attributes before opset 7.
_LEGACY_BROADCAST = frozenset(
    {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"}
)


def explicit_broadcasts(model: onnx.ModelProto) -> None:
    """Each node of ``model``'s main graph (opset < 7) of a binary op with ``broadcast=1``
    loses its ``broadcast`` and ``axis`` attributes, B unsqueezed (Unsqueeze-1) by the axes
    of A after B's last when ``axis`` puts it short of A's end."""
    graph = model.graph
    if not any(_attr(n, "broadcast", 0) for n in graph.node if n.op_type in _LEGACY_BROADCAST):
        return
    ranks = _ranks(model)
    nodes: list[onnx.NodeProto] = []
    for n in graph.node:
        if n.op_type not in _LEGACY_BROADCAST or not _attr(n, "broadcast", 0) or n.domain:
            nodes.append(n)
            continue
        axis = _attr(n, "axis", None)
        for a in [a for a in n.attribute if a.name in ("broadcast", "axis")]:
            n.attribute.remove(a)
        if axis is not None and len(n.input) == 2:
            rank_a, rank_b = ranks.get(n.input[0]), ranks.get(n.input[1])
            if rank_a is None or rank_b is None:
                raise UnsupportedOpError(
                    n.op_type,
                    None,
                    n.name,
                    f"broadcast from axis {axis} with inputs of unknown rank (ONNX's shape "
                    "inference could not type them)",
                )
            missing = rank_a - (axis % rank_a if rank_a else 0) - rank_b
            if missing > 0:
                b = f"{n.input[1]}__broadcast_{n.output[0]}"
                axes = list(range(rank_b, rank_b + missing))
                nodes.append(helper.make_node("Unsqueeze", [n.input[1]], [b], axes=axes))
                n.input[1] = b
        nodes.append(n)
    del graph.node[:]
    graph.node.extend(nodes)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of every value ONNX's shape inference types, at the model's own opset and
    at opset 6 (BatchNormalization-1 and others before it have no inference function; the
    converter keeps value names)."""
    models = [model]
    with contextlib.suppress(Exception):  # (the converter raises assorted C++ errors)
        models.append(version_converter.convert_version(model, 6))
    ranks: dict[str, int] = {}
    for m in reversed(models):
        graph = onnx.shape_inference.infer_shapes(m).graph
        ranks.update((t.name, len(t.dims)) for t in graph.initializer)
        for vi in (*graph.input, *graph.value_info, *graph.output):
            t = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and t.HasField("shape"):
                ranks[vi.name] = len(t.shape.dim)
    return ranks


def _attr(n: onnx.NodeProto, name: str, default: Any) -> Any:
    return next((helper.get_attribute_value(a) for a in n.attribute if a.name == name), default)


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name, value=numpy_helper.from_array(np.asarray(value), name)
    )


_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})


def drop_windows_in_padding(model: onnx.ModelProto) -> None:
    """Each ``ceil_mode`` pool of ``model``'s main graph whose last window would start in the
    end padding gets that end pad trimmed (see the module docstring), and the graph's
    ``value_info`` is cleared."""
    graph = model.graph
    pools = [
        n
        for n in graph.node
        if n.op_type in _POOLS
        and not n.domain
        and _attr(n, "ceil_mode", 0)
        and _attr(n, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
    ]
    if not pools:
        return
    shapes = _shapes(model)
    for n in pools:
        kernel = list(_attr(n, "kernel_shape", []))
        rank = len(kernel)
        spatial = shapes.get(n.input[0], [])[2:]
        if len(spatial) != rank or None in spatial:
            continue
        strides = list(_attr(n, "strides", [1] * rank))
        dilations = list(_attr(n, "dilations", [1] * rank))
        pads = list(_attr(n, "pads", [0] * 2 * rank))
        if (len(strides), len(dilations), len(pads)) != (rank, rank, 2 * rank) or (
            min(strides + dilations, default=1) < 1
        ):
            continue  # (invalid: refused by name when the graph is validated)
        trimmed = list(pads)
        for k, size in enumerate(int(d) for d in spatial if d is not None):
            span = (kernel[k] - 1) * dilations[k] + 1
            begin, end, stride = pads[k], pads[rank + k], strides[k]
            out = -(-(size + begin + end - span) // stride) + 1
            if out > 1 and (out - 1) * stride >= size + begin:  # the last window starts late
                trimmed[rank + k] = max(min(end, (out - 2) * stride + span - size - begin), 0)
        if trimmed != pads:
            _set(n, "pads", trimmed)
            # (What inference wrote before, the converter's or the exporter's, counted the
            # dropped window, here and downstream.)
            del graph.value_info[:]


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The shapes ONNX's shape inference gives values (None: a dimension it leaves open)."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    shapes: dict[str, list[int | None]] = {}
    for vi in (*graph.input, *graph.value_info):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape"):
            shapes[vi.name] = [
                d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim
            ]
    return shapes


def resize_outputs(graph: onnx.GraphProto, opset: int) -> frozenset[str]:
    """The outputs of the Upsample and Resize nodes of ``graph`` when ``opset`` is before 11
    (their output names survive the version converter)."""
    if opset >= 11:
        return frozenset()
    return frozenset(
        n.output[0]
        for n in _all_nodes(graph)
        if n.op_type in ("Upsample", "Resize") and n.domain in ("", "ai.onnx") and n.output
    )


def keep_resize_semantics(graph: onnx.GraphProto, outputs: frozenset[str]) -> None:
    """The converted Resize nodes producing ``outputs`` get the coordinate and nearest modes
    their opset-10 originals meant (see the module docstring)."""
    if not outputs:
        return
    known = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for n in _all_nodes(graph):
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            known[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    for n in _all_nodes(graph):
        if n.op_type != "Resize" or not n.output or n.output[0] not in outputs:
            continue
        scales = known.get(n.input[2]) if len(n.input) > 2 else None
        _set(n, "coordinate_transformation_mode", "asymmetric")
        _set(n, "nearest_mode", _nearest_mode(n, scales))


def _nearest_mode(n: onnx.NodeProto, scales: np.ndarray | None) -> str:
    """Rounding down for enlarged axes, up for shrunk ones: one mode must serve all axes, so
    scales known to do both are refused, and unknown ones are taken to enlarge (Upsample's
    scales must be >= 1)."""
    if scales is None:
        return "floor"
    shrinks, grows = bool(np.any(scales < 1)), bool(np.any(scales > 1))
    mode = next((a.s.decode() for a in n.attribute if a.name == "mode"), "nearest")
    if shrinks and grows and mode == "nearest":
        raise UnsupportedOpError(
            "Resize",
            10,
            n.name,
            f"nearest resize by scales {scales.tolist()} shrinks some axes and enlarges others "
            "(before opset 11 those round their taps in opposite directions)",
        )
    return "ceil" if shrinks else "floor"


def _set(n: onnx.NodeProto, name: str, value: Any) -> None:
    for a in list(n.attribute):
        if a.name == name:
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(name, value))


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for n in graph.node:
        yield n
        for body in subgraphs(n):
            yield from _all_nodes(body)


def subgraphs(n: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs among ``n``'s attributes (If, Loop and Scan bodies)."""
    for a in n.attribute:
        if a.HasField("g"):
            yield a.g
        yield from a.graphs
