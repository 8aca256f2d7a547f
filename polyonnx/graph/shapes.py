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

from collections.abc import Collection, Mapping

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import ML_DOMAIN, Node, Value
from polyonnx.graph.ml_shapes import ml_outputs

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
        "BatchNormalization",
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


#: Inputs whose values (not only shapes) decide an op's output shape, by position. When one
#: of them is known only at run time (a graph input: the shape fed to Reshape, Expand, Tile,
#: ConstantOfShape...), no static shape exists and the op is refused by that input's name.
SHAPE_FROM_VALUES: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Resize": (2, 3),
    "Upsample": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "OneHot": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "CenterCropPad": (1,),
    "Col2Im": (1, 2),
    "DFT": (1, 2),
    "STFT": (1, 3),
    "MaxUnpool": (2,),
    "MelWeightMatrix": (0, 1),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    **{op: (1,) for op in REDUCTIONS},
}


def run_time_shape_input(node: Node, known: Collection[str]) -> str | None:
    """The first input of ``node`` whose value decides its output shape but is not among the
    values ``known`` at compile time (see :data:`SHAPE_FROM_VALUES`), else None."""
    positions = () if node.domain else SHAPE_FROM_VALUES.get(node.op_type, ())
    return next((node.inputs[k] for k in positions if node.input(k) not in ("", *known)), None)


def infer_outputs(node: Node, values: Mapping[str, Value]) -> tuple[Value, ...]:
    """Static types of ``node``'s outputs from its input types, or ShapeError naming the node."""
    named = [values.get(i) for i in node.inputs if i]
    ins = [v for v in named if v is not None and v.is_static]
    if len(ins) != len(named) or not ins:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): cannot infer the shape of "
            f"{', '.join(node.outputs)} because an input shape is unknown"
        )
    if node.domain == ML_DOMAIN:
        return ml_outputs(node, ins)
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
    if node.op_type == "BatchNormalization":  # (training statistics: ONNX before 14 types none)
        out += [Value(o, dtype, ins[1].shape) for o in node.outputs[1:] if o and len(ins) > 1]
    return tuple(out)
