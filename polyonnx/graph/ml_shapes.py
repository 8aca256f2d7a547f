"""Output types of the ONNX-ML ops ONNX's inference types without a shape (Normalizer,
Scaler, Imputer, Binarizer, FeatureVectorizer, the linear and SVM regressors, and the scores of
the linear and SVM classifiers).

Example:
    >>> from polyonnx.graph.ir import Node, Value
    >>> n = Node("n", "Scaler", ("x",), ("y",), {"scale": (2.0,)}, ML_DOMAIN)
    >>> ml_outputs(n, [Value("x", "int64", (4, 3))])
    (Value(name='y', dtype='float32', shape=(4, 3)),)
"""

from __future__ import annotations

from collections.abc import Sequence

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import ML_DOMAIN, Node, Value
from polyonnx.graph.strings import UNSIZED

#: Ops whose output has the input's shape: the output's dtype, None for the input's.
SAME_SHAPE: dict[str, str | None] = {
    "Normalizer": "float32",
    "Scaler": "float32",
    "Imputer": None,
    "Binarizer": None,
}


def ml_outputs(node: Node, inputs: Sequence[Value]) -> tuple[Value, ...]:
    """The output types of ONNX-ML ``node`` from its (static) input types; ShapeError for an
    op without a rule here."""
    first = inputs[0]
    if node.op_type in SAME_SHAPE:
        return (Value(node.outputs[0], SAME_SHAPE[node.op_type] or first.dtype, first.shape),)
    if node.op_type == "FeatureVectorizer" and first.shape:
        width = sum(int(d) for d in node.attr("inputdimensions", ()))
        return (Value(node.outputs[0], "float32", (first.shape[0], width)),)
    if node.op_type in ("LinearRegressor", "SVMRegressor") and len(first.shape) == 2:
        width = int(node.attr("targets", 1)) if node.op_type == "LinearRegressor" else 1
        return (Value(node.outputs[0], "float32", (first.shape[0], width)),)
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
