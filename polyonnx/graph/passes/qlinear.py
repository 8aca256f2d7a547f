"""QLinearConv, QLinearMatMul, ConvInteger and MatMulInteger with constant weights as float
Conv/MatMul on integer values, when float32 provably sums them exactly.

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
Exact in any order of the sum, but only as a sum of the products: the Conv carries
:data:`EXACT_ATTR`, which keeps it out of Winograd's form (whose transforms round).
The ``QuantizeLinear -> DequantizeLinear`` pair between two such ops then becomes float ops in
the first one's epilogue (:mod:`polyonnx.graph.passes.fake_quant`).

An op whose bound reaches 2^24 (large integer weights over a long window: per-channel int8
weights over 3x3x512 inputs) splits its weights (and bias) into digits of base
:data:`DIGIT`, ``w = DIGIT * hi + lo`` with ``lo`` in ``[-DIGIT/2, DIGIT/2)``, and sums each in
float32 when both bounds are below 2^24: two exact float32 convolutions, on the fast path,
then ``DIGIT * hi + lo``, where ``DIGIT * hi`` is exact and the addition rounds the exact sum
once, as the integer lowering's ``float32(acc)`` does. Past that (or for a ConvInteger or
MatMulInteger whose int32 output is read as an integer, not only cast to float32 as dynamic
quantization does) the op sums in float64, which holds every integer below 2^53: half the
vector lanes and no blocked layout, and the one conversion
of the exact sum to float32 again rounds it as ``float32(acc)``. Either way the result is the
same bit for bit.

On a target with a byte dot product (x86 VNNI: ``dot4=True``), a MatMulInteger or
QLinearMatMul whose centred weights are bytes (int8) and whose depth is a multiple of 4 sums
those bytes instead, in int32 as the definition does: polyonnx's ``PackedMatMulInteger`` of A,
the weights packed four to an int32 and their column sums (and A's zero point), see
:mod:`polyonnx.krnl.lower.quant`; its sum, as int32 or (for a requantization, or for Casts to
float32) as float32, is requantized by the same nodes as the float form's.

ConvInteger and MatMulInteger (dynamic quantization: their x zero point often comes from a
DynamicQuantizeLinear at run time, so the bound takes the whole range of x's type) output the
int32 sum itself: the float sum cast to int32, and a Cast of that back to float32 (what
dynamic quantization does next) reads the float sum directly.

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
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import TensorProto

from polyonnx.graph.ir import INTERNAL_DOMAIN, Graph, Node, Value, fresh_name
from polyonnx.graph.pads import reads_no_padding

EXACT_ATTR = "exact_integers"
"""The attribute (1) of a Conv this pass writes: its sum must stay exact, so no later pass may
compute it another way that rounds (Winograd's transforms do)."""

#: float32 (float64) holds every integer of smaller magnitude exactly.
EXACT = 1 << 24
EXACT_FLOAT64 = 1 << 53
#: The base of the weights' digits when one float32 sum could round (see the module docstring).
DIGIT = 16
_INTEGERS = ("int8", "uint8")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A quantized op as float: its integer input and zero point, the centred weights (and
    bias) in the sum's type, the requantization multiplier and the output's zero point (None
    and "" for ConvInteger and MatMulInteger, whose output is the int32 sum itself)."""

    x: str
    x_zero: str
    terms: tuple[tuple[np.ndarray, np.ndarray | None], ...]
    """(weights, bias) of each sum: one, or the high and low digits of the weights (and bias)
    in base :data:`DIGIT`, whose sums ``hi`` and ``lo`` give ``DIGIT * hi + lo``."""
    multiplier: np.ndarray | None
    y_zero: str
    dtype: str  # of the sum: float32, or float64 past float32's bound


def qlinear_as_float(graph: Graph, dot4: bool = False) -> Graph:
    """Each quantized Conv / MatMul that float32 computes exactly as the float ops of the
    module docstring (other nodes unchanged); with ``dot4`` (the target has a byte dot
    product: :func:`polyonnx.codegen.target.dot4_bits`), a quantized MatMul whose centred
    weights are bytes and whose depth is a multiple of 4 sums them as bytes instead
    (``PackedMatMulInteger``: see the module docstring). Runs before Identity nodes are
    removed (it writes some)."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    sums: dict[str, str] = {}  # an int32 sum -> the float32 value it was cast from
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}

    def read_as_float(value: str) -> bool:
        """Whether only Casts to float32 read ``value`` (dynamic quantization's int32 sum)."""
        readers = consumers.get(value, [])
        return (
            value not in outputs
            and bool(readers)
            and all(r.op_type == "Cast" and r.attr("to") == TensorProto.FLOAT for r in readers)
        )

    for n in graph.nodes:
        if n.op_type == "Cast" and n.input(0) in sums and n.attr("to") == TensorProto.FLOAT:
            # (an exact integer cast to int32 and back: the float sum itself)
            nodes.append(Node(n.name, "Identity", [sums[n.inputs[0]]], n.outputs, guard=n.guard))
            continue
        conv = _packed_conv(n, graph) if dot4 and not n.domain else None
        if conv is not None:
            nodes.extend(_packed_conv_nodes(n, conv, values, consts, taken))
            continue
        packed = _packed(n, graph) if dot4 and not n.domain else None
        if packed is not None:
            written, float_sum = _packed_nodes(
                n, packed, read_as_float(n.outputs[0]), values, consts, taken
            )
            nodes.extend(written)
            if float_sum:
                sums[n.outputs[0]] = float_sum
            continue
        plan = None if n.domain else _plan(n, graph, read_as_float(n.outputs[0]))
        if plan is None:
            nodes.append(n)
            continue
        written, float_sum = _float_nodes(n, plan, values, consts, taken)
        nodes.extend(written)
        if plan.multiplier is None:
            sums[n.outputs[0]] = float_sum
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


#: Each op's inputs, by role ("" where it has none).
_ROLES = {
    "QLinearConv": ("x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"),
    "QLinearMatMul": ("x", "xs", "xz", "w", "ws", "wz", "ys", "yz"),
    "ConvInteger": ("x", "w", "xz", "wz"),
    "MatMulInteger": ("x", "w", "xz", "wz"),
}


def _roles(n: Node, graph: Graph) -> dict[str, str] | None:
    """Each input of quantized op ``n`` by role ("" where it has none), when the op's form
    suits a rewrite: constant weights, scales and zero points (x's may be computed at run
    time, by DynamicQuantizeLinear, but is one element of x's type), integer x, weights and
    output. None otherwise (the integer lowering names what is wrong, if anything)."""
    if n.op_type not in _ROLES:
        return None
    r = dict.fromkeys(("xs", "ws", "ys", "yz", "b"), "")
    r.update((role, n.input(k)) for k, role in enumerate(_ROLES[n.op_type]))
    c = graph.constants
    if not all(r[k] in c for k in ("w", "xs", "ws", "ys", "wz", "yz", "b") if r[k]):
        return None
    requantized = n.op_type.startswith("QLinear")
    x_dtype, y_dtype = graph.value(r["x"]).dtype, graph.value(n.outputs[0]).dtype
    if x_dtype not in _INTEGERS or y_dtype not in (_INTEGERS if requantized else ("int32",)):
        return None
    xz = r["xz"]
    if xz and (graph.value(xz).dtype != x_dtype or math.prod(graph.value(xz).dims) != 1):
        return None
    if np.asarray(c[r["w"]]).dtype.name not in _INTEGERS:
        return None
    return r


def _plan(n: Node, graph: Graph, read_as_float: bool = False) -> _Plan | None:
    """How ``n`` computes as float ops, or None; ``read_as_float``: only Casts to float32 read
    its output (so its sum need only be exact once rounded to float32)."""
    r = _roles(n, graph)
    if r is None:
        return None
    requantized = n.op_type.startswith("QLinear")
    channel_axis = 1 if "MatMul" in n.op_type else 0  # of the weights: outputs first, or columns
    c = graph.constants
    x_dtype, xz = graph.value(r["x"]).dtype, r["xz"]
    weights = np.asarray(c[r["w"]])
    if channel_axis == 1 and weights.ndim != 2:
        return None
    channels = weights.shape[channel_axis]
    multiplier = _multiplier(c, r, channels) if requantized else None
    centred = _centred(weights, c.get(r["wz"]), channel_axis)
    if (requantized and multiplier is None) or centred is None:
        return None
    bias = np.asarray(c[r["b"]]).astype(np.int64).reshape(-1) if r["b"] else np.zeros(1, np.int64)
    x_zero = c.get(xz) if xz else np.zeros(1, np.int64)
    reach = _reach(x_dtype, x_zero)

    def largest(w: np.ndarray, b: np.ndarray) -> int:
        """The largest magnitude a sum with these weights and bias can reach."""
        return int((np.abs(w).reshape(channels, -1).sum(axis=1) * reach + np.abs(b)).max(initial=0))

    terms = [(centred, bias)]
    dtype: type[np.floating] = np.float32
    whole = largest(centred, bias)
    if whole >= EXACT:
        # Digits in [-DIGIT/2, DIGIT/2): each digit's sum in float32, then one rounding of
        # DIGIT * hi + lo (DIGIT * hi is exact) gives float32(acc) as the requantization
        # (or a Cast to float32) reads it; an int32 output read as such needs the sum
        # itself, in float64.
        (w_hi, w_lo), (b_hi, b_lo) = _digits(centred), _digits(bias)
        hi, lo = (w_hi, b_hi), (w_lo, b_lo)
        if (requantized or read_as_float) and max(largest(*hi), largest(*lo)) < EXACT:
            terms = [hi, lo]
        elif whole < EXACT_FLOAT64:
            dtype = np.float64
        else:
            return None
    return _Plan(
        r["x"],
        xz,
        tuple(
            (np.moveaxis(w, 0, channel_axis).astype(dtype), b.astype(dtype) if r["b"] else None)
            for w, b in terms
        ),
        multiplier,
        r["yz"],
        np.dtype(dtype).name,
    )


def _digits(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(hi, lo)`` with ``a = DIGIT * hi + lo`` and ``-DIGIT/2 <= lo < DIGIT/2``."""
    lo = (a + DIGIT // 2) % DIGIT - DIGIT // 2
    return (a - lo) // DIGIT, lo


def _multiplier(
    c: Mapping[str, np.ndarray], r: Mapping[str, str], channels: int
) -> np.ndarray | None:
    """``(x_scale * w_scale) / y_scale`` in float32 as the integer lowering computes it (per
    tensor or per channel); None when a scale or zero point has an unexpected size."""
    x_scale, w_scale, y_scale = (np.asarray(c[r[k]], np.float32) for k in ("xs", "ws", "ys"))
    single = [x_scale, y_scale] + [np.asarray(c[r[k]]) for k in ("xz", "yz") if r[k]]
    if any(a.size != 1 for a in single) or w_scale.size not in (1, channels):
        return None  # (the integer lowering names what is wrong)
    return ((x_scale.reshape(-1) * w_scale.reshape(-1)) / y_scale.reshape(-1)).astype(np.float32)


def _centred(weights: np.ndarray, zero: np.ndarray | None, channel_axis: int) -> np.ndarray | None:
    """``weights - zero`` in int64 with the channel axis first; None when the zero point is
    neither per tensor nor per channel."""
    by_channel = np.moveaxis(weights.astype(np.int64), channel_axis, 0)
    z = np.zeros(1, np.int64) if zero is None else np.asarray(zero).astype(np.int64).reshape(-1)
    if z.size not in (1, by_channel.shape[0]):
        return None
    return by_channel - z.reshape((-1,) + (1,) * (by_channel.ndim - 1))


def _reach(x_dtype: str, zero: np.ndarray | None) -> int:
    """The largest ``|x - x_zero_point|``: from a known zero point, else anywhere in the type's
    range (a zero point known only at run time)."""
    info = np.iinfo(x_dtype)
    if zero is None:
        return int(info.max) - int(info.min)
    z = int(np.asarray(zero).reshape(-1)[0])
    return max(abs(int(info.min) - z), abs(int(info.max) - z))


@dataclasses.dataclass
class _Writer:
    """Writes the nodes (and their values and constants) that replace the quantized op ``n``;
    ``nodes`` in order."""

    n: Node
    values: dict[str, Value]
    consts: dict[str, np.ndarray]
    taken: set[str]
    nodes: list[Node] = dataclasses.field(default_factory=list)

    def constant(self, label: str, array: np.ndarray) -> str:
        name = fresh_name(f"{self.n.name}_{label}", self.taken)
        self.consts[name] = array
        self.values[name] = Value(name, str(array.dtype), array.shape)
        return name

    def node(
        self,
        label: str,
        op: str,
        inputs: list[str],
        shape: tuple,
        dtype: str,
        domain: str = "",
        **attrs: Any,
    ) -> str:
        """A node making a new value of ``shape`` and ``dtype``; the value's name."""
        out = fresh_name(f"{self.n.name}_{label}", self.taken)
        self.values[out] = Value(out, dtype, shape)
        name = fresh_name(f"{self.n.name}_{label}", self.taken)
        self.nodes.append(Node(name, op, inputs, [out], attrs, domain, self.n.guard))
        return out

    def last(self, op: str, inputs: list[str], domain: str = "", **attrs: Any) -> None:
        """The node making ``n``'s own output, under ``n``'s name."""
        n = self.n
        self.nodes.append(Node(n.name, op, inputs, n.outputs, attrs, domain, n.guard))

    def packed_matmul(
        self, x: str, x_zero: str, packed: tuple[np.ndarray, np.ndarray]
    ) -> list[str]:
        """The inputs of a ``PackedMatMulInteger`` of ``x`` by ``packed`` (the weights' quads
        and column sums, see :func:`_pack`)."""
        quads, sums = self.constant("quads", packed[0]), self.constant("column_sums", packed[1])
        return [x, quads, sums, *([x_zero] if x_zero else [])]

    def packed_conv(self, x: str, weights: np.ndarray, init: np.ndarray) -> str:
        """A ``PackedConvInteger`` of ``x`` by centred int8 ``weights`` from ``init``, with
        ``n``'s window: its float32 sum."""
        n, y = self.n, self.values[self.n.outputs[0]]
        inputs = [x, self.constant("weights", weights), self.constant("init", init)]
        attrs = {k: v for k, v in n.attrs if k != "group"}
        op = "PackedConvInteger"
        return self.node("bytes", op, inputs, y.shape, "float32", INTERNAL_DOMAIN, **attrs)

    def requantize(self, acc32: str, multiplier: np.ndarray, y_zero: str) -> None:
        """``n``'s output: ``QuantizeLinear(acc32 * multiplier, 1, y_zero)``."""
        shape = self.values[self.n.outputs[0]].shape
        scaled = self.node(
            "rescale", "Mul", [acc32, self.constant("multiplier", multiplier)], shape, "float32"
        )
        one = self.constant("one", np.array(1.0, np.float32))
        self.last("QuantizeLinear", [scaled, one, *([y_zero] if y_zero else [])])


def _float_nodes(
    n: Node,
    plan: _Plan,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> tuple[list[Node], str]:
    """The nodes replacing ``n`` (see the module docstring), and the float32 value of the sum."""
    y = values[n.outputs[0]]
    w = _Writer(n, values, consts, taken)
    x_shape, x_zero = values[plan.x].shape, [plan.x_zero] if plan.x_zero else []
    if plan.dtype == "float32":  # (x - x_zero_point, exact in float32)
        one = w.constant("unit", np.array(1.0, np.float32))
        centred = w.node("centre", "DequantizeLinear", [plan.x, one, *x_zero], x_shape, "float32")
    else:
        centred = w.node("widen", "Cast", [plan.x], x_shape, plan.dtype, to=TensorProto.DOUBLE)
        if x_zero:
            zero_shape = values[plan.x_zero].shape
            to = TensorProto.DOUBLE
            zero = w.node("widen_zero", "Cast", x_zero, zero_shape, plan.dtype, to=to)
            centred = w.node("centre", "Sub", [centred, zero], x_shape, plan.dtype)
    sums = []
    for k, (weights, bias) in enumerate(plan.terms):
        suffix = "" if len(plan.terms) == 1 else ("_hi", "_lo")[k]
        operands = [centred, w.constant(f"weights{suffix}", weights)]
        if n.op_type in ("QLinearConv", "ConvInteger"):
            if bias is not None:
                operands.append(w.constant(f"bias{suffix}", bias))
            attrs = {**dict(n.attrs), EXACT_ATTR: 1}
            sums.append(w.node(f"conv{suffix}", "Conv", operands, y.shape, plan.dtype, **attrs))
        else:
            sums.append(w.node(f"matmul{suffix}", "MatMul", operands, y.shape, plan.dtype))
    acc = sums[0]
    if len(sums) == 2:  # DIGIT * hi + lo, rounded once (DIGIT * hi is exact)
        digit = w.constant("digit", np.array(DIGIT, np.float32))
        shifted = w.node("shift", "Mul", [sums[0], digit], y.shape, "float32")
        acc = w.node("digits", "Add", [shifted, sums[1]], y.shape, "float32")
    acc32 = acc
    if plan.dtype != "float32":  # (rounded once, as the integer lowering's float32(acc))
        acc32 = w.node("narrow", "Cast", [acc], y.shape, "float32", to=TensorProto.FLOAT)
    if plan.multiplier is None:  # the exact sum, as the op's int32
        w.last("Cast", [acc], to=TensorProto.INT32)
        return w.nodes, acc32
    multiplier = plan.multiplier
    if n.op_type == "QLinearConv":  # (per output channel: along axis 1 of the output)
        multiplier = multiplier.reshape((-1,) + (1,) * (len(y.shape) - 2))
    w.requantize(acc32, multiplier, plan.y_zero)
    return w.nodes, acc32


@dataclasses.dataclass(frozen=True)
class _Packed:
    """A quantized MatMul as ``PackedMatMulInteger``: its A and A's zero point, the centred
    weights four bytes to an int32 (``[K / 4, N]``) and their column sums, and the
    requantization multiplier and output zero point (None and "" for MatMulInteger)."""

    x: str
    x_zero: str
    quads: np.ndarray
    column_sums: np.ndarray
    multiplier: np.ndarray | None
    y_zero: str


def _packed(n: Node, graph: Graph) -> _Packed | None:
    """``n`` as a ``PackedMatMulInteger`` when it is a MatMulInteger or QLinearMatMul with
    constant 2-D weights whose centred values are bytes (int8) and whose depth is a multiple
    of 4, else None."""
    if n.op_type not in ("MatMulInteger", "QLinearMatMul"):
        return None
    r = _roles(n, graph)
    if r is None:
        return None
    c = graph.constants
    weights = np.asarray(c[r["w"]])
    packed = _pack(weights, c.get(r["wz"])) if len(graph.value(r["x"]).shape) >= 2 else None
    if packed is None:
        return None
    multiplier = None
    if n.op_type == "QLinearMatMul":
        multiplier = _multiplier(c, r, weights.shape[1])
        if multiplier is None:
            return None
    return _Packed(r["x"], r["xz"], *packed, multiplier, r["yz"])


def _pack(weights: np.ndarray, zero: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """Integer weights ``[K, N]`` less their zero point (per tensor or per column) four bytes
    to an int32 (``[K / 4, N]``), and each column's sum; None unless they are 2-D, ``K`` is a
    multiple of 4 and the centred weights fit int8."""
    if weights.ndim != 2 or weights.shape[0] % 4:
        return None
    centred = _centred(weights, zero, 1)  # [N, K]
    if centred is None or not _fits_bytes(centred):
        return None
    quads = np.ascontiguousarray(byte_quads(centred, 1).T)
    return quads, centred.sum(axis=1).astype(np.int32)


def byte_quads(weights: np.ndarray, axis: int) -> np.ndarray:
    """Weights that fit int8 with their ``axis`` (a multiple of 4 long) in groups of four
    bytes, each group one int32, lowest index in the lowest byte (that axis a quarter as long):
    the signed operand of krnl's ``dot4``."""
    moved = np.moveaxis(weights.astype(np.int8), axis, -1)
    quads = np.ascontiguousarray(moved).view(np.int32)
    return np.ascontiguousarray(np.moveaxis(quads, -1, axis))


def qdq_as_bytes(graph: Graph) -> Graph:
    """Each QDQ MatMul or Conv (``op(DequantizeLinear(a), DequantizeLinear(W)[, bias])`` with
    constant integer weights and constant scales and zero points) that sums bytes
    (:func:`_pack`, :func:`_conv_bytes`) as ``PackedMatMulInteger`` / ``PackedConvInteger`` of
    ``a`` times the product of the two scales (plus the bias), for a target with a byte dot
    product. Runs before constant folding (which would fold ``DequantizeLinear(W)`` into float
    weights).

    The definition dequantizes first and sums the float products; this sums the integers
    exactly and scales once, as onnxruntime's int8 kernels do: the same sum up to float32
    rounding (each product, and each partial sum, is rounded there), as any other order of
    a float sum is. The dequantizations left unread go as dead code.

    Example:
        >>> import numpy as np
        >>> from polyonnx.graph.ir import Graph, Node, Value
        >>> consts = {"s": np.array(0.1, "float32"), "z": np.array(128, "uint8"),
        ...           "w": np.ones((8, 3), "int8"), "ws": np.array(0.5, "float32")}
        >>> v = {n: Value(n, str(a.dtype), a.shape) for n, a in consts.items()}
        >>> v.update({"q": Value("q", "uint8", (2, 8)), "a": Value("a", "float32", (2, 8)),
        ...           "b": Value("b", "float32", (8, 3)), "y": Value("y", "float32", (2, 3))})
        >>> g = Graph("g", (v["q"],), (v["y"],), (
        ...     Node("da", "DequantizeLinear", ("q", "s", "z"), ("a",)),
        ...     Node("dw", "DequantizeLinear", ("w", "ws"), ("b",)),
        ...     Node("mm", "MatMul", ("a", "b"), ("y",))), v, consts)
        >>> [n.op_type for n in qdq_as_bytes(g).nodes]
        ['DequantizeLinear', 'DequantizeLinear', 'PackedMatMulInteger', 'Mul']
    """
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    producers = graph.producers()
    nodes: list[Node] = []
    for n in graph.nodes:
        q = _qdq_operands(n, graph, producers) if n.op_type in ("MatMul", "Conv") else None
        written = None if q is None else _qdq_nodes(n, graph, producers, q, values, consts, taken)
        nodes.extend(written if written is not None else [n])
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


@dataclasses.dataclass(frozen=True)
class _Dequantized:
    """The integer operands of a QDQ op: a's integers, scale and zero point (its name, ""
    without), and the constant weights' integers, scale and zero point."""

    a: str
    a_scale: np.ndarray
    a_zero: str
    weights: np.ndarray
    w_scale: np.ndarray
    w_zero: np.ndarray | None
    axis: int


def _qdq_operands(n: Node, graph: Graph, producers: Mapping[str, Node]) -> _Dequantized | None:
    """The dequantized operands of ``n`` when both come from DequantizeLinear with constant,
    unblocked float32 scales (a's per tensor) and integer data (the weights constant)."""
    if n.domain:
        return None
    da, dw = (producers.get(i) for i in n.inputs[:2])
    if not all(
        d is not None and d.op_type == "DequantizeLinear" and not d.domain for d in (da, dw)
    ):
        return None
    assert da is not None and dw is not None
    c = graph.constants

    def params(d: Node) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The dequantizer's scale and zero point, when constant, unblocked and float32."""
        scale, zero = d.input(1), d.input(2) if len(d.inputs) > 2 else ""
        if scale not in c or (zero and zero not in c) or d.attr("block_size", 0):
            return None
        s = np.asarray(c[scale])
        return (s, np.asarray(c[zero]) if zero else None) if s.dtype == np.float32 else None

    a, w_name = da.input(0), dw.input(0)
    pa, pw = params(da), params(dw)
    if pa is None or pw is None or w_name not in c or graph.value(a).dtype not in _INTEGERS:
        return None
    weights = np.asarray(c[w_name])
    (a_scale, a_zero), (w_scale, w_zero) = pa, pw
    if weights.dtype.name not in _INTEGERS or a_scale.size != 1:
        return None
    if a_zero is not None and a_zero.size != 1:
        return None
    zero_name = da.input(2) if a_zero is not None else ""
    axis = int(dw.attr("axis", 1)) % max(weights.ndim, 1)
    return _Dequantized(a, a_scale, zero_name, weights, w_scale, w_zero, axis)


def _qdq_nodes(
    n: Node,
    graph: Graph,
    producers: Mapping[str, Node],
    q: _Dequantized,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node] | None:
    """The nodes computing QDQ ``n`` from bytes, or None when it does not sum bytes."""
    w = _Writer(n, values, consts, taken)
    y = values[n.outputs[0]]
    channels = q.weights.shape[0 if n.op_type == "Conv" else -1]
    # (per-channel weight scales factor out of the sum only along the output channels)
    if q.w_scale.size not in (1, channels) or (
        q.w_scale.size > 1 and q.axis != (0 if n.op_type == "Conv" else q.weights.ndim - 1)
    ):
        return None
    scale = (q.a_scale.reshape(-1) * q.w_scale.reshape(-1)).astype(np.float32)
    if n.op_type == "MatMul":
        packed = _pack(q.weights, q.w_zero) if len(graph.value(q.a).shape) >= 2 else None
        if packed is None:
            return None
        inputs = w.packed_matmul(q.a, q.a_zero, packed)
        acc = w.node("bytes", "PackedMatMulInteger", inputs, y.shape, "float32", INTERNAL_DOMAIN)
        w.last("Mul", [acc, w.constant("scale", scale)])
        return w.nodes
    a_zero = int(np.asarray(graph.constants[q.a_zero]).reshape(-1)[0]) if q.a_zero else 0
    conv = _conv_bytes(n, graph.value(q.a), a_zero, q.weights, q.w_zero)
    known = _float_bias(n, graph, producers)
    if conv is None or known is None:
        return None
    centred, init = conv
    (bias,) = known
    acc = w.packed_conv(q.a, centred, init.astype(np.int32))
    per_channel = (-1,) + (1,) * (len(y.shape) - 2)
    if bias is None:
        w.last("Mul", [acc, w.constant("scale", scale.reshape(per_channel))])
        return w.nodes
    scaled = w.node(
        "scaled", "Mul", [acc, w.constant("scale", scale.reshape(per_channel))], y.shape, "float32"
    )
    w.last("Add", [scaled, w.constant("bias", bias.reshape(per_channel))])
    return w.nodes


def _float_bias(
    n: Node, graph: Graph, producers: Mapping[str, Node]
) -> tuple[np.ndarray | None] | None:
    """A Conv's bias as a float32 constant: given as one, or the DequantizeLinear of constant
    integers a quantizer writes (computed here as it computes it); ``(None,)`` without a bias,
    None when it is computed at run time."""
    name = n.input(2) if len(n.inputs) > 2 else ""
    c = graph.constants
    if not name:
        return (None,)
    if name in c:
        b = np.asarray(c[name])
        return (b.reshape(-1),) if b.dtype == np.float32 else None
    d = producers.get(name)
    if d is None or d.op_type != "DequantizeLinear" or d.domain or d.attr("block_size", 0):
        return None
    if not all(i in c for i in d.inputs if i):
        return None
    ints, scale = np.asarray(c[d.input(0)]), np.asarray(c[d.input(1)])
    zero = np.asarray(c[d.input(2)]) if d.input(2) else np.zeros((), ints.dtype)
    if ints.ndim != 1 or scale.dtype != np.float32 or scale.size not in (1, ints.size):
        return None
    return (((ints.astype(np.float32) - zero.astype(np.float32)) * scale).astype(np.float32),)


def _packed_nodes(
    n: Node,
    p: _Packed,
    read_as_float: bool,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> tuple[list[Node], str]:
    """The nodes replacing ``n`` by its ``PackedMatMulInteger`` (then requantized as the float
    form is), and the float32 value of its sum ("" where only the int32 sum is made)."""
    w = _Writer(n, values, consts, taken)
    inputs = w.packed_matmul(p.x, p.x_zero, (p.quads, p.column_sums))
    op = "PackedMatMulInteger"
    if p.multiplier is None and not read_as_float:  # (the int32 sum itself)
        w.last(op, inputs, INTERNAL_DOMAIN)
        return w.nodes, ""
    acc = w.node("bytes", op, inputs, values[n.outputs[0]].shape, "float32", INTERNAL_DOMAIN)
    if p.multiplier is None:  # (read only by Casts to float32, which read ``acc``)
        w.last("Cast", [acc], to=TensorProto.INT32)
    else:
        w.requantize(acc, p.multiplier, p.y_zero)
    return w.nodes, acc


@dataclasses.dataclass(frozen=True)
class _PackedConv:
    """A QLinearConv as ``PackedConvInteger``: its x, the centred weights (int8), each output
    channel's initial sum (the bias less x's zero point times the channel's weights), and the
    requantization multiplier and output zero point."""

    x: str
    weights: np.ndarray
    init: np.ndarray
    multiplier: np.ndarray
    y_zero: str


def _packed_conv(n: Node, graph: Graph) -> _PackedConv | None:
    """``n`` as a ``PackedConvInteger`` when it is an ungrouped QLinearConv whose centred
    weights are bytes (int8), whose input channels are a multiple of 4 and whose window reads
    no padding, or reads it as x's zero point (uint8 x with zero point 0: what a Relu's output
    quantizes to), else None."""
    if n.op_type != "QLinearConv":
        return None
    r = _roles(n, graph)
    if r is None:
        return None
    c = graph.constants
    x_zero = int(np.asarray(c[r["xz"]]).reshape(-1)[0]) if r["xz"] else 0
    weights = np.asarray(c[r["w"]])
    conv = _conv_bytes(n, graph.value(r["x"]), x_zero, weights, c.get(r["wz"]))
    multiplier = _multiplier(c, r, weights.shape[0])
    if conv is None or multiplier is None:
        return None
    centred, init = conv
    if r["b"]:
        init = init + np.asarray(c[r["b"]]).astype(np.int64).reshape(-1)
    if np.abs(init).max(initial=0) >= 1 << 31:
        return None
    return _PackedConv(r["x"], centred, init.astype(np.int32), multiplier, r["yz"])


def _fits_bytes(centred: np.ndarray) -> bool:
    """Whether centred weights (output channels first) are int8 and every sum of theirs over
    bytes stays within int32, with room for the initial value: a QDQ op's sum must not wrap
    (a QLinear op's wraps as its definition does, but such a sum is no real model's)."""
    if not centred.size:
        return False
    if centred.min() < -128 or centred.max() > 127:
        return False
    return 255 * int(np.abs(centred).reshape(len(centred), -1).sum(axis=1).max()) < 1 << 30


def _conv_bytes(
    n: Node, x: Value, x_zero: int, weights: np.ndarray, w_zero: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The centred int8 weights of ungrouped convolution ``n`` on integers ``x`` (zero point
    ``x_zero``) and each output channel's initial sum (x's zero point as its bytes are read,
    times the channel's weights, negated); None unless the weights fit int8, x's channels are
    a multiple of 4 and the window reads no padding or reads it as x's zero point (uint8 x
    with zero point 0: what a Relu's output quantizes to; the padding holds bytes of 0)."""
    if int(n.attr("group", 1)) != 1 or weights.ndim < 3 or weights.shape[1] % 4:
        return None
    if weights.dtype.name not in _INTEGERS or not x.is_static or x.dtype not in _INTEGERS:
        return None
    unsigned = x.dtype == "uint8"
    if not reads_no_padding(n) and not (unsigned and x_zero == 0):
        return None
    centred = _centred(weights, w_zero, 0)
    if centred is None or not _fits_bytes(centred):
        return None
    byte_zero = x_zero if unsigned else x_zero + 128  # (an int8 x is read as x + 128)
    return centred.astype(np.int8), -byte_zero * centred.reshape(len(centred), -1).sum(axis=1)


def _packed_conv_nodes(
    n: Node,
    p: _PackedConv,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """``PackedConvInteger`` (its float32 sum) requantized as the float form is."""
    w = _Writer(n, values, consts, taken)
    acc = w.packed_conv(p.x, p.weights, p.init)
    multiplier = p.multiplier.reshape((-1,) + (1,) * (len(values[n.outputs[0]].shape) - 2))
    w.requantize(acc, multiplier, p.y_zero)
    return w.nodes
