"""QuantizeLinear and DequantizeLinear (integer types), per tensor or per axis::

    for i0, i1:                                   (QuantizeLinear to uint8, per axis 1)
      S: Y[i0, i1] = uint8(min(max(float32(round(X[i0, i1] / scale[i1])) + float32(zp[i1]),
                                   0.0), 255.0))

As the reference computes them: ``x / scale`` in the input's type rounded half to even, the zero
point added and the sum saturated to the target's range (clamped while still a float, so no
out-of-range conversion happens); dequantizing subtracts the zero point and multiplies by the
scale in float32, then rounds to the scale's type. The encoded types (int4, int2, float8,
float4: :mod:`polyonnx.krnl.lower.encoding`) quantize and dequantize through their codes: a
float8 result is ``x / scale`` converted (saturating unless ``saturate=0``), its zero point
ignored as the reference ignores it; a float4 one is ``x / scale + zero_point`` converted.

Blocked scales (opset 21's ``block_size``: a scale and zero point of X's rank, one per
``block_size`` consecutive elements along ``axis``, as weight-only int4/int8 quantizers write
them) need the block of an element, ``i // block_size``, which is not affine: the axis is
iterated as a block loop and a loop within the block instead, ``i = b * block_size + j``, the
parameters read at ``b``, a guard ``i < X.shape[axis]`` cutting a ragged last block::

    for i0, b1, j1:                  (DequantizeLinear, block_size 4 along axis 1 of [2, 10])
      S: Y[i0, 4*b1 + j1] = (float32(X[i0, 4*b1 + j1]) - float32(zp[i0, b1])) * scale[i0, b1]
         if 4*b1 + j1 < 10
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    bad_attr,
    ceil_div,
    generic_iters,
    nest,
    normalize_axis,
    unsupported,
    var,
)
from polyonnx.krnl.lower.encoding import FLOAT_FORMATS, INT_RANGES, decode, encode, int_code
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

_INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
_SMALL_FLOATS = tuple(FLOAT_FORMATS)


@dataclass(frozen=True)
class _Elements:
    """How a (de)quantizing nest runs over X: its loops, an element's index, the guards of a
    ragged last block, and the blocked parameters' layout (``block`` 0 and ``axis`` -1 unless
    blocked)."""

    shape: tuple[int, ...]
    iters: list[tuple[str, int]]
    index: tuple[ir.Aff, ...]
    guards: tuple[ir.Cond, ...]
    axis: int
    block: int

    def stmt(self, y: str, value: ir.Expr) -> tuple[ir.Node, ...]:
        """``Y[index] = value`` over the elements."""
        return nest(self.iters, (ir.Stmt("S", ir.Access(y, self.index), value, self.guards),))


def _elements(node: Node, ctx: LowerContext, x: str) -> _Elements:
    """The loops over ``x`` for ``node``'s scale layout (see the module docstring)."""
    shape = ctx.shape(x)
    iters = generic_iters(shape)
    index = tuple(var(n) for n, _ in iters)
    block = int(node.attr("block_size", 0))
    if block < 0:
        raise bad_attr(node, "block_size", f"must be >= 0, got {block}")
    if not block:  # (the axis matters only to per-axis parameters: see _param)
        return _Elements(shape, iters, index, (), -1, 0)
    axis = normalize_axis(node, int(node.attr("axis", 1)), len(shape))
    extent = shape[axis]
    b, j = f"b{axis}", f"i{axis}"
    iters[axis : axis + 1] = [(b, ceil_div(extent, block)), (j, min(block, extent))]
    position = var(b) * block + var(j)
    index = (*index[:axis], position, *index[axis + 1 :])
    guards = (ir.lt(position, extent),) if extent % block and block < extent else ()
    return _Elements(shape, iters, index, guards, axis, block)


def _param(node: Node, ctx: LowerContext, name: str, at: _Elements) -> ir.Expr | None:
    """A load of the scale or zero point ``name`` (one element, one per element along the
    node's axis, or one per block) for the element at ``at.index``; None when ``name`` is
    absent."""
    if not name:
        return None
    shape, rank = ctx.shape(name), len(at.shape)
    if at.block:
        blocks = ceil_div(at.shape[at.axis], at.block)
        want = (*at.shape[: at.axis], blocks, *at.shape[at.axis + 1 :])
        if shape != want:
            raise ShapeError(
                f"node {node.name!r} ({node.op_type}): {name!r} of shape {list(shape)}, "
                f"expected {list(want)} for blocks of {at.block} along axis {at.axis}"
            )
        index: tuple[ir.Aff, ...] = tuple(
            var(f"b{k}") if k == at.axis else at.index[k] for k in range(rank)
        )
    elif int(np.prod(shape, dtype=np.int64)) == 1:
        index = (ir.Aff.lift(0),) * len(shape)
    elif len(shape) == 1:
        axis = normalize_axis(node, int(node.attr("axis", 1)), rank)
        if shape[0] != at.shape[axis]:
            raise ShapeError(
                f"node {node.name!r} ({node.op_type}): {name!r} has {shape[0]} values, "
                f"axis {axis} of the input {at.shape[axis]}"
            )
        index = (at.index[axis],)
    else:
        raise unsupported(
            node, ctx, f"{name!r} of shape {list(shape)} without block_size (blocked)"
        )
    return ir.Load(name, index, ctx.dtype(name))


def _f32(e: ir.Expr) -> ir.Expr:
    """``e`` as float32 (an encoded value decoded first)."""
    if e.dtype in ir.ENCODED_DTYPES:
        e = decode(e)
    return e if e.dtype == "float32" else ir.Cast(e, "float32")


@register("QuantizeLinear", since=10)
def lower_quantize_linear(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y = saturate(round(X / scale) + zero_point)``."""
    x, scale, zp, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dst = ctx.dtype(y)
    if dst not in (*_INTEGERS, *INT_RANGES, *_SMALL_FLOATS) or ctx.dtype(x) not in (
        "float32",
        "float16",
    ):
        raise unsupported(node, ctx, f"{ctx.dtype(x)} to {dst}")
    at = _elements(node, ctx, x)
    s = _param(node, ctx, scale, at)
    assert s is not None
    xv = ir.Load(x, at.index, ctx.dtype(x))
    if s.dtype != xv.dtype:
        s = ir.Cast(s, xv.dtype)
    z = _param(node, ctx, zp, at)
    if dst in _SMALL_FLOATS:
        scaled: ir.Expr = xv / s
        if dst == "float4_e2m1fn" and z is not None:
            scaled = _f32(scaled) + _f32(z)
        return at.stmt(y, encode(scaled, dst, saturate=bool(node.attr("saturate", 1))))
    value = _f32(ir.unary("round", xv / s))
    if z is not None:
        value = value + _f32(z)
    lo, hi = INT_RANGES[dst] if dst in INT_RANGES else (np.iinfo(dst).min, np.iinfo(dst).max)
    value = ir.minimum(ir.maximum(value, float(lo)), float(hi))
    out = int_code(ir.Cast(value, "int64"), dst) if dst in INT_RANGES else ir.Cast(value, dst)
    return at.stmt(y, out)


@register("DequantizeLinear", since=10)
def lower_dequantize_linear(node: Node, ctx: LowerContext) -> tuple[ir.Node, ...]:
    """``Y = (X - zero_point) * scale``, in float32."""
    x, scale, zp, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    src, dst = ctx.dtype(x), ctx.dtype(y)
    if src not in (*_INTEGERS, *INT_RANGES, *_SMALL_FLOATS) or dst not in ("float32", "float16"):
        raise unsupported(node, ctx, f"{src} to {dst}")
    at = _elements(node, ctx, x)
    s = _param(node, ctx, scale, at)
    assert s is not None
    value = _f32(ir.Load(x, at.index, src))
    z = _param(node, ctx, zp, at)
    if z is not None and src not in _SMALL_FLOATS:  # (a float8 zero point must be, and is, 0)
        value = value - _f32(z)
    value = value * _f32(s)
    return at.stmt(y, value if dst == "float32" else ir.Cast(value, dst))


@register("DynamicQuantizeLinear", since=11)
def lower_dynamic_quantize_linear(node: Node, ctx: LowerContext) -> Lowered:
    """DynamicQuantizeLinear to uint8: the range of ``X`` (with 0 in it) in two running
    reductions, then the scale, the zero point and ``Y`` as the reference computes them::

        lo = min(0, X...), hi = max(0, X...)
        scale = (hi == lo ? 1 : hi - lo) / 255
        zp = round(clamp(0 - lo / scale, 0, 255))
        Y = uint8(clamp(round(X / scale) + zp, 0, 255))
    """
    x = node.input(0)
    y, scale, zp = (node.outputs[k] if len(node.outputs) > k else "" for k in range(3))
    if ctx.dtype(x) != "float32":
        raise unsupported(node, ctx, f"input of dtype {ctx.dtype(x)}")
    iters = generic_iters(ctx.shape(x))
    index = tuple(var(n) for n, _ in iters)
    lo = ir.Buffer(f"{node.name}__lo", "float32", (1,), "temp")
    hi = ir.Buffer(f"{node.name}__hi", "float32", (1,), "temp")
    step = ir.Buffer(f"{node.name}__scale", "float32", (1,), "temp")
    point = ir.Buffer(f"{node.name}__zp", "float32", (1,), "temp")
    one = (ir.Aff.lift(0),)

    def at(b: ir.Buffer) -> ir.Load:
        return ir.Load(b.name, one, "float32")

    xv = ir.Load(x, index, "float32")
    width = at(hi) - at(lo)
    nests: list[ir.Node] = [
        ir.Stmt("S", ir.Access(lo.name, one), ir.Const(0.0, "float32")),
        ir.Stmt("S", ir.Access(hi.name, one), ir.Const(0.0, "float32")),
        *nest(
            iters,
            (
                ir.Stmt("S", ir.Access(lo.name, one), ir.minimum(at(lo), xv)),
                ir.Stmt("S", ir.Access(hi.name, one), ir.maximum(at(hi), xv)),
            ),
        ),
        ir.Stmt(
            "S",
            ir.Access(step.name, one),
            ir.Select(
                ir.Binary("eq", width, ir.Const(0.0, "float32")), ir.Const(1.0, "float32"), width
            )
            / ir.Const(255.0, "float32"),
        ),
        ir.Stmt(
            "S",
            ir.Access(point.name, one),
            ir.unary(
                "round",
                ir.minimum(ir.maximum(ir.Const(0.0, "float32") - at(lo) / at(step), 0.0), 255.0),
            ),
        ),
    ]
    if y:
        q = ir.minimum(ir.maximum(ir.unary("round", xv / at(step)) + at(point), 0.0), 255.0)
        nests += nest(iters, (ir.Stmt("S", ir.Access(y, index), ir.Cast(q, "uint8")),))
    for out, buf, dtype in ((scale, step, "float32"), (zp, point, "uint8")):
        if out:
            value = at(buf) if dtype == "float32" else ir.Cast(at(buf), dtype)
            nests.append(
                ir.Stmt("S", ir.Access(out, (ir.Aff.lift(0),) * len(ctx.shape(out))), value)
            )
    return Lowered(tuple(nests), (lo, hi, step, point))
