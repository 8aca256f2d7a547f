"""Fallback shape rules for values that ONNX shape inference leaves untyped.

ONNX inference covers almost every standard op; these rules cover the shape-preserving and
broadcasting families so that an op without an ONNX inference function (or with a partial one)
still gets a static type. Anything else raises :class:`ShapeError` naming the node.

Example:
    >>> n = Node("add0", "Add", ("a", "b"), ("c",))
    >>> vals = {"a": Value("a", "float32", (2, 3)), "b": Value("b", "float32", (3,))}
    >>> infer_outputs(n, vals)
    (Value(name='c', dtype='float32', shape=(2, 3)),)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node, Value

#: Ops whose single output has the type and shape of their first input.
SAME_AS_INPUT = frozenset(
    {
        "Abs",
        "Acos",
        "Acosh",
        "Asin",
        "Asinh",
        "Atan",
        "Atanh",
        "Ceil",
        "Celu",
        "Clip",
        "Cos",
        "Cosh",
        "Dropout",
        "Elu",
        "Erf",
        "Exp",
        "Floor",
        "Gelu",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "LeakyRelu",
        "Log",
        "LogSoftmax",
        "LRN",
        "Mish",
        "Neg",
        "Reciprocal",
        "Relu",
        "Round",
        "Selu",
        "Shrink",
        "Sigmoid",
        "Sign",
        "Sin",
        "Sinh",
        "Softmax",
        "Softplus",
        "Softsign",
        "Sqrt",
        "Tan",
        "Tanh",
        "ThresholdedRelu",
        # Normalisations (some are functions whose ONNX inference can leave Y untyped).
        "GroupNormalization",
        "InstanceNormalization",
        "LpNormalization",
        "MeanVarianceNormalization",
        "RMSNormalization",
    }
)

#: Ops whose output is the multidirectional broadcast of all inputs, typed like the first input.
BROADCAST = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Max",
        "Min",
        "Mean",
        "Sum",
        "PRelu",
        "Mod",
    }
)

#: Broadcasting ops whose output is bool.
COMPARISON = frozenset(
    {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor"}
)

#: The Reduce ops: one tensor reduced over axes (an attribute, or the second input from opset
#: 18; 13 for ReduceSum), with keepdims. Validation, lowering and the backend name them here.
REDUCTIONS = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)


def infer_outputs(node: Node, values: Mapping[str, Value]) -> tuple[Value, ...]:
    """Static types of ``node``'s outputs from its input types, or ShapeError naming the node."""
    named = [values.get(i) for i in node.inputs if i]
    ins = [v for v in named if v is not None and v.is_static]
    if len(ins) != len(named) or not ins:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): cannot infer the shape of "
            f"{', '.join(node.outputs)} because an input shape is unknown"
        )
    first = ins[0]
    if node.op_type in SAME_AS_INPUT:
        dtype, shape = first.dtype, first.shape
    elif node.op_type in BROADCAST or node.op_type in COMPARISON:
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(*(v.dims for v in ins)))
        except ValueError:
            raise ShapeError(
                f"node {node.name!r} ({node.op_type}): input shapes "
                f"{[v.shape for v in ins]} do not broadcast"
            ) from None
        dtype = "bool" if node.op_type in COMPARISON else first.dtype
    else:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): ONNX shape inference gave no "
            f"static shape for {', '.join(o for o in node.outputs if o)} and "
            "polyonnx has no shape rule for this op"
        )
    out = [Value(node.outputs[0], dtype, shape)]
    if node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        out.append(Value(node.outputs[1], "bool", shape))
    return tuple(out)
