"""Test harness for lowerings: ONNX model -> graph.ir.Graph -> krnl -> interpreter, vs onnxruntime.

Builds the Graph directly from an ``onnx.helper`` model (after ONNX shape inference) so these
tests do not depend on the frontend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.krnl import ir
from polyonnx.krnl.lower.registry import LowerContext, lower_node
from polyonnx.krnl.program import VIEW_OPS
from polyonnx.krnl.verify import verify
from polyonnx.testing import assert_close, onnxruntime_outputs

from .interp import interpret


def _attr_value(a: onnx.AttributeProto) -> Any:
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return tuple(x.decode() if isinstance(x, bytes) else x for x in v)
    return v


def _value(vi: onnx.ValueInfoProto) -> Value:
    tt = vi.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name
    return Value(vi.name, dtype, tuple(d.dim_value for d in tt.shape.dim))


def graph_from_model(model: onnx.ModelProto) -> Graph:
    """A Graph with every value typed from ONNX shape inference; initializers become constants."""
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = model.graph
    values = {vi.name: _value(vi) for vi in (*g.input, *g.value_info, *g.output)}
    constants = {}
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        constants[init.name] = arr
        values[init.name] = Value(init.name, arr.dtype.name, tuple(arr.shape))
    nodes = tuple(
        Node(
            n.name or f"{n.op_type.lower()}{k}",
            n.op_type,
            tuple(n.input),
            tuple(n.output),
            {a.name: _attr_value(a) for a in n.attribute},
            n.domain,
        )
        for k, n in enumerate(g.node)
    )
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return Graph(
        g.name,
        tuple(values[i.name] for i in g.input if i.name not in constants),
        tuple(values[o.name] for o in g.output),
        nodes,
        values,
        constants,
        opset,
    )


def renumber(nodes: tuple[ir.Node, ...], start: int = 0) -> tuple[tuple[ir.Node, ...], int]:
    """Give the placeholder statement names unique numbers (the kernel builder's job)."""
    out: list[ir.Node] = []
    for n in nodes:
        if isinstance(n, ir.Stmt):
            out.append(dataclasses.replace(n, name=f"S{start}"))
            start += 1
        else:
            body, start = renumber(n.body, start)
            out.append(dataclasses.replace(n, body=body))
    return tuple(out), start


def node_kernel(graph: Graph, node: Node) -> ir.Kernel:
    """One node's lowering as a verified kernel (inputs, outputs and temps as buffers)."""
    lowered = lower_node(node, LowerContext(graph))
    buffers: dict[str, ir.Buffer] = {}
    for name in node.inputs:
        if name and name not in buffers:
            v = graph.value(name)
            buffers[name] = ir.Buffer(name, v.dtype, v.shape, "input")
    for name in node.outputs:
        if name:
            v = graph.value(name)
            buffers[name] = ir.Buffer(name, v.dtype, v.shape, "output")
    for t in lowered.temps:
        buffers[t.name] = t
    for name, value in lowered.constants:
        buffers[name] = ir.Buffer(name, value.dtype.name, value.shape, "input")
    for view, _ in lowered.views:
        buffers[view.name] = view
    body, _ = renumber(lowered.nests)
    kernel = ir.Kernel(node.name, tuple(buffers.values()), body, (node.name,))
    verify(kernel)
    return kernel


def run_krnl(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Lower every node, verify and interpret it (view ops reshape); return the graph
    outputs."""
    arrays: dict[str, np.ndarray] = {k: np.array(v) for k, v in graph.constants.items()}
    arrays.update({k: np.array(v) for k, v in feeds.items()})
    for node in graph.nodes:
        if node.op_type in VIEW_OPS:
            arrays[node.outputs[0]] = arrays[node.inputs[0]].reshape(
                graph.value(node.outputs[0]).shape
            )
            continue
        kernel = node_kernel(graph, node)
        lowered = lower_node(node, LowerContext(graph))
        arrays.update(lowered.constants)
        for view, value in lowered.views:
            arrays[view.name] = arrays[value].reshape(view.shape)
        for b in kernel.buffers:
            if b.kind == "output":
                # NaN-filled, so an element the lowering forgets to write fails the comparison.
                fill = np.nan if b.dtype in ir.FLOAT_DTYPES else 0
                arrays[b.name] = np.full(b.shape, fill, b.dtype)
        interpret(kernel, arrays)
    return {o.name: arrays[o.name] for o in graph.outputs}


def make_model(
    op_type: str,
    inputs: Sequence[tuple[str, np.ndarray | None]],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 17,
    constants: Mapping[str, np.ndarray] | None = None,
    n_outputs: int = 1,
) -> onnx.ModelProto:
    """A one-node model. ``inputs``: (name, example array) pairs; ``""`` names skip an optional
    input; names in ``constants`` become initializers. Output types come from shape inference."""
    constants = dict(constants or {})
    names = [n for n, _ in inputs]
    outputs = [f"y{k}" if n_outputs > 1 else "y" for k in range(n_outputs)]
    node = helper.make_node(
        op_type, names, outputs, name=f"{op_type.lower()}_0", **dict(attrs or {})
    )
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in inputs
        if n and n not in constants
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in constants.items()]
    untyped = [helper.make_value_info(o, onnx.TypeProto()) for o in outputs]
    graph = helper.make_graph([node], "g", graph_inputs, untyped, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    types = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    del model.graph.output[:]
    model.graph.output.extend(types[o] for o in outputs)
    onnx.checker.check_model(model)
    return model


def check(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5
) -> None:
    """The lowered model's outputs equal onnxruntime's."""
    got = run_krnl(graph_from_model(model), feeds)
    names = [out.name for out in model.graph.output]
    assert_close(
        [got[n] for n in names],
        onnxruntime_outputs(model, feeds),
        rtol=rtol,
        atol=atol,
        names=names,
    )


def check_op(
    op_type: str,
    inputs: Sequence[tuple[str, np.ndarray | None]],
    attrs: Mapping[str, Any] | None = None,
    opset: int = 17,
    constants: Sequence[str] = (),
    **tol: float,
) -> None:
    """Build a one-node model from example arrays, lower, interpret and compare to onnxruntime.

    Inputs named in ``constants`` become initializers (weights), the rest are fed.
    """
    model = make_model(
        op_type, inputs, attrs, opset, {n: a for n, a in inputs if n in constants and a is not None}
    )
    check(model, {n: a for n, a in inputs if n and n not in constants and a is not None}, **tol)


def rand(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return (
        np.random.default_rng(seed + 17 * len(shape) + sum(shape))
        .standard_normal(shape)
        .astype(dtype)
    )
