"""Einsum: one loop nest over every index letter, a reduction over the contracted ones.

``"bij,bjk->bik"`` becomes::

    for b, i, k:
      S: Y[b, i, k] = 0.0
      for j:
        S: Y[b, i, k] = (Y[b, i, k] + (X0[b, i, j] * X1[b, j, k]))

A letter repeated within one operand (``"ii->i"``, a diagonal) indexes both axes with the
same iterator. An ellipsis stands for the leading unnamed axes, which broadcast numpy-style
(a size-1 axis reads element 0). Without ``->`` the output is the ellipsis followed by the
letters that occur once, in alphabetical order. No BLAS: the schedule stage sees a plain nest.
"""

from __future__ import annotations

from collections import Counter

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import Aff, nest, unsupported, var, zero
from polyonnx.krnl.lower.registry import LowerContext, register


def _parse(node: Node, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """Per-operand letter lists (ellipsis axes spelled ``.0``, ``.1``..) and the output's."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ModelError(
            f"node {node.name!r} (Einsum): equation {equation!r} has "
            f"{len(terms)} operands, the node {len(ranks)} inputs"
        )
    n_ellipsis = 0
    operands: list[list[str]] = []
    for term, rank in zip(terms, ranks, strict=True):
        head, dots, tail = term.partition("...")
        named = len(head) + len(tail)
        if not dots and named != rank or dots and named > rank:
            raise ShapeError(
                f"node {node.name!r} (Einsum): term {term!r} does not fit an operand of rank {rank}"
            )
        k = rank - named if dots else 0
        n_ellipsis = max(n_ellipsis, k)
        # Ellipsis axes are right-aligned across operands, as numpy broadcasting does.
        operands.append([*head, *(f".{n_ellipsis - k + i}" for i in range(k)), *tail])
    # Re-align: an operand whose ellipsis is shorter names the trailing ellipsis axes.
    for letters, term, rank in zip(operands, terms, ranks, strict=True):
        head, dots, tail = term.partition("...")
        if dots:
            k = rank - len(head) - len(tail)
            letters[len(head) : len(head) + k] = [f".{n_ellipsis - k + i}" for i in range(k)]
    if not all(c.isalpha() for term in terms for c in term.replace("...", "")):
        raise ModelError(
            f"node {node.name!r} (Einsum): equation {equation!r} has characters "
            "other than letters, ',', '->' and '...'"
        )
    ellipsis = [f".{i}" for i in range(n_ellipsis)]
    if arrow:
        head, dots, tail = rhs.partition("...")
        out = [*head, *(ellipsis if dots else []), *tail]
    else:
        counts = Counter(c for letters in operands for c in letters if not c.startswith("."))
        out = ellipsis + sorted(c for c, n in counts.items() if n == 1)
    return operands, out


def _extents(
    node: Node, ctx: LowerContext, operands: list[list[str]], shapes: list[tuple[int, ...]]
) -> dict[str, int]:
    """The extent of each letter (and ellipsis axis) over all operands."""
    extent: dict[str, int] = {}
    for letters, shape in zip(operands, shapes, strict=True):
        for c, d in zip(letters, shape, strict=True):
            if c not in extent or extent[c] == d:
                extent[c] = d
            elif c.startswith(".") and 1 in (d, extent[c]):
                extent[c] = max(d, extent[c])  # ellipsis axes broadcast
            elif 1 in (d, extent[c]):
                # torch.einsum and onnxruntime broadcast it, but ONNX shape inference types
                # the output with the first operand's extent: every later shape is wrong.
                raise unsupported(
                    node,
                    ctx,
                    f"index {c!r} broadcasts (sizes {extent[c]} and {d}); only axes under "
                    "'...' broadcast: Expand the operand first",
                )
            else:
                raise ShapeError(
                    f"node {node.name!r} (Einsum): index {c!r} has sizes {extent[c]} and {d}"
                )
    return extent


@register("Einsum")
def lower_einsum(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """General Einsum as a multiply-accumulate nest over all letters."""
    inputs = [i for i in node.inputs if i]
    y = node.outputs[0]
    dtype = ctx.dtype(y)
    if dtype == "bool":
        raise unsupported(node, ctx, "bool operands")
    equation = node.attr("equation")
    if not equation:
        raise ModelError(f"node {node.name!r} (Einsum): attribute 'equation' is required")
    shapes = [ctx.shape(i) for i in inputs]
    operands, out = _parse(node, str(equation), [len(s) for s in shapes])
    extent = _extents(node, ctx, operands, shapes)
    if len(set(out)) != len(out) or any(c not in extent for c in out):
        raise ModelError(
            f"node {node.name!r} (Einsum): output {''.join(out)!r} repeats a "
            "letter or uses one no operand has"
        )

    def it(c: str) -> str:
        return f"e{c[1:]}" if c.startswith(".") else f"i_{c}"

    contracted = sorted(
        {c for letters in operands for c in letters} - set(out),
        key=lambda c: (not c.startswith("."), c),
    )
    out_index = tuple(var(it(c)) for c in out)
    if tuple(extent[c] for c in out) != tuple(ctx.shape(y)):
        raise ShapeError(
            f"node {node.name!r} (Einsum): output {ctx.shape(y)} does not match "
            f"the equation ({tuple(extent[c] for c in out)})"
        )
    product: ir.Expr | None = None
    for name, letters, shape in zip(inputs, operands, shapes, strict=True):
        index = tuple(
            Aff.lift(0) if (d == 1 and extent[c] != 1) else var(it(c))
            for c, d in zip(letters, shape, strict=True)
        )
        term = ir.Load(name, index, ctx.dtype(name))
        product = term if product is None else product * term
    assert product is not None
    target = ir.Access(y, out_index)
    update = ir.Stmt("S", target, ir.Load(y, out_index, dtype) + product)
    body = (
        ir.Stmt("S", target, zero(dtype)),
        *nest([(it(c), extent[c]) for c in contracted], (update,)),
    )
    if any(extent[c] == 0 for c in out):
        return ()
    return nest([(it(c), extent[c]) for c in out], body)
