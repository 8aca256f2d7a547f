"""Corrupted cases: a random graph's model bytes or fields (``model``), or one of its feeds
(``feed``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from polyonnx.fuzz.case import Case, Draw
from polyonnx.fuzz.graphs import random_graph

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
    chunk = buf[start : start + draw.integer(1, 64)]
    return bytes(buf[:at] + chunk + buf[at:]), f"{len(chunk)} bytes copied to {at}"


def _hostile_attribute(draw: Draw, m: onnx.ModelProto) -> str | None:
    attrs = [
        (n, a)
        for n in m.graph.node
        for a in n.attribute
        if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
    ]
    if not attrs:
        return None
    n, a = draw.choice(attrs)
    value = draw.choice(_HOSTILE_INTS)
    if a.type == onnx.AttributeProto.INT:
        a.i = max(min(value, 2**62), -(2**62))
    elif a.ints:
        a.ints[draw.integer(0, len(a.ints) - 1)] = max(min(value, 2**62), -(2**62))
    else:
        a.ints.append(value)
    return f"attribute {a.name} of {n.op_type} set to {value}"


def _bad_dim(draw: Draw, m: onnx.ModelProto) -> str | None:
    g = m.graph
    vis = [vi for vi in (*g.input, *g.output) if vi.type.tensor_type.shape.dim]
    if not vis:
        return None
    vi = draw.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    d = dims[draw.integer(0, len(dims) - 1)]
    value = draw.choice([0, -1, 7, 10**6, 2**40])
    d.dim_value = value
    return f"a dimension of {vi.name} set to {value}"


def _renamed_input(draw: Draw, m: onnx.ModelProto) -> str | None:
    g = m.graph
    if not g.node:
        return None
    n = draw.choice(list(g.node))
    if not n.input:
        return None
    names = [o for x in g.node for o in x.output] + ["ghost", ""]
    k = draw.integer(0, len(n.input) - 1)
    n.input[k] = draw.choice(names)
    return f"input {k} of {n.op_type} renamed to {n.input[k]!r}"


def _bad_type(draw: Draw, m: onnx.ModelProto) -> str:
    vi = draw.choice(list(m.graph.input) + list(m.graph.output))
    elem = draw.choice(
        [
            TensorProto.STRING,
            TensorProto.BOOL,
            TensorProto.INT8,
            TensorProto.FLOAT16,
            TensorProto.DOUBLE,
            TensorProto.COMPLEX64,
            0,
        ]
    )
    vi.type.tensor_type.elem_type = elem
    return f"element type of {vi.name} set to {elem}"


def _bad_version(draw: Draw, m: onnx.ModelProto) -> str:
    if draw.integer(0, 1):
        m.ir_version = draw.choice([0, 1, 3, 7, 99])
        return f"ir_version {m.ir_version}"
    m.opset_import[0].version = draw.choice([1, 6, 9, 12, 30, 999])
    return f"opset {m.opset_import[0].version}"


def _other_op(draw: Draw, m: onnx.ModelProto) -> str | None:
    if not m.graph.node:
        return None
    n = draw.choice(list(m.graph.node))
    n.op_type = draw.choice(
        [
            "Conv",
            "MaxPool",
            "Gemm",
            "Softmax",
            "Concat",
            "Transpose",
            "Add",
            "Relu",
            "Pad",
            "NoSuchOp",
            "Loop",
        ]
    )
    return f"a node's op changed to {n.op_type}"


def _dropped_node(draw: Draw, m: onnx.ModelProto) -> str | None:
    if not m.graph.node:
        return None
    k = draw.integer(0, len(m.graph.node) - 1)
    del m.graph.node[k]
    return f"node {k} removed"


def _bad_initializer(draw: Draw, m: onnx.ModelProto) -> str:
    """An initializer's dims changed or the initializer removed; with none, a node
    duplicated (what every mutation falls back to when it finds nothing to change)."""
    g = m.graph
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


_PROTO_MUTATIONS: dict[str, Callable[[Draw, onnx.ModelProto], str | None]] = {
    "attribute": _hostile_attribute,
    "dim": _bad_dim,
    "name": _renamed_input,
    "type": _bad_type,
    "version": _bad_version,
    "op": _other_op,
    "drop": _dropped_node,
    "init": _bad_initializer,
}
"""The field corruptions, each returning what it did (None: nothing to corrupt there)."""


def _mutate_proto(draw: Draw, m: onnx.ModelProto) -> str:
    """Corrupts one field of ``m`` in place; returns what it did."""
    what = draw.choice(list(_PROTO_MUTATIONS))
    done = _PROTO_MUTATIONS[what](draw, m)
    return done if done is not None else _bad_initializer(draw, m)


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


def _strided(x: np.ndarray) -> np.ndarray:
    wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]) if x.ndim else (2,), x.dtype)
    view = wide[..., ::2] if x.ndim else wide[::2].reshape(())
    view[...] = x
    return view


def _misaligned(x: np.ndarray) -> np.ndarray:
    raw = np.zeros(x.nbytes + 1, np.uint8)
    view = raw[1:].view(x.dtype).reshape(x.shape)
    view[...] = x
    return view


def _other_shape(draw: Draw, x: np.ndarray) -> np.ndarray:
    shape = list(x.shape)
    shape[draw.integer(0, x.ndim - 1)] += draw.choice([-1, 1, 5])
    return np.resize(x, [max(d, 0) for d in shape])


def _with_nan(draw: Draw, x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.reshape(-1)[draw.integer(0, x.size - 1)] = draw.choice([np.nan, np.inf, -np.inf])
    return x


_FeedCorruption = Callable[[Draw, dict[str, Any], str, np.ndarray], None]


def _replace(
    applies: Callable[[np.ndarray], bool], value: Callable[[Draw, np.ndarray], Any]
) -> _FeedCorruption:
    """A corruption that replaces the feed by ``value(draw, x)`` when ``applies(x)``."""

    def corrupt(draw: Draw, feeds: dict[str, Any], name: str, x: np.ndarray) -> None:
        if applies(x):
            feeds[name] = value(draw, x)

    return corrupt


def _always(x: np.ndarray) -> bool:
    return True


def _extra(draw: Draw, feeds: dict[str, Any], name: str, x: np.ndarray) -> None:
    feeds["not_an_input"] = x


def _missing(draw: Draw, feeds: dict[str, Any], name: str, x: np.ndarray) -> None:
    del feeds[name]


_FEED_CORRUPTIONS: dict[str, _FeedCorruption] = {
    "dtype": _replace(
        _always,
        lambda d, x: x.astype(d.choice(["float16", "float64", "int32", "int64", "bool", "uint8"])),
    ),
    "shape": _replace(lambda x: bool(x.ndim), _other_shape),
    "rank": _replace(
        _always, lambda d, x: x[None] if d.integer(0, 1) or not x.ndim else x.reshape(-1)[:1]
    ),
    "fortran": _replace(_always, lambda d, x: np.asfortranarray(x)),
    "strided": _replace(_always, lambda d, x: _strided(x)),
    "misaligned": _replace(_always, lambda d, x: _misaligned(x)),
    "zero": _replace(lambda x: bool(x.ndim), lambda d, x: np.zeros((0, *x.shape[1:]), x.dtype)),
    "nan": _replace(lambda x: x.dtype.kind == "f" and bool(x.size), _with_nan),
    "none": _replace(_always, lambda d, x: None),
    "list": _replace(_always, lambda d, x: x.tolist()),
    "scalar": _replace(_always, lambda d, x: 1.0),
    "extra": _extra,
    "missing": _missing,
}
"""The feed corruptions (a condition that does not hold leaves the feeds as they are)."""


def corrupt_feeds(draw: Draw) -> Case:
    """A random graph with one of its feeds corrupted (or misplaced, or dropped)."""
    base = random_graph(draw)
    feeds: dict[str, Any] = dict(base.feeds)
    name = draw.choice(sorted(feeds))
    what = draw.choice(list(_FEED_CORRUPTIONS))
    _FEED_CORRUPTIONS[what](draw, feeds, name, feeds[name])
    return Case("feed", base.model, feeds, f"{base.label}; feed {name!r}: {what}")
