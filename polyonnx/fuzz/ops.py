"""The ops random graphs grow by: each takes the last value and returns a new one (or None
when the op does not apply to it), drawing its attributes and operands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import numpy_helper

from polyonnx.fuzz.builder import MAX_ELEMENTS, Builder, Value


def _positive(b: Builder, v: Value) -> Value:
    """|v| + 0.5: an operand that keeps Sqrt, Log, Pow and Reciprocal finite."""
    a = b.node("Abs", [v.name], v.dtype)
    return b.node("Add", [a.name, _scalar(b, 0.5, v.dtype)], v.dtype)


def _scalar(b: Builder, value: float, dtype: str) -> str:
    name = b.fresh("s")
    b.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
    return name


def _broadcast_shape(b: Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: some dims 1, maybe fewer or more leading."""
    out = [d if b.draw.integer(0, 2) else 1 for d in shape]
    if b.draw.integer(0, 4) == 0 and len(out) < 4:
        return (b.draw.integer(1, 3), *out)  # the other operand has more dims
    return tuple(out[b.draw.integer(0, len(out)) :] if b.draw.integer(0, 1) else out)


def _unary(b: Builder, v: Value) -> Value | None:
    if v.dtype.startswith("int"):
        return b.node(b.draw.choice(["Abs", "Neg"]), [v.name], v.dtype)
    op = b.draw.choice(
        [
            "Relu",
            "Neg",
            "Abs",
            "Sigmoid",
            "Tanh",
            "Exp",
            "Sqrt",
            "Log",
            "Reciprocal",
            "LeakyRelu",
            "Clip",
        ]
    )
    if op == "Exp":  # bounded argument: no overflow to inf
        return b.node("Exp", [b.node("Tanh", [v.name], v.dtype).name], v.dtype)
    if op in ("Sqrt", "Log", "Reciprocal"):
        return b.node(op, [_positive(b, v).name], v.dtype)
    if op == "LeakyRelu":
        return b.node(op, [v.name], v.dtype, alpha=b.draw.choice([0.01, 0.1, 0.5]))
    if op == "Clip":
        lo = b.draw.choice([-1.0, -0.5, 0.0])
        return b.node(op, [v.name, _scalar(b, lo, v.dtype), _scalar(b, lo + 1.0, v.dtype)], v.dtype)
    return b.node(op, [v.name], v.dtype)


def _binary(b: Builder, v: Value) -> Value | None:
    ops = ["Add", "Sub", "Mul", "Max", "Min"] + (["Div"] if not v.dtype.startswith("int") else [])
    op = b.draw.choice(ops)
    shape = _broadcast_shape(b, v.shape)
    if np.prod(np.broadcast_shapes(shape, v.shape)) > MAX_ELEMENTS:
        return None
    other = b.operand(shape, v.dtype, away_from_zero=op == "Div")
    args = [v.name, other] if op == "Div" or b.draw.integer(0, 1) else [other, v.name]
    return b.node(op, args, v.dtype)


def _pow(b: Builder, v: Value) -> Value | None:
    if v.dtype.startswith("int"):
        return None
    base = _positive(b, v)
    return b.node("Pow", [base.name, _scalar(b, b.draw.choice([0.5, 2.0, 3.0]), v.dtype)], v.dtype)


def _window_attrs(
    b: Builder, spatial: Sequence[int], kernel: Sequence[int], *, dilations: bool
) -> dict[str, Any] | None:
    """Random strides, dilations and pads for which every output dimension is >= 1."""
    rank = len(spatial)
    strides = [b.draw.integer(1, 3) for _ in range(rank)]
    dil = [b.draw.integer(1, 2) for _ in range(rank)] if dilations else [1] * rank
    pads = (
        [b.draw.integer(0, k - 1) for k in kernel] * 2 if b.draw.integer(0, 1) else [0] * (2 * rank)
    )
    for k in range(rank):
        span = (kernel[k] - 1) * dil[k] + 1
        if spatial[k] + pads[k] + pads[rank + k] < span:
            return None
    attrs: dict[str, Any] = {"strides": strides, "pads": pads}
    if dilations and any(d > 1 for d in dil):
        attrs["dilations"] = dil
    return attrs


def _conv(b: Builder, v: Value) -> Value | None:
    if len(v.shape) not in (3, 4) or v.dtype != "float32":  # onnxruntime: float32 only
        return None
    channels, spatial = v.shape[1], v.shape[2:]
    group = b.draw.choice([g for g in (1, 2, 3) if channels % g == 0])
    m = group * b.draw.integer(1, 3)
    kernel = [b.draw.integer(1, 3) for _ in spatial]
    attrs = _window_attrs(b, spatial, kernel, dilations=True)
    if attrs is None:
        return None
    w = b.operand((m, channels // group, *kernel), v.dtype)
    inputs = [v.name, w] + ([b.operand((m,), v.dtype)] if b.draw.integer(0, 1) else [])
    if group > 1:
        attrs["group"] = group
    return b.node("Conv", inputs, v.dtype, **attrs)


def _pool(b: Builder, v: Value) -> Value | None:
    if len(v.shape) not in (3, 4) or v.dtype != "float32":  # onnxruntime: float32 only
        return None
    op = b.draw.choice(["MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"])
    if op.startswith("Global"):
        return b.node(op, [v.name], v.dtype)
    kernel = [b.draw.integer(1, 3) for _ in v.shape[2:]]
    attrs = _window_attrs(b, v.shape[2:], kernel, dilations=False)
    if attrs is None:
        return None
    attrs["kernel_shape"] = kernel
    if b.draw.integer(0, 2) == 0 and _ceil_mode_agrees(v.shape[2:], kernel, attrs):
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.draw.integer(0, 1):
        attrs["count_include_pad"] = 1
    return b.node(op, [v.name], v.dtype, **attrs)


def _ceil_mode_agrees(spatial: Sequence[int], kernel: Sequence[int], attrs: dict[str, Any]) -> bool:
    """Whether ONNX shape inference and onnxruntime agree on the ceil_mode output size: they
    differ when the last window would start past the input and its begin padding (onnxruntime
    drops that window, polyonnx too, and refuses the inferred shape with a ShapeError)."""
    rank, strides, pads = len(spatial), attrs["strides"], attrs["pads"]
    for k in range(rank):
        padded = spatial[k] + pads[k] + pads[rank + k] - kernel[k]
        out = -(-padded // strides[k]) + 1
        if (out - 1) * strides[k] >= spatial[k] + pads[k]:
            return False
    return True


def _matmul(b: Builder, v: Value) -> Value | None:
    if v.dtype not in ("float32", "float64") or not v.shape:
        return None
    n = b.draw.integer(1, 6)
    if len(v.shape) == 2 and b.draw.integer(0, 1):
        trans_a, trans_b = b.draw.integer(0, 1), b.draw.integer(0, 1)
        rows, k = (v.shape[1], v.shape[0]) if trans_a else v.shape
        w = b.operand((n, k) if trans_b else (k, n), v.dtype)
        inputs = [v.name, w]
        if b.draw.integer(0, 1):
            inputs.append(b.operand(b.draw.choice([(n,), (1, n), (rows, n), ()]), v.dtype))
        return b.node(
            "Gemm",
            inputs,
            v.dtype,
            transA=trans_a,
            transB=trans_b,
            alpha=b.draw.choice([1.0, 0.5]),
            beta=b.draw.choice([1.0, 2.0]),
        )
    k = v.shape[-1]
    w_shape = (k,) if b.draw.integer(0, 4) == 0 else (*_broadcast_shape(b, v.shape[:-2]), k, n)
    if np.prod(v.shape[:-1]) * n > MAX_ELEMENTS:
        return None
    return b.node("MatMul", [v.name, b.operand(w_shape, v.dtype)], v.dtype)


def _softmax(b: Builder, v: Value) -> Value | None:
    if v.dtype not in ("float32", "float64") or not v.shape:
        return None
    rank = len(v.shape)
    return b.node(
        b.draw.choice(["Softmax", "LogSoftmax"]),
        [v.name],
        v.dtype,
        axis=b.draw.integer(-rank, rank - 1),
    )


def _layout(b: Builder, v: Value) -> Value | None:
    rank = len(v.shape)
    if rank == 0:
        return None
    op = b.draw.choice(["Transpose", "Concat", "Pad", "Flatten"])
    if op == "Transpose":
        perm = list(range(rank))
        for i in range(rank - 1, 0, -1):  # Fisher-Yates, from the draw
            j = b.draw.integer(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return b.node(op, [v.name], v.dtype, perm=perm)
    if op == "Concat":
        axis = b.draw.integer(-rank, rank - 1)
        shape = list(v.shape)
        shape[axis] = b.draw.integer(1, 3)
        if np.prod(v.shape) + np.prod(shape) > MAX_ELEMENTS:
            return None
        other = b.operand(shape, v.dtype)
        return b.node(
            op, [v.name, other] if b.draw.integer(0, 1) else [other, v.name], v.dtype, axis=axis
        )
    if op == "Pad":
        pads = [b.draw.integer(0, 2) for _ in range(2 * rank)]
        if np.prod([d + pads[i] + pads[rank + i] for i, d in enumerate(v.shape)]) > MAX_ELEMENTS:
            return None
        pad_const = b.fresh("pads")
        b.inits.append(numpy_helper.from_array(np.array(pads, np.int64), pad_const))
        return b.node(op, [v.name, pad_const], v.dtype)
    return b.node(op, [v.name], v.dtype, axis=b.draw.integer(0, rank))


def _batchnorm(b: Builder, v: Value) -> Value | None:
    if len(v.shape) < 2 or v.dtype not in ("float32", "float64"):
        return None
    c = v.shape[1]
    var = b.fresh("var")
    b.inits.append(numpy_helper.from_array(np.abs(b.data((c,), v.dtype)) + 0.1, var))
    return b.node(
        "BatchNormalization",
        [v.name, b.operand((c,), v.dtype), b.operand((c,), v.dtype), b.operand((c,), v.dtype), var],
        v.dtype,
    )


#: Every op a graph can grow by, drawn uniformly.
GROWERS: tuple[Callable[[Builder, Value], Value | None], ...] = (
    _unary,
    _binary,
    _pow,
    _conv,
    _pool,
    _matmul,
    _softmax,
    _layout,
    _batchnorm,
)
