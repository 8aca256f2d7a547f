"""Finishes out of reduction nests: a reduction's last statement becomes a nest of its own.

Reductions lower as one nest per output point: initialise an accumulator, fold the reduced
elements in, finish into the output (``y = acc / n`` for a mean). With the finish inside, the
nest is no reduction nest the scheduler can register-tile (its vector lanes would have to run
the finish too). Distributing the loops over the finish is legal when the finish reads the
accumulator at its own point only and nothing else of the nest, and writes what the nest does
not touch: every accumulator is complete before any finish then, as it was before its own.

Example (before, after)::

    for i, c:                              for i, c:
      S0: acc[i, c] = 0.0                    S0: acc[i, c] = 0.0
      for r:                                 for r:
        S1: acc[i, c] = acc[i, c] + x[r, i, c]   S1: acc[i, c] = acc[i, c] + x[r, i, c]
      S2: y[i, 0, c] = acc[i, c] / 8.0     for i, c:
                                             S2: y[i, 0, c] = acc[i, c] / 8.0
"""

from __future__ import annotations

from dataclasses import replace

from polyonnx.krnl.ir import Aff, Kernel, Loop, Node, Stmt, loads


def distribute_finishes(kernel: Kernel) -> Kernel:
    """``kernel`` with the finish of every reduction nest into a temp accumulator in a nest of
    its own (see the module docstring)."""
    body: list[Node] = []
    for node in kernel.body:
        body.extend(_distribute(kernel, node) if isinstance(node, Loop) else (node,))
    return replace(kernel, body=tuple(body))


def _distribute(kernel: Kernel, nest: Loop) -> tuple[Node, ...]:
    loops = [nest]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    inner = loops[-1].body
    if len(inner) != 3 or not isinstance(inner[1], Loop):
        return (nest,)
    init, reduction, finish = inner
    if not isinstance(init, Stmt) or not isinstance(finish, Stmt) or init.guards:
        return (nest,)
    acc = init.write.buffer
    point = tuple(Aff.var(lp.iterator) for lp in loops)
    if kernel.buffer(acc).kind != "temp" or init.write.index != point:
        return (nest,)
    folds = _statements(reduction)
    if any(s.write != init.write for s in folds):
        return (nest,)
    written = {acc, finish.write.buffer}
    if any(finish.write.buffer == ld.buffer for s in (init, *folds) for ld in loads(s.body)):
        return (nest,)
    if any(
        ld.buffer in written and (ld.buffer != acc or ld.index != point)
        for ld in loads(finish.body)
    ):
        return (nest,)
    return _rebuild(loops, (init, reduction)), _rebuild(loops, (finish,))


def _statements(node: Node) -> list[Stmt]:
    if isinstance(node, Stmt):
        return [node]
    return [s for child in node.body for s in _statements(child)]


def _rebuild(loops: list[Loop], body: tuple[Node, ...]) -> Node:
    node: tuple[Node, ...] = body
    for lp in reversed(loops):
        node = (replace(lp, body=node),)
    return node[0]
