"""Producer-consumer inlining of point-wise nests inside a kernel.

A fusion group lowers to one nest per node, so ``Conv -> Relu`` writes the convolution's result
to a temp and reads it back in the next nest. When a temp is written once per element by a
one-statement nest and read back, at the same point only, by the next nest over the same
loops, the producer's expression is substituted into the consumer and the temp disappears:
one pass over memory instead of two.

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


def _readers(kernel: Kernel, buffer: str) -> int:
    return sum(1 for _, s in kernel.statements() for ld in loads(s.body) if ld.buffer == buffer)


def _try_inline(kernel: Kernel, first: Node, second: Node) -> Node | None:
    a, b = perfect_nest(first), perfect_nest(second)
    if a is None or b is None:
        return None
    (p_loops, p), (c_loops, c) = a, b
    temp = p.write.buffer
    if kernel.buffer(temp).kind != "temp" or p.guards or c.guards:
        return None
    bounds = [(lp.lower, lp.upper) for lp in p_loops]
    if bounds != [(lp.lower, lp.upper) for lp in c_loops] or any(
        not (lo.is_const and hi.is_const) for lo, hi in bounds
    ):
        return None
    p_point = tuple(Aff.var(lp.iterator) for lp in p_loops)
    c_point = tuple(Aff.var(lp.iterator) for lp in c_loops)
    if p.write.index != p_point or any(ld.buffer == temp for ld in loads(p.body)):
        return None
    reads = [ld for ld in loads(c.body) if ld.buffer == temp]
    if not reads or any(ld.index != c_point for ld in reads) or c.write.buffer == temp:
        return None
    if _readers(kernel, temp) != len(reads):
        return None  # someone else reads the temp too
    names = {lp.iterator: cl.iterator for lp, cl in zip(p_loops, c_loops, strict=True)}
    producer = _rewrite(p.body, names, "", None)
    return _rebuild(c_loops, replace(c, body=_rewrite(c.body, {}, temp, producer)))


def _rebuild(loops: list[Loop], stmt: Stmt) -> Node:
    node: Node = stmt
    for lp in reversed(loops):
        node = replace(lp, body=(node,))
    return node


def inline_pointwise(kernel: Kernel) -> Kernel:
    """``kernel`` with every point-wise producer nest inlined into its consumer (see above)."""
    body = list(kernel.body)
    changed = True
    while changed:
        changed = False
        for i in range(len(body) - 1):
            merged = _try_inline(replace(kernel, body=tuple(body)), body[i], body[i + 1])
            if merged is not None:
                temp = perfect_nest(body[i])[1].write.buffer  # type: ignore[index]
                body[i : i + 2] = [merged]
                kernel = replace(kernel, buffers=tuple(b for b in kernel.buffers if b.name != temp))
                changed = True
                break
    return replace(kernel, body=tuple(body))
