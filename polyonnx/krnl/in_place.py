"""Epilogues in place: a reduction accumulates straight into the buffer its epilogue writes.

``Conv -> Relu`` lowers to a reduction into a temp and a point-wise nest ``y = relu(t)``.
When the temp is read only there, at the point being written, ``y`` can take the temp's
place: the reduction accumulates into ``y`` and the epilogue updates it in place
(``y = relu(y)``). The result is the same, one buffer fewer is allocated, and the epilogue
rewrites cache lines the reduction has just written instead of claiming fresh ones.

Example (before, after)::

    S0: t[i] = b[i]                     S0: y[i] = b[i]
    S1: t[i] = t[i] + x[i, k] * w[k]    S1: y[i] = y[i] + x[i, k] * w[k]
    S2: y[i] = max(t[i], 0)             S2: y[i] = max(y[i], 0)
"""

from __future__ import annotations

from dataclasses import replace

from polyonnx.krnl.ir import Aff, Kernel, Node, Stmt, loads, perfect_nest, rename_buffers


def accumulate_in_place(kernel: Kernel) -> Kernel:
    """``kernel`` with each temp that only feeds one full point-wise epilogue replaced by the
    epilogue's output (see the module docstring)."""
    for temp, target in _candidates(kernel):
        kernel = replace(
            kernel,
            body=rename_buffers(kernel.body, {temp: target}),
            buffers=tuple(b for b in kernel.buffers if b.name != temp),
        )
    return kernel


def _candidates(kernel: Kernel) -> list[tuple[str, str]]:
    buffers = {b.name: b for b in kernel.buffers}
    out = []
    for i, node in enumerate(kernel.body):
        epilogue = full_pointwise(node, buffers)
        if epilogue is None:
            continue
        target = epilogue.write.buffer
        before = [s for _, s in replace(kernel, body=kernel.body[:i]).statements()]
        after = [s for _, s in replace(kernel, body=kernel.body[i + 1 :]).statements()]
        for ld in loads(epilogue.body):
            temp = ld.buffer
            if (
                buffers[temp].kind != "temp"
                or ld.index != epilogue.write.index
                or buffers[temp].shape != buffers[target].shape
                or buffers[temp].dtype != buffers[target].dtype
            ):
                continue
            # A renaming: the target is used by no other statement, the temp by none after
            # the epilogue, and the epilogue reads the temp only at its point.
            if any(
                o.buffer == target or (o.buffer == temp and o.index != ld.index)
                for o in loads(epilogue.body)
            ):
                continue
            if any(uses(s, target) for s in before + after) or any(uses(s, temp) for s in after):
                continue
            out.append((temp, target))
            break
    return out


def uses(stmt: Stmt, buffer: str) -> bool:
    """Whether ``stmt`` writes or reads ``buffer``."""
    return stmt.write.buffer == buffer or any(o.buffer == buffer for o in loads(stmt.body))


def full_pointwise(node: Node, buffers: dict) -> Stmt | None:
    """The statement of a perfect nest that writes every element of its buffer once, at
    ``[i0, i1, ...]`` of its own loops ``0 <= ik < shape[k]``, or None."""
    nest = perfect_nest(node)
    if nest is None or not isinstance(nest[1], Stmt) or nest[1].guards:
        return None
    loops, stmt = nest
    shape = buffers[stmt.write.buffer].shape
    if len(loops) != len(shape) or stmt.write.index != tuple(Aff.var(lp.iterator) for lp in loops):
        return None
    if any(
        not (lp.lower.is_const and lp.upper.is_const)
        or lp.lower.const != 0
        or lp.upper.const != extent
        for lp, extent in zip(loops, shape, strict=True)
    ):
        return None
    return stmt
