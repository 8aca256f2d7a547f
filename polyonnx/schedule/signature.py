"""What identifies a kernel for schedules, and how much arithmetic it does.

The signature hashes the kernel's loops, statements and buffer shapes with buffers renamed by
position, so two identical convolutions in a model (or in two models) share it and a trace tuned
on one replays on the other.

Example:
    >>> from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
    >>> i = Aff.var("i")
    >>> def double(x, y):
    ...     s = Stmt("S0", Access(y, (i,)), Load(x, (i,), "float32") * 2.0)
    ...     return Kernel("k", (Buffer(x, "float32", (4,), "input"),
    ...                         Buffer(y, "float32", (4,), "output")), (Loop("i", 0, 4, (s,)),))
    >>> kernel_signature(double("a", "b")) == kernel_signature(double("x", "y"))
    True
    >>> kernel_flops(double("a", "b"))
    4
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

from polyonnx.krnl.ir import (
    Binary,
    Expr,
    Kernel,
    Unary,
    loop_box,
    rename_buffers,
    walk,
)
from polyonnx.krnl.memo import identity_memo


def canonical(kernel: Kernel) -> Kernel:
    """``kernel`` named ``k`` with buffers named ``b0, b1, ...`` in argument order."""
    names = {b.name: f"b{k}" for k, b in enumerate(kernel.buffers)}
    return Kernel(
        "k",
        tuple(replace(b, name=names[b.name]) for b in kernel.buffers),
        rename_buffers(kernel.body, names),
    )


@identity_memo
def canonical_digest(kernel: Kernel) -> str:
    """The SHA-256 (hex) of the printed :func:`canonical` kernel; remembered per kernel object
    (:mod:`polyonnx.krnl.memo`): the scheduler and codegen both name kernels by it."""
    return hashlib.sha256(str(canonical(kernel)).encode()).hexdigest()


def kernel_signature(kernel: Kernel) -> str:
    """A stable 16-hex-digit hash of the kernel's structure (not of its names)."""
    return canonical_digest(kernel)[:16]


def _arith(e: Expr) -> int:
    return sum(isinstance(x, Unary | Binary) and x.op not in ("neg",) for x in walk(e))


def kernel_flops(kernel: Kernel) -> int:
    """Arithmetic operations executed: per statement, its loops' trip counts times the unary and
    binary operations of its body (a multiply-add counts 2). Guards (e.g. padding) are
    ignored, as is usual for convolution FLOP counts; a loop whose bounds depend on outer loops
    counts its largest trip count."""
    total = 0
    for loops, stmt in kernel.statements():
        trips = math.prod(max(0, hi - lo + 1) for lo, hi in loop_box(loops).values())
        total += trips * _arith(stmt.body)
    return total
