"""Flat views: an NCHW 1x1 convolution on ``[N, C, 1, H*W]`` pixels, a MatMul of a batched
``A`` by a 2-D ``B`` on ``[1, P*M, K]`` rows, and the element-wise ops after them on those
shapes.

**Pixels.** A 1x1 convolution with stride 1 and no padding treats pixels alike, so it computes
the same on its input reshaped to one row of ``H*W`` pixels. In ONNX's layout the loops over a
feature map run along its width, which at 7x7 or 14x14 is shorter than the vectors of an
AVX-512 register tile (or leaves a ragged edge): the conv, its bias and activation epilogue
and the residual Add after it would mostly run in scalar code. On one row of pixels they run
along all of them. :func:`flat_pixels` rewrites every such ``Conv`` left in ONNX's layout (not
channel-blocked by :mod:`polyonnx.graph.passes.layout`; constant weights, float32) to read a
``Reshape`` of its input and write ``[N, M, 1, H*W]`` (``[N, M, 1, 1, D*H*W]`` in 3-D: the
rank is kept, and with it the weights).

**Rows.** A MatMul of ``A[P..., M, K]`` by a 2-D ``B[K, N]`` multiplies every row of ``A`` by
the same ``B``: it is one product of ``P*M`` rows, but as written its loops are ``P`` products
of ``M`` rows, and with a small ``M`` (an exporter's ``[sequence, batch, features]``
attention layout: ViT at batch 2 gives ``M = 2``) no register tile of rows fits.
:func:`flat_rows` rewrites it to read ``A`` as ``[1..., P*M, K]`` (the rank kept, so
broadcast operands keep their meaning) and write ``[1..., P*M, N]``.

Both move the element-wise ops that follow onto the flat shape (their other inputs reshaped
the same way when they have the output's shape; inputs that broadcast along the axes the view
keeps, such as a bias or per-channel constants, kept as they are). A ``Reshape`` back is
inserted where a flat value is read by any other op or is a graph output. Reshapes are views
(no kernel, no copy).

Example (ShuffleNet's stem conv stays, its first 1x1 conv reads a flat Reshape)::

    g = flat_pixels(optimize(import_model(light_model("shufflenet"))))
    [n.op_type for n in g.nodes][:4]   # ['Conv', 'Relu', 'MaxPool', 'Reshape']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.dce import eliminate_dead_code
from polyonnx.graph.passes.fuse import ELEMENTWISE


def flat_pixels(graph: Graph) -> Graph:
    """``graph`` with its eligible 1x1 convolutions on flat pixels (see the module docstring);
    a graph with none is returned unchanged."""
    return _flatten(graph, _eligible, _pixels, _pixel_operand)


def flat_rows(graph: Graph) -> Graph:
    """``graph`` with its MatMuls of a batched ``A`` by a 2-D ``B`` on flat rows (see the
    module docstring); a graph with none is returned unchanged."""
    return _flatten(graph, _eligible_matmul, _rows, _row_operand)


def _pixels(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``[N, C, spatial...]`` as ``[N, C, 1..., prod(spatial)]``."""
    n, c, *spatial = shape
    return (n, c, *(1,) * (len(spatial) - 1), math.prod(spatial))


def _rows(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``[P..., M, N]`` as ``[1..., P*M, N]``."""
    return (*(1,) * (len(shape) - 2), math.prod(shape[:-1]), shape[-1])


def _pixel_operand(operand: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """An operand broadcasting only along the channels and batch (size 1 over the spatial
    axes) means the same against the flat pixels."""
    spatial = len(shape) - 2
    return all(int(d) == 1 for d in operand[max(len(operand) - spatial, 0) :])


def _row_operand(operand: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """An operand broadcasting along every axis but the last (a bias) means the same against
    the flat rows."""
    return all(int(d) == 1 for d in operand[:-1]) and len(operand) <= len(shape)


def _flatten(
    graph: Graph,
    eligible: Callable[[Graph, Node], bool],
    flat_shape: Callable[[tuple[int, ...]], tuple[int, ...]],
    broadcasts: Callable[[tuple[int, ...], tuple[int, ...]], bool],
) -> Graph:
    """``graph`` with every ``eligible`` node reading its first input, and writing its
    output, as the views ``flat_shape`` gives, and the element-wise nodes after it with it
    (their other inputs of the output's shape viewed the same way; the others kept when
    ``broadcasts(operand shape, output shape)``)."""
    if not any(eligible(graph, n) for n in graph.nodes):
        return graph
    values = dict(graph.values)
    constants = dict(graph.constants)
    nodes: list[Node] = []
    flat: dict[str, str] = {}  # value -> its flat twin
    plain: set[str] = set()  # values with a flat twin that exist as they are too

    def reshape(name: str, shape: tuple[int, ...], out: str) -> None:
        target = f"{out}__shape"
        constants[target] = np.array(shape, np.int64)
        values[target] = Value(target, "int64", (len(shape),))
        nodes.append(Node(f"{out}__reshape", "Reshape", (name, target), (out,)))

    def twin_of(name: str) -> str:
        twin = f"{name}__flat"
        value = graph.value(name)
        values[twin] = Value(twin, value.dtype, flat_shape(value.dims))
        flat[name] = twin
        return twin

    def to_flat(name: str) -> str:
        if name not in flat:
            reshape(name, values[twin_of(name)].dims, flat[name])
            plain.add(name)
        return flat[name]

    def to_plain(name: str) -> str:
        if name in flat and name not in plain:
            reshape(flat[name], graph.value(name).dims, name)
            plain.add(name)
        return name

    for node in graph.nodes:
        if eligible(graph, node):
            x, y = node.inputs[0], node.outputs[0]
            nodes.append(
                dataclasses.replace(
                    node, inputs=(to_flat(x), *node.inputs[1:]), outputs=(twin_of(y),)
                )
            )
        elif _follows_flat(graph, node, flat, broadcasts):
            shape = graph.value(node.outputs[0]).shape
            ins = tuple(
                to_flat(i) if i and graph.value(i).shape == shape else i for i in node.inputs
            )
            nodes.append(dataclasses.replace(node, inputs=ins, outputs=(twin_of(node.outputs[0]),)))
        else:
            nodes.append(dataclasses.replace(node, inputs=tuple(to_plain(i) for i in node.inputs)))
    for v in graph.outputs:
        to_plain(v.name)
    used = {i for n in nodes for i in n.inputs} | {o for n in nodes for o in n.outputs}
    values = {k: v for k, v in values.items() if k in used or k in graph.values}
    return eliminate_dead_code(
        dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=constants)
    )


def _eligible(graph: Graph, node: Node) -> bool:
    """An ONNX Conv with a 1x1 kernel, stride 1 and no padding, constant float32 weights and a
    static input of two or more spatial axes that are not one row already."""
    if node.op_type != "Conv" or node.domain or len(node.inputs) < 2:
        return False
    w = graph.constants.get(node.inputs[1])
    x, y = graph.value(node.inputs[0]), graph.value(node.outputs[0])
    if w is None or w.dtype != np.float32 or x.dtype != "float32":
        return False
    if not (x.is_static and y.is_static) or len(x.shape) < 4 or x.shape[2:] != y.shape[2:]:
        return False
    # (A 1x1 kernel with stride 1 has no padding under any auto_pad.)
    strides, pads = node.attr("strides"), node.attr("pads")
    return (
        all(int(k) == 1 for k in w.shape[2:])
        and any(int(s) != 1 for s in x.shape[2:-1])
        and (strides is None or all(int(s) == 1 for s in strides))
        and (pads is None or not any(int(p) for p in pads))
    )


def _eligible_matmul(graph: Graph, node: Node) -> bool:
    """An ONNX MatMul of a static float ``A`` of rank 3 or more, with more than one matrix, by
    a 2-D ``B``."""
    if node.op_type != "MatMul" or node.domain or len(node.inputs) != 2:
        return False
    a, b = graph.value(node.inputs[0]), graph.value(node.inputs[1])
    if a.dtype not in ("float32", "float64") or not (a.is_static and b.is_static):
        return False
    return len(a.shape) >= 3 and len(b.shape) == 2 and math.prod(a.dims[:-2]) > 1


def _follows_flat(
    graph: Graph,
    node: Node,
    flat: dict[str, str],
    broadcasts: Callable[[tuple[int, ...], tuple[int, ...]], bool],
) -> bool:
    """An element-wise node reading a flat value, with its output's shape, whose other inputs
    have that shape too or keep their meaning on the flat view (``broadcasts``)."""
    if node.domain or node.op_type not in ELEMENTWISE or len(node.outputs) != 1:
        return False
    shape = graph.value(node.outputs[0]).shape
    ins = [i for i in node.inputs if i]
    if not any(i in flat for i in ins) or any(
        graph.value(i).shape != shape for i in ins if i in flat
    ):
        return False
    dims = graph.value(node.outputs[0]).dims
    return all(graph.value(i).shape == shape or broadcasts(graph.value(i).dims, dims) for i in ins)
