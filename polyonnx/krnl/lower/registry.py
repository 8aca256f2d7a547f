"""The lowering registry: one function per (op type, since-opset), one file per op family.

A lowering function takes the node and a :class:`LowerContext` and returns krnl loop nests
(``Loop``/``Stmt`` trees) that read the node's input buffers and write its output buffers, named
after the ONNX values. Statement names are placeholders; the kernel builder renumbers them.

Example:
    >>> @register("Relu")
    ... def lower_relu(node, ctx): ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node
from polyonnx.krnl import ir


@dataclass(frozen=True)
class LowerContext:
    """What a lowering may ask about the graph: shapes, dtypes and constant values."""

    graph: Graph

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.graph.value(name).shape)

    def dtype(self, name: str) -> str:
        return self.graph.value(name).dtype

    def constant(self, name: str) -> np.ndarray | None:
        """The compile-time value of ``name`` (an initializer), or None."""
        return self.graph.constants.get(name) if name else None


Lowering = Callable[[Node, LowerContext], tuple[ir.Node, ...]]

_REGISTRY: dict[str, list[tuple[int, Lowering]]] = {}


def register(op_type: str, since: int = 1, domain: str = "") -> Callable[[Lowering], Lowering]:
    """Register ``fn`` as the lowering of ``op_type`` from opset ``since`` on."""

    def deco(fn: Lowering) -> Lowering:
        entries = _REGISTRY.setdefault(_key(op_type, domain), [])
        entries.append((since, fn))
        entries.sort(key=lambda e: e[0])
        return fn

    return deco


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def find(op_type: str, opset: int, domain: str = "") -> Lowering | None:
    """The lowering for ``op_type`` valid at ``opset``, or None."""
    best = None
    for since, fn in _REGISTRY.get(_key(op_type, domain), []):
        if since <= opset:
            best = fn
    return best


def lower_node(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Lower one node; raise :class:`UnsupportedOpError` when nothing is registered."""
    _load_families()
    fn = find(node.op_type, ctx.graph.opset, node.domain)
    if fn is None:
        raise UnsupportedOpError(node.op_type, ctx.graph.opset, node.name,
                                 "no lowering registered")
    return tuple(fn(node, ctx))


def supported_ops() -> list[str]:
    _load_families()
    return sorted(_REGISTRY)


def _load_families() -> None:
    # Importing the family modules registers their lowerings.
    from polyonnx.krnl import lower  # noqa: F401
