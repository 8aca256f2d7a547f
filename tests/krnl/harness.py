"""Test harness for lowerings: ONNX model -> graph.ir.Graph -> krnl -> interpreter, vs onnxruntime.

Builds the Graph directly from an ``onnx.helper`` model (after ONNX shape inference) so these
tests do not depend on the frontend.

Also the models and kernels more than one test module of ``tests/krnl`` (and
``tests/schedule``) build: convs over a channel-blocked input (:func:`conv_input_model`, run
by :func:`run_against_onnxruntime`), a reduction with a point-wise epilogue
(:func:`matvec_relu`) and recurrent layers (:class:`RecurrentCase`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.krnl import ir
from polyonnx.krnl.ir import Access, Buffer, Kernel, Load, Loop, Stmt, maximum
from polyonnx.krnl.lower.registry import LowerContext, lower_node
from polyonnx.krnl.program import VIEW_OPS
from polyonnx.krnl.verify import verify
from polyonnx.testing import assert_close, onnxruntime_outputs, onnxruntime_session

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


# --------------------------------------------------------------------------- whole models

CHANNELS = 64
"""Channels of :func:`conv_input_model`'s input: a multiple of every host's channel block."""


def conv_input_model(
    nodes: list[onnx.NodeProto],
    outputs: list[str],
    channels: int = CHANNELS,
    weights: dict[str, tuple[int, ...]] | None = None,
) -> onnx.ModelProto:
    """A model over ``x: [1, channels, 9, 9]`` with random weights of the given shapes."""
    rng = np.random.default_rng(len(nodes))
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name
        )
        for name, shape in (weights or {}).items()
    ]
    graph = helper.make_graph(
        nodes,
        "borders",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 9, 9])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def run_against_onnxruntime(model: onnx.ModelProto, threads: int, runs: int = 2) -> None:
    """Compile ``model`` (one input, ``x``) for ``threads`` and run it ``runs`` times on
    fresh random inputs, each run's outputs against onnxruntime's."""
    sess = polyonnx.InferenceSession(
        model, options=polyonnx.Options(num_threads=threads, cache=False)
    )
    ref = onnxruntime_session(model)
    rng = np.random.default_rng(threads)
    shape = [int(d) for d in sess.get_inputs()[0].shape]
    for _ in range(runs):  # a border the first run wrote would show in the second
        x = rng.standard_normal(shape).astype(np.float32)
        for got, want in zip(sess.run(None, {"x": x}), ref.run(None, {"x": x}), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- kernels

_F32 = "float32"
_I, _K = ir.Aff.var("i"), ir.Aff.var("k")


def matvec_relu(extra: tuple[Stmt, ...] = (), residual: bool = False) -> Kernel:
    """``t = b + W x`` (a reduction into temp ``t``), ``y = relu(t [+ r])``, then ``extra``."""
    init = Stmt("S0", Access("t", (_I,)), Load("b", (_I,), _F32))
    update = Stmt(
        "S1",
        Access("t", (_I,)),
        Load("t", (_I,), _F32) + Load("w", (_I, _K), _F32) * Load("x", (_K,), _F32),
    )
    value = Load("t", (_I,), _F32) + Load("r", (_I,), _F32) if residual else Load("t", (_I,), _F32)
    epilogue = Stmt("S2", Access("y", (_I,)), maximum(value, 0.0))
    buffers = [
        Buffer("x", _F32, (5,), "input"),
        Buffer("w", _F32, (4, 5), "input"),
        Buffer("b", _F32, (4,), "input"),
        Buffer("r", _F32, (4,), "input"),
        Buffer("t", _F32, (4,), "temp"),
        Buffer("y", _F32, (4,), "output"),
        Buffer("z", _F32, (4,), "output"),
    ]
    body = [Loop("i", 0, 4, (init, Loop("k", 0, 5, (update,)))), Loop("i", 0, 4, (epilogue,))]
    body += [Loop("i", 0, 4, (s,)) for s in extra]
    return Kernel("k", tuple(buffers), tuple(body))


# --------------------------------------------------------------------------- recurrent layers

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass(frozen=True)
class RecurrentCase:
    """An RNN, GRU or LSTM layer: its op, sizes, direction, layout and optional inputs."""

    op: str
    seq: int
    batch: int
    inp: int
    hidden: int
    direction: str = "forward"
    layout: int = 0
    lens: bool = False
    initial: bool = False
    peep: bool = False
    fed: bool = False
    """W, R and B as graph inputs rather than initializers (packed by a nest at run time)."""
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        flags = [
            f for f, on in (("lens", self.lens), ("h0", self.initial), ("peep", self.peep),
                            ("fed", self.fed)) if on
        ]  # fmt: skip
        extra = [f"{k}={v}" for k, v in self.attrs.items()]
        return "-".join(
            [
                self.op,
                f"T{self.seq}B{self.batch}I{self.inp}H{self.hidden}",
                self.direction,
                f"layout{self.layout}",
                *flags,
                *extra,
            ]
        )


def case_arrays(case: RecurrentCase, seed: int) -> dict[str, np.ndarray]:
    """Inputs in layout 0 (onnxruntime's), weights scaled so the states stay in range."""
    rng = np.random.default_rng(seed)
    dirs = 2 if case.direction == "bidirectional" else 1
    g, h = GATES[case.op], case.hidden

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {
        "x": normal(case.seq, case.batch, case.inp),
        "w": normal(dirs, g * h, case.inp, scale=1 / np.sqrt(case.inp)),
        "r": normal(dirs, g * h, h, scale=1 / np.sqrt(h)),
        "b": normal(dirs, 2 * g * h, scale=0.5),
    }
    if case.lens:
        lens = rng.integers(1, case.seq + 1, case.batch).astype(np.int32)
        lens[0] = case.seq  # (one full row, so Y has no all-zero tail)
        out["l"] = lens
    if case.initial:
        out["h0"] = normal(dirs, case.batch, h)
        if case.op == "LSTM":
            out["c0"] = normal(dirs, case.batch, h)
    if case.peep:
        out["p"] = normal(dirs, 3 * h, scale=0.5)
    return out


#: Inputs whose batch and sequence axes swap in layout 1.
TO_BATCH_MAJOR = {"x": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}


def case_model(case: RecurrentCase, arrays: dict[str, np.ndarray], layout: int) -> onnx.ModelProto:
    """The one-layer model of ``case`` in ``layout`` (``arrays`` in layout 0, as from
    :func:`case_arrays`): weights as initializers unless ``case.fed``."""
    order = ["x", "w", "r", "b", "l", "h0"] + (["c0", "p"] if case.op == "LSTM" else [])
    names = [n if n in arrays else "" for n in order]
    while not names[-1]:
        names.pop()
    weights = {"w", "r", "b"} if not case.fed else set()
    arrays = {
        n: a.transpose(TO_BATCH_MAJOR[n]) if layout and n in TO_BATCH_MAJOR else a
        for n, a in arrays.items()
    }
    dirs = 2 if case.direction == "bidirectional" else 1
    t, b, h = case.seq, case.batch, case.hidden
    shapes = {
        "Y": [t, dirs, b, h] if not layout else [b, t, dirs, h],
        "Y_h": [dirs, b, h] if not layout else [b, dirs, h],
    }
    outputs = ["Y", "Y_h"] + (["Y_c"] if case.op == "LSTM" else [])
    shapes["Y_c"] = shapes["Y_h"]
    attrs = {"hidden_size": h, "direction": case.direction, **case.attrs}
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(case.op, names, outputs, name="rnn", **attrs)

    def info(n: str, a: np.ndarray) -> onnx.ValueInfoProto:
        kind = TensorProto.INT32 if a.dtype == np.int32 else TensorProto.FLOAT
        return helper.make_tensor_value_info(n, kind, list(a.shape))

    graph = helper.make_graph(
        [node],
        "rnn",
        [info(n, arrays[n]) for n in names if n and n not in weights],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs],
        [numpy_helper.from_array(arrays[n], n) for n in names if n in weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model
