"""How a kernel's statements move through memory as the loop AST's loops run: linear forms of
the AST's integer expressions, constant trip counts, how far each statement iterator and each
accessed element move per iteration of a loop (or per vector lane), and the vector width of a
statement. Pure analysis: no LLVM, no isl.

Example:
    >>> from polyonnx.codegen import loopast as la
    >>> loop = la.For("c0", la.IConst(2), la.IOp("le", (la.IVar("c0"), la.IConst(9))), 1, ())
    >>> static_trip(loop)
    8
    >>> linear(la.IOp("add", (la.IOp("mul", (la.IConst(4), la.IVar("c1"))), la.IConst(3))))
    {'c1': 4, '': 3}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from polyonnx.codegen import loopast as la
from polyonnx.krnl.ir import Aff, Buffer, Expr, Kernel, LaneFold, Stmt, loads, walk


def linear(e: la.IExpr) -> dict[str, int] | None:
    """``e`` as {var: coeff, "": const} when affine, else None."""
    if isinstance(e, la.IConst):
        return {"": e.value}
    if isinstance(e, la.IVar):
        return {e.name: 1}
    maybe = [linear(a) for a in e.args]
    parts = [p for p in maybe if p is not None]
    if len(parts) != len(maybe):
        return None
    if e.op in ("add", "sub"):
        out = dict(parts[0])
        for k, v in parts[1].items():
            out[k] = out.get(k, 0) + (v if e.op == "add" else -v)
        return out
    if e.op == "neg":
        return {k: -v for k, v in parts[0].items()}
    if e.op == "mul":
        a, b = parts
        if set(a) <= {""}:
            a, b = b, a
        if set(b) <= {""}:
            factor = b.get("", 0)
            return {n: v * factor for n, v in a.items()}
    return None


def static_trip(node: la.For) -> int | None:
    """The trip count of ``for (i = init; i <= init + k; i++)`` (or ``<``), when constant."""
    cond = node.cond
    if not (
        isinstance(cond, la.IOp)
        and cond.op in ("le", "lt")
        and cond.args[0] == la.IVar(node.iterator)
    ):
        return None
    upper, lower = linear(cond.args[1]), linear(node.init)
    if upper is None or lower is None:
        return None
    diff = {k: upper.get(k, 0) - lower.get(k, 0) for k in set(upper) | set(lower)}
    if any(v for k, v in diff.items() if k != ""):
        return None
    trip = diff.get("", 0) + (1 if cond.op == "le" else 0)
    return max(trip, 0)


@dataclass(frozen=True)
class Lanes:
    """Inside a vector loop: how many lanes a vector has and how far each statement iterator
    moves from one lane to the next."""

    width: int
    steps: Mapping[str, int]


@dataclass(frozen=True)
class Accesses:
    """A kernel's statements and buffers as codegen reads them (by AST statement name)."""

    statements: Mapping[str, tuple[tuple[str, ...], Stmt]]
    """statement name -> (its iterators, the statement)"""
    buffers: Mapping[str, Buffer]

    @staticmethod
    def of(kernel: Kernel) -> Accesses:
        """The statements and buffers of ``kernel``."""
        stmts = {
            s.name: (tuple(lp.iterator for lp in loops), s) for loops, s in kernel.statements()
        }
        return Accesses(stmts, {b.name: b for b in kernel.buffers})

    def width(self, calls: tuple[la.Call, ...], vector_bits: int) -> int:
        """Lanes of a vector of ``vector_bits`` for the widest element the statements of
        ``calls`` read, compute or write."""
        widest = 1
        for c in calls:
            stmt = self.statements[c.stmt][1]
            for e in (stmt.body, *loads(stmt.body)):
                widest = max(widest, np.dtype(e.dtype).itemsize)
            widest = max(widest, np.dtype(self.buffers[stmt.write.buffer].dtype).itemsize)
        return max(vector_bits // (8 * widest), 1)

    def iterator_steps(self, call: la.Call, var: str) -> dict[str, int] | None:
        """How much each statement iterator moves per iteration of loop ``var`` (None when an
        argument is not linear in the loops)."""
        iterators, _ = self.statements[call.stmt]
        steps = {}
        for it, arg in zip(iterators, call.args, strict=True):
            lin = linear(arg)
            if lin is None:
                return None
            steps[it] = lin.get(var, 0)
        return steps

    def lane_steps(self, call: la.Call, var: str) -> dict[str, int] | None:
        """How much each statement iterator moves per lane of a vector loop ``var``, or None
        if the statement cannot be vectorized along it."""
        _, stmt = self.statements[call.stmt]
        steps = self.iterator_steps(call, var)
        if steps is None:
            return None
        if any(isinstance(i, Expr) for ld in loads(stmt.body) for i in ld.index):
            return None  # gathers stay scalar
        if any(isinstance(e, LaneFold) for e in walk(stmt.body)):
            return None  # a lane fold is a vector's fold already
        if self.element_step(stmt.write.buffer, stmt.write.index, steps) != 1:
            return None  # the write must be one contiguous vector (no reduction across lanes)
        return steps

    def element_step(
        self, buffer: str, index: tuple[Aff | Expr, ...], steps: Mapping[str, int]
    ) -> int:
        """How many elements ``buffer[index]`` moves when the iterators move by ``steps``."""
        shape = self.buffers[buffer].shape
        step, stride = 0, 1
        for ix, extent in reversed(list(zip(index, shape, strict=True))):
            assert isinstance(ix, Aff), "a computed index has no element step"
            step += sum(c * steps.get(n, 0) for n, c in ix.terms) * stride
            stride *= extent
        return step

    def element(
        self, call: la.Call, index: tuple[Aff | Expr, ...], rename: Mapping[str, str]
    ) -> tuple[tuple[tuple[str, int], ...], ...] | None:
        """Each index of a statement instance as a linear form of the AST's loop variables
        (renamed by ``rename``), None when one is not affine."""
        iterators, _ = self.statements[call.stmt]
        args = {it: linear(arg) for it, arg in zip(iterators, call.args, strict=True)}
        out = []
        for ix in index:
            if not isinstance(ix, Aff):
                return None
            form = {"": ix.const}
            for name, c in ix.terms:
                lin = args[name]
                if lin is None:
                    return None
                for var, k in lin.items():
                    var = rename.get(var, var)
                    form[var] = form.get(var, 0) + c * k
            out.append(tuple(sorted((v, k) for v, k in form.items() if k)))
        return tuple(out)
