"""The lowering registry: one function per (op type, since-opset), one file per op family.

A lowering function takes the node and a :class:`LowerContext` and returns krnl loop nests
(``Loop``/``Stmt`` trees) that read the node's input buffers and write its output buffers, named
after the ONNX values. Statement names are placeholders; the kernel builder renumbers them.

A lowering that needs scratch space (Softmax's running max, AveragePool's tap counts) returns a
:class:`Lowered` record instead of a plain tuple: its ``temps`` declare those extra buffers
(kind ``"temp"``, named ``f"{node.name}__<what>"``) with their shapes and dtypes, so the kernel
builder adds them to the kernel's buffer list. :func:`lower_node` always returns a
:class:`Lowered`, wrapping plain tuples with no temps.

A family module registers its lowerings with ``@register("Relu")`` (or
``@register("Resize", since=13)``); :func:`lower_node` finds and runs the one for a node.
Every family is registered before this module is used: importing it runs the package's
``__init__``, which imports them all (so the registry never imports its families).

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", "float32", (4,)), Value("y", "float32", (4,))
    >>> relu = Node("relu", "Relu", ("x",), ("y",))
    >>> graph = Graph("g", (x,), (y,), (relu,), {"x": x, "y": y})
    >>> [loop] = lower_node(relu, LowerContext(graph)).nests
    >>> loop.iterator, str(loop.body[0])
    ('i0', 'S: y[i0] = max(x[i0], 0.0)')
    >>> find("Relu", graph.opset).__name__
    'lower_relu'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from polyonnx.errors import UnsupportedOpError
from polyonnx.graph.ir import Graph, Node
from polyonnx.krnl import ir


@dataclass(frozen=True)
class LowerContext:
    """What a lowering may ask about the graph: shapes, dtypes, constant values, and which
    values are stored zero-bordered (see :mod:`polyonnx.krnl.borders`)."""

    graph: Graph
    borders: Mapping[str, ir.Border] = field(default_factory=dict)
    tile_bytes: int = 0
    """The target's register-tile width in bytes (two vectors; 0: not known), for lowerings
    whose best loop nest depends on how a loop fills vectors."""

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.graph.value(name).shape)

    def is_static(self, name: str) -> bool:
        """False for a value with a data-dependent (symbolic) dimension."""
        return self.graph.value(name).is_static

    def dtype(self, name: str) -> str:
        return self.graph.value(name).dtype

    def border(self, name: str) -> ir.Border | None:
        """How value ``name`` is stored zero-bordered, or None when it is stored as it is."""
        return self.borders.get(name)

    def constant(self, name: str) -> np.ndarray | None:
        """The compile-time value of ``name`` (an initializer), or None."""
        return self.graph.constants.get(name) if name else None


@dataclass(frozen=True, slots=True)
class DynamicOutput:
    """An output whose extent along some dimensions is known only after running (NonZero,
    Compress, Unique, TopK with a run-time K).

    The lowering writes ``value`` into a buffer of the maximal ``shape``; ``counts[d]`` names,
    for each dynamic dimension ``d``, a one-element int64 buffer (declared in the lowering's
    ``temps``) that holds the dimension's real extent when the kernel returns, and is ``""``
    for a static dimension. The runtime returns ``value[:counts[0], :counts[1], ...]``.
    """

    value: str
    shape: tuple[int, ...]
    counts: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "counts", tuple(self.counts))
        if len(self.counts) != len(self.shape) or not any(self.counts):
            raise ValueError(
                f"DynamicOutput {self.value}: one count name (or '') per "
                "dimension, at least one dynamic"
            )


@dataclass(frozen=True, slots=True)
class Lowered:
    """The result of lowering one node: its loop nests, in order, and the temp buffers they use.

    ``temps`` are scratch buffers private to this node (not ONNX values); the kernel builder
    declares them in the kernel with exactly this name, dtype and shape. ``constants`` are
    compile-time tensors the lowering derived from constant inputs (e.g. weights repacked into
    the layout its loops read best); they join the model's weights. ``views`` are read-only
    reshapes of an input value — ``(buffer, value)`` pairs, the buffer having the value's
    element count — that share the value's memory (e.g. ``[N, C, H*W]`` for an NCHW input, so
    the pixels form one contiguous loop). Only reads go through a view, so no dependence hides
    behind the second name. ``dynamic`` lists the outputs with data-dependent extents (see
    :class:`DynamicOutput`).
    """

    nests: tuple[ir.Node, ...]
    temps: tuple[ir.Buffer, ...] = ()
    constants: tuple[tuple[str, np.ndarray], ...] = ()
    views: tuple[tuple[ir.Buffer, str], ...] = ()
    dynamic: tuple[DynamicOutput, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "nests", tuple(self.nests))
        object.__setattr__(self, "temps", tuple(self.temps))
        object.__setattr__(self, "constants", tuple(self.constants))
        object.__setattr__(self, "views", tuple(self.views))
        object.__setattr__(self, "dynamic", tuple(self.dynamic))
        if any(t.kind != "temp" for t in self.temps):
            raise ValueError("Lowered.temps must be buffers of kind 'temp'")
        if any(b.kind != "input" for b, _ in self.views):
            raise ValueError("Lowered.views must be buffers of kind 'input'")


Lowering = Callable[[Node, LowerContext], "tuple[ir.Node, ...] | Lowered"]

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


def op_name(node: Node) -> str:
    """The op as messages name it: ``Relu``, or with its domain, ``ai.onnx.ml.Scaler``."""
    return _key(node.op_type, node.domain)


def op_opset(node: Node, ctx: LowerContext) -> int | None:
    """The opset messages give for ``node``: the graph's, which is the default domain's
    (None for an op of another domain)."""
    return None if node.domain else ctx.graph.opset


def find(op_type: str, opset: int, domain: str = "") -> Lowering | None:
    """The lowering for ``op_type`` valid at ``opset``, or None."""
    best = None
    for since, fn in _REGISTRY.get(_key(op_type, domain), []):
        if since <= opset:
            best = fn
    return best


def lower_node(node: Node, ctx: LowerContext) -> Lowered:
    """Lower one node to its loop nests and temp buffers.

    Raises :class:`UnsupportedOpError` when nothing is registered (or the lowering rejects an
    attribute value) and :class:`~polyonnx.errors.ModelError` for invalid attributes.
    """
    fn = find(node.op_type, ctx.graph.opset, node.domain)
    if fn is None:
        raise UnsupportedOpError(
            op_name(node), op_opset(node, ctx), node.name, "no lowering registered"
        )
    out = fn(node, ctx)
    return out if isinstance(out, Lowered) else Lowered(tuple(out))


def lower_nodes(nodes: Iterable[Node], ctx: LowerContext) -> Lowered:
    """Lower the nodes of a fusion group, in order, into one :class:`Lowered`: their nests one
    after the other, and the temps, constants, views and dynamic outputs of all of them."""
    parts = [lower_node(node, ctx) for node in nodes]
    return Lowered(
        nests=tuple(n for p in parts for n in p.nests),
        temps=tuple(t for p in parts for t in p.temps),
        constants=tuple(c for p in parts for c in p.constants),
        views=tuple(v for p in parts for v in p.views),
        dynamic=tuple(d for p in parts for d in p.dynamic),
    )


def has_lowering(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether a lowering of ``op_type`` is registered at ``opset``."""
    return find(op_type, opset, domain) is not None


def supported_ops() -> list[str]:
    return sorted(_REGISTRY)
