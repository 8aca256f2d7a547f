"""Constant folding: evaluate at compile time every node whose result does not depend on feeds.

A node folds when all its inputs are constants, or when it is ``Shape``/``Size`` of a value
whose shape is static. ``ConstantOfShape``, ``Shape``, ``Size`` and inference-form
``BatchNormalization`` are computed with numpy; every other op through ``onnx.reference`` on a
one-node model at the graph's opset.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> import numpy as np
    >>> vals = {"s": Value("s", "int64", (1,)), "w": Value("w", "float32", (3,))}
    >>> g = Graph("g", (), (vals["w"],), (Node("c", "ConstantOfShape", ("s",), ("w",)),),
    ...           vals, {"s": np.array([3])})
    >>> print(fold_constants(g))
    graph g() -> (w: float32[3])
      const s: int64[1]
      const w: float32[3]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Graph, Node
from polyonnx.graph.strings import is_string

#: Results larger than this (bytes) stay computed at run time, so that folding cannot turn a
#: cheap computation (a Tile, an Expand) into a huge constant.
DEFAULT_MAX_BYTES = 256 << 20

#: Ops that must not be evaluated once at compile time: their results differ per run.
NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


def fold_constants(graph: Graph, max_bytes: int = DEFAULT_MAX_BYTES) -> Graph:
    """Replace every foldable node by constants for its outputs (see the module docstring).

    Folded outputs keep their names and types; a folded graph output becomes a constant.
    Results over ``max_bytes`` are left to run time, except ConstantOfShape, which always folds.
    """
    consts = dict(graph.constants)
    nodes: list[Node] = []
    for n in graph.nodes:
        results = _fold(n, graph, consts, max_bytes)
        if results is None:
            nodes.append(n)
            continue
        for name, arr in results.items():
            v = graph.value(name)
            arr = np.asarray(arr)
            if tuple(arr.shape) != v.shape:
                raise ShapeError(
                    f"node {n.name!r} ({n.op_type}): {name!r} evaluates to shape "
                    f"{tuple(arr.shape)} but is typed {v.shape}"
                )
            consts[name] = arr.astype(v.dtype, copy=False)
    return dataclasses.replace(graph, nodes=tuple(nodes), constants=consts)


def _fold(
    n: Node, graph: Graph, consts: Mapping[str, np.ndarray], max_bytes: int
) -> dict[str, np.ndarray] | None:
    """The outputs of ``n`` by name, or None when it cannot or should not be folded."""
    if n.domain or n.op_type in NONDETERMINISTIC:
        return None
    if any(isinstance(v, onnx.GraphProto) for _, v in n.attrs):
        return None  # control flow reads outer-scope values not listed as inputs
    if n.op_type in ("Shape", "Size") and graph.value(n.inputs[0]).is_static:
        shape = np.array(graph.value(n.inputs[0]).shape, dtype=np.int64)
        if n.op_type == "Size":
            return {n.outputs[0]: np.array(shape.prod(), dtype=np.int64)}
        # Shape-15 start/end clamp like Python slicing.
        return {n.outputs[0]: shape[n.attr("start", 0) : n.attr("end", None)]}
    ins = [i for i in n.inputs if i]
    if not ins or any(i not in consts for i in ins):
        return None
    outs = [graph.value(o) for o in n.outputs if o]
    if any(not v.is_static or is_string(v.dtype) for v in outs):
        # Data-dependent extents are known at run time only; strings are computed by the
        # loops (onnx.reference's StringNormalizer, say, also strips accents).
        return None
    if n.op_type == "ConstantOfShape":
        # Exempt from the size cap: its result (typically weights) is needed in full either way,
        # at compile time or at run time, so folding costs nothing extra.
        return evaluate_node(n, consts, graph.opset)
    size = sum(int(np.prod(v.dims)) * np.dtype(v.dtype).itemsize for v in outs)
    if size > max_bytes:
        return None
    return evaluate_node(n, consts, graph.opset)


def evaluate_node(
    n: Node, consts: Mapping[str, np.ndarray], opset: int
) -> dict[str, np.ndarray] | None:
    """The outputs of ``n`` (by name) from constant inputs, or None if it cannot be evaluated.

    Example:
        >>> evaluate_node(Node("c", "ConstantOfShape", ("s",), ("z",)), {"s": np.array([2])}, 13)
        {'z': array([0., 0.], dtype=float32)}
    """
    if n.op_type == "ConstantOfShape":
        fill = n.attr("value")
        fill = fill.reshape(-1)[0] if fill is not None else np.float32(0)
        shape = tuple(int(d) for d in consts[n.inputs[0]])
        return {n.outputs[0]: np.full(shape, fill, dtype=np.asarray(fill).dtype)}
    if n.op_type == "BatchNormalization":
        return _batchnorm(n, consts)
    return _evaluate(n, consts, opset)


def _batchnorm(n: Node, consts: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    # onnx.reference blends batch statistics for opset < 14, so inference form is done here.
    if n.attr("training_mode", 0) or any(o for o in n.outputs[1:]):
        return None
    x, scale, bias, mean, var = (consts[i] for i in n.inputs[:5])
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    f = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + n.attr("epsilon", 1e-5))
    y = (x - mean.reshape(bshape)) * f.reshape(bshape) + bias.reshape(bshape)
    return {n.outputs[0]: y.astype(x.dtype)}


def _evaluate(
    n: Node, consts: Mapping[str, np.ndarray], opset: int
) -> dict[str, np.ndarray] | None:
    proto = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name)
    proto.attribute.extend(to_attribute(k, v) for k, v in n.attrs)
    try:
        ref = ReferenceEvaluator(proto, opsets={"": opset})
        results = ref.run(None, {i: consts[i] for i in n.inputs if i})
    except Exception:  # onnx.reference raises anything; the node is then simply left to run
        return None
    return {o: np.asarray(r) for o, r in zip(n.outputs, results, strict=False) if o}


def to_attribute(name: str, value: Any) -> onnx.AttributeProto:
    """An AttributeProto for a python attribute value as the importer produces them.

    Example:
        >>> to_attribute("perm", (1, 0)).ints
        [1, 0]
    """
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, tuple):
        if not value:
            # An empty list carries no element type; every standard list attribute that may be
            # empty (axes, pads, perm, shape...) is a list of ints.
            return helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS)
        items = [numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for v in value]
        return helper.make_attribute(name, items)
    return helper.make_attribute(name, value)
