"""Data movement: Transpose, Concat, Pad, ConstantOfShape.

These are copies with affine index maps. Concat is one nest per input, each writing its slab of
the output at an offset along the axis. Pad splits every padded axis into its pieces (before,
inside, after the input) so that each piece reads the input through an affine index — a constant
for ``edge``, a reversed one for ``reflect``, a shifted one for ``wrap`` — and ``constant`` mode
fills the output then copies the input in.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ModelError, ShapeError
from polyonnx.graph.ir import Node
from polyonnx.graph.pads import spread_pads
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    generic_iters,
    nest,
    normalize_axis,
    opset,
    scalar_attr_value,
    scalar_index,
    str_attr,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.registry import LowerContext, register


@register("Transpose")
def lower_transpose(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y[i0, .., ik] = X[...]`` with ``X``'s axis ``perm[d]`` indexed by ``i_d``."""
    x, y = node.input(0), node.outputs[0]
    rank = len(ctx.shape(x))
    perm = tuple(int(p) for p in node.attr("perm", tuple(reversed(range(rank)))))
    if sorted(perm) != list(range(rank)):
        raise bad_attr(node, "perm", f"= {list(perm)} is not a permutation of {rank} axes")
    iters = generic_iters(ctx.shape(y))
    x_index: list[Aff] = [Aff.lift(0)] * rank
    for d, p in enumerate(perm):
        x_index[p] = var(iters[d][0])
    stmt = ir.Stmt(
        "S", ir.Access(y, tuple(var(n) for n, _ in iters)), ir.Load(x, tuple(x_index), ctx.dtype(x))
    )
    return nest(iters, (stmt,))


@register("Concat")
def lower_concat(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """One copy nest per input, shifted by the sizes of the inputs before it along ``axis``."""
    y = node.outputs[0]
    rank = len(ctx.shape(y))
    if not node.has_attr("axis") and opset(ctx) >= 4:
        raise bad_attr(node, "axis", "is required")
    axis = normalize_axis(node, int(node.attr("axis", 1)), rank)
    nests: list[ir.Node] = []
    offset = 0
    for x in (i for i in node.inputs if i):
        shape = ctx.shape(x)
        iters = generic_iters(shape)
        index = [var(n) for n, _ in iters]
        out_index = list(index)
        out_index[axis] = index[axis] + offset
        if shape[axis]:
            nests.extend(
                nest(
                    iters,
                    (
                        ir.Stmt(
                            "S",
                            ir.Access(y, tuple(out_index)),
                            ir.Load(x, tuple(index), ctx.dtype(x)),
                        ),
                    ),
                )
            )
        offset += shape[axis]
    if offset != ctx.shape(y)[axis]:
        raise ShapeError(
            f"node {node.name!r} (Concat): inputs add up to {offset} along axis "
            f"{axis}, output has {ctx.shape(y)[axis]}"
        )
    return tuple(nests)


def _typed_const(value: float | int | bool, dtype: str) -> ir.Const:
    if dtype in ir.FLOAT_DTYPES:
        return ir.Const(float(value), dtype)
    if dtype == "bool":
        return ir.Const(bool(value), dtype)
    return ir.Const(int(value), dtype)


@register("ConstantOfShape")
def lower_constant_of_shape(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Fill the output (whose shape the graph has already resolved) with ``value``."""
    y = node.outputs[0]
    value = node.attr("value")
    try:
        fill = scalar_attr_value(value) if value is not None else 0.0
    except ValueError as e:
        raise bad_attr(node, "value", str(e)) from None
    iters = generic_iters(ctx.shape(y))
    stmt = ir.Stmt(
        "S", ir.Access(y, tuple(var(n) for n, _ in iters)), _typed_const(fill, ctx.dtype(y))
    )
    return nest(iters, (stmt,))


Piece = tuple[int, int, Aff]
"""An output range ``[lo, hi)`` along one axis and the input index read there."""


def _pads(node: Node, ctx: LowerContext, rank: int) -> tuple[list[int], list[int]]:
    """Per-axis (begin, end) pads from the attribute (opset < 11) or the constant inputs."""
    axes = None
    if opset(ctx) < 11:
        pads = node.attr("pads", node.attr("paddings"))
        if pads is None:
            raise bad_attr(node, "pads", "is required")
    else:
        pads = ctx.constant(node.input(1))
        if pads is None:
            raise unsupported(
                node, ctx, "pads computed at run time (input 'pads' must be a constant)"
            )
        if node.input(3):
            axes_value = ctx.constant(node.input(3))
            if axes_value is None:
                raise unsupported(node, ctx, "axes computed at run time")
            axes = [
                normalize_axis(node, int(a), rank, "axes")
                for a in np.asarray(axes_value).reshape(-1)
            ]
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    spread = spread_pads(pads, axes, rank)
    if spread is None:
        count = rank if axes is None else len(axes)
        wrong = (
            f"pads has {len(pads)} values, expected {2 * count}"
            if len(pads) != 2 * count
            else f"axes {axes} name an axis twice"
        )
        raise ModelError(f"node {node.name!r} (Pad): {wrong}")
    return spread


def _pieces(node: Node, mode: str, o: str, size: int, pb: int, pe: int) -> list[Piece]:
    """Split one output axis into its before / inside / after ranges (edge, reflect, wrap).

    Negative pads crop first; the positive ones then pad the cropped input (so ``wrap`` wraps
    around what is left, as onnxruntime does).
    """
    start = max(-pb, 0)
    kept = size - start - max(-pe, 0)
    pb, pe = max(pb, 0), max(pe, 0)
    # Each padded element must map to one input element: edge needs a non-empty axis, reflect
    # mirrors without repeating the border element, wrap goes round at most once.
    limit = {"edge": kept and max(pb, pe), "reflect": kept - 1, "wrap": kept}[mode]
    if max(pb, pe) > 0 and max(pb, pe) > limit:
        raise ModelError(
            f"node {node.name!r} (Pad): {mode} padding of {max(pb, pe)} does not "
            f"fit an axis of (cropped) size {kept}"
        )
    o_var = var(o) + start
    left = {"edge": Aff.lift(start), "reflect": 2 * start + pb - o_var, "wrap": o_var - pb + kept}[
        mode
    ]
    right = {
        "edge": Aff.lift(start + kept - 1),
        "reflect": 2 * (start + kept) + pb - 2 - o_var,
        "wrap": o_var - pb - kept,
    }[mode]
    pieces = [(0, pb, left), (pb, pb + kept, o_var - pb), (pb + kept, pb + kept + pe, right)]
    return [p for p in pieces if p[0] < p[1]]


def _piece_nest(
    y: str, names: Sequence[str], ranges: Sequence[tuple[int, int]], value: ir.Expr
) -> ir.Node:
    nodes: tuple[ir.Node, ...] = (ir.Stmt("S", ir.Access(y, tuple(var(n) for n in names)), value),)
    for name, (lo, hi) in reversed(list(zip(names, ranges, strict=True))):
        nodes = (ir.Loop(name, lo, hi, nodes),)
    return nodes[0]


@register("Pad")
def lower_pad(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """Pad in ``constant``, ``edge``, ``reflect`` and ``wrap`` modes; negative pads crop."""
    x, y = node.input(0), node.outputs[0]
    dtype = ctx.dtype(x)
    in_shape, out_shape = ctx.shape(x), ctx.shape(y)
    rank = len(in_shape)
    mode = str_attr(node, "mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap") or (mode == "wrap" and opset(ctx) < 19):
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    begin, end = _pads(node, ctx, rank)
    expected = tuple(s + b + e for s, b, e in zip(in_shape, begin, end, strict=True))
    if expected != tuple(out_shape):
        raise ShapeError(
            f"node {node.name!r} (Pad): output shape {tuple(out_shape)} does not "
            f"match the pads (expected {expected})"
        )
    names = [f"i{d}" for d in range(rank)]
    if mode == "constant":
        if opset(ctx) < 11:
            fill: ir.Expr = _typed_const(float(node.attr("value", 0.0)), dtype)
        elif node.input(2):
            # The pad value is read at run time: it may be a graph input.
            fill = ir.Load(node.input(2), scalar_index(ctx, node.input(2)), dtype)
        else:
            fill = zero(dtype)
        # Fill everything, then copy the (possibly cropped) input over its region.
        nests = [_piece_nest(y, names, [(0, n) for n in out_shape], fill)]
        inside = [
            (max(b, 0), min(b + n, b + n + e)) for n, b, e in zip(in_shape, begin, end, strict=True)
        ]
        if all(lo < hi for lo, hi in inside):
            nests.append(
                _piece_nest(
                    y,
                    names,
                    inside,
                    ir.Load(x, tuple(var(o) - b for o, b in zip(names, begin, strict=True)), dtype),
                )
            )
        return tuple(nests) if all(out_shape) else ()
    per_axis = [_pieces(node, mode, names[d], in_shape[d], begin[d], end[d]) for d in range(rank)]
    return tuple(
        _piece_nest(
            y, names, [(p[0], p[1]) for p in combo], ir.Load(x, tuple(p[2] for p in combo), dtype)
        )
        for combo in itertools.product(*per_axis)
    )
