"""Corrupted cases: a random graph's model bytes or fields (``model``), or one of its feeds
(``feed``)."""

from __future__ import annotations

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


def _mutate_proto(draw: Draw, m: onnx.ModelProto) -> str:
    """Corrupts one field of ``m`` in place; returns what it did."""
    g = m.graph
    what = draw.choice(["attribute", "dim", "name", "type", "version", "op", "drop", "init"])
    if what == "attribute":
        attrs = [
            (n, a)
            for n in g.node
            for a in n.attribute
            if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
        ]
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
    if what == "version":
        if draw.integer(0, 1):
            m.ir_version = draw.choice([0, 1, 3, 7, 99])
            return f"ir_version {m.ir_version}"
        m.opset_import[0].version = draw.choice([1, 6, 9, 12, 30, 999])
        return f"opset {m.opset_import[0].version}"
    if what == "op" and g.node:
        n = draw.choice(list(g.node))
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


def corrupt_feeds(draw: Draw) -> Case:
    """A random graph with one of its feeds corrupted (or misplaced, or dropped)."""
    base = random_graph(draw)
    feeds: dict[str, Any] = dict(base.feeds)
    name = draw.choice(sorted(feeds))
    x = feeds[name]
    what = draw.choice(
        [
            "dtype",
            "shape",
            "rank",
            "fortran",
            "strided",
            "misaligned",
            "zero",
            "nan",
            "none",
            "list",
            "scalar",
            "extra",
            "missing",
        ]
    )
    if what == "dtype":
        feeds[name] = x.astype(
            draw.choice(["float16", "float64", "int32", "int64", "bool", "uint8"])
        )
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
