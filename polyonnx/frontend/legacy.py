"""Node forms of old opsets that ONNX no longer defines, or that its version converter
upgrades unfaithfully, rewritten so that later stages see standard ops that mean the same.

* ``ImageScaler`` (an experimental op ONNX dropped; tiny-YOLOv2 and other zoo models of
  opsets 7-9 start with it): ``y = scale * x + bias[c]`` becomes ``Mul`` then ``Add`` of
  Constant nodes, which every opset defines and onnxruntime runs alike.
* ``Hardmax`` before opset 13 works on its input coerced to 2-D, which the converter forgets
  (:func:`flatten_hardmax`).
* Binary ops before opset 7 broadcast only when told (``broadcast=1``), aligning B with A
  from ``axis`` on (from the end without it); ONNX's converter appends B's missing axes
  whatever ``axis`` says (a [C] bias added at axis 1 of [N, C, H, W] became [C, 1, 1, 1]).
  :func:`explicit_broadcasts` unsqueezes B to end where A ends, as numpy's rule then reads it.
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
    >>> replace_experimental(g)
    >>> [n.op_type for n in g.node]
    ['Constant', 'Mul', 'Constant', 'Add']
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

from polyonnx.errors import ModelError, UnsupportedOpError


def replace_experimental(graph: onnx.GraphProto) -> None:
    """Each default-domain ``ImageScaler`` node of ``graph`` (and of its subgraphs) becomes
    ``Add(Mul(x, scale), bias)`` with ``bias`` shaped ``[C, 1, 1]``."""

    def rewrite(n: onnx.NodeProto) -> list[onnx.NodeProto]:
        if len(n.input) != 1 or len(n.output) != 1:
            raise ModelError(
                f"ImageScaler node {n.name!r} has {len(n.input)} inputs and {len(n.output)} "
                "outputs; it takes one image and gives one"
            )
        x, y, tag = n.input[0], n.output[0], f"{n.output[0]}__image_scaler"
        scale = np.float32(_attr(n, "scale", 1.0))
        bias = np.asarray(_attr(n, "bias", []), np.float32)
        return [
            _constant(f"{tag}_scale", scale),
            helper.make_node("Mul", [x, f"{tag}_scale"], [f"{tag}_scaled"], f"{n.name}_scale"),
            _constant(f"{tag}_bias", bias.reshape(-1, 1, 1)),
            helper.make_node("Add", [f"{tag}_scaled", f"{tag}_bias"], [y], n.name),
        ]

    _rewrite(graph, "ImageScaler", rewrite)


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


def _constant(name: str, value: np.ndarray | np.floating) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name, value=numpy_helper.from_array(np.asarray(value), name)
    )


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


def _set(n: onnx.NodeProto, name: str, value: str) -> None:
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
