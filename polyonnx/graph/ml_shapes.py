"""Output types of the ONNX-ML ops ONNX's inference types without a shape (Normalizer,
Scaler, Imputer, Binarizer, FeatureVectorizer, ArrayFeatureExtractor, and the trees,
regressors and linear and SVM classifiers of ML opsets 1 and 2, which scikit-learn's exporter
still writes).

Example:
    >>> from polyonnx.graph.ir import Node, Value
    >>> n = Node("n", "Scaler", ("x",), ("y",), {"scale": (2.0,)}, ML_DOMAIN)
    >>> ml_outputs(n, [Value("x", "int64", (4, 3))])
    (Value(name='y', dtype='float32', shape=(4, 3)),)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ShapeError, UnsupportedOpError
from polyonnx.graph.ir import ML_DOMAIN, Node, Value
from polyonnx.graph.strings import UNSIZED, is_string

#: Ops whose output has the input's shape: the output's dtype, None for the input's.
SAME_SHAPE: dict[str, str | None] = {
    "Normalizer": "float32",
    "Scaler": "float32",
    "Imputer": None,
    "Binarizer": None,
}


#: How to export a classifier without its ZipMap.
ZIPMAP_EXPORT_HINT = "skl2onnx: to_onnx(model, ..., options={'zipmap': False})"
#: Regressors: the attribute (and its default) that counts their output columns.
TARGETS: dict[str, tuple[str, int]] = {
    "TreeEnsembleRegressor": ("n_targets", 1),
    "TreeEnsemble": ("n_targets", 0),
    "LinearRegressor": ("targets", 1),
    "SVMRegressor": ("", 1),  # (no such attribute: one column)
}


def ml_outputs(node: Node, inputs: Sequence[Value]) -> tuple[Value, ...]:
    """The output types of ONNX-ML ``node`` from its (static) input types; ShapeError for an
    op without a rule here."""
    first = inputs[0]
    if node.op_type == "ZipMap":  # (InferenceSession takes it out: polyonnx.frontend.zipmap)
        raise UnsupportedOpError(
            f"{ML_DOMAIN}.ZipMap",
            node=node.name,
            detail="a sequence of maps is returned by InferenceSession only (a list of dicts, "
            "as onnxruntime returns it); to compile a library, export the model without "
            f"ZipMap ({ZIPMAP_EXPORT_HINT})",
        )
    if node.op_type == "CategoryMapper":  # (strings to int64, or int64 to strings)
        dtype = "int64" if is_string(first.dtype) else UNSIZED
        return (Value(node.outputs[0], dtype, first.shape),)
    if node.op_type in SAME_SHAPE:
        return (Value(node.outputs[0], SAME_SHAPE[node.op_type] or first.dtype, first.shape),)
    rows = first.shape[0] if len(first.shape) == 2 else None
    if node.op_type == "FeatureVectorizer" and first.shape:
        width = sum(int(d) for d in node.attr("inputdimensions", ()))
        return (Value(node.outputs[0], "float32", (first.shape[0], width)),)
    if node.op_type == "ArrayFeatureExtractor" and len(inputs) == 2 and first.shape:
        # (a 1-D X gives one row, as onnxruntime reads it)
        picked = int(np.prod(inputs[1].dims, dtype=np.int64))
        lead = first.shape[:-1] if len(first.shape) > 1 else (1,)
        return (Value(node.outputs[0], first.dtype, (*lead, picked)),)
    if rows is not None and node.op_type in TARGETS:
        targets = int(node.attr(*TARGETS[node.op_type]))
        dtype = first.dtype if node.op_type == "TreeEnsemble" else "float32"
        return (Value(node.outputs[0], dtype, (rows, targets)),)
    if rows is not None and node.op_type == "TreeEnsembleClassifier":
        ints = node.attr("classlabels_int64s")
        labels = ints if ints is not None and len(ints) else node.attr("classlabels_strings", ())
        label = "int64" if ints is not None and len(ints) else UNSIZED  # (sized by strings.py)
        return (
            Value(node.outputs[0], label, (rows,)),
            Value(node.outputs[1], "float32", (rows, len(labels))),
        )[: len(node.outputs)]
    if node.op_type in ("LinearClassifier", "SVMClassifier") and len(first.shape) == 2:
        return _classifier_outputs(node, first)
    raise ShapeError(
        f"node {node.name!r} ({node.op_type}): ONNX shape inference gave no static shape for "
        f"{', '.join(o for o in node.outputs if o)} and polyonnx has no shape rule for "
        f"{ML_DOMAIN}.{node.op_type}"
    )


def _classifier_outputs(node: Node, first: Value) -> tuple[Value, ...]:
    """Labels ``[N]`` and scores ``[N, width]`` of a LinearClassifier or SVMClassifier (the
    width as onnxruntime writes it; the lowering checks the attributes)."""
    rows, cols = first.shape
    ints, strings = node.attr("classlabels_ints"), node.attr("classlabels_strings")
    labels = len(ints) if ints is not None and len(ints) else len(strings or ())
    coefficients = len(node.attr("coefficients", ()) or ())
    if node.op_type == "LinearClassifier":
        classes = coefficients // max(int(cols), 1)
        width = 2 if classes == 1 and labels == 2 else classes
    else:
        svc = sum(int(v) for v in node.attr("vectors_per_class", ()) or ()) > 0
        with_prob = len(node.attr("prob_a", ()) or ()) > 0
        width = labels
        if svc and not with_prob:
            width = labels * (labels - 1) // 2 if labels > 2 else 2
    label_dtype = "int64" if ints is not None and len(ints) else UNSIZED
    outs = [Value(node.outputs[0], label_dtype, (rows,))]
    if len(node.outputs) > 1 and node.outputs[1]:
        outs.append(Value(node.outputs[1], "float32", (rows, width)))
    return tuple(outs)
