"""A chain of elementwise ops, each on the previous result and an optional constant: the nodes
a pass writes in place of one node (a per-channel multiply-add, a quantize-dequantize pair).

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Node, Value
    >>> values = {"x": Value("x", "float32", (4,))}
    >>> consts: dict = {}
    >>> n = Node("bn", "BatchNormalization", ("x",), ("y",))
    >>> steps = [Step("Mul", np.float32(2), "scale"), Step("Round")]
    >>> [str(m) for m in chain(n, "x", steps, values, consts, {"x", "y", "bn"})]
    ['bn_mul_1: bn_mul = Mul(x, bn_scale)', 'bn: y = Round(bn_mul)']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyonnx.graph.ir import Node, Value, fresh_name


@dataclass(frozen=True)
class Step:
    """One op of a chain: ``op(previous, operand)``, or ``op(previous)`` without an operand;
    ``label`` names the operand's constant (``<node>_<label>``)."""

    op: str
    operand: np.ndarray | None = None
    label: str = "c"


def chain(
    n: Node,
    x: str,
    steps: Sequence[Step],
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """The nodes applying ``steps`` to ``x`` in order, in ``x``'s type and shape; the last
    writes ``n``'s first output and keeps ``n``'s name, every node has ``n``'s guard. New
    constants and values go into ``consts`` and ``values``, new names into ``taken``."""
    dtype, shape = values[x].dtype, values[x].shape
    nodes: list[Node] = []
    for k, step in enumerate(steps):
        last = k == len(steps) - 1
        inputs = [x]
        if step.operand is not None:
            c = fresh_name(f"{n.name}_{step.label}", taken)
            consts[c] = np.asarray(step.operand).astype(dtype)
            values[c] = Value(c, dtype, consts[c].shape)
            inputs.append(c)
        y = n.outputs[0] if last else fresh_name(f"{n.name}_{step.op.lower()}", taken)
        if not last:
            values[y] = Value(y, dtype, shape)
        name = n.name if last else fresh_name(f"{n.name}_{step.op.lower()}", taken)
        nodes.append(Node(name, step.op, inputs, [y], guard=n.guard))
        x = y
    return nodes
