"""Det: the determinant of each square matrix of a batch, by LU factorisation with partial
pivoting (as LAPACK's ``getrf``, which numpy and the ONNX reference use).

Every matrix is copied into the scratch ``<node>__lu`` (in float64 for float16 and float32
input: the determinant of an ill-conditioned matrix loses less). Step ``k`` picks the row of
largest magnitude in column ``k`` from row ``k`` down (the first on a tie, as ``i?amax``),
swaps it with row ``k`` and eliminates below the pivot; the determinant is the product of the
diagonal, negated once per real swap. A zero pivot (a singular matrix) leaves its column's
multipliers at 0, so the product is 0 rather than NaN. Writes stay affine: the pivot row is
only *read* at a computed index, the swap writes row ``k`` and selects in the rows below::

    for b..:
      for i, j: S: lu[b, i, j] = X[b, i, j]
      S: sign[b] = 1
      for k:
        S: piv[b] = k
        for i in [k + 1, n): S: piv[b] = |lu[b, i, k]| > |lu[b, piv[b], k]| ? i : piv[b]
        for j in [k, n): S: row[b, j] = lu[b, piv[b], j]
        for i in [k + 1, n), j in [k, n): S: lu[b, i, j] = i == piv[b] ? lu[b, k, j] : lu[b, i, j]
        for j in [k, n): S: lu[b, k, j] = row[b, j]
        S: sign[b] = piv[b] != k ? -sign[b] : sign[b]
        for i in [k + 1, n):
          S: f[b, i] = lu[b, k, k] == 0 ? 0 : lu[b, i, k] / lu[b, k, k]
          for j in [k + 1, n): S: lu[b, i, j] = lu[b, i, j] - f[b, i] * lu[b, k, j]
      for k: S: sign[b] = sign[b] * lu[b, k, k]
      S: Y[b] = sign[b]

``k`` is a sequential loop (each step reads what the previous wrote): isl keeps it in order.
"""

from __future__ import annotations

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, unsupported, var
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"


@register("Det", since=11)
def lower_det(node: Node, ctx: LowerContext) -> Lowered:
    """Det of ``X[*, n, n]`` into ``Y[*]`` (see the module docstring).

    Example: ``X = [[0, 2], [3, 4]]`` swaps its rows (pivot 3), eliminates ``2 - 0 * 4/3``
    and gives ``-(3 * 2) = -6``.
    """
    x, y = node.input(0), node.outputs[0]
    dtype = ctx.dtype(x)
    if dtype not in ir.FLOAT_DTYPES:
        raise unsupported(node, ctx, f"input {x!r} has dtype {dtype}; Det takes float types")
    xs = ctx.shape(x)
    if len(xs) < 2 or xs[-1] != xs[-2]:
        raise ShapeError(f"node {node.name!r} (Det): input {x!r} of shape {xs} is not square")
    n, batch = xs[-1], xs[:-2]
    acc = "float64"  # (float64 keeps cancellation in the elimination small for float32 input)
    names = [f"b{d}" for d in range(len(batch))]
    outer = list(zip(names, batch, strict=True))
    bi = tuple(var(nm) for nm in names)
    y_at = ir.Access(y, bi)
    one = ir.Const(1.0, acc)
    if any(e == 0 for e in batch):
        return Lowered(())
    if n == 0:  # the empty product: every determinant is 1
        return Lowered(nest(outer, (ir.Stmt("S", y_at, ir.Const(1.0, dtype)),)))

    lu = ir.Buffer(f"{node.name}__lu", acc, (*batch, n, n))
    row = ir.Buffer(f"{node.name}__row", acc, (*batch, n))
    fac = ir.Buffer(f"{node.name}__factor", acc, (*batch, n))
    piv = ir.Buffer(f"{node.name}__pivot", I64, batch)
    sign = ir.Buffer(f"{node.name}__sign", acc, batch)

    def m(i: ir.Index, j: ir.Index) -> ir.Load:
        return ir.Load(lu.name, (*bi, i, j), acc)

    def m_at(i: str, j: str) -> ir.Access:
        return ir.Access(lu.name, (*bi, var(i), var(j)))

    def vec(buf: ir.Buffer, i: str) -> tuple[ir.Access, ir.Load]:
        return ir.Access(buf.name, (*bi, var(i))), ir.Load(buf.name, (*bi, var(i)), acc)

    p_at, p_ld = ir.Access(piv.name, bi), ir.Load(piv.name, bi, I64)
    s_at, s_ld = ir.Access(sign.name, bi), ir.Load(sign.name, bi, acc)
    i, j, k = var("i"), var("j"), var("k")
    r_at, r_ld = vec(row, "j")
    f_at, f_ld = vec(fac, "i")
    xv: ir.Expr = ir.Load(x, (*bi, i, j), dtype)
    xv = xv if dtype == acc else ir.Cast(xv, acc)
    larger = ir.Binary("gt", ir.unary("abs", m(i, k)), ir.unary("abs", m(p_ld, k)))
    pivot = m(k, k)
    step = ir.Loop(
        "k",
        0,
        n,
        (
            ir.Stmt("S", p_at, ir.Iter("k")),
            ir.Loop("i", k + 1, n, (ir.Stmt("S", p_at, ir.Select(larger, ir.Iter("i"), p_ld)),)),
            ir.Loop("j", k, n, (ir.Stmt("S", r_at, m(p_ld, j)),)),
            ir.Loop(
                "i",
                k + 1,
                n,
                (
                    ir.Loop(
                        "j",
                        k,
                        n,
                        (
                            ir.Stmt(
                                "S",
                                m_at("i", "j"),
                                ir.Select(ir.Binary("eq", ir.Iter("i"), p_ld), m(k, j), m(i, j)),
                            ),
                        ),
                    ),
                ),
            ),
            ir.Loop("j", k, n, (ir.Stmt("S", m_at("k", "j"), r_ld),)),
            ir.Stmt("S", s_at, ir.Select(ir.Binary("ne", p_ld, ir.Iter("k")), -s_ld, s_ld)),
            ir.Loop(
                "i",
                k + 1,
                n,
                (
                    ir.Stmt(
                        "S",
                        f_at,
                        ir.Select(
                            ir.Binary("eq", pivot, ir.Const(0.0, acc)),
                            ir.Const(0.0, acc),
                            m(i, k) / pivot,
                        ),
                    ),
                    ir.Loop(
                        "j", k + 1, n, (ir.Stmt("S", m_at("i", "j"), m(i, j) - f_ld * m(k, j)),)
                    ),
                ),
            ),
        ),
    )
    det: ir.Expr = s_ld if dtype == acc else ir.Cast(s_ld, dtype)
    body = (
        *nest([("i", n), ("j", n)], (ir.Stmt("S", m_at("i", "j"), xv),)),
        ir.Stmt("S", s_at, one),
        step,
        # The product of the diagonal, kept in float64 until the one rounding to Y's type.
        ir.Loop("k", 0, n, (ir.Stmt("S", s_at, s_ld * m(k, k)),)),
        ir.Stmt("S", y_at, det),
    )
    return Lowered(nest(outer, body), (lu, row, fac, piv, sign))
