"""A random graph under construction: fresh names, random data, nodes typed by ONNX shape
inference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from polyonnx.fuzz.case import Draw

#: Largest intermediate (elements) a random graph grows to.
MAX_ELEMENTS = 4096


@dataclass(frozen=True)
class Value:
    """A value of the graph, with the shape inference gave it."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class Builder:
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

    def data(self, shape: Sequence[int], dtype: str, *, away_from_zero: bool = False) -> np.ndarray:
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

    def node(self, op: str, inputs: Sequence[str], dtype: str, **attrs: Any) -> Value:
        out = self.fresh("v")
        self.nodes.append(
            helper.make_node(op, list(inputs), [out], name=f"{op.lower()}_{out}", **attrs)
        )
        self.ops.append(op)
        return Value(out, self._infer(out), dtype)

    def model(self, outputs: Sequence[Value]) -> onnx.ModelProto:
        outs = [
            helper.make_tensor_value_info(
                v.name, helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), list(v.shape)
            )
            for v in outputs
        ]
        g = helper.make_graph(self.nodes, "fuzz", self.inputs, outs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])

    def _infer(self, name: str) -> tuple[int, ...]:
        g = helper.make_graph(
            self.nodes, "fuzz", self.inputs, [helper.make_empty_tensor_value_info(name)], self.inits
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        inferred = shape_inference.infer_shapes(m, strict_mode=True)
        dims = inferred.graph.output[0].type.tensor_type.shape.dim
        return tuple(int(d.dim_value) for d in dims)
