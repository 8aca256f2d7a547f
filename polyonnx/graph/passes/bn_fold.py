"""Fold an inference BatchNormalization into the Conv that feeds it.

With ``f = scale / sqrt(var + eps)`` per output channel, ``BN(Conv(x, w, b))`` equals
``Conv(x, w * f, (b - mean) * f + beta)``. The fold applies when the Conv's weights (and bias)
and all four BN parameters are constants and the Conv's output is read only by the BN. A
BatchNormalization elsewhere is left alone: it has its own lowering.

Example:
    >>> from polyonnx.frontend import import_model
    >>> from polyonnx.testing.examples import conv_model
    >>> g = import_model(conv_model())
    >>> [n.op_type for n in g.nodes]
    ['Conv', 'BatchNormalization', 'Relu']
    >>> [n.op_type for n in fold_batchnorm(g).nodes]
    ['Conv', 'Relu']
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.graph.ir import Additions, Graph, Node


def fold_batchnorm(graph: Graph) -> Graph:
    """Fold every Conv → BatchNormalization pair that qualifies (see the module docstring)."""
    add = Additions(graph)
    consts, values = add.constants, add.values
    producers = graph.producers()
    consumers = graph.consumers()
    graph_outputs = {v.name for v in graph.outputs}
    replaced: dict[str, Node] = {}  # conv name -> folded conv
    dropped: set[str] = set()  # BN node names
    for bn in graph.nodes:
        conv = _foldable_conv(bn, producers, consumers, consts, graph_outputs)
        if conv is None:
            continue
        w = consts[conv.inputs[1]]
        m = w.shape[0]
        b = consts[conv.input(2)] if conv.input(2) else np.zeros(m, w.dtype)
        scale, beta, mean, var = (consts[i].astype(np.float64) for i in bn.inputs[1:5])
        f = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        # (The factor per channel in float64, the product in the weights' own type: a float64
        # copy of all the weights is slow to make.)
        new_w = w * f.astype(w.dtype).reshape((m,) + (1,) * (w.ndim - 1))
        new_b = ((b - mean) * f + beta).astype(w.dtype)
        # Fresh names: the original weights may be shared with other Convs.
        w_name = add.constant(f"{conv.name}_w_bn", new_w)
        b_name = add.constant(f"{conv.name}_b_bn", new_b)
        replaced[conv.name] = dataclasses.replace(
            conv, inputs=(conv.inputs[0], w_name, b_name), outputs=(bn.outputs[0],)
        )
        del values[conv.outputs[0]]
        dropped.add(bn.name)
    nodes = tuple(replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped)
    return dataclasses.replace(graph, nodes=nodes, values=values, constants=consts)


def _foldable_conv(
    bn: Node,
    producers: dict[str, Node],
    consumers: dict[str, list[Node]],
    consts: dict[str, np.ndarray],
    graph_outputs: set[str],
) -> Node | None:
    """The Conv that ``bn`` can be folded into, or None."""
    if bn.op_type != "BatchNormalization" or bn.domain or bn.attr("training_mode", 0):
        return None
    if not int(bn.attr("spatial", 1)):
        return None  # statistics per activation, not per output channel
    if any(o for o in bn.outputs[1:]) or any(i not in consts for i in bn.inputs[1:5]):
        return None
    conv = producers.get(bn.inputs[0])
    if conv is None or conv.op_type != "Conv" or conv.domain:
        return None
    x = conv.outputs[0]
    if x in graph_outputs or len(consumers.get(x, ())) != 1:
        return None
    if conv.inputs[1] not in consts or (conv.input(2) and conv.input(2) not in consts):
        return None
    if consts[conv.inputs[1]].dtype.kind != "f":
        return None
    return conv
