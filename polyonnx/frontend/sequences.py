"""Sequences as lists of tensors known at compile time (and optionals as a tensor or none).

A sequence built inside the graph (``SequenceEmpty``, ``SequenceConstruct``, ``SplitToSequence``)
and edited at positions known at compile time (``SequenceInsert``, ``SequenceErase``) is a
Python list of the names of its tensors while the frontend types the graph. The ops that read
it become plain nodes: ``SequenceAt`` an Identity of the element, ``SequenceLength`` a
constant, ``ConcatFromSequence`` a Concat (of Unsqueezes, with ``new_axis``),
``SplitToSequence`` a Split (and Squeezes, with ``keepdims=0``). No sequence is left for the
later stages. Likewise an optional is the name of its tensor or nothing (``Optional``),
``OptionalHasElement`` a constant and ``OptionalGetElement`` an Identity. A sequence graph
output becomes outputs of its elements, named by :func:`element_name`;
:mod:`polyonnx.backend` feeds a sequence input as its elements and an optional input as its
tensor or nothing (compiling once per length and shapes) and returns a sequence output as a
list. A sequence whose length or positions are known only at run time, or any other op on
one, is refused with :class:`~polyonnx.errors.UnsupportedOpError`.

Example:
    >>> from polyonnx.graph.ir import Node
    >>> lists = SequenceLists()
    >>> _ = lists.expand(Node("c", "SequenceConstruct", ("a", "b"), ("s",)), {}, {})
    >>> [(p.op_type, list(p.input), list(p.output)) for p in lists.expand(
    ...     Node("at", "SequenceAt", ("s", "i"), ("y",)), {}, {"i": np.array(-1)}).nodes]
    [('Identity', ['b'], ['y'])]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.graph.ir import Node, Value

#: The ops :class:`SequenceLists` replaces.
SEQUENCE_OPS = frozenset(
    {
        "SequenceEmpty",
        "SequenceConstruct",
        "SequenceInsert",
        "SequenceErase",
        "SequenceAt",
        "SequenceLength",
        "ConcatFromSequence",
        "SplitToSequence",
        "Optional",
        "OptionalHasElement",
        "OptionalGetElement",
    }
)


def element_name(sequence: str, k: int) -> str:
    """The name of element ``k`` of a sequence that is a graph input or output: the model
    compiled takes and returns the elements as tensors of these names."""
    return f"{sequence}[{k}]"


def presence_name(optional: str) -> str:
    """The name of the bool output that says whether optional graph output ``optional`` has
    an element (the model compiled returns it beside the element, or the sequence's
    elements, named as :func:`element_name` says)."""
    return f"{optional}?"


@dataclass
class Replacement:
    """The plain nodes and constants that replace one sequence op (none for an op that only
    edits a list)."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    constants: list[onnx.TensorProto] = field(default_factory=list)


@dataclass
class SequenceLists:
    """The sequences of a graph, each the list of its tensors' names (see the module
    docstring)."""

    lists: dict[str, list[str]] = field(default_factory=dict)
    #: Optional tensors: the tensor's name, or None for an empty optional.
    optionals: dict[str, str | None] = field(default_factory=dict)

    def expand(
        self, n: Node, values: Mapping[str, Value], known: Mapping[str, np.ndarray]
    ) -> Replacement:
        """Record or replace sequence op ``n``; ``values`` types its tensor inputs, ``known``
        holds the values known at compile time (positions, split sizes)."""
        op, out = n.op_type, n.outputs[0]
        if op.startswith("Optional"):
            return self._optional(n)
        if op == "Identity" and n.inputs[0] in self.optionals:
            self.optionals[out] = self.optionals[n.inputs[0]]
            return Replacement()
        if op == "SequenceEmpty":
            self.lists[out] = []
            return Replacement()
        if op == "SequenceConstruct":
            self.lists[out] = list(n.inputs)
            return Replacement()
        if op == "SplitToSequence":
            return self._split(n, values, known)
        seq = self._list(n, n.inputs[0])
        if op == "Identity":
            self.lists[out] = list(seq)
            return Replacement()
        if op == "SequenceInsert":
            where = self._position(n, 2, known, len(seq), default=len(seq), end=True)
            self.lists[out] = [*seq[:where], n.inputs[1], *seq[where:]]
            return Replacement()
        if op == "SequenceErase":
            where = self._position(n, 1, known, len(seq), default=len(seq) - 1)
            self.lists[out] = seq[:where] + seq[where + 1 :]
            return Replacement()
        if op == "SequenceAt":
            where = self._position(n, 1, known, len(seq), default=None)
            return Replacement([_node("Identity", [seq[where]], [out], n.name)])
        if op == "SequenceLength":
            return Replacement(constants=[numpy_helper.from_array(np.array(len(seq)), out)])
        return self._concat(n, seq)

    def _optional(self, n: Node) -> Replacement:
        """Optional, OptionalHasElement, OptionalGetElement: an optional is its tensor or
        nothing; a plain tensor (or sequence) given where an optional may be is present."""
        x, out = (n.inputs[0] if n.inputs else ""), n.outputs[0]
        if n.op_type == "Optional":
            self.optionals[out] = x or None
            return Replacement()
        if n.op_type == "OptionalHasElement":
            present = bool(x) and self.optionals.get(x, x) is not None
            return Replacement(constants=[numpy_helper.from_array(np.array(present), out)])
        if x in self.lists:  # (OptionalGetElement of a sequence: the sequence)
            self.lists[out] = list(self.lists[x])
            return Replacement()
        element = self.optionals.get(x, x)
        if not element:
            raise ModelError(f"node {n.name!r} (OptionalGetElement): the optional is empty")
        return Replacement([_node("Identity", [element], [out], n.name)])

    def _list(self, n: Node, name: str) -> list[str]:
        if name not in self.lists:
            raise UnsupportedOpError(
                n.op_type,
                node=n.name,
                detail=f"sequence {name!r} is not built in the graph from a list known at "
                "compile time",
            )
        return self.lists[name]

    def _position(
        self,
        n: Node,
        k: int,
        known: Mapping[str, np.ndarray],
        size: int,
        default: int | None,
        end: bool = False,
    ) -> int:
        """Input ``k`` of ``n``, a position in a sequence of ``size`` elements (negative
        counts from the end; ``end``: ``size`` itself too, inserting at the end), or
        ``default`` when absent."""
        name = n.inputs[k] if len(n.inputs) > k else ""
        if not name:
            if default is None:
                raise ModelError(f"node {n.name!r} ({n.op_type}): position input missing")
            return default
        if name not in known:
            raise UnsupportedOpError(
                n.op_type, node=n.name, detail=f"position {name!r} is known only at run time"
            )
        p = int(np.asarray(known[name]).reshape(-1)[0])
        if not -size <= p < size + end:
            raise ModelError(
                f"node {n.name!r} ({n.op_type}): position {p} is out of range for {size} element(s)"
            )
        return p + size if p < 0 else p

    def _split(
        self, n: Node, values: Mapping[str, Value], known: Mapping[str, np.ndarray]
    ) -> Replacement:
        x, out = n.inputs[0], n.outputs[0]
        if x not in values or not values[x].is_static:
            raise UnsupportedOpError(
                n.op_type, node=n.name, detail=f"input {x!r} has no static shape"
            )
        shape = values[x].dims
        axis = int(n.attr("axis", 0))
        if not -len(shape) <= axis < len(shape):
            raise ModelError(f"node {n.name!r} (SplitToSequence): axis {axis} is out of range")
        axis %= len(shape)
        extent = shape[axis]
        split_name = n.inputs[1] if len(n.inputs) > 1 else ""
        if split_name and split_name not in known:
            raise UnsupportedOpError(
                n.op_type, node=n.name, detail=f"split {split_name!r} is known only at run time"
            )
        split = np.asarray(known[split_name]).astype(np.int64) if split_name else None
        if split is None:
            sizes = [1] * extent
        elif split.ndim == 0:
            step = int(split)
            if step <= 0:
                raise ModelError(f"node {n.name!r} (SplitToSequence): split {step} must be > 0")
            sizes = [min(step, extent - s) for s in range(0, extent, step)]
        else:
            sizes = [int(s) for s in split]
        if sum(sizes) != extent or any(s < 0 for s in sizes):
            raise ModelError(
                f"node {n.name!r} (SplitToSequence): split {sizes} does not add up to "
                f"{extent}, the extent of axis {axis}"
            )
        squeeze = split is None and not int(n.attr("keepdims", 1))
        parts = [f"{out}/{k}" for k in range(len(sizes))]
        sizes_name, axes_name = f"{out}/sizes", f"{out}/axes"
        rep = Replacement(
            constants=[numpy_helper.from_array(np.array(sizes, np.int64), sizes_name)]
        )
        pieces = [p + "/kept" for p in parts] if squeeze else parts
        if sizes:
            rep.nodes.append(_node("Split", [x, sizes_name], pieces, n.name, axis=axis))
        if squeeze:
            rep.constants.append(numpy_helper.from_array(np.array([axis], np.int64), axes_name))
            rep.nodes += [
                _node("Squeeze", [k, axes_name], [p], f"{n.name}/{i}")
                for i, (k, p) in enumerate(zip(pieces, parts, strict=True))
            ]
        self.lists[out] = parts
        return rep

    def _concat(self, n: Node, seq: list[str]) -> Replacement:
        out = n.outputs[0]
        if not seq:
            raise UnsupportedOpError(n.op_type, node=n.name, detail="an empty sequence")
        axis = int(n.attr("axis"))
        if not int(n.attr("new_axis", 0)):
            return Replacement([_node("Concat", seq, [out], n.name, axis=axis)])
        axes_name = f"{out}/axes"
        parts = [f"{out}/{k}" for k in range(len(seq))]
        rep = Replacement(
            constants=[numpy_helper.from_array(np.array([axis], np.int64), axes_name)]
        )
        rep.nodes += [
            _node("Unsqueeze", [s, axes_name], [p], f"{n.name}/{k}")
            for k, (s, p) in enumerate(zip(seq, parts, strict=True))
        ]
        rep.nodes.append(_node("Concat", parts, [out], n.name, axis=axis))
        return rep


def _node(
    op: str, inputs: list[str], outputs: list[str], name: str, axis: int | None = None
) -> onnx.NodeProto:
    node = helper.make_node(op, inputs, outputs, name=name)
    if axis is not None:
        node.attribute.append(helper.make_attribute("axis", axis))
    return node
