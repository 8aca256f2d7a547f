"""Gemm and MatMul: an init statement and a multiply-accumulate over ``k``.

Gemm (``transA=0, transB=1``, bias ``C`` of shape ``[N]``)::

    for i, j:
      S: Y[i, j] = (C[j] * beta)
      for k:
        S: Y[i, j] = (Y[i, j] + ((A[i, k] * B[j, k]) * alpha))

MatMul follows numpy: leading batch dimensions broadcast (iterators ``b0..``) and a 1-D operand
has no ``i`` (or ``j``) loop.

float16 products are summed in float32 (:mod:`polyonnx.krnl.lower.half`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.passes.panels import PANEL_ATTR
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    broadcast_index,
    load,
    nest,
    require_float,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.half import half_product
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register


@register("Gemm")
def lower_gemm(node: Node, ctx: LowerContext) -> Lowered:
    """Gemm: ``Y = alpha * op(A) @ op(B) + beta * C`` with ``C`` broadcast to ``[M, N]``."""
    a, b, c, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, a)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    a_shape, b_shape, y_shape = ctx.shape(a), ctx.shape(b), ctx.shape(y)
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ShapeError(f"node {node.name!r} (Gemm): A {a_shape} and B {b_shape} must be 2-D")
    k_extent = a_shape[0] if trans_a else a_shape[1]
    if (b_shape[1] if trans_b else b_shape[0]) != k_extent:
        raise ShapeError(
            f"node {node.name!r} (Gemm): inner dimensions of A {a_shape} and B {b_shape} differ"
        )
    i, j, k = var("i"), var("j"), var("k")
    out = ir.Access(y, (i, j))
    bias: ir.Expr | None = None
    if c and beta != 0.0:
        bias = ir.Load(c, broadcast_index(ctx.shape(c), y_shape, ("i", "j")), ctx.dtype(c))
        bias = bias if beta == 1.0 else bias * beta
    init_value = bias if bias is not None else zero(dtype)
    weights = ctx.constant(b)
    constants: tuple[tuple[str, np.ndarray], ...] = ()
    if trans_b and weights is not None:
        # Constant B^T (a fully connected layer): transposed at compile time, so the output
        # columns the vector loops run along read B contiguously. (A view: it is copied once,
        # into the weights blob, not into a fresh array first: VGG19's 400 MB took 1.3-2 s
        # of first touches.)
        b, trans_b = f"{b}__transposed", False
        constants = ((b, weights.T),)
        b_load: ir.Expr = ir.Load(b, (k, j), dtype)
    else:
        b_load = load(ctx, b, (j, k) if trans_b else (k, j))
    a_load = load(ctx, a, (k, i) if trans_a else (i, k))
    if dtype == "float16":
        lowered = half_product(
            node.name,
            [("i", y_shape[0]), ("j", y_shape[1])],
            out,
            [("k", k_extent)],
            a_load,
            b_load,
            alpha=alpha,
            bias=bias,
        )
        return dataclasses.replace(lowered, constants=constants)
    product = a_load * b_load
    if alpha != 1.0:
        product = product * alpha
    update = ir.Stmt("S", out, ir.Load(y, out.index, dtype) + product)
    return Lowered(
        nest(
            [("i", y_shape[0]), ("j", y_shape[1])],
            (ir.Stmt("S", out, init_value), *nest([("k", k_extent)], (update,))),
        ),
        (),
        constants,
    )


@register("MatMul")
def lower_matmul(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...] | Lowered:
    """MatMul with numpy semantics (batch broadcasting, 1-D operands)."""
    a, b, y = node.input(0), node.input(1), node.outputs[0]
    dtype = ctx.dtype(a)
    if dtype == "bool":
        raise unsupported(node, ctx, "bool inputs")
    a_shape, b_shape, y_shape = ctx.shape(a), ctx.shape(b), ctx.shape(y)
    if not a_shape or not b_shape:
        raise ShapeError(f"node {node.name!r} (MatMul): operands must not be scalars")
    k_extent = a_shape[-1]
    if (b_shape[0] if len(b_shape) == 1 else b_shape[-2]) != k_extent:
        raise ShapeError(
            f"node {node.name!r} (MatMul): inner dimensions of A {a_shape} and B {b_shape} differ"
        )
    a_vector, b_vector = len(a_shape) == 1, len(b_shape) == 1
    n_batch = len(y_shape) - (0 if a_vector else 1) - (0 if b_vector else 1)
    batch_shape = y_shape[:n_batch]
    batch_names = [f"b{d}" for d in range(n_batch)]
    iters = list(zip(batch_names, batch_shape, strict=True))
    out_index = [var(n) for n in batch_names]
    if not a_vector:
        iters.append(("i", y_shape[n_batch]))
        out_index.append(var("i"))
    if not b_vector:
        iters.append(("j", y_shape[-1]))
        out_index.append(var("j"))
    k = var("k")
    rows = int(np.prod(y_shape[:-1]))  # rows of A (batches included) that each read all of B
    panel = int(node.attr(PANEL_ATTR, PANEL))
    if (
        len(b_shape) == 2
        and not a_vector
        and dtype in ("float32", "float64")
        and b_shape[1] >= 2 * panel
        and k_extent >= panel
        and (ctx.constant(b) is not None or rows >= PACK_MIN_ROWS)
    ):
        return _panelled(node, ctx, dtype, iters, out_index, k_extent, panel)
    a_index = (
        (k,)
        if a_vector
        else (*broadcast_index(a_shape[:-2], batch_shape, batch_names), var("i"), k)
    )
    b_index = (
        (k,)
        if b_vector
        else (*broadcast_index(b_shape[:-2], batch_shape, batch_names), k, var("j"))
    )
    out = ir.Access(y, tuple(out_index))
    if dtype == "float16":
        return half_product(
            node.name, iters, out, [("k", k_extent)], load(ctx, a, a_index), load(ctx, b, b_index)
        )
    update = ir.Stmt(
        "S", out, ir.Load(y, out.index, dtype) + load(ctx, a, a_index) * load(ctx, b, b_index)
    )
    return nest(iters, (ir.Stmt("S", out, zero(dtype)), *nest([("k", k_extent)], (update,))))


PANEL = 32
"""Columns of B per packed panel when the MatMul has no ``panel`` attribute; the pipeline
sets the target's register-tile width (:mod:`polyonnx.graph.passes.panels`)."""

PACK_MIN_ROWS = 32
"""Rows of A from which a B known only at run time is packed into panels. Packing costs two
passes over B (read it, write the panels) before the product reads them; with fewer rows, a
few register tiles read B directly, each once, and the passes cost more than the cache
conflicts they avoid (Zen 4, N = 1000 and 1024: 3-4x faster unpacked at 2-8 rows, even at
32, packing ahead at 64)."""


def _panelled(
    node: Node,
    ctx: LowerContext,
    dtype: str,
    iters: list[tuple[str, int]],
    out_index: list[Aff],
    k_extent: int,
    panel: int,
) -> Lowered:
    """``Y = A @ B`` for a 2-D ``B`` read through panels ``Bp[jt, k, jj] = B[k, panel*jt + jj]``:
    the columns a register tile needs are contiguous for every ``k`` (a row of B is ``N``
    floats apart, and with ``N`` a power of two those rows fight for the same cache sets).
    A constant ``B`` is packed (zero-padded) at compile time, another by a first nest of the
    kernel. The product accumulates into ``acc[..., jt, i, jj]`` over whole panels; a last
    nest writes ``Y``.
    """
    a, b, y = node.input(0), node.input(1), node.outputs[0]
    n_cols = ctx.shape(b)[1]
    panels = -(-n_cols // panel)
    packed = f"{b}__panels"
    j = var("jt") * panel + var("jj")
    weights = ctx.constant(b)
    nests: tuple[ir.Node, ...] = ()
    temps: list[ir.Buffer] = []
    constants: tuple[tuple[str, np.ndarray], ...] = ()
    if weights is not None:
        padded = np.zeros((k_extent, panels * panel), weights.dtype)
        padded[:, :n_cols] = weights
        constants = (
            (
                packed,
                np.ascontiguousarray(padded.reshape(k_extent, panels, panel).transpose(1, 0, 2)),
            ),
        )
    else:
        temps.append(ir.Buffer(packed, dtype, (panels, k_extent, panel), "temp"))
        point = (var("jt"), var("k"), var("jj"))
        pack = ir.Stmt(
            "S",
            ir.Access(packed, point),
            load(ctx, b, (var("k"), j)),
            (ir.lt(j, n_cols),) if n_cols % panel else (),
        )
        # Row by row of B: each row is read once, whole, as it lies in memory.
        nests = nest([("k", k_extent), ("jt", panels), ("jj", panel)], (pack,))
        if n_cols % panel:
            tail = ir.Stmt(
                "S", ir.Access(packed, (Aff.lift(panels - 1), var("k"), var("jj"))), zero(dtype)
            )
            nests = (
                *nests,
                ir.Loop("k", 0, k_extent, (ir.Loop("jj", n_cols % panel, panel, (tail,)),)),
            )
    n_batch = len(iters) - 2
    batch = iters[:n_batch]
    acc = f"{node.name}__acc"
    # Panel-major: a register tile's accumulators are one contiguous block, and the rows a
    # panel's sweep updates are a panel apart, not a whole row of Y (with N a power of two,
    # Y's rows share cache sets: 1024 columns put every row of a panel in one L1 set).
    temps.append(
        ir.Buffer(acc, dtype, (*(e for _, e in batch), panels, iters[n_batch][1], panel), "temp")
    )
    acc_point = (*(var(n) for n, _ in batch), var("jt"), var("i"), var("jj"))
    a_index = (
        *broadcast_index(ctx.shape(a)[:-2], tuple(e for _, e in batch), [n for n, _ in batch]),
        var("i"),
        var("k"),
    )
    product = load(ctx, a, a_index) * ir.Load(packed, (var("jt"), var("k"), var("jj")), dtype)
    init = ir.Stmt("S", ir.Access(acc, acc_point), zero(dtype))
    update = ir.Stmt("S", ir.Access(acc, acc_point), ir.Load(acc, acc_point, dtype) + product)
    body = nest(
        [*batch, iters[n_batch], ("jt", panels), ("jj", panel)],
        (init, *nest([("k", k_extent)], (update,))),
    )
    out = ir.Access(y, tuple(j if isinstance(x, Aff) and x == var("j") else x for x in out_index))
    copy = ir.Stmt(
        "S", out, ir.Load(acc, acc_point, dtype), (ir.lt(j, n_cols),) if n_cols % panel else ()
    )
    final = nest([*batch, iters[n_batch], ("jt", panels), ("jj", panel)], (copy,))
    return Lowered((*nests, *body, *final), tuple(temps), constants)
