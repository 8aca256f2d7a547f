"""bfloat16 arithmetic computed in float32, rounded to bfloat16 at every op's output.

No CPU polyonnx targets computes in bfloat16 (and LLVM lowers its ``bfloat`` arithmetic to
compiler-runtime calls), so a bfloat16 value is its code, the upper half of a float32 (see
:data:`polyonnx.graph.ir.ENCODED_DTYPES`). An op computing on bfloat16 values becomes the
same op in float32 between conversions: its bfloat16 inputs widened (exactly), its bfloat16
outputs computed in float32 and rounded to the nearest bfloat16 (ties to even, NaN kept)::

    y: bfloat16 = MatMul(a: bfloat16, b: bfloat16)
    ->
    a__f32 = Cast[to=FLOAT](a);  b__f32 = Cast[to=FLOAT](b)
    y__f32 = MatMul(a__f32, b__f32)
    y = Cast[to=BFLOAT16](y__f32)

That is where the ONNX reference rounds: it computes each op with ml_dtypes, whose ufuncs
compute every element in float32 and round it once, and whose matrix products (``np.dot``,
``np.matmul``, Einsum's reference) accumulate in float32. Within one op polyonnx keeps float32
where the reference rounds intermediate numpy steps to bfloat16 (a Celu's, a Gemm's ``alpha *
AB + beta * C``): the results may then differ in the last place, polyonnx's the more accurate.
Sums of a reduction (ReduceSum, ReduceMean...) accumulate in float32, where numpy's
``np.sum`` of a bfloat16 array rounds every partial sum to bfloat16 (a sum of 1000 ones is
256 there).

Left as they are: the conversions and the ops that move codes without computing on them
(:data:`polyonnx.graph.validate.ENCODED_OPS`), views and Shape/Size, which read no element,
and the ops whose lowerings compute bfloat16 themselves (:data:`NATIVE`: the ONNX function
bodies of Softmax and Attention round intermediate tensors, which a float32 op would not;
Unique's and TopK's outputs may have a data-dependent extent, which no later op may read).
The conversions of a node in a branch of an If (a guarded node) run under the guards of the
values they convert.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> v = {n: Value(n, "bfloat16", (2,)) for n in "xy"}
    >>> g = Graph("g", (v["x"],), (v["y"],), (Node("r", "Relu", ("x",), ("y",)),), v)
    >>> print(compute_bfloat16(g))
    graph g(x: bfloat16[2]) -> (y: bfloat16[2])
      r__widen_x: x__f32 = Cast[to=1](x)
      r: y__f32 = Relu(x__f32)
      r__round_y: y = Cast[to=16](y__f32)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import TensorProto

from polyonnx.graph.ir import Graph, Node, Value, fresh_name
from polyonnx.graph.validate import ENCODED_OPS

BF16 = "bfloat16"

#: Ops whose lowerings read and write bfloat16 themselves: Softmax, LogSoftmax and Attention
#: round where their ONNX function bodies have bfloat16 tensors (``x - max``, ``exp``, the sum
#: and the quotient of a softmax); Unique and TopK compare values and move codes (their
#: outputs may have a data-dependent extent, which no conversion may read).
NATIVE = frozenset({"Softmax", "LogSoftmax", "Attention", "Unique", "TopK"})

#: Ops that read no element (Shape, Size), only alias their input (views; inference Dropout,
#: removed or refused by :mod:`~polyonnx.graph.passes.simplify`) or only convert or move codes
#: (:data:`polyonnx.graph.validate.ENCODED_OPS`, which the validator checks on their own).
_UNTOUCHED = frozenset(
    {"Shape", "Size", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
)


_KEPT = _UNTOUCHED | ENCODED_OPS | NATIVE


def computed_in_float32(node: Node, values: Mapping[str, Value]) -> bool:
    """Whether :func:`compute_bfloat16` rewrites ``node``: an ONNX op, neither a conversion,
    nor a view, nor :data:`NATIVE`, with a bfloat16 input or output."""
    if node.domain or node.op_type in _KEPT:
        return False
    return any(
        name and name in values and values[name].dtype == BF16
        for name in (*node.inputs, *node.outputs)
    )


def compute_bfloat16(graph: Graph) -> Graph:
    """Every op computing on bfloat16 values computed in float32 (see the module docstring).
    A graph without such an op is returned as it is."""
    values = dict(graph.values)
    if not any(computed_in_float32(n, values) for n in graph.nodes):
        return graph
    taken_values = set(values) | set(graph.constants)
    taken_nodes = {n.name for n in graph.nodes}
    producer_guard = {o: n.guard for n in graph.nodes for o in n.outputs if o}
    widened: dict[str, str] = {}  # bfloat16 value -> its float32 copy
    nodes: list[Node] = []

    def wide_value(name: str, base: str) -> str:
        wide = fresh_name(base, taken_values)
        values[wide] = Value(wide, "float32", values[name].shape)
        return wide

    for n in graph.nodes:
        if not computed_in_float32(n, values):
            nodes.append(n)
            continue
        inputs = []
        for i in n.inputs:
            if i and values[i].dtype == BF16:
                if i not in widened:
                    widened[i] = wide_value(i, f"{i}__f32")
                    nodes.append(
                        Node(
                            fresh_name(f"{n.name}__widen_{i}", taken_nodes),
                            "Cast",
                            (i,),
                            (widened[i],),
                            {"to": TensorProto.FLOAT},
                            guard=producer_guard.get(i, ()),
                        )
                    )
                i = widened[i]
            inputs.append(i)
        outputs, rounds = [], []
        for o in n.outputs:
            if o and values[o].dtype == BF16:
                wide = wide_value(o, f"{o}__f32")
                rounds.append(
                    Node(
                        fresh_name(f"{n.name}__round_{o}", taken_nodes),
                        "Cast",
                        (wide,),
                        (o,),
                        {"to": TensorProto.BFLOAT16},
                        guard=n.guard,
                    )
                )
                o = wide
            outputs.append(o)
        nodes.append(
            dataclasses.replace(
                n, inputs=tuple(inputs), outputs=tuple(outputs), attrs=_float32_attrs(n)
            )
        )
        nodes.extend(rounds)
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values)


def _float32_attrs(node: Node) -> tuple[tuple[str, Any], ...]:
    """``node``'s attributes with a bfloat16 element type made float32: ``dtype`` (EyeLike,
    the random ops) and ConstantOfShape's ``value``."""
    out = []
    for k, v in node.attrs:
        if k == "dtype" and v == TensorProto.BFLOAT16:
            v = TensorProto.FLOAT
        elif isinstance(v, np.ndarray) and v.dtype == np.dtype(BF16):
            v = v.astype(np.float32)
        out.append((k, v))
    return tuple(out)
