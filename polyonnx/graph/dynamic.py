"""Values whose extent depends on input data: their graph-level types.

NonZero, Compress, Unique, NonMaxSuppression, StringNormalizer (with stopwords), StringSplit
(the number of substrings) and TopK (with a K computed at run time) size some output
dimension by the data they read. Such a dimension is typed with a symbolic name,
``f"{node}_count"`` (e.g. ``Value("idx", "int64", (2, "nz_count"))``); the lowering writes a
buffer of the maximal shape plus the real extent, and the runtime returns the valid part.

These values are accepted only as graph outputs: a node that reads one is refused with
:class:`~polyonnx.errors.UnsupportedOpError` (polyonnx compiles static shapes inside the graph).
Whatever shape the model declares for such an output (the backend suite declares the extent of
its one test input) is replaced by the symbolic one: the declared extent is a fact about one
input, not about the op.

Example:
    >>> vals = {"x": Value("x", "float32", (2, 3))}
    >>> dynamic_outputs(Node("nz", "NonZero", ("x",), ("y",)), vals, 13)
    (Value(name='y', dtype='int64', shape=(2, 'nz_count')),)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value

#: Ops whose outputs may have a data-dependent extent.
DYNAMIC_OPS = frozenset(
    {
        "NonZero",
        "Compress",
        "Unique",
        "TopK",
        "NonMaxSuppression",
        "StringNormalizer",
        "StringSplit",
    }
)


def count_dim(node: Node) -> str:
    """The symbolic dimension a node's data-dependent extent is typed with."""
    return f"{node.name}_count"


def is_dynamic(node: Node, known: Mapping[str, np.ndarray]) -> bool:
    """Whether ``node``'s output extent depends on run-time data (``known``: the values
    available at compile time). TopK is dynamic only when its K (opset 10+) is not known;
    StringNormalizer always is (its rule gives a static shape when it has no stopwords)."""
    if node.domain or node.op_type not in DYNAMIC_OPS:
        return False
    if node.op_type == "StringNormalizer":
        return True
    if node.op_type == "StringSplit" and node.inputs[0] in known:
        # (onnx.reference, which types a known input's split, cannot split a scalar.)
        return np.ndim(known[node.inputs[0]]) == 0
    if node.op_type == "TopK":
        return len(node.inputs) > 1 and bool(node.inputs[1]) and node.inputs[1] not in known
    return not all(i in known for i in node.inputs if i)


def dynamic_outputs(node: Node, values: Mapping[str, Value], opset: int) -> tuple[Value, ...]:
    """The types of a dynamic node's outputs, with :func:`count_dim` where data decides."""
    x = values.get(node.inputs[0])
    if x is None or not x.is_static:
        raise UnsupportedOpError(
            node.op_type, opset, node.name, f"input {node.inputs[0]!r} has no static shape"
        )
    xs = tuple(int(d) for d in x.shape)
    cnt = count_dim(node)
    outs = [o for o in node.outputs]

    def along(shape: tuple[int, ...], axis: int) -> tuple[int | str, ...]:
        return tuple(cnt if d == axis else e for d, e in enumerate(shape))

    def axis_of(rank: int, default: int | None) -> int | None:
        axis = node.attr("axis", default)
        if axis is None:
            return None
        if not -rank <= int(axis) < rank:
            raise UnsupportedOpError(
                node.op_type, opset, node.name, f"axis {axis} out of range for rank {rank}"
            )
        return int(axis) % rank

    if node.op_type == "NonZero":
        return (Value(outs[0], "int64", (len(xs), cnt)),)
    if node.op_type == "NonMaxSuppression":  # rows of (batch, class, box)
        return (Value(outs[0], "int64", (cnt, 3)),)
    if node.op_type == "StringNormalizer":  # [C] or [1, C]: stopwords removed along C
        kept = along(xs, len(xs) - 1) if node.attr("stopwords", ()) and xs else xs
        return (Value(outs[0], x.dtype, kept),)
    if node.op_type == "StringSplit":  # the substrings along a new last axis, and their counts
        split: list[tuple[str, tuple[int | str, ...]]] = [(x.dtype, (*xs, cnt)), ("int64", xs)]
        return tuple(Value(o, t, s) for o, (t, s) in zip(outs, split, strict=False) if o)
    if node.op_type == "Compress":
        axis = axis_of(len(xs), None)
        return (Value(outs[0], x.dtype, (cnt,) if axis is None else along(xs, axis)),)
    if node.op_type == "TopK":
        axis = axis_of(len(xs), -1)
        shape = along(xs, axis if axis is not None else len(xs) - 1)
        dtypes = (x.dtype, "int64")
        return tuple(Value(o, t, shape) for o, t in zip(outs, dtypes, strict=False) if o)
    # Unique: Y, indices, inverse_indices, counts.
    axis = axis_of(len(xs), None)
    n = int(np.prod(xs, dtype=np.int64)) if axis is None else xs[axis]
    types = [
        (x.dtype, (cnt,) if axis is None else along(xs, axis)),
        ("int64", (cnt,)),
        ("int64", (n,)),
        ("int64", (cnt,)),
    ]
    return tuple(Value(o, t, s) for o, (t, s) in zip(outs, types, strict=False) if o)


def check_inputs(node: Node, values: Mapping[str, Value], opset: int) -> None:
    """UnsupportedOpError if ``node`` reads a value with a data-dependent extent."""
    for i in node.inputs:
        v = values.get(i) if i else None
        if v is not None and not v.is_static:
            dims = [d for d in v.shape if not isinstance(d, int)]
            raise UnsupportedOpError(
                node.op_type,
                opset,
                node.name,
                f"input {i!r} has a data-dependent extent ({', '.join(map(str, dims))}); "
                "polyonnx supports such values only as graph outputs, not as inputs of "
                "other nodes",
            )


def refuse_dynamic_inputs(graph: Graph) -> Graph:
    """``graph`` unchanged, or UnsupportedOpError naming the first node that reads a value
    with a data-dependent extent (those are supported as graph outputs only)."""
    for n in graph.nodes:
        check_inputs(n, graph.values, graph.opset)
    seen: set[str] = set()
    for v in graph.outputs:
        if not v.is_static and v.name in seen:
            raise UnsupportedOpError(
                "graph output",
                graph.opset,
                v.name,
                "a value with a data-dependent extent listed twice",
            )
        seen.add(v.name)
    return graph
