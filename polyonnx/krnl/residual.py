"""Residuals in place: ``y = f(conv(x) + r)`` starts its sums at ``r``, in ``r``'s memory.

A reduction whose epilogue adds a value ``r`` that dies with the kernel (ResNet's shortcut)
starts its accumulators at ``r`` instead, and ``y`` takes ``r``'s memory (the caller records
it in :attr:`~polyonnx.krnl.program.Program.storage`): the kernel reads ``y`` where it read
``r``, updates it and writes it back. One stream of cache lines instead of two, and none
fetched only to be overwritten (a store to a line not in cache reads it first), as
onnxruntime's fused ``Conv + Sum`` does::

    S0: y[i] = b[i]                       S0: y[i] = b[i] + y[i]      (y holds r on entry)
    S1: y[i] = y[i] + x[i, k] * w[k]      S1: y[i] = y[i] + x[i, k] * w[k]
    S2: y[i] = max(y[i] + r[i], 0)        S2: y[i] = max(y[i], 0)

Sums are reassociated, ``(b + r) + sum`` for ``(b + sum) + r``: floating-point results move
by rounding, as any reduction order does. Every access to ``y[i]`` follows the init's read
of it at the same point, so the dependences isl sees are the kernel's real ones.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from polyonnx.krnl.in_place import full_pointwise, uses
from polyonnx.krnl.ir import (
    Aff,
    Binary,
    Buffer,
    Expr,
    Kernel,
    Load,
    Loop,
    Node,
    Stmt,
    loads,
    map_children,
    perfect_nest,
    walk,
)


@dataclass(frozen=True)
class _Match:
    residual: str
    init: Stmt
    epilogue: Stmt
    epilogue_at: int


def residual_in_place(
    kernel: Kernel, dying: Collection[str], fixed: Collection[str] = ()
) -> tuple[Kernel, dict[str, str]]:
    """``kernel`` with each epilogue's residual among ``dying`` (values read by no later
    kernel) moved into its reduction's init, and ``{y: r}`` for each: ``y`` must then live in
    ``r``'s memory (the kernel no longer declares ``r``). Outputs in ``fixed`` keep their own
    memory (graph outputs, zero-bordered values)."""
    shared: dict[str, str] = {}
    while True:
        match = _find(kernel, set(dying) - set(shared.values()), set(fixed))
        if match is None:
            return kernel, shared
        kernel = _rewrite(kernel, match)
        shared[match.epilogue.write.buffer] = match.residual


def _find(kernel: Kernel, dying: set[str], fixed: set[str]) -> _Match | None:
    buffers = {b.name: b for b in kernel.buffers}
    statements = [s for _, s in kernel.statements()]
    for at, node in enumerate(kernel.body):
        epilogue = full_pointwise(node, buffers)
        if epilogue is None:
            continue
        y = epilogue.write.buffer
        residual = _residual(epilogue, buffers, dying)
        if residual is None or buffers[y].kind != "output" or y in fixed:
            continue
        init = _reduction_init(kernel.body[:at], buffers[y])
        # The residual is read by the epilogue alone, the output touched by the reduction only.
        if init is None or any(uses(s, residual) for s in statements if s is not epilogue):
            continue
        if [s for s in statements if uses(s, y)] != [*init, epilogue]:
            continue
        return _Match(residual, init[0], epilogue, at)
    return None


def _residual(epilogue: Stmt, buffers: dict, dying: set[str]) -> str | None:
    """The buffer ``r`` of the one ``y[p] + r[p]`` in the epilogue (its only loads of ``y`` and
    ``r``), when ``r`` is a dying input like ``y``."""
    y, point = epilogue.write.buffer, epilogue.write.index
    for e in _adds(epilogue.body):
        pair = {ld.buffer: ld for ld in (e.a, e.b) if isinstance(ld, Load) and ld.index == point}
        r = next((b for b in pair if b != y), None)
        if (
            y not in pair
            or r is None
            or r not in dying
            or buffers[r].kind != "input"
            or (buffers[r].shape, buffers[r].dtype) != (buffers[y].shape, buffers[y].dtype)
        ):
            continue
        if sum(ld.buffer in (y, r) for ld in loads(epilogue.body)) == 2:
            return r
    return None


def _adds(e: Expr) -> list[Binary]:
    return [x for x in walk(e) if isinstance(x, Binary) and x.op == "add"]


def _reduction_init(nodes: tuple[Node, ...], y: Buffer) -> tuple[Stmt, Stmt] | None:
    """(init, update) of the reduction nest among ``nodes`` that computes all of ``y``:
    ``for p: S0: y[p] = e; for k...: S1: y[p] = y[p] + e'`` (``e``, ``e'`` not reading ``y``),
    its outer loops covering ``y`` from 0."""
    for node in nodes:
        outer: list[Loop] = []
        while isinstance(node, Loop) and len(node.body) == 1 and isinstance(node.body[0], Loop):
            outer.append(node)
            node = node.body[0]
        if not isinstance(node, Loop):
            continue
        outer.append(node)
        body = node.body
        if len(body) != 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
            continue
        init = body[0]
        inner = perfect_nest(body[1])
        if inner is None or not isinstance(inner[1], Stmt):
            continue
        update = inner[1]
        point = tuple(Aff.var(lp.iterator) for lp in outer)
        if (
            init.write.buffer != y.name
            or init.write.index != point
            or init.guards
            or update.guards
            or update.write != init.write
            or [(lp.lower, lp.upper) for lp in outer]
            != [(Aff.lift(0), Aff.lift(n)) for n in y.shape]
        ):
            continue
        acc = Load(y.name, point, init.body.dtype)
        body_ = update.body
        if not (isinstance(body_, Binary) and body_.op == "add" and acc in (body_.a, body_.b)):
            continue
        rest = body_.b if body_.a == acc else body_.a
        if any(ld.buffer == y.name for ld in loads(init.body) + loads(rest)):
            continue
        return init, update
    return None


def _rewrite(kernel: Kernel, m: _Match) -> Kernel:
    y = m.epilogue.write.buffer
    point = m.epilogue.write.index
    acc = Load(y, point, m.epilogue.body.dtype)
    residual_sum = {
        Binary("add", acc, Load(m.residual, point, acc.dtype)),
        Binary("add", Load(m.residual, point, acc.dtype), acc),
    }

    def drop_residual(e: Expr) -> Expr:
        return acc if e in residual_sum else map_children(e, drop_residual)

    epilogue_body = drop_residual(m.epilogue.body)
    init = m.init
    init_body = Binary("add", init.body, Load(y, init.write.index, init.body.dtype))

    def node(n: Node) -> Node:
        if n is init:
            return replace(init, body=init_body)
        if n is m.epilogue:
            return replace(n, body=epilogue_body)
        if isinstance(n, Loop):
            return replace(n, body=tuple(node(c) for c in n.body))
        return n

    body = [node(n) for n in kernel.body]
    if epilogue_body == acc:  # y = y: nothing left to do after the reduction
        del body[m.epilogue_at]
    return replace(
        kernel, body=tuple(body), buffers=tuple(b for b in kernel.buffers if b.name != m.residual)
    )
