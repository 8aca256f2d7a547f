"""The i64 arithmetic of loops and addresses: the loop AST's integer expressions and krnl's
affine indices, folded when an operand is constant and numbered per basic block.

Addresses are sums of products of the same loop values, once per access of every unrolled
statement: numbering them leaves LLVM (and llvmlite's IR printer) far fewer instructions to
parse and simplify, for the same machine code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.llvm_types import i64
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import Aff

_ARITHMETIC = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "sdiv",
    "pdiv_q": "sdiv",
    "pdiv_r": "srem",
    "zdiv_r": "srem",
}
"""Loop-AST ops computed by :meth:`IndexEmitter.int` (folded and numbered), by its name."""
_PREDICATES = {"eq": "==", "le": "<=", "lt": "<", "ge": ">=", "gt": ">"}


@dataclass(frozen=True)
class IndexEmitter:
    """Emits i64 index arithmetic at ``builder``'s position."""

    builder: ir.IRBuilder
    numbered: dict[tuple, ir.Value] = field(default_factory=dict)
    """Instructions already emitted, by (block, op, operands)."""

    def int(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x op y`` on i64 (``add``, ``sub``, ``mul``: nsw; ``sdiv``, ``srem``), folded when
        an operand is constant and reused when this block already computed it."""
        cx = x.constant if isinstance(x, ir.Constant) else None
        cy = y.constant if isinstance(y, ir.Constant) else None
        if cx is not None and cy is not None and op in ("add", "sub", "mul"):
            return i64(cx + cy if op == "add" else cx - cy if op == "sub" else cx * cy)
        if op == "mul" and 0 in (cx, cy):
            return i64(0)
        if (op == "add" and cx == 0) or (op == "mul" and cx == 1):
            return y
        if (op in ("add", "sub") and cy == 0) or (op in ("mul", "sdiv") and cy == 1):
            return x
        key = (self.builder.block, op, x if cx is None else cx, y if cy is None else cy)
        hit = self.numbered.get(key)
        if hit is None:
            b = self.builder
            hit = (
                getattr(b, op)(x, y, flags=["nsw"])
                if op in ("add", "sub", "mul")
                else getattr(b, op)(x, y)
            )
            self.numbered[key] = hit
        return hit

    def expr(self, e: la.IExpr, env: Mapping[str, ir.Value]) -> ir.Value:
        """A loop-AST expression (isl's semantics, see :class:`~polyonnx.codegen.loopast.IOp`)
        with its variables' values from ``env``."""
        b = self.builder
        if isinstance(e, la.IConst):
            return i64(e.value)
        if isinstance(e, la.IVar):
            return env[e.name]
        a = [self.expr(x, env) for x in e.args]
        op = e.op
        if op in _ARITHMETIC:
            return self.int(_ARITHMETIC[op], a[0], a[1])
        if op == "neg":
            return self.int("sub", i64(0), a[0])
        if op == "fdiv_q":
            return self._floor_div(a[0], a[1])
        if op in ("min", "max"):
            out = a[0]
            for x in a[1:]:
                pick = b.icmp_signed("<" if op == "min" else ">", out, x)
                out = b.select(pick, out, x)
            return out
        if op in _PREDICATES:
            return b.icmp_signed(_PREDICATES[op], a[0], a[1])
        if op in ("and", "or"):
            return b.and_(a[0], a[1]) if op == "and" else b.or_(a[0], a[1])
        if op == "select":
            return b.select(a[0], a[1], a[2])
        raise CodegenError(f"unknown loop-AST op {op!r}")

    def _floor_div(self, a: ir.Value, d: ir.Value) -> ir.Value:
        """floor(a / d) for d > 0: a >= 0 ? a / d : -((d - 1 - a) / d)."""
        b = self.builder
        neg = b.sdiv(b.sub(b.sub(d, i64(1)), a), d)
        return b.select(
            b.icmp_signed(">=", a, i64(0)),
            b.sdiv(a, d),
            b.sub(i64(0), neg),
        )

    def aff(self, a: Aff, point: Mapping[str, ir.Value]) -> ir.Value:
        """A krnl affine index at a statement instance (iterator values ``point``)."""
        out: ir.Value = i64(0)
        for name, c in a.terms:
            out = self.int("add", out, self.int("mul", point[name], i64(c)))
        return self.int("add", out, i64(a.const))
