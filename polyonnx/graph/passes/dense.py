"""Convolutions that are fully-connected layers run as ``Gemm``.

A Conv whose kernel covers its whole input (no padding, no groups, no dilation: the output is
``1 x 1``) computes ``y[n, o] = sum over (c, kh, kw) of w[o, c, kh, kw] * x[n, c, kh, kw]``, a
matrix product of the flattened input with the flattened weights: DenseNet's and
SqueezeNet-style classifiers (1x1 conv on a pooled 1x1 map), VGG's "fc as conv" (a 7x7 conv on
a 7x7 map). As a conv it walks the weights across their rows (a stride of ``C*KH*KW`` between
output channels); as a ``Gemm`` with constant weights it gets the packed-panel, streamed plan of
a batch-1 FC layer. The reshapes around it are views (no copy), but they end the conv's
fusion group: a small layer (weights under :data:`MIN_WEIGHT_BYTES`, a squeeze-excitation
block's) stays a conv with its activation fused, where the weights' layout costs little.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value, fresh_name
    >>> x, y = Value("x", "float32", (1, 256, 1, 1)), Value("y", "float32", (1, 128, 1, 1))
    >>> w = np.ones((128, 256, 1, 1), "float32")
    >>> g = Graph("g", (x,), (y,), (Node("fc", "Conv", ("x", "w"), ("y",)),),
    ...           {"x": x, "y": y, "w": Value("w", "float32", w.shape)}, {"w": w})
    >>> for n in conv_as_gemm(g).nodes:
    ...     print(n)
    fc_flatten: fc_in = Reshape(x, fc_in_shape)
    fc: fc_out = Gemm[transB=1](fc_in, fc_weights)
    fc_unflatten: y = Reshape(fc_out, fc_out_shape)
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from polyonnx.graph.ir import Graph, Node, Value, fresh_name
from polyonnx.graph.pads import reads_no_padding

#: Weights below this stay in a conv: a few thousand multiply-adds, where an activation kept
#: in the conv's kernel saves more than the Gemm's layout of the weights.
MIN_WEIGHT_BYTES = 64 << 10


def conv_as_gemm(graph: Graph) -> Graph:
    """Every Conv that is a fully-connected layer (see the module docstring) as a ``Gemm``
    between two reshapes."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        if not _is_dense(n, graph):
            nodes.append(n)
            continue
        nodes.extend(_as_gemm(n, graph, values, consts, taken))
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _is_dense(n: Node, graph: Graph) -> bool:
    if n.op_type != "Conv" or n.domain or n.inputs[1] not in graph.constants:
        return False
    if n.input(2) and n.input(2) not in graph.constants:
        return False
    x, y = graph.value(n.inputs[0]), graph.value(n.outputs[0])
    w = graph.constants[n.inputs[1]]
    if not (x.is_static and y.is_static) or x.dtype not in ("float32", "float64"):
        return False
    if w.nbytes < MIN_WEIGHT_BYTES:
        return False
    spatial = x.dims[2:]
    return (
        int(n.attr("group", 1)) == 1
        and all(int(d) == 1 for d in n.attr("dilations", ()))
        and reads_no_padding(n)
        and len(spatial) >= 1
        and tuple(w.shape[2:]) == spatial
        and all(d == 1 for d in y.dims[2:])
        and w.dtype.name == x.dtype
    )


def _as_gemm(
    n: Node,
    graph: Graph,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    x, y = graph.value(n.inputs[0]), graph.value(n.outputs[0])
    w = graph.constants[n.inputs[1]]
    batch, depth = x.dims[0], math.prod(x.dims[1:])
    names = {
        k: fresh_name(f"{n.name}_{k}", taken)
        for k in ("in", "in_shape", "weights", "out", "out_shape", "flatten", "unflatten")
    }
    new_consts = {
        names["in_shape"]: np.array([batch, depth], np.int64),
        names["weights"]: np.ascontiguousarray(w.reshape(w.shape[0], depth)),
        names["out_shape"]: np.array(y.dims, np.int64),
    }
    for name, arr in new_consts.items():
        consts[name] = arr
        values[name] = Value(name, arr.dtype.name, tuple(arr.shape))
    values[names["in"]] = Value(names["in"], x.dtype, (batch, depth))
    values[names["out"]] = Value(names["out"], x.dtype, (batch, w.shape[0]))
    gemm_inputs = (names["in"], names["weights"]) + ((n.input(2),) if n.input(2) else ())
    return [
        Node(
            names["flatten"], "Reshape", (x.name, names["in_shape"]), (names["in"],), guard=n.guard
        ),
        Node(n.name, "Gemm", gemm_inputs, (names["out"],), {"transB": 1}, guard=n.guard),
        Node(
            names["unflatten"],
            "Reshape",
            (names["out"], names["out_shape"]),
            (y.name,),
            guard=n.guard,
        ),
    ]
