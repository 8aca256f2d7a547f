"""Point-wise consumers sunk into the statements that write their input.

:mod:`~polyonnx.krnl.inline` substitutes a one-statement producer into its reader. A temp
written piece by piece, by several statements with their own loops (a Winograd convolution's
output tiles, one statement per column of a tile), has no single expression to substitute:
there the reader moves instead. A point-wise nest ``z[p] = f(y[p], ...)`` over the whole of a
temp ``y`` becomes part of each statement writing ``y``: ``y[idx] = e`` becomes
``z[idx] = f(e, ...)``, the reader's other operands indexed at ``idx`` too, and ``y`` is gone:
the activation runs on each value as it is computed, in registers, instead of in a second
pass over memory.

It is the same computation when the writers do not read ``y`` (a later write of an element
then replaces an earlier one in ``z`` as it did in ``y``), no other statement reads ``y``, and
nothing between the first writer and the reader writes ``z`` or what ``f`` reads, or reads
``z``.

Example (before, after)::

    for th, p: S0: y[4*th + p, 0] = a[th, p] * 2.0      for th, p: S0: z[4*th + p, 0] = max(a[th, p] * 2.0, b[4*th + p])
               S1: y[4*th + p, 1] = a[th, p] * 3.0                 S1: z[4*th + p, 1] = max(a[th, p] * 3.0, b[4*th + p])
    for i, j:  S2: z[i, j] = max(y[i, j], b[i])
"""  # noqa: E501

from __future__ import annotations

from dataclasses import replace

from polyonnx.krnl.ir import (
    Aff,
    Expr,
    Iter,
    Kernel,
    Load,
    Node,
    Stmt,
    loads,
    map_children,
    perfect_nest,
    walk,
)


def sink_pointwise(kernel: Kernel) -> Kernel:
    """``kernel`` with every point-wise reader of a piecewise-written temp sunk into the
    writers (see the module docstring)."""
    while (sunk := _sink_one(kernel)) is not None:
        kernel = sunk
    return kernel


def _statements(node: Node) -> list[Stmt]:
    if isinstance(node, Stmt):
        return [node]
    return [s for child in node.body for s in _statements(child)]


def _reader(kernel: Kernel, node: Node) -> tuple[Stmt, str, tuple[str, ...]] | None:
    """(statement, the temp it reads, its iterators) of a one-statement point-wise nest over
    the whole of a temp of the kernel, reading it only at its own point, or None."""
    nest = perfect_nest(node)
    if nest is None or not isinstance(nest[1], Stmt) or nest[1].guards:
        return None
    loops, c = nest
    its = tuple(lp.iterator for lp in loops)
    point = tuple(Aff.var(i) for i in its)
    if c.write.index != point or any(isinstance(e, Iter) for e in walk(c.body)):
        return None
    if not all(isinstance(i, Aff) for ld in loads(c.body) for i in ld.index):
        return None
    bounds = [(lp.lower, lp.upper) for lp in loops]
    for ld in loads(c.body):
        buffer = kernel.buffer(ld.buffer)
        if buffer.kind != "temp" or ld.index != point or ld.buffer == c.write.buffer:
            continue
        if bounds == [(Aff.lift(0), Aff.lift(n)) for n in buffer.shape]:
            return c, ld.buffer, its
    return None


def _sink_one(kernel: Kernel) -> Kernel | None:
    body = kernel.body
    for j, node in enumerate(body):
        found = _reader(kernel, node)
        if found is None:
            continue
        c, temp, its = found
        stmts = [_statements(n) for n in body]
        writers = [k for k in range(j) if any(s.write.buffer == temp for s in stmts[k])]
        if not writers or _touches(stmts, temp, c, writers[0], j):
            continue
        first = writers[0]
        rewritten = tuple(_sunk(n, temp, c, its) for n in body[first:j])
        return replace(
            kernel,
            body=(*body[:first], *rewritten, *body[j + 1 :]),
            buffers=tuple(b for b in kernel.buffers if b.name != temp),
        )
    return None


def _touches(stmts: list[list[Stmt]], temp: str, c: Stmt, first: int, j: int) -> bool:
    """Whether sinking ``c`` (node ``j``) into the writers of ``temp`` from node ``first`` on
    could change a result (see the module docstring)."""
    operands = {ld.buffer for ld in loads(c.body)} - {temp}
    out = c.write.buffer
    for k, group in enumerate(stmts):
        for s in group:
            reads = {ld.buffer for ld in loads(s.body)}
            if k != j and temp in reads:
                return True  # another reader, or a writer that accumulates
            if first <= k < j and (s.write.buffer in operands | {out} or out in reads):
                return True
    return False


def _sunk(node: Node, temp: str, c: Stmt, its: tuple[str, ...]) -> Node:
    if isinstance(node, Stmt):
        if node.write.buffer != temp:
            return node
        at = dict(zip(its, node.write.index, strict=True))
        return replace(
            node,
            write=replace(c.write, index=node.write.index),
            body=_substitute(c.body, at, temp, node.body),
        )
    return replace(node, body=tuple(_sunk(child, temp, c, its) for child in node.body))


def _substitute(e: Expr, at: dict[str, Aff], temp: str, value: Expr) -> Expr:
    """``e`` with its loads of ``temp`` replaced by ``value`` and every other load's index
    taken at ``at`` (iterator -> affine expression of the writer's iterators)."""
    if isinstance(e, Load):
        if e.buffer == temp:
            return value
        return replace(e, index=tuple(i.substitute(at) for i in e.index))  # type: ignore[union-attr]
    return map_children(e, lambda child: _substitute(child, at, temp, value))
