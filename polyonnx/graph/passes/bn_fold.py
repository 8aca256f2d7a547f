"""Fold an inference BatchNormalization into the Conv or ConvTranspose that feeds it.

With ``f = scale / sqrt(var + eps)`` per output channel, ``BN(Conv(x, w, b))`` equals
``Conv(x, w * f, (b - mean) * f + beta)``; likewise for a ConvTranspose, whose weights hold
output channel ``g * M/group + m`` of group ``g`` at ``w[c, m]`` for the input channels ``c``
of that group. The fold applies when the weights (and bias) and all four BN parameters are
constants and the convolution's output is read only by the BN. A BatchNormalization elsewhere
is left alone: it has its own lowering.

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
        scale, beta, mean, var = (consts[i].astype(np.float64) for i in bn.inputs[1:5])
        f = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        m = len(f)
        b = consts[conv.input(2)] if conv.input(2) else np.zeros(m, w.dtype)
        # (The factor per channel in float64, the product in the weights' own type: a float64
        # copy of all the weights is slow to make.)
        new_w = w * _weight_factors(conv, w, f.astype(w.dtype))
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
    """The Conv or ConvTranspose that ``bn`` can be folded into, or None."""
    if bn.op_type != "BatchNormalization" or bn.domain or bn.attr("training_mode", 0):
        return None
    if not int(bn.attr("spatial", 1)):
        return None  # statistics per activation, not per output channel
    if any(o for o in bn.outputs[1:]) or any(i not in consts for i in bn.inputs[1:5]):
        return None
    conv = producers.get(bn.inputs[0])
    if conv is None or conv.op_type not in ("Conv", "ConvTranspose") or conv.domain:
        return None
    x = conv.outputs[0]
    if x in graph_outputs or len(consumers.get(x, ())) != 1:
        return None
    if conv.inputs[1] not in consts or (conv.input(2) and conv.input(2) not in consts):
        return None
    w = consts[conv.inputs[1]]
    if w.dtype.kind != "f" or w.ndim < 3:
        return None
    group = int(conv.attr("group", 1))
    channels = w.shape[0] if conv.op_type == "Conv" else w.shape[1] * group
    if conv.op_type == "ConvTranspose" and w.shape[0] % group:
        return None
    if any(consts[i].shape != (channels,) for i in bn.inputs[1:5]):
        return None
    return conv


def _weight_factors(conv: Node, w: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``f`` (one factor per output channel) shaped to multiply ``conv``'s weights."""
    taps = (1,) * (w.ndim - 2)
    if conv.op_type == "Conv":  # w[o, c, *taps]
        return f.reshape((len(f), 1) + taps)
    # ConvTranspose: w[c, m, *taps], where input channel c is in group c // (C / group) and
    # m counts that group's output channels.
    group = int(conv.attr("group", 1))
    per_group = w.shape[0] // group
    by_group = f.reshape(group, 1, len(f) // group)
    return np.repeat(by_group, per_group, axis=1).reshape((w.shape[0], w.shape[1]) + taps)
