"""ZipMap (ONNX-ML): a classifier's scores as a list of ``{label: score}`` dicts, one per row.

scikit-learn's exporter ends every classifier with one. It computes nothing: the compiled model
returns the scores tensor and :class:`~polyonnx.runtime.session.InferenceSession` presents it
as onnxruntime does. So a ZipMap is taken out of the model before it is compiled (an Identity
of its ``[N, C]`` input under its output's name), which is only possible where its output is a
graph output that no other node reads; anywhere else it is refused. A shared library has no
Python layer: compiling one from a model with a ZipMap is refused the same way, with the
exporter's option that leaves it out.

Example:
    >>> from onnx import TensorProto, helper
    >>> zipmap = helper.make_node("ZipMap", ["p"], ["probs"], domain="ai.onnx.ml",
    ...                           classlabels_int64s=[0, 1])
    >>> probs = helper.make_value_info("probs", helper.make_sequence_type_proto(
    ...     helper.make_map_type_proto(TensorProto.INT64,
    ...                                helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    >>> p = helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 2])
    >>> model = helper.make_model(helper.make_graph([zipmap], "g", [p], [probs]))
    >>> model, zipped = without_zipmaps(model)
    >>> [n.op_type for n in model.graph.node], zipped["probs"].labels
    (['Identity'], (0, 1))
    >>> zipped["probs"].present(np.array([[0.25, 0.75], [1.0, 0.0]], np.float32))
    [{0: 0.25, 1: 0.75}, {0: 1.0, 1: 0.0}]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.graph.ir import ML_DOMAIN
from polyonnx.graph.ml_shapes import ZIPMAP_EXPORT_HINT


@dataclass(frozen=True)
class Zipped:
    """A graph output made by a ZipMap: its labels, and its ONNX type as onnxruntime names it."""

    labels: tuple[int | str, ...]

    @property
    def type(self) -> str:
        key = "int64" if self.labels and isinstance(self.labels[0], int) else "string"
        return f"seq(map({key},tensor(float)))"

    def present(self, scores: np.ndarray) -> list[dict[int | str, float]]:
        """One ``{label: score}`` dict per row of ``scores`` (a ``[C]`` input is one row)."""
        rows = scores.reshape(1, -1) if scores.ndim == 1 else scores
        if rows.ndim != 2 or rows.shape[1] != len(self.labels):
            raise ModelError(
                f"ZipMap has {len(self.labels)} labels for scores of shape {list(scores.shape)}"
            )
        return [dict(zip(self.labels, row.tolist(), strict=True)) for row in rows]


def is_zipmap(node: onnx.NodeProto) -> bool:
    return node.op_type == "ZipMap" and node.domain == ML_DOMAIN


def without_zipmaps(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Zipped]]:
    """``model`` with each ZipMap replaced by an Identity (a copy when there is any), and the
    labels of each graph output a ZipMap made; UnsupportedOpError for a ZipMap elsewhere."""
    graph = model.graph
    found = [n for n in graph.node if is_zipmap(n)]
    if not found:
        return model, {}
    outputs = {o.name for o in graph.output}
    read = {i for n in graph.node for i in n.input}
    zipped: dict[str, Zipped] = {}
    for node in found:
        out = node.output[0]
        if out not in outputs or out in read:
            raise UnsupportedOpError(
                "ai.onnx.ml.ZipMap",
                node=node.name,
                detail=f"its sequence of maps {out!r} is read by other nodes; polyonnx returns "
                "a ZipMap's dicts only as a graph output (or export without it, "
                f"{ZIPMAP_EXPORT_HINT})",
            )
        zipped[out] = Zipped(_labels(node))
    model = _copy(model)
    for node in model.graph.node:
        if is_zipmap(node):
            node.op_type, node.domain = "Identity", ""
            del node.attribute[:]
    for vi in model.graph.output:
        if vi.name in zipped:
            vi.type.CopyFrom(onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None))
    return model, zipped


def _labels(node: onnx.NodeProto) -> tuple[int | str, ...]:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    ints, strings = attrs.get("classlabels_int64s"), attrs.get("classlabels_strings")
    if bool(ints) == bool(strings):
        raise ModelError(
            f"ZipMap node {node.name!r} must have exactly one of classlabels_int64s and "
            "classlabels_strings"
        )
    if ints:
        return tuple(int(i) for i in ints)
    return tuple(s.decode("utf-8") for s in strings or ())


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out
