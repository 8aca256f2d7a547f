"""A QuantizeLinear read by a DequantizeLinear as the float ops it amounts to ("fake quant").

QDQ models (onnxruntime's quantizer, TensorRT-style exports, Intel Neural Compressor) put a
``QuantizeLinear -> DequantizeLinear`` pair on every activation; their meaning is float math
on the rounded values. With constant parameters, integer types of at most 16 bits and float32
data, the pair is exactly::

    DequantizeLinear(QuantizeLinear(x, s1, z1), s2, z2)
        = (clamp(round(x / s1) + z1, lo, hi) - z2) * s2
        = (min(max(round(x / s1), lo - z1), hi - z1) + (z1 - z2)) * s2

(every intermediate is a small integer held exactly in float32, so moving ``z1`` across the
clamp changes nothing; the ``Add`` is left out when ``z1 == z2``, as in every pair a quantizer
writes). As elementwise ``Div``, ``Round``, ``Max``, ``Min``, ``Mul`` the pair joins the
epilogue of the Conv or MatMul before it and follows a channel-blocked layout, instead of two
kernels of their own and a layout change on each side; a ``Mul``/``Add`` by constants after it
(an unfolded BatchNormalization) then merges with its ``Mul``.

Only the DequantizeLinear is replaced: a QuantizeLinear whose integers something else reads
(a graph output, a QLinear op) stays, and goes when nothing does (dead code). Blocked scales
(``block_size``), float8/int4 codes, int32 and non-float32 data keep their own lowerings.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value, fresh_name
    >>> v = {"x": Value("x", "float32", (1, 4)), "q": Value("q", "uint8", (1, 4)),
    ...      "y": Value("y", "float32", (1, 4))}
    >>> consts = {"s": np.array(0.1, "float32"), "z": np.array(128, "uint8")}
    >>> v.update({n: Value(n, str(a.dtype), a.shape) for n, a in consts.items()})
    >>> g = Graph("g", (v["x"],), (v["y"],), (
    ...     Node("q", "QuantizeLinear", ("x", "s", "z"), ("q",)),
    ...     Node("dq", "DequantizeLinear", ("q", "s", "z"), ("y",))), v, consts)
    >>> [n.op_type for n in fold_quantize_pairs(g).nodes]
    ['QuantizeLinear', 'Div', 'Round', 'Max', 'Min', 'Mul']
"""

from __future__ import annotations

import dataclasses

import numpy as np
from onnx import helper

from polyonnx.graph.ir import Graph, Node, Value, fresh_name
from polyonnx.graph.passes.chain import Step, chain

#: The integer types a pair is folded for: their values are exact in float32.
_RANGES = {t: (np.iinfo(t).min, np.iinfo(t).max) for t in ("int8", "uint8", "int16", "uint16")}


@dataclasses.dataclass(frozen=True)
class _Params:
    """A (de)quantizer's scale and zero point, shaped to broadcast against its data."""

    scale: np.ndarray
    zero: np.ndarray


#: Ops that only move or relabel elements: a per-tensor (de)quantizer commutes with them.
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})


def fold_quantize_pairs(graph: Graph) -> Graph:
    """Each DequantizeLinear of a QuantizeLinear's output, both with constant parameters, as
    the float ops of the module docstring (other nodes unchanged). Views between the two
    (a QOperator model's Flatten or Reshape of integers) are applied to the float result
    instead, when the parameters are per tensor."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    producers = graph.producers()
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        views: list[Node] = []
        q = producers.get(n.input(0)) if n.op_type == "DequantizeLinear" else None
        while q is not None and q.op_type in VIEWS and not q.domain and q.guard == n.guard:
            views.insert(0, q)
            q = producers.get(q.inputs[0])
        pair = None if q is None else _pair(graph, q, n)
        if q is None or pair is None or (views and pair[0].scale.ndim + pair[1].scale.ndim):
            nodes.append(n)
            continue
        if not views:
            nodes.extend(_fake_quant(q.inputs[0], n, *pair, values, consts, taken))
            continue
        # The pair on the quantizer's input, then each view on floats, the last into n's output.
        current = fresh_name(f"{n.name}_float", taken)
        values[current] = Value(current, "float32", values[q.inputs[0]].shape)
        at_input = Node(n.name, n.op_type, n.inputs, [current], n.attrs, n.domain, n.guard)
        nodes.extend(_fake_quant(q.inputs[0], at_input, *pair, values, consts, taken))
        for k, view in enumerate(views):
            out = n.outputs[0] if k == len(views) - 1 else fresh_name(f"{view.name}_float", taken)
            if out != n.outputs[0]:
                values[out] = Value(out, "float32", values[view.outputs[0]].shape)
            name = fresh_name(f"{view.name}_float", taken)
            inputs = (current, *view.inputs[1:])
            nodes.append(Node(name, view.op_type, inputs, [out], view.attrs, "", view.guard))
            current = out
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _pair(graph: Graph, q: Node, dq: Node) -> tuple[_Params, _Params, str] | None:
    """The parameters of quantizer ``q`` and dequantizer ``dq`` and the integer type between
    them, when the pair folds exactly (see the module docstring)."""
    if q.op_type != "QuantizeLinear" or q.domain or dq.domain or q.guard != dq.guard:
        return None
    x, y = graph.value(q.inputs[0]), graph.value(dq.outputs[0])
    between = graph.value(q.outputs[0]).dtype
    if between not in _RANGES or x.dtype != "float32" or y.dtype != "float32":
        return None
    p = _params(graph, q, len(x.shape), between)
    d = _params(graph, dq, len(x.shape), between)
    return None if p is None or d is None else (p, d, between)


def _params(graph: Graph, n: Node, rank: int, between: str) -> _Params | None:
    """Node ``n``'s constant scale and zero point, per tensor or per axis, as float32 arrays
    that broadcast against its rank-``rank`` data; None when they are not that."""
    if int(n.attr("block_size", 0)) or n.input(1) not in graph.constants:
        return None
    scale = np.asarray(graph.constants[n.input(1)])
    zero_name = n.input(2)
    if zero_name and zero_name not in graph.constants:
        return None
    zero = np.asarray(graph.constants[zero_name]) if zero_name else np.zeros((), between)
    if scale.dtype != np.float32 or zero.dtype != np.dtype(between) or zero.shape != scale.shape:
        return None
    if scale.size == 1:
        shape: tuple[int, ...] = ()
    elif scale.ndim == 1 and rank:
        axis = int(n.attr("axis", 1)) % rank
        shape = (scale.size,) + (1,) * (rank - 1 - axis)
    else:
        return None
    return _Params(scale.reshape(shape), zero.astype(np.float32).reshape(shape))


def _quantize_steps(q: _Params, kind: str) -> list[Step]:
    """A quantizer's float ops up to its zero point: ``min(max(round(x / s), lo - z), hi -
    z)`` for integers of type ``kind`` (no division by a scale of 1: integer-valued data)."""
    lo, hi = _RANGES[kind]
    steps = [] if np.all(q.scale == 1) else [Step("Div", q.scale)]
    return [
        *steps,
        Step("Round"),
        Step("Max", np.float32(lo) - q.zero),
        Step("Min", np.float32(hi) - q.zero),
    ]


def _fake_quant(
    x: str,
    dq: Node,
    q: _Params,
    d: _Params,
    between: str,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """The nodes computing ``dq``'s output from the quantizer's input ``x``."""
    steps = _quantize_steps(q, between)
    if np.any(q.zero != d.zero):
        steps.append(Step("Add", q.zero - d.zero))
    if not np.all(d.scale == 1):
        steps.append(Step("Mul", d.scale))
    return chain(dq, x, steps, values, consts, taken)


def unfold_quantizers(graph: Graph) -> Graph:
    """Each QuantizeLinear and DequantizeLinear left alone (not a pair: the integers are read
    by something else, a byte convolution, a graph output) with float32 data, an 8- or 16-bit
    integer type and a constant scale and zero point per tensor, as the element-wise ops it
    amounts to, which fuse into the kernel before them and follow a blocked layout::

        QuantizeLinear(x, s, z)   = Cast(min(max(round(x / s), lo - z), hi - z) + z)
        DequantizeLinear(q, s, z) = (float32(q) - z) * s

    exactly (see the module docstring; ``/ s`` and ``* s`` left out for a scale of 1, ``+ z``
    and ``- z`` for a zero point of 0).

    Example:
        >>> import numpy as np
        >>> from polyonnx.graph.ir import Graph, Node, Value
        >>> v = {"x": Value("x", "float32", (1, 4)), "q": Value("q", "uint8", (1, 4))}
        >>> consts = {"s": np.array(0.5, "float32"), "z": np.array(0, "uint8")}
        >>> v.update({n: Value(n, str(a.dtype), a.shape) for n, a in consts.items()})
        >>> g = Graph("g", (v["x"],), (v["q"],), (
        ...     Node("q", "QuantizeLinear", ("x", "s", "z"), ("q",)),), v, consts)
        >>> [n.op_type for n in unfold_quantizers(g).nodes]
        ['Div', 'Round', 'Max', 'Min', 'Cast']
    """
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        integers = n.outputs[0] if n.op_type == "QuantizeLinear" else n.input(0)
        floats = n.input(0) if n.op_type == "QuantizeLinear" else n.outputs[0]
        kind = graph.value(integers).dtype if n.op_type.endswith("QuantizeLinear") else ""
        p = None
        if (
            not n.domain
            and kind in _RANGES
            and graph.value(floats).dtype == "float32"
            and (p := _params(graph, n, len(graph.value(floats).shape), kind)) is not None
            and p.scale.ndim == 0
        ):
            nodes.extend(_unfolded(n, p, kind, values, consts, taken))
        else:
            nodes.append(n)
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _unfolded(
    n: Node,
    p: _Params,
    kind: str,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """Quantizer or dequantizer ``n`` (per tensor, parameters ``p``) as element-wise ops."""
    to = int(helper.np_dtype_to_tensor_dtype(np.dtype(kind if n.op_type[0] == "Q" else "float32")))
    x, y = n.input(0), n.outputs[0]
    shape = values[y].shape
    zero = float(p.zero)
    if n.op_type == "QuantizeLinear":
        steps = [*_quantize_steps(p, kind), *([Step("Add", p.zero)] if zero else [])]
        rounded = fresh_name(f"{n.name}_rounded", taken)
        values[rounded] = Value(rounded, "float32", shape)
        at = Node(n.name, n.op_type, n.inputs, [rounded], guard=n.guard)
        nodes = chain(at, x, steps, values, consts, taken)
        nodes[-1] = dataclasses.replace(nodes[-1], name=fresh_name(f"{n.name}_float", taken))
        return [*nodes, Node(n.name, "Cast", [rounded], [y], {"to": to}, "", n.guard)]
    widened = fresh_name(f"{n.name}_widened", taken)
    values[widened] = Value(widened, "float32", shape)
    cast = Node(
        fresh_name(f"{n.name}_cast", taken), "Cast", [x], [widened], {"to": to}, "", n.guard
    )
    steps = [Step("Sub", p.zero)] if zero else []
    steps += [] if p.scale == 1 else [Step("Mul", p.scale)]
    if not steps:
        return [dataclasses.replace(cast, name=n.name, outputs=(y,))]
    return [cast, *chain(n, widened, steps, values, consts, taken)]
