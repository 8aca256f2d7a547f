"""``ai.onnx.preview`` ops as the standard ops they stand for.

``FlexAttention(Q, K, V)`` (PyTorch's ``flex_attention``) is scaled dot-product attention
whose scores and probabilities pass through two optional subgraphs, ``score_mod`` (a bias, a
causal mask, a soft cap ...) and ``prob_mod``::

    s = sqrt(scale)
    Y = prob_mod(Softmax(score_mod((Q * s) @ (K * s)^T), axis=-1)) @ V

with ``scale`` 1/sqrt(E) by default, the scores cast to the softmax's type (``float32`` for
``float16`` and ``bfloat16`` inputs, or ``softmax_precision``) before ``score_mod``, and grouped
query heads (``Hq`` a multiple of ``Hkv``): query head ``h`` reads key/value head
``h // (Hq / Hkv)``. It becomes those nodes, the two subgraphs inlined, before anything else
reads the model, so the fusion and scheduling of MatMul, Softmax and element-wise ops apply.
Grouped heads need no copy of ``K`` and ``V``: the queries of one key head are contiguous,
so ``Q`` reshaped to ``[B, Hkv, (Hq / Hkv) * L, E]`` multiplies ``K`` head by head.

Example:
    >>> from onnx import TensorProto as T, helper
    >>> q = helper.make_tensor_value_info("q", T.FLOAT, [1, 2, 3, 4])
    >>> y = helper.make_tensor_value_info("y", T.FLOAT, None)
    >>> n = helper.make_node("FlexAttention", ["q", "q", "q"], ["y"], domain="ai.onnx.preview")
    >>> m = helper.make_model(helper.make_graph([n], "g", [q], [y]), opset_imports=[
    ...     helper.make_opsetid("", 23), helper.make_opsetid("ai.onnx.preview", 1)])
    >>> [n.op_type for n in expand_preview(m).graph.node]
    ['Mul', 'Mul', 'Transpose', 'MatMul', 'Softmax', 'MatMul']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.control import inline
from polyonnx.frontend.rewrite import NodeWriter, with_nodes
from polyonnx.frontend.value_types import elem_type_text

DOMAIN = "ai.onnx.preview"

#: The softmax's element type for each input type when ``softmax_precision`` is not given.
_SOFTMAX_TYPE: dict[int, int] = {
    TensorProto.FLOAT16: TensorProto.FLOAT,
    TensorProto.BFLOAT16: TensorProto.FLOAT,
}


class _Writer(NodeWriter):
    """The standard nodes (and initializers) replacing one FlexAttention node."""

    def constant(self, value: np.ndarray, what: str) -> str:
        name = self.fresh(what)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def reshape(self, x: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [x, self.constant(np.array(shape, np.int64), "shape")])

    def cast(self, x: str, have: int, want: int) -> str:
        return x if have == want else self.op("Cast", [x], to=want)

    def subgraph(self, graph: onnx.GraphProto, x: str, what: str) -> str:
        """``graph`` (one input, one output) inlined on ``x``; its result's name."""
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise ModelError(
                f"FlexAttention node {self.node.name!r}: {what} must have one input and one "
                f"output; it has {len(graph.input)} and {len(graph.output)}"
            )
        prefix = f"{self.node.name or self.node.output[0]}/{what}/"
        nodes, inits, [result] = inline(graph, prefix, [x])
        self.nodes.extend(nodes)
        self.initializers.extend(inits)
        return result

    def refuse(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{DOMAIN}.FlexAttention", None, self.node.name, why)


@dataclass(frozen=True)
class _Operand:
    name: str
    elem: int
    shape: tuple[int, ...]


def _operand(w: _Writer, name: str, types: Mapping[str, onnx.TypeProto]) -> _Operand:
    t = types.get(name)
    tensor = t.tensor_type if t is not None and t.HasField("tensor_type") else None
    dims = tensor.shape.dim if tensor is not None and tensor.HasField("shape") else None
    if tensor is None or dims is None or any(not d.HasField("dim_value") for d in dims):
        raise w.refuse(f"input {name!r} has no static shape after shape inference")
    shape = tuple(int(d.dim_value) for d in dims)
    if len(shape) != 4:
        raise ModelError(
            f"FlexAttention node {w.node.name!r}: input {name!r} must have rank 4 "
            f"([batch, heads, sequence, size]); it has shape {shape}"
        )
    return _Operand(name, tensor.elem_type, shape)


def _check(w: _Writer, q: _Operand, k: _Operand, v: _Operand) -> int:
    """How many query heads share each key/value head; a ModelError for shapes that do not
    fit together."""
    (bq, hq, _, e), (bk, hkv, s, ek), (bv, hv, sv, _) = q.shape, k.shape, v.shape
    problems = [
        (bq == bk == bv, f"batch sizes {bq}, {bk}, {bv} differ"),
        (hkv == hv, f"K has {hkv} heads, V {hv}"),
        (s == sv, f"K has {s} positions, V {sv}"),
        (e == ek, f"Q's head size {e} is not K's {ek}"),
        (hkv > 0 and hq % hkv == 0, f"Q's {hq} heads are not a multiple of K's {hkv}"),
        (q.elem == k.elem == v.elem, "Q, K and V have different element types"),
    ]
    for ok, why in problems:
        if not ok:
            raise ModelError(f"FlexAttention node {w.node.name!r}: {why}")
    return hq // hkv


def _flex_attention(w: _Writer, types: Mapping[str, onnx.TypeProto]) -> None:
    if len(w.node.input) != 3 or len(w.node.output) != 1:
        raise ModelError(
            f"FlexAttention node {w.node.name!r} must have inputs Q, K, V and one output"
        )
    q, k, v = (_operand(w, name, types) for name in w.node.input)
    group = _check(w, q, k, v)
    (b, hq, l, e), (_, hkv, s, _), ev = q.shape, k.shape, v.shape[3]
    dtype = helper.tensor_dtype_to_np_dtype(q.elem)
    scale = w.attr("scale")
    scale = 1.0 / np.sqrt(e) if scale is None else scale
    # The reference scales Q and K by sqrt(scale), rounded to float32, then to their type.
    root = np.array(np.sqrt(np.float32(scale)), dtype=dtype)
    root_name = w.constant(root, "sqrt_scale")
    qs = w.op("Mul", [q.name, root_name])
    ks = w.op("Mul", [k.name, root_name])
    kt = w.op("Transpose", [ks], perm=[0, 1, 3, 2])
    if group > 1:
        qs = w.reshape(qs, [b, hkv, group * l, e])
    scores = w.op("MatMul", [qs, kt])
    if group > 1:
        scores = w.reshape(scores, [b, hq, l, s])
    precision = w.attr("softmax_precision")
    soft = _SOFTMAX_TYPE.get(q.elem, q.elem) if precision is None else int(precision)
    if soft not in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        raise w.refuse(
            f"softmax_precision {elem_type_text(soft)} (polyonnx computes "
            "the softmax in float16, float32 or float64)"
        )
    scores = w.cast(scores, q.elem, soft)
    score_mod = w.attr("score_mod")
    if score_mod is not None:
        scores = w.subgraph(score_mod, scores, "score_mod")
    probs = w.op("Softmax", [scores], axis=-1)
    prob_mod = w.attr("prob_mod")
    if prob_mod is not None:
        probs = w.subgraph(prob_mod, probs, "prob_mod")
    values = w.cast(v.name, v.elem, soft)
    if group > 1:
        probs = w.reshape(probs, [b, hkv, group * l, s])
    y = w.op("MatMul", [probs, values])
    if group > 1:
        y = w.reshape(y, [b, hq, l, ev])
    w.cast(y, soft, v.elem)
    w.nodes[-1].output[0] = w.node.output[0]  # (the last node writes the node's output)


def expand_preview(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its main graph's FlexAttention nodes replaced (see the module
    docstring); ``model`` itself when it has none."""
    graph = model.graph
    if not any(n.domain == DOMAIN and n.op_type == "FlexAttention" for n in graph.node):
        return model
    types = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)}
    for t in graph.initializer:
        types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    for n in graph.node:
        if n.domain != DOMAIN or n.op_type != "FlexAttention":
            nodes.append(n)
            continue
        w = _Writer(n)
        _flex_attention(w, types)
        nodes.extend(w.nodes)
        initializers.extend(w.initializers)
    return with_nodes(model, nodes, initializers)
