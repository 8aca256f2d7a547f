"""Producer-consumer inlining of point-wise nests inside a kernel.

A fusion group lowers to one nest per node, so ``Conv -> Relu`` writes the convolution's result
to a temp and reads it back in the next nest. When a temp is written once per element by a
one-statement nest and read, at the same point only, by one statement of a later nest over
the same loops, the producer's expression is substituted into that statement and the temp
disappears: one pass over memory instead of two. The reader need not be the next nest (a
fusion group is a DAG: in ``x * sigmoid(x)`` both nests read ``x``), and it may read the temp
more than once (each read becomes a copy of the expression, within one statement, where LLVM
computes it once).

Example (before, after)::

    for i0, i1: S0: t[i0, i1] = acc[i1, i0]        for i0, i1:
    for i0, i1: S1: y[i0, i1] = max(t[i0, i1], 0)      S1: y[i0, i1] = max(acc[i1, i0], 0)
"""

from __future__ import annotations

from dataclasses import replace

from polyonnx.krnl.ir import (
    Aff,
    Expr,
    Iter,
    Kernel,
    Load,
    Loop,
    Node,
    Stmt,
    loads,
    map_children,
    perfect_nest,
)


def _rewrite(e: Expr, names: dict[str, str], temp: str, producer: Expr | None) -> Expr:
    """Rename iterators by ``names``; replace loads of ``temp`` by ``producer``."""
    if isinstance(e, Load):
        if e.buffer == temp and producer is not None:
            return producer
        index = tuple(
            i.substitute({k: Aff.var(v) for k, v in names.items()})
            if isinstance(i, Aff)
            else _rewrite(i, names, temp, producer)
            for i in e.index
        )
        return replace(e, index=index)
    if isinstance(e, Iter):
        return replace(e, name=names.get(e.name, e.name))
    return map_children(e, lambda c: _rewrite(c, names, temp, producer))


def _producer(kernel: Kernel, node: Node) -> tuple[list[Loop], Stmt] | None:
    """(loops, statement) of a one-statement nest over constant bounds writing every point
    of a temp at its own point (and not reading it), or None."""
    nest = perfect_nest(node)
    if nest is None or not isinstance(nest[1], Stmt):
        return None
    loops, p = nest
    if kernel.buffer(p.write.buffer).kind != "temp" or p.guards:
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in loops):
        return None
    if p.write.index != tuple(Aff.var(lp.iterator) for lp in loops):
        return None
    if any(ld.buffer == p.write.buffer for ld in loads(p.body)):
        return None
    return loops, p


def _writes(node: Node) -> set[str]:
    if isinstance(node, Stmt):
        return {node.write.buffer}
    return {b for child in node.body for b in _writes(child)}


def _reads(node: Node, buffer: str) -> int:
    """How many statements under ``node`` read ``buffer``."""
    if isinstance(node, Stmt):
        return int(any(ld.buffer == buffer for ld in loads(node.body)))
    return sum(_reads(child, buffer) for child in node.body)


def _inline_one(kernel: Kernel) -> Kernel | None:
    """``kernel`` with its first inlinable producer (see the module docstring) inlined, or
    None when there is none."""
    body = kernel.body
    for i, node in enumerate(body):
        found = _producer(kernel, node)
        if found is None:
            continue
        p_loops, p = found
        temp = p.write.buffer
        readers = [j for j in range(len(body)) if _reads(body[j], temp)]
        others = [n for k, n in enumerate(body) if k != i and temp in _writes(n)]
        if len(readers) != 1 or readers[0] <= i or _reads(body[readers[0]], temp) != 1 or others:
            continue
        j = readers[0]
        nest = perfect_nest(body[j])
        if nest is None or not isinstance(nest[1], Stmt) or nest[1].guards:
            continue
        c_loops, c = nest
        if [(lp.lower, lp.upper) for lp in p_loops] != [(lp.lower, lp.upper) for lp in c_loops]:
            continue
        c_point = tuple(Aff.var(lp.iterator) for lp in c_loops)
        if any(ld.index != c_point for ld in loads(c.body) if ld.buffer == temp):
            continue
        # What the producer reads must hold the same values where the reader runs.
        inputs = {ld.buffer for ld in loads(p.body)}
        if any(inputs & _writes(n) for n in body[i + 1 : j + 1]):
            continue
        names = {lp.iterator: cl.iterator for lp, cl in zip(p_loops, c_loops, strict=True)}
        producer = _rewrite(p.body, names, "", None)
        merged = _rebuild(c_loops, replace(c, body=_rewrite(c.body, {}, temp, producer)))
        return replace(
            kernel,
            body=(*body[:i], *body[i + 1 : j], merged, *body[j + 1 :]),
            buffers=tuple(b for b in kernel.buffers if b.name != temp),
        )
    return None


def _rebuild(loops: list[Loop], stmt: Stmt) -> Node:
    node: Node = stmt
    for lp in reversed(loops):
        node = replace(lp, body=(node,))
    return node


def inline_pointwise(kernel: Kernel) -> Kernel:
    """``kernel`` with every point-wise producer nest inlined into its reader (see above)."""
    while (inlined := _inline_one(kernel)) is not None:
        kernel = inlined
    return kernel
