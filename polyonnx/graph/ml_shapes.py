"""Output types of the ONNX-ML ops ONNX's inference types without a shape (Normalizer,
Scaler, Imputer, Binarizer, FeatureVectorizer).

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
    raise ShapeError(
        f"node {node.name!r} ({node.op_type}): ONNX shape inference gave no static shape for "
        f"{', '.join(o for o in node.outputs if o)} and polyonnx has no shape rule for "
        f"{ML_DOMAIN}.{node.op_type}"
    )
