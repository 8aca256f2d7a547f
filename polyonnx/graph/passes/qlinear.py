"""QLinearConv and QLinearMatMul with constant weights as float Conv/MatMul on integer values,
when float32 provably sums them exactly.

Both ops sum ``(x - x_zero_point) * (w - w_zero_point)`` in int32, then requantize in float32:
``y = saturate(round(float32(acc) * (x_scale * w_scale / y_scale)) + y_zero_point)``. Every
operand of that sum is a small integer, and float32 holds every integer below 2^24 exactly; the
weights are known, so each output channel's largest possible partial sum is too::

    bound[oc] = sum(|w[oc] - w_zero_point|) * max|x - x_zero_point| + |bias[oc]|

(``max|x - x_zero_point|`` over the whole range of x's type). When every bound is below 2^24,
a float32 Conv (MatMul) of the integer values gives the int32 sum exactly, in whatever order
its schedule sums, so the op becomes::

    QuantizeLinear(Mul(Conv(DequantizeLinear(x, 1, x_zero_point), w - w_zero_point, bias),
                       x_scale * w_scale / y_scale), 1, y_zero_point)

bit for bit the integer lowering's result (:mod:`polyonnx.krnl.lower.qconv`), with the float
convolution's blocked layout, register tiles and fused epilogue instead of an int32 loop nest.
The ``QuantizeLinear -> DequantizeLinear`` pair between two such ops then becomes float ops in
the first one's epilogue (:mod:`polyonnx.graph.passes.fake_quant`). An op whose bound reaches
2^24 (large integer weights over a long window) keeps the integer lowering.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> consts = {"s": np.array(0.1, "float32"), "z": np.array(0, "uint8"),
    ...           "w": np.ones((2, 3), "int8"), "wz": np.array(0, "int8")}
    >>> v = {n: Value(n, str(a.dtype), a.shape) for n, a in consts.items()}
    >>> v.update({"a": Value("a", "uint8", (4, 2)), "y": Value("y", "uint8", (4, 3))})
    >>> g = Graph("g", (v["a"],), (v["y"],), (Node("mm", "QLinearMatMul",
    ...     ("a", "s", "z", "w", "s", "wz", "s", "z"), ("y",)),), v, consts)
    >>> [n.op_type for n in qlinear_as_float(g).nodes]
    ['DequantizeLinear', 'MatMul', 'Mul', 'QuantizeLinear']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from polyonnx.graph.ir import Graph, Node, Value, fresh_name

#: float32 holds every integer of smaller magnitude exactly.
EXACT = 1 << 24
_INTEGERS = ("int8", "uint8")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A quantized op as float: its integer input and zero point, the centred weights (and
    bias) as float32, the requantization multiplier and the output's zero point."""

    x: str
    x_zero: str
    weights: np.ndarray
    bias: np.ndarray | None
    multiplier: np.ndarray
    y_zero: str


def qlinear_as_float(graph: Graph) -> Graph:
    """Each QLinearConv / QLinearMatMul that float32 computes exactly as the float ops of the
    module docstring (other nodes unchanged)."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        plan = None if n.domain else _plan(n, graph)
        if plan is None:
            nodes.append(n)
            continue
        nodes.extend(_float_nodes(n, plan, values, consts, taken))
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _plan(n: Node, graph: Graph) -> _Plan | None:
    if n.op_type == "QLinearConv":
        x, xs, xz, w, ws, wz, ys, yz, b = (n.input(k) for k in range(9))
        channel_axis = 0  # of the weights: output channels first
    elif n.op_type == "QLinearMatMul":
        x, xs, xz, w, ws, wz, ys, yz = (n.input(k) for k in range(8))
        b, channel_axis = "", 1  # the weights' columns
    else:
        return None
    c = graph.constants
    if not all(name in c for name in (xs, w, ws, ys) + tuple(z for z in (xz, wz, yz, b) if z)):
        return None
    if graph.value(x).dtype not in _INTEGERS or graph.value(n.outputs[0]).dtype not in _INTEGERS:
        return None
    weights = np.asarray(c[w])
    if weights.dtype.name not in _INTEGERS or (n.op_type == "QLinearMatMul" and weights.ndim != 2):
        return None
    channels = weights.shape[channel_axis]
    x_scale, w_scale, y_scale = (np.asarray(c[s], np.float32) for s in (xs, ws, ys))
    single = [x_scale, y_scale] + [np.asarray(c[z]) for z in (xz, yz) if z]
    if any(a.size != 1 for a in single) or w_scale.size not in (1, channels):
        return None  # (the integer lowering names what is wrong)
    w_zero = np.asarray(c[wz]).astype(np.int64).reshape(-1) if wz else np.zeros(1, np.int64)
    if w_zero.size not in (1, channels):
        return None
    # Centred weights, their channel axis first, then each channel's bound.
    by_channel = np.moveaxis(weights.astype(np.int64), channel_axis, 0)
    centred = by_channel - w_zero.reshape((-1,) + (1,) * (by_channel.ndim - 1))
    info = np.iinfo(graph.value(x).dtype)
    x_zero = int(np.asarray(c[xz]).reshape(-1)[0]) if xz else 0
    x_reach = max(abs(info.min - x_zero), abs(info.max - x_zero))
    bias = np.asarray(c[b]).astype(np.int64).reshape(-1) if b else None
    bound = np.abs(centred).reshape(channels, -1).sum(axis=1) * x_reach
    if bias is not None:
        bound = bound + np.abs(bias)
    if bound.max(initial=0) >= EXACT:
        return None
    multiplier = (x_scale.reshape(-1) * w_scale.reshape(-1)) / y_scale.reshape(-1)  # as lowered
    return _Plan(
        x,
        xz,
        np.moveaxis(centred, 0, channel_axis).astype(np.float32),
        None if bias is None else bias.astype(np.float32),
        multiplier.astype(np.float32),
        yz,
    )


def _float_nodes(
    n: Node,
    plan: _Plan,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """DequantizeLinear (scale 1), Conv or MatMul, Mul by the multiplier, QuantizeLinear."""
    y = values[n.outputs[0]]

    def constant(label: str, array: np.ndarray) -> str:
        name = fresh_name(f"{n.name}_{label}", taken)
        consts[name] = array
        values[name] = Value(name, str(array.dtype), array.shape)
        return name

    def value(label: str, shape: tuple[int | str, ...]) -> str:
        name = fresh_name(f"{n.name}_{label}", taken)
        values[name] = Value(name, "float32", shape)
        return name

    def node(
        label: str, op: str, inputs: list[str], out: str, attrs: Mapping | None = None
    ) -> Node:
        name = fresh_name(f"{n.name}_{label}", taken)
        return Node(name, op, inputs, [out], attrs or {}, "", n.guard)

    one = constant("one", np.array(1.0, np.float32))
    centred = value("centred", values[plan.x].shape)
    acc = value("acc", y.shape)
    scaled = value("scaled", y.shape)
    if n.op_type == "QLinearConv":
        multiplier = plan.multiplier.reshape((-1,) + (1,) * (len(y.shape) - 2))
        operands = [centred, constant("weights", plan.weights)]
        if plan.bias is not None:
            operands.append(constant("bias", plan.bias))
        product = node("conv", "Conv", operands, acc, dict(n.attrs))
    else:
        multiplier = plan.multiplier
        product = node("matmul", "MatMul", [centred, constant("weights", plan.weights)], acc)
    x_zero = [plan.x_zero] if plan.x_zero else []
    y_zero = [plan.y_zero] if plan.y_zero else []
    return [
        node("centre", "DequantizeLinear", [plan.x, one, *x_zero], centred),
        product,
        node("rescale", "Mul", [acc, constant("multiplier", multiplier)], scaled),
        Node(n.name, "QuantizeLinear", [scaled, one, *y_zero], n.outputs, guard=n.guard),
    ]
