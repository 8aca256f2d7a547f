"""Graph-level validation before anything is folded, lowered or allocated.

A model downloaded from anywhere may carry attributes that ONNX's checker lets through (zero
strides, negative pads, an axis out of range, a kernel larger than its padded input) or shapes
whose tensors would not fit in memory. :func:`validate` refuses them with a
:class:`~polyonnx.errors.ModelError` (or :class:`~polyonnx.errors.ShapeError`) naming the node, its
op and the attribute, so no later stage ever sees them. Lowerings keep their own checks; this pass
exists so that the checks run before constant folding and memory planning, and for every node.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", "float32", (1, 1, 4, 4)), Value("y", "float32", (1, 1, 4, 4))
    >>> n = Node("pool", "MaxPool", ("x",), ("y",), {"kernel_shape": (1, 1), "strides": (0, 1)})
    >>> try:
    ...     validate(Graph("g", (x,), (y,), (n,), {"x": x, "y": y}))
    ... except ModelError as e:
    ...     print(e)
    node 'pool' (MaxPool): attribute 'strides' must be positive, got [0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import ENCODED_DTYPES, Graph, Node, Value
from polyonnx.graph.shapes import BROADCAST, COMPARISON, REDUCTIONS, SAME_AS_INPUT
from polyonnx.graph.strings import UNSIZED, element_type, string_width

#: Element types native code handles (the krnl dtypes).
SUPPORTED_DTYPES = frozenset(
    {
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        *ENCODED_DTYPES,
    }
)
#: The ops that may touch a value of an encoded type: conversions, which compute on its code,
#: and ops whose loops only move values (their codes copied as they are).
ENCODED_OPS = frozenset(
    {
        "Cast",
        "CastLike",
        "BitCast",
        "QuantizeLinear",
        "DequantizeLinear",
        "Identity",
        "Compress",
        "OneHot",
        "ReverseSequence",
    }
)

#: The default of :attr:`polyonnx.options.Options.max_tensor_bytes`.
DEFAULT_MAX_TENSOR_BYTES = 4 << 30

_AUTO_PADS = frozenset({"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})


def validate(graph: Graph, max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES) -> Graph:
    """Return ``graph`` unchanged, or raise naming the first bad value, node or attribute.

    Checks every value has non-negative dimensions, a supported dtype and at most
    ``max_tensor_bytes`` bytes, and every node's attributes (see :func:`validate_node`).
    """
    for v in graph.inputs:
        _check_value(v, "graph input", max_tensor_bytes)
    for name in graph.constants:
        _check_value(graph.value(name), "constant", max_tensor_bytes)
    for n in graph.nodes:
        validate_node(n, graph.values)
        _check_encoded(n, graph.values)
        for o in n.outputs:
            if o and o in graph.values:
                _check_value(
                    graph.values[o], f"output of node {n.name!r} ({n.op_type})", max_tensor_bytes
                )
    return graph


def _check_encoded(node: Node, values: Mapping[str, Value]) -> None:
    """Refuse an op other than a conversion on a value of an encoded type (float8, int4...):
    its loops would compute on the bit patterns. bfloat16 is computed by every ONNX op, in
    float32 (:mod:`polyonnx.graph.passes.bfloat16`)."""
    if node.op_type in ENCODED_OPS and not node.domain:
        return
    for name in (*node.inputs, *node.outputs):
        v = values.get(name) if name else None
        if v is not None and v.dtype == "bfloat16" and not node.domain:
            continue
        if v is not None and v.dtype in ENCODED_DTYPES:
            raise UnsupportedOpError(
                node.op_type,
                node=node.name,
                detail=f"value {name!r} has element type {v.dtype}, which polyonnx converts "
                f"(Cast, CastLike) but does not compute with",
            )


def _check_value(v: Value, what: str, limit: int) -> None:
    if any(isinstance(d, int) and d < 0 for d in v.shape):
        raise ShapeError(
            f"value {v.name!r} ({what}) has a negative dimension: shape {list(v.shape)}"
        )
    if v.dtype not in SUPPORTED_DTYPES and string_width(v.dtype) is None:
        elem = "unsized string" if v.dtype == UNSIZED else v.dtype
        raise UnsupportedOpError(
            "value",
            detail=f"{v.name!r} ({what}) has element type "
            f"{elem}; polyonnx handles numeric, bool and (sized) string tensors",
        )
    if v.is_static:
        # (One dim this large is absurd even when another is 0 and the tensor holds nothing.)
        if any(d > limit for d in v.dims):
            raise ModelError(
                f"value {v.name!r} ({what}) has shape {list(v.shape)}, a dimension "
                f"larger than the limit of {limit} bytes (Options.max_tensor_bytes)"
            )
        nbytes = int(np.prod(v.dims, dtype=object)) * np.dtype(v.dtype).itemsize
        if nbytes > limit:
            raise ModelError(
                f"value {v.name!r} ({what}) of shape {list(v.shape)} would take "
                f"{nbytes} bytes, more than the limit of {limit} "
                "(Options.max_tensor_bytes)"
            )


def validate_node(node: Node, values: Mapping[str, Value]) -> None:
    """Raise :class:`ModelError` if an attribute of ``node`` is invalid for its input shapes.

    Covers sliding windows (Conv, ConvTranspose, pools: kernel, strides, dilations, pads,
    auto_pad, group, kernel versus padded input), axis attributes, Transpose's ``perm``,
    LRN's ``size``, the inner dimensions of Gemm and MatMul, and the per-channel inputs of
    BatchNormalization and InstanceNormalization. Inputs whose shapes are not known yet are skipped.
    """
    if node.domain:
        return
    _same_types(node, values)
    if node.op_type == "Reshape":
        _same_size(node, values)
    check = _CHECKS.get(node.op_type)
    if check is not None:
        check(node, [_shape(values, i) for i in node.inputs])


_ALL = (slice(None),)

#: Ops whose inputs (in each slice) share one element type: ONNX's type constraint T.
_SAME_TYPE: dict[str, tuple[slice, ...]] = {
    **dict.fromkeys(
        (
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Max",
            "Min",
            "Sum",
            "Mean",
            "Concat",
            "Equal",
            "Less",
            "LessOrEqual",
            "Greater",
            "GreaterOrEqual",
            "And",
            "Or",
            "Xor",
            "BitShift",
            "PRelu",
            "Clip",
            "Mod",
        ),
        _ALL,
    ),
    **dict.fromkeys(("Conv", "ConvTranspose", "Gemm"), (slice(0, 3),)),
    "MatMul": (slice(0, 2),),
    "Where": (slice(1, 3),),
    # Since opset 15, scale/bias and mean/var may each differ from X.
    "BatchNormalization": (slice(1, 3), slice(3, 5)),
}


#: Ops whose first output has the element type of their first input.
_TYPE_PRESERVING = (
    SAME_AS_INPUT
    | BROADCAST
    | frozenset(
        {
            "MatMul",
            "Gemm",
            "Conv",
            "ConvTranspose",
            "MaxPool",
            "AveragePool",
            "GlobalMaxPool",
            "GlobalAveragePool",
            "BatchNormalization",
            "Transpose",
            "Concat",
            "Pad",
            "Flatten",
            "Reshape",
            "Squeeze",
            "Unsqueeze",
            "Expand",
            "Tile",
            "Slice",
            "Gather",
            "GatherElements",
        }
    )
)


def _same_types(node: Node, values: Mapping[str, Value]) -> None:
    if node.op_type in _TYPE_PRESERVING and node.inputs and node.outputs:
        x, y = values.get(node.inputs[0]), values.get(node.outputs[0])
        if x is not None and y is not None and x.dtype != y.dtype:
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): output {y.name!r} is "
                f"declared {y.dtype} but the op computes {x.dtype}"
            )
    if node.op_type in BROADCAST | COMPARISON:
        shapes = [values[i].dims for i in node.inputs if i and i in values]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ShapeError(
                f"node {node.name!r} ({node.op_type}): input shapes "
                f"{[list(sh) for sh in shapes]} do not broadcast"
            ) from None
    for part in _SAME_TYPE.get(node.op_type, ()):
        names = [i for i in node.inputs[part] if i and i in values]
        if len({element_type(values[i].dtype) for i in names}) > 1:
            which = ", ".join(f"{i!r} ({values[i].dtype})" for i in names)
            raise ModelError(
                f"node {node.name!r} ({node.op_type}): inputs {which} must have "
                "the same element type"
            )


def _same_size(node: Node, values: Mapping[str, Value]) -> None:
    """A Reshape's output holds as many elements as its input (ONNX's shape inference takes
    the target shape as it is given: a target fixed at export time, such as a sequence
    length, would otherwise read past the input or leave the output half written)."""
    x, y = _shape(values, node.inputs[0]), _shape(values, node.outputs[0])
    if x is None or y is None:
        return
    have, want = int(np.prod(x)), int(np.prod(y))
    if have != want:
        raise ShapeError(
            f"node {node.name!r} (Reshape): input {node.inputs[0]!r} of shape {list(x)} "
            f"({have} elements) cannot be reshaped to {list(y)} ({want} elements)"
        )


def _shape(values: Mapping[str, Value], name: str) -> tuple[int, ...] | None:
    v = values.get(name) if name else None
    return tuple(int(d) for d in v.shape) if v is not None and v.is_static else None


def _bad(node: Node, attr: str, detail: str) -> ModelError:
    return ModelError(f"node {node.name!r} ({node.op_type}): attribute {attr!r} {detail}")


def _ints(node: Node, attr: str) -> tuple[int, ...] | None:
    value = node.attr(attr)
    if value is None:
        return None
    if (
        isinstance(value, np.ndarray)
        or not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(v, int) for v in value)
    ):
        raise _bad(node, attr, f"must be a list of ints, got {value!r}")
    return tuple(value)


def _int(node: Node, attr: str) -> int | None:
    value = node.attr(attr)
    if value is not None and not isinstance(value, int):
        raise _bad(node, attr, f"must be an int, got {value!r}")
    return value


def _length(node: Node, attr: str, values: tuple[int, ...] | None, length: int) -> None:
    if values is not None and len(values) != length:
        raise _bad(node, attr, f"must have {length} values, got {list(values)}")


def _window(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    """Conv, ConvTranspose and the pools: one sliding window over the spatial axes."""
    for attr in ("kernel_shape", "strides", "dilations"):
        values = _ints(node, attr)
        if values is not None and any(v < 1 for v in values):
            raise _bad(node, attr, f"must be positive, got {list(values)}")
    pads = _ints(node, "pads")
    if pads is not None and any(p < 0 for p in pads):
        raise _bad(node, "pads", f"must be non-negative, got {list(pads)}")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PADS:
        raise _bad(
            node,
            "auto_pad",
            f"has unknown value {auto_pad!r}; expected one of {sorted(_AUTO_PADS)}",
        )
    x = shapes[0] if shapes else None
    if x is None:
        return
    if len(x) < 3:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): input {node.inputs[0]!r} has "
            f"shape {list(x)}; expected [N, C, spatial...]"
        )
    rank = len(x) - 2
    kernel = _ints(node, "kernel_shape")
    _length(node, "kernel_shape", kernel, rank)
    for attr in ("strides", "dilations"):
        _length(node, attr, _ints(node, attr), rank)
    _length(node, "pads", pads, 2 * rank)
    if node.op_type in ("Conv", "ConvTranspose"):
        kernel = kernel or _conv_weights(node, shapes, x)
    if node.op_type == "ConvTranspose" or kernel is None or auto_pad.startswith("SAME"):
        return
    dilations = _ints(node, "dilations") or (1,) * rank
    pads = pads if pads is not None and auto_pad == "NOTSET" else (0,) * (2 * rank)
    for k in range(rank):
        span = (kernel[k] - 1) * dilations[k] + 1
        padded = x[2 + k] + pads[k] + pads[rank + k]
        if span > padded:
            raise _bad(
                node,
                "kernel_shape",
                f"{list(kernel)} (dilated extent {span} on spatial "
                f"axis {k}) is larger than the padded input ({padded})",
            )


def _conv_weights(
    node: Node, shapes: list[tuple[int, ...] | None], x: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Check ``group`` against X and W; the kernel from W's shape (None if W is untyped)."""
    group = _int(node, "group")
    group = 1 if group is None else group
    if group < 1:
        raise _bad(node, "group", f"must be positive, got {group}")
    w = shapes[1] if len(shapes) > 1 else None
    channels = x[1]
    if channels % group:
        raise _bad(node, "group", f"= {group} does not divide the {channels} input channels")
    if w is None:
        return None
    if len(w) != len(x):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): W {list(w)} and X {list(x)} "
            "must have the same rank"
        )
    if node.op_type == "Conv":
        if w[0] % group:
            raise _bad(node, "group", f"= {group} does not divide the {w[0]} output channels")
        if w[1] * group != channels:
            raise ShapeError(
                f"node {node.name!r} (Conv): W has {w[1]} input channels per "
                f"group, X has {channels} channels and group = {group}"
            )
    return w[2:]


def _axis_in(
    node: Node, attr: str, rank: int, *, inclusive: bool = False, required: bool = False
) -> None:
    axis = _int(node, attr)
    if axis is None:
        if required:
            raise _bad(node, attr, "is required")
        return
    hi = rank + 1 if inclusive else rank
    if not -hi <= axis < hi:
        raise _bad(node, attr, f"= {axis} is out of range for rank {rank}")


def _axis_check(
    attr: str = "axis", *, inclusive: bool = False, required: bool = False
) -> Callable[[Node, list[tuple[int, ...] | None]], None]:
    def check(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
        if shapes and shapes[0] is not None:
            _axis_in(node, attr, len(shapes[0]), inclusive=inclusive, required=required)

    return check


def _axes_list(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    """An ``axes`` attribute (Reduce*, Squeeze before opset 13/18): in range, no repeats."""
    axes = _ints(node, "axes")
    if axes is None or not shapes or shapes[0] is None:
        return
    rank = len(shapes[0]) + (len(axes) if node.op_type == "Unsqueeze" else 0)
    if any(not -rank <= a < rank for a in axes):
        raise _bad(node, "axes", f"{list(axes)} has an axis out of range for rank {rank}")
    if len({a % rank for a in axes}) != len(axes):
        raise _bad(node, "axes", f"{list(axes)} repeats an axis")


def _transpose(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    perm = _ints(node, "perm")
    if perm is None or not shapes or shapes[0] is None:
        return
    if sorted(perm) != list(range(len(shapes[0]))):
        raise _bad(
            node,
            "perm",
            f"{list(perm)} is not a permutation of the {len(shapes[0])} axes of {node.inputs[0]!r}",
        )


def _lrn(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    size = _int(node, "size")
    if size is not None and size < 1:
        raise _bad(node, "size", f"must be positive, got {size}")


def _gemm(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return
    a, b = shapes[0], shapes[1]
    if len(a) != 2 or len(b) != 2:
        raise ShapeError(f"node {node.name!r} (Gemm): A {list(a)} and B {list(b)} must be matrices")
    k_a = a[0] if node.attr("transA", 0) else a[1]
    k_b = b[1] if node.attr("transB", 0) else b[0]
    if k_a != k_b:
        raise ShapeError(
            f"node {node.name!r} (Gemm): A {list(a)} and B {list(b)} disagree on "
            f"the inner dimension ({k_a} != {k_b}; transA="
            f"{node.attr('transA', 0)}, transB={node.attr('transB', 0)})"
        )


def _matmul(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return
    a, b = shapes[0], shapes[1]
    if a and b and a[-1] != (b[0] if len(b) == 1 else b[-2]):
        raise ShapeError(
            f"node {node.name!r} (MatMul): A {list(a)} and B {list(b)} disagree "
            "on the inner dimension"
        )


def _per_channel(*inputs: int) -> Callable[[Node, list[tuple[int, ...] | None]], None]:
    """Inputs ``inputs`` (BatchNormalization's scale, bias, mean and variance, say) are vectors
    of one value per channel of X (its axis 1); with ``spatial=0`` (BatchNormalization before
    opset 9) they hold one value per activation, shaped like X without its batch axis."""

    def check(node: Node, shapes: list[tuple[int, ...] | None]) -> None:
        if not shapes or shapes[0] is None or len(shapes[0]) < 2:
            return
        per_activation = not int(node.attr("spatial", 1))
        want = shapes[0][1:] if per_activation else shapes[0][1:2]
        what = "activation" if per_activation else "channel"
        for k in inputs:
            shape = shapes[k] if k < len(shapes) else None
            if shape is not None and shape != want:
                raise ShapeError(
                    f"node {node.name!r} ({node.op_type}): input {k} {node.inputs[k]!r} has "
                    f"shape {list(shape)}; it must be {list(want)}, one value per {what} "
                    f"of X {list(shapes[0])}"
                )

    return check


_CHECKS: dict[str, Callable[[Node, list[Any]], None]] = {
    **dict.fromkeys(("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"), _window),
    **dict.fromkeys(
        (
            "Softmax",
            "LogSoftmax",
            "Hardmax",
            "Gather",
            "GatherElements",
            "ScatterElements",
            "Split",
            "ArgMax",
            "ArgMin",
            "Compress",
        ),
        _axis_check(),
    ),
    "Concat": _axis_check(required=True),
    "Flatten": _axis_check(inclusive=True),
    **dict.fromkeys((*REDUCTIONS, "Squeeze", "Unsqueeze"), _axes_list),
    "Transpose": _transpose,
    "LRN": _lrn,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "BatchNormalization": _per_channel(1, 2, 3, 4),
    "InstanceNormalization": _per_channel(1, 2),
}
