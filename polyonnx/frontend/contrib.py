"""onnxruntime's quantized contrib ops (domain ``com.microsoft``) as the standard ops they
stand for.

onnxruntime's quantizer in its QOperator format, and the int8 models of the ONNX model zoo,
write the ops it has no standard ``QLinear*`` for in onnxruntime's own domain: ``QLinearAdd``,
``QLinearMul``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearGlobalAveragePool``,
``QLinearAveragePool``, ``QLinearConcat``, ``QLinearSoftmax``, ``QLinearWhere`` and ``QGemm``;
its QDQ format with 16-bit or 4-bit integers (or on request) writes onnxruntime's own
``QuantizeLinear`` and ``DequantizeLinear``, which are the standard ops. Each ``QLinear*`` op
means: dequantize the integer inputs, apply the float op, quantize the result with the output's
scale and zero point::

    QLinearAdd(a, sa, za, b, sb, zb, sc, zc)
        = QuantizeLinear(Add(DequantizeLinear(a, sa, za), DequantizeLinear(b, sb, zb)), sc, zc)

so that is what they become, before anything else reads the model. A dequantized value that
the previous op quantized is then a quantize-dequantize pair, which becomes float ops fused
into that op's kernel (:mod:`polyonnx.graph.passes.fake_quant`). onnxruntime computes some of
these ops with integer arithmetic or precomputed scale ratios, so where a value falls within
float rounding of a half step its result may differ from this one by one quantization step.

An attribute this cannot express (a ``channels_last`` layout) is refused with
:class:`~polyonnx.errors.UnsupportedOpError`; other contrib ops stay as they are (and are
refused later, by domain).

Example:
    >>> from onnx import helper
    >>> n = helper.make_node("QLinearSigmoid", ["x", "s", "z", "s2", "z2"], ["y"],
    ...                      domain="com.microsoft")
    >>> g = helper.make_graph([n], "g", [], [])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    >>> [n.op_type for n in expand_contrib(m).graph.node]
    ['DequantizeLinear', 'Sigmoid', 'QuantizeLinear']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.rewrite import NodeWriter, with_nodes

DOMAIN = "com.microsoft"


@dataclass
class _Writer(NodeWriter):
    """The standard nodes (and initializers) replacing one contrib node."""

    opset: int
    types: dict[str, int]

    def dequantize(self, x: str, scale: str, zero: str = "", **attrs: Any) -> str:
        return self.op("DequantizeLinear", [x, scale, zero] if zero else [x, scale], **attrs)

    def quantize(self, y: str, scale: str, zero: str, like: str) -> str:
        """``y`` quantized into the node's output, an integer of ``like``'s type when the zero
        point is left out (QuantizeLinear alone would make it uint8)."""
        out = self.node.output[0]
        elem = self.types.get(zero or like, onnx.TensorProto.UINT8)
        self.types[out] = elem  # (for the contrib nodes that read it)
        if not zero:
            zero = self.fresh("zero")
            dtype = helper.tensor_dtype_to_np_dtype(elem)
            self.initializers.append(numpy_helper.from_array(np.zeros((), dtype), zero))
        return self.op("QuantizeLinear", [y, scale, zero], out)

    def refuse(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{DOMAIN}.{self.node.op_type}", None, self.node.name, why)


def _inputs(n: onnx.NodeProto, count: int) -> list[str]:
    return list(n.input) + [""] * (count - len(n.input))


def _binary(op: str) -> Callable[[_Writer], None]:
    def write(w: _Writer) -> None:
        a, sa, za, b, sb, zb, sc, zc = _inputs(w.node, 8)
        y = w.op(op, [w.dequantize(a, sa, za), w.dequantize(b, sb, zb)])
        w.quantize(y, sc, zc, a)

    return write


def _unary(op: str) -> Callable[[_Writer], None]:
    """The contrib op on one quantized input whose attributes (but ``channels_last``) are the
    float op's."""

    def write(w: _Writer) -> None:
        x, sx, zx, sy, zy = _inputs(w.node, 5)
        if w.attr("channels_last", 0):
            raise w.refuse("channels_last=1 (NHWC data) is not supported")
        attrs = {
            a.name: helper.get_attribute_value(a)
            for a in w.node.attribute
            if a.name != "channels_last"
        }
        w.quantize(w.op(op, [w.dequantize(x, sx, zx)], **attrs), sy, zy, x)

    return write


def _concat(w: _Writer) -> None:
    sy, zy, *rest = w.node.input
    if not rest or len(rest) % 3:
        raise ModelError(
            f"QLinearConcat node {w.node.name!r}: after Y_scale and Y_zero_point, its inputs "
            f"must be (tensor, scale, zero point) triples; it has {len(rest)} more"
        )
    parts = [w.dequantize(*rest[k : k + 3]) for k in range(0, len(rest), 3)]
    w.quantize(w.op("Concat", parts, axis=w.attr("axis")), sy, zy, rest[0])


def _softmax(w: _Writer) -> None:
    x, sx, zx, sy, zy = _inputs(w.node, 5)
    old = int(w.attr("opset", w.opset)) < 13  # Softmax-1/11: coerced to 2-D at the axis
    axis = int(w.attr("axis", 1 if old else -1))
    v = w.dequantize(x, sx, zx)
    if old == (w.opset < 13):
        y = w.op("Softmax", [v], axis=axis)
    elif old:  # the old meaning under a newer opset: flatten at the axis, then reshape back
        flat = w.op("Softmax", [w.op("Flatten", [v], axis=axis)], axis=-1)
        y = w.op("Reshape", [flat, w.op("Shape", [v])])
    elif axis == -1:  # (the last axis means the same under both)
        y = w.op("Softmax", [v], axis=-1)
    else:
        raise w.refuse(f"Softmax-13 semantics on axis {axis} in an opset-{w.opset} model")
    w.quantize(y, sy, zy, x)


def _where(w: _Writer) -> None:
    c, x, sx, zx, y, sy, zy, sz, zz = _inputs(w.node, 9)
    z = w.op("Where", [c, w.dequantize(x, sx, zx), w.dequantize(y, sy, zy)])
    w.quantize(z, sz, zz, x)


def _qgemm(w: _Writer) -> None:
    a, sa, za, b, sb, zb, c, sy, zy = _inputs(w.node, 9)
    trans_b = int(w.attr("transB", 0))
    # Per-column scales lie along B's axis of outputs and along the bias's only axis (the
    # axis attribute is opset 13's; before it, scales are per tensor).
    b_axis: dict[str, Any] = {} if w.opset < 13 else {"axis": 0 if trans_b else 1}
    c_axis: dict[str, Any] = {} if w.opset < 13 else {"axis": 0}
    inputs = [w.dequantize(a, sa, za), w.dequantize(b, sb, zb, **b_axis)]
    if c:  # an int32 bias in units of sa * sb
        inputs.append(w.dequantize(c, w.op("Mul", [sa, sb]), **c_axis))
    alpha = float(w.attr("alpha", 1.0))  # (onnxruntime scales the bias by alpha too)
    y = w.op(
        "Gemm",
        inputs,
        w.node.output[0] if not sy else "",
        alpha=alpha,
        beta=alpha,
        transA=int(w.attr("transA", 0)),
        transB=trans_b,
    )
    if sy:
        w.quantize(y, sy, zy, a)


def _same(op: str) -> Callable[[_Writer], None]:
    """The contrib op as the standard op of the same inputs and attributes (onnxruntime's
    QuantizeLinear and DequantizeLinear: the standard ones with 16-bit and 4-bit integers
    before the opsets that have them)."""

    def write(w: _Writer) -> None:
        attrs = {a.name: helper.get_attribute_value(a) for a in w.node.attribute}
        w.op(op, list(w.node.input), w.node.output[0], **attrs)

    return write


_EXPANSIONS: dict[str, Callable[[_Writer], None]] = {
    "QuantizeLinear": _same("QuantizeLinear"),
    "DequantizeLinear": _same("DequantizeLinear"),
    "QLinearAdd": _binary("Add"),
    "QLinearMul": _binary("Mul"),
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu"),
    "QLinearGlobalAveragePool": _unary("GlobalAveragePool"),
    "QLinearAveragePool": _unary("AveragePool"),
    "QLinearConcat": _concat,
    "QLinearSoftmax": _softmax,
    "QLinearWhere": _where,
    "QGemm": _qgemm,
}


def expand_contrib(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its main graph's quantized contrib nodes replaced (see the module
    docstring); ``model`` itself when it has none."""
    graph = model.graph
    if not any(n.domain == DOMAIN and n.op_type in _EXPANSIONS for n in graph.node):
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in (*graph.input, *graph.value_info, *graph.output)
    }
    types.update((t.name, t.data_type) for t in graph.initializer)
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    for n in graph.node:
        if n.domain != DOMAIN or n.op_type not in _EXPANSIONS:
            nodes.append(n)
            continue
        if opset < 10:
            raise UnsupportedOpError(
                f"{DOMAIN}.{n.op_type}", None, n.name, f"needs opset >= 10 (the model's: {opset})"
            )
        w = _Writer(n, opset, types)
        _EXPANSIONS[n.op_type](w)
        nodes.extend(w.nodes)
        initializers.extend(w.initializers)
    return with_nodes(model, nodes, initializers)
