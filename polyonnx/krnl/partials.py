"""Reductions along a contiguous loop fold into a row of vector partials.

A reduction folds the elements of a row one after the other into one accumulator
(``acc = acc + x[r]``): every step waits for the one before, and no loop of the nest is free
to run on vector lanes when the row is the contiguous axis (a softmax's, a layer norm's, a
``ReduceSum`` over the last axis). Folding the row into ``P`` partial accumulators instead,
element ``r`` into partial ``r mod P``, makes the lanes independent: the loop over them carries
nothing, the scheduler vectorizes it like any other, and a lane fold (a vector's horizontal
fold) puts the ``P`` partials into the accumulator at the end of the row. ``P`` is a few
vectors' worth (the register tile's width: two vectors), so each lane's chain also leaves the
adder's latency covered.

This reassociates the fold, which is exact for ``max``, ``min``, integer sums and products and
the boolean ones, and changes a floating-point sum or product's rounding as a pairwise
summation does (numpy's, onnxruntime's): within the ONNX suite's tolerances. float16
accumulators keep their order. The rewritten kernel states the new order, so every schedule
of it is still checked against its exact dependences.

Example (before, after; ``P = 4`` and a row of 10)::

    for i:                                  for i:
      S0: acc[i] = 0.0                        S0: acc[i] = 0.0
      for r in [0, 10):                       for l in [0, 4):
        S1: acc[i] = acc[i] + x[i, r]           S1: part[i, l] = 0.0
                                              for t in [0, 2):
                                                for l in [0, 4):
                                                  S1: part[i, l] = part[i, l] + x[i, 4*t + l]
                                              S1: acc[i] = acc[i] + add_lanes(part[i, 0:4])
                                              for r in [8, 10):
                                                S1: acc[i] = acc[i] + x[i, r]

``add_lanes`` is a :class:`~polyonnx.krnl.ir.LaneFold`: one vector load and ``log2(P)``
shuffles and adds, where a tree of scalar loads cost a softmax row more than its vector loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from polyonnx.krnl import ir
from polyonnx.krnl.ir import Aff, Kernel, Loop, Node, Stmt
from polyonnx.krnl.lower.common import highest, lowest, zero

_EXACT = ("float16", "float32", "float64", *ir.INT_DTYPES)
_ASSOCIATIVE: dict[str, tuple[str, ...]] = {
    "add": ("float32", "float64", *ir.INT_DTYPES),
    "mul": ("float32", "float64", *ir.INT_DTYPES),
    "max": _EXACT,
    "min": _EXACT,
    "or": ("bool",),
    "and": ("bool",),
}
"""The folds that may be reassociated, by op, and the accumulator dtypes each may be for."""


def identity(op: str, dtype: str) -> ir.Const:
    """The element that leaves ``op``'s fold unchanged (``0`` for ``add``, ``-inf`` for
    ``max`` ...).

    Example:
        >>> str(identity("max", "float32")), str(identity("mul", "int32"))
        ('-inf', '1')
    """
    if op == "add":
        return zero(dtype)
    if op == "mul":
        return ir.Const(1.0 if dtype in ir.FLOAT_DTYPES else 1, dtype)
    return lowest(dtype) if op in ("max", "or") else highest(dtype)  # (min, and)


@dataclass(frozen=True, slots=True)
class _Fold:
    """A statement ``acc[I] = op(acc[I], value)`` of a row loop (or ``op(value, acc[I])``)."""

    stmt: Stmt
    op: str
    acc_first: bool

    def with_value(self, acc: ir.Expr, value: ir.Expr) -> ir.Expr:
        return ir.binary(self.op, acc, value) if self.acc_first else ir.binary(self.op, value, acc)


def fold_in_partials(kernel: Kernel, partial_bytes: int) -> Kernel:
    """``kernel`` with every reduction along a contiguous innermost loop at least two rows of
    partials long folded into ``partial_bytes`` of partial accumulators (see the module
    docstring); ``partial_bytes`` 0: unchanged.

    Example:
        >>> from polyonnx.testing.examples import softmax_rows
        >>> print(fold_in_partials(softmax_rows(rows=4, n=10), 16))  # doctest: +ELLIPSIS
        kernel softmax_rows(..., tmp M__part0: float32[4, 4], tmp S__part0: float32[4, 4]) {
          for i in [0, 4):
            S0: M[i] = -inf
            for l0 in [0, 4):
              S1: M__part0[i, l0] = -inf
            for t0 in [0, 2):
              for l0 in [0, 4):
                S1: M__part0[i, l0] = max(M__part0[i, l0], X[i, l0 + 4*t0])
            S1: M[i] = max(M[i], max_lanes(M__part0[i, 0:4]))
            for r in [8, 10):
              S1: M[i] = max(M[i], X[i, r])
        ...
    """
    if partial_bytes <= 0:
        return kernel
    taken = {b.name for b in kernel.buffers} | _iterators(kernel.body)
    temps: list[ir.Buffer] = []

    def fresh(prefix: str) -> str:
        name = next(n for n in (f"{prefix}{k}" for k in itertools.count()) if n not in taken)
        taken.add(name)
        return name

    def visit(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for n in nodes:
            if isinstance(n, Stmt):
                out.append(n)
                continue
            split = _split(kernel, n, partial_bytes, fresh)
            if split is None:
                out.append(replace(n, body=visit(n.body)))
            else:
                nodes_, parts = split
                out.extend(nodes_)
                temps.extend(parts)
        return tuple(out)

    body = visit(kernel.body)
    if not temps:
        return kernel
    return replace(kernel, buffers=(*kernel.buffers, *temps), body=body)


def _split(
    kernel: Kernel, row: Loop, partial_bytes: int, fresh: Callable[[str], str]
) -> tuple[tuple[Node, ...], list[ir.Buffer]] | None:
    """The loops that fold ``row`` into partials and the partials' buffers, or None when
    ``row`` is no such loop."""
    stmts = tuple(s for s in row.body if isinstance(s, Stmt) and not s.guards)
    if len(stmts) != len(row.body) or not (row.lower.is_const and row.upper.is_const):
        return None  # (not innermost, guarded, or of a run-time length)
    r = row.iterator
    folds = {s.write.buffer: f for s in stmts if (f := _fold(s, r)) is not None}
    if not folds or len(folds) != sum(s.write.buffer in folds for s in stmts):
        return None
    for s in stmts:
        # Nothing but its own fold touches an accumulator, and nothing reads the iterator.
        others = [ld.buffer for ld in ir.loads(s.body) if ld.buffer != s.write.buffer]
        if any(b in folds for b in others) or any(
            isinstance(e, ir.Iter) and e.name == r for e in ir.walk(s.body)
        ):
            return None
    if not _contiguous(stmts, r):
        return None
    itemsize = max(np.dtype(kernel.buffer(a).dtype).itemsize for a in folds)
    lanes = 1 << (partial_bytes // itemsize).bit_length() - 1  # (a power of two)
    length = row.upper.const - row.lower.const
    if lanes < 2 or length < 2 * lanes:
        return None
    steps = length // lanes
    t, lane = fresh("t"), fresh("l")
    at = {r: Aff.var(t) * lanes + Aff.var(lane) + row.lower.const}
    parts: list[ir.Buffer] = []
    inits: list[Node] = []
    combines: list[Node] = []
    moved: dict[str, tuple[str, tuple[Aff, ...]]] = {}
    for name, f in folds.items():
        acc = kernel.buffer(name)
        part = ir.Buffer(fresh(f"{name}__part"), acc.dtype, (*acc.shape, lanes))
        parts.append(part)
        index = f.stmt.write.index
        moved[name] = (part.name, index)
        start = ir.Stmt(
            f.stmt.name, ir.Access(part.name, (*index, Aff.var(lane))), identity(f.op, acc.dtype)
        )
        inits.append(Loop(lane, 0, lanes, (start,)))
        lanes_of_part = ir.LaneFold(
            f.op, ir.Load(part.name, (*index, Aff.lift(0)), acc.dtype), lanes
        )
        combines.append(
            replace(f.stmt, body=f.with_value(ir.Load(name, index, acc.dtype), lanes_of_part))
        )
    body: list[Node] = []
    for s in stmts:
        step = _at(s, at)
        if s.write.buffer in moved:
            part_name, index = moved[s.write.buffer]
            step = _retarget(step, part_name, (*index, Aff.var(lane)))
        body.append(step)
    nodes: list[Node] = [*inits, Loop(t, 0, steps, (Loop(lane, 0, lanes, body),)), *combines]
    if steps * lanes < length:
        nodes.append(replace(row, lower=row.lower + steps * lanes))
    return tuple(nodes), parts


def _fold(s: Stmt, r: str) -> _Fold | None:
    """``s`` as a fold into an accumulator that stays put along ``r``, or None."""
    e = s.body
    if not isinstance(e, ir.Binary) or e.op not in _ASSOCIATIVE:
        return None
    if e.dtype not in _ASSOCIATIVE[e.op] or any(r in i.vars for i in s.write.index):
        return None
    own = ir.Load(s.write.buffer, s.write.index, e.dtype)
    for acc_first, acc, value in ((True, e.a, e.b), (False, e.b, e.a)):
        if acc == own and all(ld.buffer != s.write.buffer for ld in ir.loads(value)):
            return _Fold(s, e.op, acc_first)
    return None


def _contiguous(stmts: tuple[Stmt, ...], r: str) -> bool:
    """Every access that moves with ``r`` moves along its last axis one element per step (so
    vector lanes over ``r`` read and write whole vectors), and some access does."""
    moving = False
    for s in stmts:
        for index in (s.write.index, *(ld.index for ld in ir.loads(s.body))):
            if not all(isinstance(i, Aff) for i in index):
                return False
            affs: tuple[Aff, ...] = index  # type: ignore[assignment]
            if any(r in i.vars for i in affs[:-1]):
                return False
            if affs and r in affs[-1].vars:
                if affs[-1].coeff(r) != 1:
                    return False
                moving = True
    return moving


def _at(s: Stmt, at: Mapping[str, Aff]) -> Stmt:
    """``s`` with every index taken at ``at`` (iterator -> affine expression)."""
    out = ir.substitute(s, at)
    assert isinstance(out, Stmt)
    return out


def _retarget(s: Stmt, part: str, index: tuple[Aff, ...]) -> Stmt:
    """The fold ``s`` into its partial ``part[index]`` instead of its accumulator."""
    acc = s.write.buffer

    def expr(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Load) and e.buffer == acc:
            return ir.Load(part, index, e.dtype)
        return ir.map_children(e, expr)

    return replace(s, write=ir.Access(part, index), body=expr(s.body))


def _iterators(nodes: tuple[Node, ...]) -> set[str]:
    return {
        name for n in nodes if isinstance(n, Loop) for name in (n.iterator, *_iterators(n.body))
    }
