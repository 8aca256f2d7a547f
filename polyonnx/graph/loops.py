"""Loops run at run time: how a Loop whose trip count or condition is known only at run time
appears in the graph, and the record the later stages keep of it.

The frontend (:mod:`polyonnx.frontend.control`) replaces such a Loop ``L`` by three parts, in
this order::

    L/enter: L/<i>, L/<cond>, L/<v>... = polyonnx.LoopEnter[start](M, cond, v_initial...)
    ...      the body's nodes, each guarded by (L/<cond>, True)
    L/exit:  v_final... = polyonnx.LoopExit(L/<cond>, cond_out, v_out..., L/<v>...)

``LoopEnter`` copies the initial values into the loop-carried buffers ``L/<v>``; the entry
point then runs the body's kernels ``for i in start..M while cond``, writing the iteration
number and the condition into ``L/<i>`` and ``L/<cond>`` before each iteration; ``LoopExit``
copies the body's results into the loop-carried buffers at the end of each iteration, and its
outputs (the Loop's) are those buffers after the loop. The guard ``(L/<cond>, True)`` holds
inside the loop by construction: it marks the loop's region, which graph passes respect as
they respect an If's branches (no fusion across it, no hoisting).

Example:
    >>> enter = Node("L/enter", "LoopEnter", ("n", "", "a0"), ("L/i", "L/c", "L/a"), {"start": 0},
    ...              INTERNAL_DOMAIN)
    >>> leave = Node("L/exit", "LoopExit", ("L/c", "go", "b", "L/a"), ("a",), {},
    ...              INTERNAL_DOMAIN, (("L/c", True),))
    >>> loop = RunTimeLoop.of(enter, leave)
    >>> loop.name, loop.trip, loop.running, loop.next_condition, loop.carried
    ('L', 'n', 'L/c', 'go', ('L/a',))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from polyonnx.graph.ir import INTERNAL_DOMAIN, Node

LOOP_ENTER = "LoopEnter"
LOOP_EXIT = "LoopExit"

Guard = tuple[tuple[str, bool], ...]


def is_loop_op(node: Node, op_type: str = "") -> bool:
    """Whether ``node`` is a LoopEnter or LoopExit (``op_type``: that one only)."""
    ops = (op_type,) if op_type else (LOOP_ENTER, LOOP_EXIT)
    return node.domain == INTERNAL_DOMAIN and node.op_type in ops


@dataclass(frozen=True, slots=True)
class RunTimeLoop:
    """A loop of the entry point: ``for i in start..trip while condition`` runs the kernels
    whose guard holds ``(running, True)``.

    ``trip``: the int64 value bounding the iteration number ("" : none); ``condition``: the
    bool before the first iteration ("" : true); ``iteration`` and ``running``: the body's
    iteration number and condition, written by the entry point before each iteration;
    ``next_condition``: the body's condition output, read after each iteration; ``carried``:
    the loop-carried buffers; ``guard``: the Loop's own guard (a Loop in an If's branch)."""

    name: str
    trip: str
    condition: str
    iteration: str
    running: str
    next_condition: str
    carried: tuple[str, ...]
    start: int = 0
    guard: Guard = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """The values the entry point reads: trip count and conditions."""
        return tuple(v for v in (self.trip, self.condition, self.next_condition) if v)

    @staticmethod
    def of(enter: Node, leave: Node) -> RunTimeLoop:
        """The loop a LoopEnter and its LoopExit describe."""
        return RunTimeLoop(
            loop_name(enter),
            enter.input(0),
            enter.input(1),
            enter.outputs[0],
            enter.outputs[1],
            leave.inputs[1],
            tuple(enter.outputs[2:]),
            int(enter.attr("start", 0)),
            enter.guard,
        )


def loop_name(node: Node) -> str:
    """The Loop node a LoopEnter (``<loop>/enter``) or LoopExit (``<loop>/exit``) stands for."""
    return node.name.rsplit("/", 1)[0]


def run_time_loops(nodes: Iterable[Node]) -> dict[str, RunTimeLoop]:
    """The run-time loops among ``nodes``, by their ``running`` value."""
    nodes = list(nodes)
    exits = {n.inputs[0]: n for n in nodes if is_loop_op(n, LOOP_EXIT)}
    loops = (RunTimeLoop.of(n, exits[n.outputs[1]]) for n in nodes if is_loop_op(n, LOOP_ENTER))
    return {loop.running: loop for loop in loops}


def enclosing(guard: Guard, loops: Mapping[str, RunTimeLoop]) -> tuple[str, ...]:
    """The ``running`` values of the loops a node (or kernel) with ``guard`` runs in,
    outermost first."""
    return tuple(cond for cond, _ in guard if cond in loops)
