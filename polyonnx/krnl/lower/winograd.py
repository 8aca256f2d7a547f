"""Winograd convolution ``F(m x m, 3 x 3)`` on channel-blocked tensors (``polyonnx.WinogradConv``,
made by :mod:`polyonnx.graph.passes.winograd`).

A 3x3 stride-1 convolution computes each ``m x m`` tile of its output from an ``a x a`` tile of
its input (``a = m + 2``) with ``a*a`` products per input and output channel instead of
``9*m*m`` (Lavin and Gray, 2016): ``Y = A^T [ (G g G^T) . (B^T d B) ] A`` per tile. The
weights' transform ``U = G g G^T`` is done once, at compile time; the kernel is three stages
of plain affine loop nests, so the scheduler tiles, vectorises and parallelises each as it
would any other::

    # input transform B^T d B: two passes of sums with constant coefficients (lanes: i)
    for n, ib, th, tw, c, i:   Z[n, ib, th, tw, r, c, i] = sum_k BT[r, k] X[., m*th+k, m*tw+c, i]
    for n, ib, th, tw, r, i:   V[n, r, s, ib, t, i] = sum_k BT[s, k] Z[n, ib, th, tw, r, k, i]
    # a*a independent products of channel blocks (the FLOPs): a blocked 1x1 conv per point
    for n, r, s, ob, t, o:     M[n, r, s, ob, t, o] = 0
      for ib, i:               M[n, r, s, ob, t, o] += V[n, r, s, ib, t, i] * U[r, s, ob, ib, i, o]
    # output transform A^T M A with the bias; ragged edge tiles cut by guards
    for n, ob, th, tw, s, o:   R[n, ob, th, tw, p, s, o] = sum_k AT[p, k] M[n, k, s, ob, t, o]
    for n, ob, th, tw, p, o:   Y[n, ob, m*th + p, m*tw + q, o] = sum_k AT[q, k] R[.., p, k, o] + B

with ``t = th * TW + tw`` the tile's number; each sum is written out term by term with its
coefficient (zeros left out), one statement per constant row (``r``, ``s``, ``p``, ``q``).
The input tiles of the last row and column may reach past the padded input: the window's end
padding is widened to cover them (:func:`input_pads`), so they read zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import INTERNAL_DOMAIN as DOMAIN
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import ceil_div, load, nest, var, window, zero
from polyonnx.krnl.lower.conv import padded_input
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

F = Fraction
#: ``F(m, 3)``'s matrices (``B^T``, ``G``, ``A^T``) by output tile size ``m``: points 0, ±1
#: (m = 2) and 0, ±1, ±2 (m = 4), and infinity.
Matrix = tuple[tuple[Fraction | int, ...], ...]
MATRICES: dict[int, tuple[Matrix, Matrix, Matrix]] = {
    2: (
        ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (F(1, 2), F(1, 2), F(1, 2)), (F(1, 2), F(-1, 2), F(1, 2)), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1)),
    ),
    4: (
        (
            (4, 0, -5, 0, 1, 0),
            (0, -4, -4, 1, 1, 0),
            (0, 4, -4, -1, 1, 0),
            (0, -2, -1, 2, 1, 0),
            (0, 2, -1, -2, 1, 0),
            (0, 4, 0, -5, 0, 1),
        ),
        (
            (F(1, 4), 0, 0),
            (F(-1, 6), F(-1, 6), F(-1, 6)),
            (F(-1, 6), F(1, 6), F(-1, 6)),
            (F(1, 24), F(1, 12), F(1, 6)),
            (F(1, 24), F(-1, 12), F(1, 6)),
            (0, 0, 1),
        ),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)),
    ),
}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``B^T``, ``G`` and ``A^T`` of ``F(m, 3)`` as float64 arrays.

    Example (a 1-D correlation of 6 inputs with 3 taps, 4 outputs):
        >>> bt, g, at = matrices(4)
        >>> d, w = np.arange(6.0), np.array([1.0, 2.0, 3.0])
        >>> at @ ((g @ w) * (bt @ d))
        array([ 8., 14., 20., 26.])
    """
    return tuple(np.array(mat, dtype=np.float64) for mat in MATRICES[m])  # type: ignore[return-value]


def transform_weights(blocked: np.ndarray, m: int) -> np.ndarray:
    """``U[r, s, ob, ib, i, o] = (G w G^T)[r, s]`` of blocked 3x3 weights
    ``[OB, IB, 3, 3, i, o]``, in the weights' own type."""
    _, g, _ = matrices(m)
    ob, ib, _, _, bi, bo = blocked.shape
    taps = np.moveaxis(blocked, (2, 3), (0, 1)).astype(np.float64)  # [3, 3, ob, ib, bi, bo]
    # Each product with G is a sum of three scaled taps: a few passes over the weights (a
    # BLAS product with an inner dimension of 3 is slower, and threads for nothing).
    rows = [sum(g[r, k] * taps[k] for k in range(3)) for r in range(m + 2)]
    u = np.empty((m + 2, m + 2, ob, ib, bi, bo), blocked.dtype)
    for r, row in enumerate(rows):
        for s in range(m + 2):
            u[r, s] = sum(g[s, k] * row[k] for k in range(3))
    return u


def tiles(out_spatial: Sequence[int], m: int) -> tuple[int, int]:
    """How many ``m x m`` tiles cover the output, down and across."""
    return ceil_div(out_spatial[0], m), ceil_div(out_spatial[1], m)


def input_pads(node: Node, ctx: LowerContext) -> tuple[tuple[int, int], tuple[int, int]]:
    """The zero padding (begin, end per spatial axis) the input tiles read: the conv's own,
    the end widened so that the last row and column of tiles stay inside."""
    xs, ys = ctx.shape(node.inputs[0]), ctx.shape(node.outputs[0])
    win = window(node, ctx, xs[2:4], (3, 3))
    m = int(node.attr("tile"))
    covered = [t * m for t in tiles(ys[2:4], m)]
    end = tuple(e + c - o for e, c, o in zip(win.pads_end, covered, ys[2:4], strict=True))
    return (win.pads_begin[0], win.pads_begin[1]), (end[0], end[1])


def _load(buffer: str, index: Sequence[ir.AffLike], dtype: str) -> ir.Load:
    return ir.Load(buffer, tuple(ir.Aff.lift(i) for i in index), dtype)


def _access(buffer: str, index: Sequence[ir.AffLike]) -> ir.Access:
    return ir.Access(buffer, tuple(ir.Aff.lift(i) for i in index))


def _combination(terms: Sequence[tuple[Fraction | int, ir.Expr]]) -> ir.Expr:
    """``sum of c * e`` over the non-zero ``c``, a unit coefficient without its product."""
    acc: ir.Expr | None = None
    for c, e in terms:
        if c == 0:
            continue
        scaled = e if abs(c) == 1 else e * float(abs(c))
        if acc is None:
            acc = scaled if c > 0 else -scaled
        else:
            acc = acc + scaled if c > 0 else acc - scaled
    if acc is None:
        raise ValueError("a Winograd row with no non-zero coefficient")
    return acc


@register("WinogradConv", domain=DOMAIN)
def lower_winograd_conv(node: Node, ctx: LowerContext) -> Lowered:
    """The three stages of the module docstring, over blocked ``X [N, IB, H, W, b]``,
    constant blocked weights ``W [OB, IB, 3, 3, b, b]`` (transformed here to
    ``U [a, a, OB, IB, b, b]``), bias ``B [OB*b]`` (optional) and ``Y [N, OB, OH, OW, b]``."""
    x, w, b, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    m = int(node.attr("tile"))
    if m not in MATRICES:
        raise ShapeError(f"node {node.name!r} (WinogradConv): no F({m}, 3) transform")
    bt, _, at = MATRICES[m]
    a = m + 2
    xs, ws, ys = ctx.shape(x), ctx.shape(w), ctx.shape(y)
    n_batch, in_blocks, block = xs[0], xs[1], xs[-1]
    out_blocks, out_h, out_w = ys[1], ys[2], ys[3]
    weights = ctx.constant(w)
    if len(xs) != 5 or ws != (out_blocks, in_blocks, 3, 3, block, block) or ys[-1] != block:
        raise ShapeError(
            f"node {node.name!r} (WinogradConv): X {xs}, W {ws} and Y {ys} do not agree on "
            f"3x3 convolution over blocks of {block} channels"
        )
    if weights is None:
        raise ShapeError(f"node {node.name!r} (WinogradConv): weights {w!r} are not constant")
    u = f"{w}__winograd{m}"
    th, tw = tiles((out_h, out_w), m)
    begin, end = input_pads(node, ctx)
    win = window(node, ctx, xs[2:4], (3, 3))
    wide = replace(win, pads_end=end)
    base = [var("th") * m - begin[0], var("tw") * m - begin[1]]
    source, prologue, temps, (row, col) = padded_input(node, ctx, x, wide, base)
    dtype = ctx.dtype(x)

    def temp(suffix: str, shape: tuple[int, ...]) -> str:
        nonlocal temps
        name = f"{node.name}__{suffix}"
        temps = (*temps, ir.Buffer(name, dtype, shape, "temp"))
        return name

    z = temp("wz", (n_batch, in_blocks, th, tw, a, a, block))
    v = temp("wv", (n_batch, a, a, in_blocks, th * tw, block))
    prod = temp("wm", (n_batch, a, a, out_blocks, th * tw, block))
    r_buf = temp("wr", (n_batch, out_blocks, th, tw, m, a, block))
    n, ib, ob, i, o = var("n"), var("ib"), var("ob"), var("i"), var("o")
    tile = var("th") * tw + var("tw")
    tile_loops = [("th", th), ("tw", tw)]

    # Input transform, along the rows then along the columns.
    rows = tuple(
        ir.Stmt(
            "S",
            _access(z, (n, ib, var("th"), var("tw"), r, var("c"), i)),
            _combination(
                [
                    (bt[r][k], _load(source, (n, ib, row + k, col + var("c"), i), dtype))
                    for k in range(a)
                ]
            ),
        )
        for r in range(a)
    )
    cols = tuple(
        ir.Stmt(
            "S",
            _access(v, (n, var("r"), s, ib, tile, i)),
            _combination(
                [
                    (bt[s][k], _load(z, (n, ib, var("th"), var("tw"), var("r"), k, i), dtype))
                    for k in range(a)
                ]
            ),
        )
        for s in range(a)
    )
    # The products: one blocked 1x1 convolution per point (r, s) of the transformed tiles.
    point = (n, var("r"), var("s"), ob, var("t"), o)
    gemm = nest(
        [("n", n_batch), ("r", a), ("s", a), ("ob", out_blocks), ("t", th * tw), ("o", block)],
        (
            ir.Stmt("S", _access(prod, point), zero(dtype)),
            *nest(
                [("ib", in_blocks), ("i", block)],
                (
                    ir.Stmt(
                        "S",
                        _access(prod, point),
                        _load(prod, point, dtype)
                        + _load(v, (n, var("r"), var("s"), ib, var("t"), i), dtype)
                        * _load(u, (var("r"), var("s"), ob, ib, i, o), dtype),
                    ),
                ),
            ),
        ),
    )
    # Output transform, along the rows then along the columns, with the bias.
    out_rows = tuple(
        ir.Stmt(
            "S",
            _access(r_buf, (n, ob, var("th"), var("tw"), p, var("s"), o)),
            _combination(
                [(at[p][k], _load(prod, (n, k, var("s"), ob, tile, o), dtype)) for k in range(a)]
            ),
        )
        for p in range(m)
    )
    bias = load(ctx, b, (ob * block + o,)) if b else None
    out_h_pos, out_w_pos = var("th") * m + var("p"), var("tw") * m
    out_cols = []
    for q in range(m):
        value = _combination(
            [
                (at[q][k], _load(r_buf, (n, ob, var("th"), var("tw"), var("p"), k, o), dtype))
                for k in range(a)
            ]
        )
        guards: tuple[ir.Cond, ...] = ()
        if th * m > out_h:
            guards += (ir.lt(out_h_pos, out_h),)
        if tw * m > out_w and (tw - 1) * m + q >= out_w:
            guards += (ir.lt(out_w_pos + q, out_w),)
        out_cols.append(
            ir.Stmt(
                "S",
                _access(y, (n, ob, out_h_pos, out_w_pos + q, o)),
                value + bias if bias is not None else value,
                guards,
            )
        )
    return Lowered(
        (
            *prologue,
            *nest([("n", n_batch), ("ib", in_blocks), *tile_loops, ("c", a), ("i", block)], rows),
            *nest([("n", n_batch), ("ib", in_blocks), *tile_loops, ("r", a), ("i", block)], cols),
            *gemm,
            *nest(
                [("n", n_batch), ("ob", out_blocks), *tile_loops, ("s", a), ("o", block)], out_rows
            ),
            *nest(
                [("n", n_batch), ("ob", out_blocks), *tile_loops, ("p", m), ("o", block)],
                tuple(out_cols),
            ),
        ),
        temps,
        constants=((u, transform_weights(weights, m)),),
    )
