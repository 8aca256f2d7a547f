"""Fuzzing: random valid graphs checked against onnxruntime, and corrupted models and feeds.

Three kinds of case:

* ``graph``: a random chain of supported ops (random shapes, attributes, broadcasting, dtypes)
  is compiled and run; its outputs must match onnxruntime's.
* ``model``: such a model with corrupted bytes or a corrupted field (an attribute, a dimension,
  a name, a type, a version) must compile and run, or be refused with a ``PolyonnxError``.
* ``feed``: a valid model run with a corrupted feed (dtype, shape, layout, alignment, NaN,
  non-arrays, names) must run, or be refused with an ``InputError``; when it runs, its outputs
  must equal those for a clean copy of the same data.

Every case runs in a worker process, so a crash or a hang is a reported failure, not a dead
campaign. Cases are made from a :class:`Draw` (a seeded ``random.Random`` here, hypothesis in
the tests), so a failure is reproduced by its kind and seed::

    python -m polyonnx.fuzz --cases 2000                 # a campaign: all kinds, seeds 0..1999
    python -m polyonnx.fuzz --kinds graph --seed 17 --cases 1 --show   # replay one case
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

T = TypeVar("T")

KINDS = ("graph", "model", "feed")

#: The options cases compile with: a small memory limit keeps hostile shapes cheap to refuse.
MAX_TENSOR_BYTES = 64 << 20

#: Largest intermediate (elements) a random graph grows to.
_MAX_ELEMENTS = 4096


class Draw(Protocol):
    """Where a case's random choices come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``."""
        ...

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``."""
        ...


@dataclass
class RandomDraw:
    """A :class:`Draw` from a seeded ``random.Random``."""

    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


@dataclass
class Case:
    """One fuzz case: a model (possibly corrupt bytes) and the feeds to run it with."""

    kind: str
    model: bytes
    feeds: dict[str, Any]
    label: str


@dataclass(frozen=True)
class Outcome:
    """What became of a case: ``status`` is pass, fail, crash, hang, unsupported or invalid."""

    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "crash", "hang")


# --------------------------------------------------------------------------- random graphs


@dataclass(frozen=True)
class _Value:
    name: str
    shape: tuple[int, ...]
    dtype: str


class _Builder:
    """A graph under construction; every value's shape comes from ONNX shape inference."""

    def __init__(self, draw: Draw, opset: int) -> None:
        self.draw, self.opset = draw, opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.ops: list[str] = []
        self._count = 0
        self._rng = np.random.default_rng(draw.integer(0, 2**31))

    def fresh(self, base: str) -> str:
        self._count += 1
        return f"{base}{self._count}"

    def data(self, shape: Sequence[int], dtype: str, *, away_from_zero: bool = False
             ) -> np.ndarray:
        if np.dtype(dtype).kind in "iu":
            lo, hi = (1, 6) if away_from_zero else (-5, 6)
            out = self._rng.integers(lo, hi, shape)
            return out.astype(dtype)
        if away_from_zero:
            mag = self._rng.uniform(0.5, 2.0, shape)
            return (mag * self._rng.choice([-1.0, 1.0], shape)).astype(dtype)
        return self._rng.standard_normal(shape).astype(dtype)

    def operand(self, shape: Sequence[int], dtype: str, *, away_from_zero: bool = False) -> str:
        """A constant or (sometimes) a graph input holding fresh random data."""
        array = self.data(shape, dtype, away_from_zero=away_from_zero)
        if self.draw.integer(0, 3) == 0:
            return self.input(array)
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def input(self, array: np.ndarray) -> str:
        name = self.fresh("in")
        elem = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(array.shape)))
        self.feeds[name] = array
        return name

    def node(self, op: str, inputs: Sequence[str], dtype: str, **attrs: Any) -> _Value:
        out = self.fresh("v")
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=f"{op.lower()}_{out}",
                                           **attrs))
        self.ops.append(op)
        return _Value(out, self._infer(out), dtype)

    def model(self, outputs: Sequence[_Value]) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(
            np.dtype(v.dtype)), list(v.shape)) for v in outputs]
        g = helper.make_graph(self.nodes, "fuzz", self.inputs, outs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])

    def _infer(self, name: str) -> tuple[int, ...]:
        g = helper.make_graph(self.nodes, "fuzz", self.inputs,
                              [helper.make_empty_tensor_value_info(name)], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        inferred = shape_inference.infer_shapes(m, strict_mode=True)
        dims = inferred.graph.output[0].type.tensor_type.shape.dim
        return tuple(int(d.dim_value) for d in dims)


def _positive(b: _Builder, v: _Value) -> _Value:
    """|v| + 0.5: an operand that keeps Sqrt, Log, Pow and Reciprocal finite."""
    a = b.node("Abs", [v.name], v.dtype)
    return b.node("Add", [a.name, _scalar(b, 0.5, v.dtype)], v.dtype)


def _scalar(b: _Builder, value: float, dtype: str) -> str:
    name = b.fresh("s")
    b.inits.append(numpy_helper.from_array(np.array(value, dtype=dtype), name))
    return name


def _broadcast_shape(b: _Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: some dims 1, maybe fewer or more leading."""
    out = [d if b.draw.integer(0, 2) else 1 for d in shape]
    if b.draw.integer(0, 4) == 0 and len(out) < 4:
        return (b.draw.integer(1, 3), *out)  # the other operand has more dims
    return tuple(out[b.draw.integer(0, len(out)):] if b.draw.integer(0, 1) else out)


def _unary(b: _Builder, v: _Value) -> _Value | None:
    if v.dtype.startswith("int"):
        return b.node(b.draw.choice(["Abs", "Neg"]), [v.name], v.dtype)
    op = b.draw.choice(["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Exp", "Sqrt", "Log",
                        "Reciprocal", "LeakyRelu", "Clip"])
    if op == "Exp":  # bounded argument: no overflow to inf
        return b.node("Exp", [b.node("Tanh", [v.name], v.dtype).name], v.dtype)
    if op in ("Sqrt", "Log", "Reciprocal"):
        return b.node(op, [_positive(b, v).name], v.dtype)
    if op == "LeakyRelu":
        return b.node(op, [v.name], v.dtype, alpha=b.draw.choice([0.01, 0.1, 0.5]))
    if op == "Clip":
        lo = b.draw.choice([-1.0, -0.5, 0.0])
        return b.node(op, [v.name, _scalar(b, lo, v.dtype), _scalar(b, lo + 1.0, v.dtype)],
                      v.dtype)
    return b.node(op, [v.name], v.dtype)


def _binary(b: _Builder, v: _Value) -> _Value | None:
    ops = ["Add", "Sub", "Mul", "Max", "Min"] + (["Div"] if not v.dtype.startswith("int")
                                                 else [])
    op = b.draw.choice(ops)
    shape = _broadcast_shape(b, v.shape)
    if np.prod(np.broadcast_shapes(shape, v.shape)) > _MAX_ELEMENTS:
        return None
    other = b.operand(shape, v.dtype, away_from_zero=op == "Div")
    args = [v.name, other] if op == "Div" or b.draw.integer(0, 1) else [other, v.name]
    return b.node(op, args, v.dtype)


def _pow(b: _Builder, v: _Value) -> _Value | None:
    if v.dtype.startswith("int"):
        return None
    base = _positive(b, v)
    return b.node("Pow", [base.name, _scalar(b, b.draw.choice([0.5, 2.0, 3.0]), v.dtype)],
                  v.dtype)


def _window_attrs(b: _Builder, spatial: Sequence[int], kernel: Sequence[int], *,
                  dilations: bool) -> dict[str, Any] | None:
    """Random strides, dilations and pads for which every output dimension is >= 1."""
    rank = len(spatial)
    strides = [b.draw.integer(1, 3) for _ in range(rank)]
    dil = [b.draw.integer(1, 2) for _ in range(rank)] if dilations else [1] * rank
    pads = [b.draw.integer(0, k - 1) for k in kernel] * 2 if b.draw.integer(0, 1) \
        else [0] * (2 * rank)
    for k in range(rank):
        span = (kernel[k] - 1) * dil[k] + 1
        if spatial[k] + pads[k] + pads[rank + k] < span:
            return None
    attrs: dict[str, Any] = {"strides": strides, "pads": pads}
    if dilations and any(d > 1 for d in dil):
        attrs["dilations"] = dil
    return attrs


def _conv(b: _Builder, v: _Value) -> _Value | None:
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


def _pool(b: _Builder, v: _Value) -> _Value | None:
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


def _ceil_mode_agrees(spatial: Sequence[int], kernel: Sequence[int],
                      attrs: dict[str, Any]) -> bool:
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


def _matmul(b: _Builder, v: _Value) -> _Value | None:
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
        return b.node("Gemm", inputs, v.dtype, transA=trans_a, transB=trans_b,
                      alpha=b.draw.choice([1.0, 0.5]), beta=b.draw.choice([1.0, 2.0]))
    k = v.shape[-1]
    w_shape = (k,) if b.draw.integer(0, 4) == 0 else (*_broadcast_shape(b, v.shape[:-2]), k, n)
    if np.prod(v.shape[:-1]) * n > _MAX_ELEMENTS:
        return None
    return b.node("MatMul", [v.name, b.operand(w_shape, v.dtype)], v.dtype)


def _softmax(b: _Builder, v: _Value) -> _Value | None:
    if v.dtype not in ("float32", "float64") or not v.shape:
        return None
    rank = len(v.shape)
    return b.node(b.draw.choice(["Softmax", "LogSoftmax"]), [v.name], v.dtype,
                  axis=b.draw.integer(-rank, rank - 1))


def _layout(b: _Builder, v: _Value) -> _Value | None:
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
        if np.prod(v.shape) + np.prod(shape) > _MAX_ELEMENTS:
            return None
        other = b.operand(shape, v.dtype)
        return b.node(op, [v.name, other] if b.draw.integer(0, 1) else [other, v.name],
                      v.dtype, axis=axis)
    if op == "Pad":
        pads = [b.draw.integer(0, 2) for _ in range(2 * rank)]
        if np.prod([d + pads[i] + pads[rank + i] for i, d in enumerate(v.shape)]) \
                > _MAX_ELEMENTS:
            return None
        pad_const = b.fresh("pads")
        b.inits.append(numpy_helper.from_array(np.array(pads, np.int64), pad_const))
        return b.node(op, [v.name, pad_const], v.dtype)
    return b.node(op, [v.name], v.dtype, axis=b.draw.integer(0, rank))


def _batchnorm(b: _Builder, v: _Value) -> _Value | None:
    if len(v.shape) < 2 or v.dtype not in ("float32", "float64"):
        return None
    c = v.shape[1]
    var = b.fresh("var")
    b.inits.append(numpy_helper.from_array(np.abs(b.data((c,), v.dtype)) + 0.1, var))
    return b.node("BatchNormalization", [v.name, b.operand((c,), v.dtype),
                                         b.operand((c,), v.dtype), b.operand((c,), v.dtype),
                                         var], v.dtype)


_GROWERS: tuple[Callable[[_Builder, _Value], _Value | None], ...] = (
    _unary, _binary, _pow, _conv, _pool, _matmul, _softmax, _layout, _batchnorm)


def random_graph(draw: Draw) -> Case:
    """A random valid model of supported ops (1 to 5 steps), with random feeds."""
    opset = draw.choice([13, 17, 18])
    b = _Builder(draw, opset)
    dtype = draw.choice(["float32"] * 6 + ["float64", "int32", "int64"])
    rank = draw.integer(1, 4) if dtype.startswith("int") else draw.choice([1, 2, 3, 4, 4, 4])
    shape = tuple(draw.integer(1, 6) for _ in range(rank))
    first = b.input(b.data(shape, dtype))
    v = _Value(first, shape, dtype)
    outputs = []
    for _ in range(draw.integer(1, 5)):
        grown = draw.choice(_GROWERS)(b, v)
        if grown is None:
            continue
        if draw.integer(0, 5) == 0:
            outputs.append(v)  # an intermediate is an output too
        v = grown
        if np.prod(v.shape) > _MAX_ELEMENTS:
            break
    if not b.nodes:
        v = b.node("Relu" if not dtype.startswith("uint") else "Abs", [first], dtype)
    if v.name == first:
        v = b.node("Neg", [first], dtype)
    outputs = [o for o in outputs if o.name != first and o.name != v.name] + [v]
    model = b.model(outputs)
    return Case("graph", model.SerializeToString(), b.feeds,
                f"opset {opset}: {' -> '.join(b.ops)} on {dtype}{list(shape)}")


# --------------------------------------------------------------------------- corrupted models

_HOSTILE_INTS = (0, -1, -7, 1, 2, 3, 64, 2**31, 10**9, -(2**40))


def _mutate_bytes(draw: Draw, data: bytes) -> tuple[bytes, str]:
    how = draw.choice(["flip", "truncate", "insert", "splice"])
    buf = bytearray(data)
    if how == "truncate":
        cut = draw.integer(0, len(buf) - 1)
        return bytes(buf[:cut]), f"truncated to {cut} bytes"
    if how == "flip":
        count = draw.integer(1, 8)
        for _ in range(count):
            buf[draw.integer(0, len(buf) - 1)] = draw.integer(0, 255)
        return bytes(buf), f"{count} random bytes"
    at = draw.integer(0, len(buf))
    if how == "insert":
        junk = bytes(draw.integer(0, 255) for _ in range(draw.integer(1, 16)))
        return bytes(buf[:at] + junk + buf[at:]), f"{len(junk)} bytes inserted at {at}"
    start = draw.integer(0, len(buf) - 1)
    chunk = buf[start:start + draw.integer(1, 64)]
    return bytes(buf[:at] + chunk + buf[at:]), f"{len(chunk)} bytes copied to {at}"


def _mutate_proto(draw: Draw, m: onnx.ModelProto) -> str:
    """Corrupts one field of ``m`` in place; returns what it did."""
    g = m.graph
    what = draw.choice(["attribute", "dim", "name", "type", "version", "op", "drop", "init"])
    if what == "attribute":
        attrs = [(n, a) for n in g.node for a in n.attribute
                 if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if attrs:
            n, a = draw.choice(attrs)
            value = draw.choice(_HOSTILE_INTS)
            if a.type == onnx.AttributeProto.INT:
                a.i = max(min(value, 2**62), -(2**62))
            elif a.ints:
                a.ints[draw.integer(0, len(a.ints) - 1)] = max(min(value, 2**62), -(2**62))
            else:
                a.ints.append(value)
            return f"attribute {a.name} of {n.op_type} set to {value}"
    if what == "dim":
        vis = [vi for vi in (*g.input, *g.output) if vi.type.tensor_type.shape.dim]
        if vis:
            vi = draw.choice(vis)
            dims = vi.type.tensor_type.shape.dim
            d = dims[draw.integer(0, len(dims) - 1)]
            value = draw.choice([0, -1, 7, 10**6, 2**40])
            d.dim_value = value
            return f"a dimension of {vi.name} set to {value}"
    if what == "name" and g.node:
        n = draw.choice(list(g.node))
        if n.input:
            names = [o for x in g.node for o in x.output] + ["ghost", ""]
            k = draw.integer(0, len(n.input) - 1)
            n.input[k] = draw.choice(names)
            return f"input {k} of {n.op_type} renamed to {n.input[k]!r}"
    if what == "type":
        vis = list(g.input) + list(g.output)
        vi = draw.choice(vis)
        elem = draw.choice([TensorProto.STRING, TensorProto.BOOL, TensorProto.INT8,
                            TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.COMPLEX64, 0])
        vi.type.tensor_type.elem_type = elem
        return f"element type of {vi.name} set to {elem}"
    if what == "version":
        if draw.integer(0, 1):
            m.ir_version = draw.choice([0, 1, 3, 7, 99])
            return f"ir_version {m.ir_version}"
        m.opset_import[0].version = draw.choice([1, 6, 9, 12, 30, 999])
        return f"opset {m.opset_import[0].version}"
    if what == "op" and g.node:
        n = draw.choice(list(g.node))
        n.op_type = draw.choice(["Conv", "MaxPool", "Gemm", "Softmax", "Concat", "Transpose",
                                 "Add", "Relu", "Pad", "NoSuchOp", "Loop"])
        return f"a node's op changed to {n.op_type}"
    if what == "drop" and g.node:
        k = draw.integer(0, len(g.node) - 1)
        del g.node[k]
        return f"node {k} removed"
    if g.initializer:
        t = draw.choice(list(g.initializer))
        if t.dims and draw.integer(0, 1):
            t.dims[draw.integer(0, len(t.dims) - 1)] = draw.choice([0, 2, 10**9])
            return f"dims of initializer {t.name} changed"
        g.initializer.remove(t)
        return f"initializer {t.name} removed"
    n = draw.choice(list(g.node))
    g.node.append(n)
    return f"node {n.name} duplicated"


def corrupt_model(draw: Draw) -> Case:
    """A random graph whose bytes or one of whose fields are corrupted."""
    base = random_graph(draw)
    if draw.integer(0, 2) == 0:
        data, how = _mutate_bytes(draw, base.model)
    else:
        m = onnx.ModelProto()
        m.ParseFromString(base.model)
        how = _mutate_proto(draw, m)
        data = m.SerializeToString()
    return Case("model", data, base.feeds, f"{base.label}; {how}")


# --------------------------------------------------------------------------- corrupted feeds


def corrupt_feeds(draw: Draw) -> Case:
    """A random graph with one of its feeds corrupted (or misplaced, or dropped)."""
    base = random_graph(draw)
    feeds: dict[str, Any] = dict(base.feeds)
    name = draw.choice(sorted(feeds))
    x = feeds[name]
    what = draw.choice(["dtype", "shape", "rank", "fortran", "strided", "misaligned", "zero",
                        "nan", "none", "list", "scalar", "extra", "missing"])
    if what == "dtype":
        feeds[name] = x.astype(draw.choice(["float16", "float64", "int32", "int64", "bool",
                                            "uint8"]))
    elif what == "shape" and x.ndim:
        shape = list(x.shape)
        shape[draw.integer(0, x.ndim - 1)] += draw.choice([-1, 1, 5])
        feeds[name] = np.resize(x, [max(d, 0) for d in shape])
    elif what == "rank":
        feeds[name] = x[None] if draw.integer(0, 1) or not x.ndim else x.reshape(-1)[:1]
    elif what == "fortran":
        feeds[name] = np.asfortranarray(x)
    elif what == "strided":
        wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]) if x.ndim else (2,), x.dtype)
        view = wide[..., ::2] if x.ndim else wide[::2].reshape(())
        view[...] = x
        feeds[name] = view
    elif what == "misaligned":
        raw = np.zeros(x.nbytes + 1, np.uint8)
        view = raw[1:].view(x.dtype).reshape(x.shape)
        view[...] = x
        feeds[name] = view
    elif what == "zero" and x.ndim:
        feeds[name] = np.zeros((0, *x.shape[1:]), x.dtype)
    elif what == "nan" and x.dtype.kind == "f" and x.size:
        x = x.copy()
        x.reshape(-1)[draw.integer(0, x.size - 1)] = draw.choice([np.nan, np.inf, -np.inf])
        feeds[name] = x
    elif what == "none":
        feeds[name] = None
    elif what == "list":
        feeds[name] = x.tolist()
    elif what == "scalar":
        feeds[name] = 1.0
    elif what == "extra":
        feeds["not_an_input"] = x
    elif what == "missing":
        del feeds[name]
    return Case("feed", base.model, feeds, f"{base.label}; feed {name!r}: {what}")


MAKERS: dict[str, Callable[[Draw], Case]] = {
    "graph": random_graph, "model": corrupt_model, "feed": corrupt_feeds}


# --------------------------------------------------------------------------- checking a case


def _compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    """'' when the outputs agree (within float tolerances), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        b = np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {a.dtype}{list(a.shape)}, onnxruntime {b.dtype}{list(b.shape)}"
        if a.dtype.kind == "f":
            rtol, atol = (1e-3, 1e-4) if a.dtype.itemsize < 8 else (1e-9, 1e-12)
            scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
            if not np.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True):
                err = float(np.nanmax(np.abs(a.astype(np.float64) - b), initial=0.0))
                return f"output {k}: max abs error {err:.3g} (scale {scale:.3g})"
        elif not np.array_equal(a, b):
            return f"output {k}: {int(np.sum(a != b))} of {a.size} elements differ"
    return ""


def _session(model: bytes) -> Any:
    from polyonnx import InferenceSession, Options

    return InferenceSession(model, options=Options(max_tensor_bytes=MAX_TENSOR_BYTES))


def check(case: Case) -> Outcome:
    """Run ``case`` in this process (see :class:`Worker` for the isolated version)."""
    from polyonnx.errors import InputError, PolyonnxError, UnsupportedOpError
    from polyonnx.testing import onnxruntime_outputs

    try:
        if case.kind == "graph":
            try:
                want = onnxruntime_outputs(case.model, case.feeds)
            except Exception as e:  # noqa: BLE001 - the generator made something invalid
                return Outcome("invalid", f"onnxruntime refuses it: {e}")
            try:
                got = _session(case.model).run(None, case.feeds)
            except UnsupportedOpError as e:
                return Outcome("unsupported", str(e))
            except PolyonnxError as e:
                return Outcome("fail", f"refused a model onnxruntime runs: "
                               f"{type(e).__name__}: {e}")
            diff = _compare(got, want)
            return Outcome("fail", diff) if diff else Outcome("pass")
        try:
            sess = _session(case.model)
        except PolyonnxError as e:
            if case.kind == "feed":
                return Outcome("fail", f"the base model does not compile: {e}")
            return Outcome("pass", f"refused: {type(e).__name__}")
        if case.kind == "model":
            feeds = {a.name: np.zeros([d if isinstance(d, int) else 1 for d in a.shape],
                                      a.dtype) for a in sess.get_inputs()}
            try:
                sess.run(None, feeds)
            except PolyonnxError as e:
                return Outcome("pass", f"compiled, run refused: {type(e).__name__}")
            return Outcome("pass", "compiled and ran")
        try:
            got = sess.run(None, case.feeds)
        except InputError as e:
            return Outcome("pass", f"refused: {e}")
        clean = {k: np.array(v, order="C", copy=True) for k, v in case.feeds.items()}
        diff = _compare(got, sess.run(None, clean))
        return Outcome("fail", f"odd layout changed the result: {diff}") if diff \
            else Outcome("pass", "ran")
    except Exception:  # noqa: BLE001 - anything but a PolyonnxError is the bug being hunted
        lines = traceback.format_exc().strip().splitlines()
        return Outcome("fail", " | ".join(lines[-3:]))


def _serve(conn: Connection) -> None:
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        conn.send(check(case))


class Worker:
    """A worker process that checks cases; a crash or hang is an outcome, and it restarts.

    Example:
        >>> with Worker() as w:                                          # doctest: +SKIP
        ...     w.check(random_graph(RandomDraw(0))).status
        'pass'
    """

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def close(self) -> None:
        if self._proc is not None:
            if self._conn is not None:
                self._conn.close()
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._proc = self._conn = None

    def check(self, case: Case) -> Outcome:
        if self._proc is None:
            self._start()
        assert self._conn is not None
        try:
            self._conn.send(case)
            if self._conn.poll(self.timeout):
                return self._conn.recv()
            self._proc.kill()
            self._proc.join()
            status, detail = "hang", f"no answer in {self.timeout:.0f} s"
        except (EOFError, OSError):
            self._proc.join()
            status, detail = "crash", f"worker died (exit code {self._proc.exitcode})"
        self._proc = self._conn = None
        return Outcome(status, detail)


# --------------------------------------------------------------------------- campaign


def campaign(kinds: Sequence[str], cases: int, seed: int, seconds: float | None,
             show: bool = False, timeout: float = 120.0) -> int:
    """Run cases ``seed .. seed + cases - 1`` (kinds taking turns); print a summary.

    Returns the number of failures.
    """
    counts: dict[str, int] = {}
    failures: list[tuple[str, int, Case, Outcome]] = []
    start = time.monotonic()
    tried = 0
    with Worker(timeout) as worker:
        for i in range(cases):
            if seconds is not None and time.monotonic() - start > seconds:
                break
            kind = kinds[i % len(kinds)]
            case = MAKERS[kind](RandomDraw(seed + i))
            outcome = worker.check(case)
            tried += 1
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
            if show:
                print(f"[{kind} seed {seed + i}] {case.label}")
                if case.kind != "model":
                    try:
                        m = onnx.ModelProto()
                        m.ParseFromString(case.model)
                        print(onnx.printer.to_text(m.graph))
                    except Exception:  # noqa: BLE001 - corrupt bytes have no text form
                        pass
                print(f"  -> {outcome.status} {outcome.detail}")
            if outcome.failed:
                failures.append((kind, seed + i, case, outcome))
                print(f"FAIL {kind} seed {seed + i}: {outcome.status}: {outcome.detail}\n"
                      f"     case: {case.label}", flush=True)
            if tried % 100 == 0:
                print(f"... {tried} cases, {len(failures)} failures, "
                      f"{time.monotonic() - start:.0f} s", flush=True)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"cases tried: {tried} ({summary}); failures: {len(failures)}; "
          f"{time.monotonic() - start:.0f} s")
    for kind, s, _, _ in failures:
        print(f"  replay: python -m polyonnx.fuzz --kinds {kind} --seed {s} --cases 1 --show")
    return len(failures)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m polyonnx.fuzz``: exit status 1 when any case failed."""
    p = argparse.ArgumentParser(prog="python -m polyonnx.fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=1000, help="number of cases (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first case (default 0)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"comma-separated kinds among {', '.join(KINDS)} (default all)")
    p.add_argument("--seconds", type=float, help="stop after this long")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds one case may take before it counts as a hang (default 120)")
    p.add_argument("--show", action="store_true", help="print every case and its outcome")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        p.error(f"unknown kinds {unknown}; choose among {', '.join(KINDS)}")
    return 1 if campaign(kinds, args.cases, args.seed, args.seconds, args.show,
                         args.timeout) else 0


if __name__ == "__main__":
    sys.exit(main())
