"""float16 products summed as the reference sums them: in float32, rounded once per output.

numpy (the ONNX reference) computes a float16 matrix product in float32 and rounds the sum to
float16; the ops after it (``* alpha``, ``+ bias``) are float16 arithmetic, each rounded in
turn. Accumulating in the float16 output instead rounds at every step and drifts by several
units in the last place over a long reduction. So MatMul, Gemm and Conv on float16 data sum
into a float32 temp ``<node>__acc`` of the output's shape::

    for i, j:
      S: acc[i, j] = 0.0
      for k:
        S: acc[i, j] = acc[i, j] + float32(A[i, k]) * float32(B[k, j])
      S: Y[i, j] = float16(float32(float16(acc[i, j])) + float32(C[j]))
"""

from __future__ import annotations

from collections.abc import Sequence

from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, zero
from polyonnx.krnl.lower.registry import Lowered


def half_product(
    name: str,
    iters: Sequence[tuple[str, int]],
    out: ir.Access,
    reduction: Sequence[tuple[str, int]],
    a: ir.Expr,
    b: ir.Expr,
    *,
    guards: tuple[ir.Cond, ...] = (),
    alpha: float = 1.0,
    bias: ir.Expr | None = None,
    before: Sequence[ir.Node] = (),
    temps: Sequence[ir.Buffer] = (),
) -> Lowered:
    """``out = float16(sum over reduction of a * b) [* alpha] [+ bias]`` over ``iters``, the
    sum in float32 (``guards`` restrict its terms); ``before`` nests run first (a padded copy
    of the input), ``temps`` are theirs."""
    acc = ir.Buffer(f"{name}__acc", "float32", tuple(e for _, e in iters), "temp")
    index = tuple(ir.Aff.var(n) for n, _ in iters)
    at, acc_load = ir.Access(acc.name, index), ir.Load(acc.name, index, "float32")
    term = ir.Cast(a, "float32") * ir.Cast(b, "float32")
    result: ir.Expr = ir.Cast(acc_load, "float16")
    if alpha != 1.0:
        result = ir.Cast(ir.Cast(result, "float32") * alpha, "float16")
    if bias is not None:
        result = ir.Cast(ir.Cast(result, "float32") + ir.Cast(bias, "float32"), "float16")
    body = (
        ir.Stmt("S", at, zero("float32")),
        *nest(reduction, (ir.Stmt("S", at, acc_load + term, guards),)),
        ir.Stmt("S", out, result),
    )
    return Lowered((*before, *nest(iters, body)), (*temps, acc))
