"""The kernels of a run-time loop's LoopEnter and LoopExit (:mod:`polyonnx.graph.loops`), and
what the program must keep of the values around a loop.

``LoopEnter`` becomes one copy kernel per loop-carried value (``carried = initial``), before
the loop; ``LoopExit`` one per value an iteration changes (``carried = result``), the loop's
last kernels, and its outputs are views of the loop-carried buffers. A result that is itself
a view of another loop-carried buffer (a swap, ``(a, b) -> (b, a)``) is staged in a buffer of
its own first, so no copy reads a buffer another copy already overwrote.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value, INTERNAL_DOMAIN
    >>> v = {n: Value(n, "float32", (2,)) for n in ("a0", "L/a", "L/b", "a")}
    >>> v.update({n: Value(n, "bool", ()) for n in ("L/c", "go")})
    >>> leave = Node("L/exit", "LoopExit", ("L/c", "go", "L/b", "L/a"), ("a",), {},
    ...              INTERNAL_DOMAIN, (("L/c", True),))
    >>> made = exit_kernels("k3", leave, Graph("g", (), (), (), v), {})
    >>> [k.name for k in made.kernels], made.storage["a"]
    (['k3_0'], 'L/a')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.loops import LOOP_ENTER, Guard, enclosing, is_loop_op, run_time_loops
from polyonnx.krnl import ir
from polyonnx.krnl.copy import copy_kernel


@dataclass(frozen=True, slots=True)
class LoopKernels:
    """The copy kernels of a LoopEnter or LoopExit, in order, and the storage they add
    (buffer -> root value); each kernel runs under the node's guard (a LoopExit's: in the
    loop)."""

    kernels: tuple[ir.Kernel, ...]
    storage: Mapping[str, str]
    guard: Guard = ()

    @property
    def guards(self) -> dict[str, Guard]:
        """Kernel name -> guard."""
        return {k.name: self.guard for k in self.kernels}


def loop_kernels(name: str, node: Node, graph: Graph, storage: Mapping[str, str]) -> LoopKernels:
    """The kernels of a LoopEnter or LoopExit ``node``, named ``<name>_<k>``; ``storage``:
    the program's so far (buffer -> root value)."""
    made = enter_kernels if is_loop_op(node, LOOP_ENTER) else exit_kernels
    return replace(made(name, node, graph, storage), guard=node.guard)


def enter_kernels(name: str, enter: Node, graph: Graph, storage: Mapping[str, str]) -> LoopKernels:
    """``carried = initial`` for each loop-carried value; kernels ``<name>_<k>``."""
    pairs = list(zip(enter.inputs[2:], enter.outputs[2:], strict=True))
    return _copies(name, [(storage.get(i, i), c) for i, c in pairs], graph, {})


def exit_kernels(name: str, leave: Node, graph: Graph, storage: Mapping[str, str]) -> LoopKernels:
    """``carried = result`` for each loop-carried value an iteration changes (staged when the
    result is a view of another loop-carried buffer); the Loop's outputs as views of the
    loop-carried buffers."""
    n = (len(leave.inputs) - 2) // 2
    results, carried = leave.inputs[2 : 2 + n], leave.inputs[2 + n :]
    roots = {storage.get(c, c) for c in carried}
    staged: list[tuple[str, str]] = []
    direct: list[tuple[str, str]] = []
    values = dict(graph.values)
    for r, c in zip(results, carried, strict=True):
        src = storage.get(r, r)
        if src == storage.get(c, c):
            continue  # the value is passed through unchanged
        if src in roots:
            temp = f"{c}__next"
            values[temp] = Value(temp, graph.value(c).dtype, graph.value(c).shape)
            staged.append((src, temp))
            src = temp
        direct.append((src, c))
    views = {o: storage.get(c, c) for o, c in zip(leave.outputs, carried, strict=True)}
    copies = _copies(name, staged + direct, graph, values)
    return LoopKernels(copies.kernels, {**copies.storage, **views})


def _copies(
    name: str, pairs: list[tuple[str, str]], graph: Graph, values: Mapping[str, Value]
) -> LoopKernels:
    """A copy kernel ``dst = src`` per pair (``src`` a root), named ``<name>_<k>``."""
    kernels, storage = [], {}
    for k, (src, dst) in enumerate(pairs):
        source, target = values.get(src) or graph.value(src), values.get(dst) or graph.value(dst)
        kernel = copy_kernel(f"{name}_{k}", Value(src, source.dtype, source.shape), target)
        storage[kernel.buffers[0].name] = src
        kernels.append(kernel)
    return LoopKernels(tuple(kernels), storage)


def loop_boundary(graph: Graph) -> frozenset[str]:
    """The values the LoopEnter and LoopExit nodes read or write: their copies and the entry
    point access them as plain row-major buffers (never zero-bordered, never placed in a
    concatenation)."""
    return frozenset(v for n in graph.nodes if is_loop_op(n) for v in (*n.inputs, *n.outputs) if v)


def read_across_loops(graph: Graph) -> frozenset[str]:
    """The values read inside a run-time loop that they are not computed in (outer values,
    the loop's state): read again by every iteration, they never die inside the loop, so no
    kernel there may take their memory."""
    loops = run_time_loops(graph.nodes)
    if not loops:
        return frozenset()
    made_in = {o: enclosing(n.guard, loops) for n in graph.nodes for o in n.outputs if o}
    return frozenset(
        i
        for n in graph.nodes
        for i in n.inputs
        if i and enclosing(n.guard, loops) != made_in.get(i, ())
    )
