"""DeformConv: a convolution whose every tap reads the input at a learned, fractional offset.

For output point ``o`` of image ``n`` and kernel tap ``k`` (both per spatial axis ``d``), the
input channels of offset group ``og`` read ``X`` at ``p_d = o_d * stride_d - pad_d + k_d *
dilation_d + offset[n, ((og * K + k) * D + d), o]`` (``K`` the taps of the kernel, ``k`` in
row-major order, ``D`` the spatial axes), interpolated linearly along each axis between
``floor(p_d)`` and ``floor(p_d) + 1``, a pixel outside the input reading 0, and times
``mask[n, og * K + k, o]`` (1 without a mask). The output is then an ordinary grouped
convolution of these samples, plus the bias. This is the ONNX reference's computation (a
GridSample with ``align_corners`` per tap), for any number of spatial axes.

A copy of X with a border of zeros, then per image three nests (the ``C/og`` channels of an
offset group share its positions, so positions and weights are computed once per group, not
per channel)::

    Xp[n, c, i + 2] = X[n, c, i], 0 on a border of 2       (for every image at once)
    for og, k, o:                                          (the per-sample tables)
      S: idx[d, og, k, o] = floor(clamp(p_d, -2, size_d)) + 2       (each d)
      S: wt[corner, og, k, o] = mask * prod_d (1 - f_d | f_d)      (each of the 2**D corners)
    for c, k, o:                                           (the sampled "columns")
      S: cols[c * K + k, o] = sum_corner wt[corner, og, k, o] * Xp[n, c, idx[., og, k, o] + corner]
    for g, oc, o:                                          (a convolution over the columns)
      S: Y[n, g * M/G + oc, o] = B[..]
      for ic, k: S: Y[..] = Y[..] + W[g * M/G + oc, ic, k] * cols[(g * C/G + ic) * K + k, o]

Every read of ``X`` is in bounds whatever the offsets are: a position is clamped to ``[-2,
size]`` by ordered comparisons (NaN and -inf go to -2, +inf to ``size``) before its floor is
taken (and the integer clamped again), and a position outside ``[-1, size)`` has both its taps
outside the input, in ``Xp``'s border of zeros. (The reference raises on NaN or infinite
offsets; here such a tap reads 0, as in onnxruntime.)
Clamping moves only positions whose taps all read 0, so the finite answers are the
reference's. A grouped convolution with several output channels per group accumulates into
``acc[g, oc, o]`` (its index a point of the nest) and then writes Y, as does float16, summed
in float32 and rounded once. With several images the tables, columns and accumulator are one
image's, and a loop over the images encloses the nests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    nest,
    pairs,
    require_float,
    spatial_names,
    var,
)
from polyonnx.krnl.lower.conv import ConvGeometry, conv_geometry, pad_input
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"
_BORDER = 2  # (zeros before and after each spatial axis of Xp)


def _int_expr(a: Aff) -> ir.Expr:
    """The affine ``a`` as an int64 expression of its iterators."""
    out: ir.Expr = ir.Const(a.const, I64)
    for name, coeff in a.terms:
        out = out + ir.Iter(name) * ir.Const(coeff, I64)
    return out


def _clamp(x: ir.Expr, lo: float | int, hi: float | int) -> ir.Expr:
    """``x`` in ``[lo, hi]`` by ordered comparisons: a NaN (which compares false) becomes
    ``lo``."""
    low, high = ir.Const(lo, x.dtype), ir.Const(hi, x.dtype)
    above = ir.Select(ir.Binary("ge", x, low), x, low)
    return ir.Select(ir.Binary("le", above, high), above, high)


def _cast(e: ir.Expr, dtype: str) -> ir.Expr:
    return e if e.dtype == dtype else ir.Cast(e, dtype)


@dataclass(frozen=True)
class _Deform:
    """One DeformConv node: its values, geometry, and the names and indices its nests share."""

    node: Node
    ctx: LowerContext
    geo: ConvGeometry
    groups: int  # offset_group
    dtype: str
    calc: str  # the arithmetic type: float64 for float64 input, else float32

    @property
    def taps(self) -> int:
        return math.prod(self.geo.kernel)

    @property
    def o_names(self) -> list[str]:
        return [f"o{s}" for s in spatial_names(self.geo.rank)]

    @property
    def k_names(self) -> list[str]:
        return [f"k{s}" for s in spatial_names(self.geo.rank)]

    @property
    def outs(self) -> list[Aff]:
        return [var(o) for o in self.o_names]

    @property
    def ks(self) -> list[Aff]:
        return [var(k) for k in self.k_names]

    @property
    def n(self) -> Aff:
        """The image (the loop around the per-image nests, when there are several)."""
        return var("n") if self.geo.n_batch > 1 else Aff.lift(0)

    @property
    def og(self) -> Aff:
        return var("og") if self.groups > 1 else Aff.lift(0)

    @property
    def k_flat(self) -> Aff:
        """The tap, row-major over the kernel."""
        out = Aff.lift(0)
        for k, size in zip(self.ks, self.geo.kernel, strict=True):
            out = out * size + k
        return out

    @property
    def corners(self) -> list[tuple[int, ...]]:
        return list(itertools.product((0, 1), repeat=self.geo.rank))

    @property
    def sample(self) -> tuple[Aff, ...]:
        """The index of the tables: offset group, tap, output point."""
        return (self.og, *self.ks, *self.outs)

    def sample_iters(self) -> list[tuple[str, int]]:
        return [*self.og_iters(), *self.kernel_iters(), *self.out_iters()]

    def og_iters(self) -> list[tuple[str, int]]:
        return [("og", self.groups)] if self.groups > 1 else []

    def kernel_iters(self) -> list[tuple[str, int]]:
        return pairs(self.k_names, self.geo.kernel)

    def out_iters(self) -> list[tuple[str, int]]:
        return pairs(self.o_names, self.geo.out_spatial)

    def name(self, what: str) -> str:
        return f"{self.node.name}__{what}"

    def f(self, v: float) -> ir.Const:
        return ir.Const(float(v), self.calc)

    def load(self, value: str, index: tuple[Aff, ...]) -> ir.Expr:
        """A load of ONNX value ``value``, in the arithmetic type."""
        return _cast(ir.Load(value, index, self.ctx.dtype(value)), self.calc)


def _deform(node: Node, ctx: LowerContext) -> _Deform:
    """The node's geometry and offset groups, its inputs' shapes checked against them."""
    x, w, offset, b, mask = (node.input(k) for k in range(5))
    y = node.outputs[0]
    dtype = require_float(node, ctx, x)
    for name in (offset, mask):
        if name:
            require_float(node, ctx, name)
    geo = conv_geometry(node, ctx, x, w, y)
    groups = int(node.attr("offset_group", 1))
    if groups < 1 or geo.channels % groups:
        raise bad_attr(node, "offset_group", f"= {groups} must divide C={geo.channels}")
    taps = math.prod(geo.kernel)
    expected = (  # (a list: one value may be given as two inputs)
        (offset, (geo.n_batch, groups * geo.rank * taps, *geo.out_spatial)),
        (mask, (geo.n_batch, groups * taps, *geo.out_spatial)),
        (b, (geo.out_channels,)),
        (y, (geo.n_batch, geo.out_channels, *geo.out_spatial)),
    )
    for name, shape in expected:
        if name and ctx.shape(name) != shape:
            raise ShapeError(
                f"node {node.name!r} (DeformConv): {name!r} has shape {list(ctx.shape(name))}, "
                f"expected {list(shape)} (X {list(ctx.shape(x))}, W {list(ctx.shape(w))}, "
                f"offset_group {groups})"
            )
    calc = "float64" if dtype == "float64" else "float32"
    return _Deform(node, ctx, geo, groups, dtype, calc)


def _tables(k: _Deform) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """Per offset group, tap and output point: each axis's first pixel in Xp (``idx``) and
    each corner's weight times the mask (``wt``)."""
    geo, offset, mask = k.geo, k.node.input(2), k.node.input(4)
    idx = ir.Buffer(k.name("idx"), I64, (geo.rank, k.groups, *geo.kernel, *geo.out_spatial))
    wt = ir.Buffer(k.name("wt"), k.calc, (len(k.corners), k.groups, *geo.kernel, *geo.out_spatial))
    stmts: list[ir.Node] = []
    weights: list[tuple[ir.Expr, ir.Expr]] = []
    for d, size in enumerate(geo.in_spatial):
        shift = k.load(offset, (k.n, (k.og * k.taps + k.k_flat) * geo.rank + d, *k.outs))
        base = _cast(_int_expr(geo.win.position(d, k.o_names[d], k.k_names[d])), k.calc)
        pos = _clamp(base + shift, -float(_BORDER), float(size))
        floor = ir.unary("floor", pos)
        frac = pos - floor
        first = _clamp(ir.Cast(floor, I64), -_BORDER, size) + ir.Const(_BORDER, I64)
        stmts.append(ir.Stmt("S", ir.Access(idx.name, (d, *k.sample)), first))
        weights.append((k.f(1.0) - frac, frac))
    scale = k.load(mask, (k.n, k.og * k.taps + k.k_flat, *k.outs)) if mask else None
    for c, corner in enumerate(k.corners):
        weight = scale
        for d, bit in enumerate(corner):
            weight = weights[d][bit] if weight is None else weight * weights[d][bit]
        assert weight is not None
        stmts.append(ir.Stmt("S", ir.Access(wt.name, (c, *k.sample)), weight))
    return nest(k.sample_iters(), stmts), [idx, wt]


def _columns(k: _Deform, padded: str) -> tuple[tuple[ir.Node, ...], ir.Buffer]:
    """``cols[c * K + k, o]``: every channel's samples of ``padded``, weighted."""
    geo = k.geo
    per_group = geo.channels // k.groups
    cc_iters = [("cc", per_group)] if per_group > 1 else []
    channel = k.og * per_group + (var("cc") if per_group > 1 else 0)
    cols = ir.Buffer(k.name("cols"), k.calc, (geo.channels * k.taps, *geo.out_spatial))
    value: ir.Expr | None = None
    for c, corner in enumerate(k.corners):
        pixel = tuple(
            ir.Load(k.name("idx"), (Aff.lift(d), *k.sample), I64) + ir.Const(bit, I64)
            for d, bit in enumerate(corner)
        )
        term = ir.Load(k.name("wt"), (Aff.lift(c), *k.sample), k.calc) * ir.Load(
            padded, (k.n, channel, *pixel), k.calc
        )
        value = term if value is None else value + term
    assert value is not None
    write = ir.Access(cols.name, (channel * k.taps + k.k_flat, *k.outs))
    iters = [*k.og_iters(), *cc_iters, *k.kernel_iters(), *k.out_iters()]
    return nest(iters, (ir.Stmt("S", write, value),)), cols


def _convolution(k: _Deform, cols: str) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """The grouped convolution of the columns into Y (through ``acc`` when grouped with
    several output channels per group, or float16)."""
    geo, w, b, y = k.geo, k.node.input(1), k.node.input(3), k.node.outputs[0]
    group, cg, mg = geo.group, geo.cg, geo.mg
    if group == 1:
        channel_iters = [("oc", geo.out_channels)]
        oc, acc_channel = var("oc"), (Aff.lift(0), var("oc"))
    else:
        channel_iters = [("g", group)] + ([("oc", mg)] if mg > 1 else [])
        oc = var("g") * mg + (var("oc") if mg > 1 else 0)
        acc_channel = (var("g"), var("oc") if mg > 1 else Aff.lift(0))
    ic_iters = [("ic", cg)] if cg > 1 else []
    ic_local = var("ic") if cg > 1 else Aff.lift(0)
    ic = (var("g") * cg if group > 1 else Aff.lift(0)) + ic_local
    temps = []
    direct = k.dtype == k.calc and not (group > 1 and mg > 1)
    if direct:
        out = ir.Access(y, (k.n, oc, *k.outs))
    else:
        acc = ir.Buffer(k.name("acc"), k.calc, (group, mg, *geo.out_spatial))
        temps.append(acc)
        out = ir.Access(acc.name, (*acc_channel, *k.outs))
    init = k.load(b, (oc,)) if b else k.f(0.0)
    product = k.load(w, (oc, ic_local, *k.ks)) * ir.Load(
        cols, (ic * k.taps + k.k_flat, *k.outs), k.calc
    )
    update = ir.Stmt("S", out, ir.Load(out.buffer, out.index, k.calc) + product)
    point_iters = [*channel_iters, *k.out_iters()]
    reduction = nest([*ic_iters, *k.kernel_iters()], (update,))
    nodes = nest(point_iters, (ir.Stmt("S", out, init), *reduction))
    if not direct:
        value = _cast(ir.Load(out.buffer, out.index, k.calc), k.dtype)
        store = ir.Stmt("S", ir.Access(y, (k.n, oc, *k.outs)), value)
        nodes = (*nodes, *nest(point_iters, (store,)))
    return nodes, temps


@register("DeformConv", since=19)
def lower_deform_conv(node: Node, ctx: LowerContext) -> Lowered:
    """DeformConv (opsets 19, 22; any spatial rank): see the module docstring."""
    k = _deform(node, ctx)
    geo = k.geo
    if 0 in (geo.n_batch, geo.out_channels, *geo.out_spatial):
        return Lowered(())
    if geo.channels == 0:
        raise ShapeError(f"node {node.name!r} (DeformConv): X {node.input(0)!r} has no channels")
    padded = tuple(s + 2 * _BORDER for s in geo.in_spatial)
    pad_buffer = ir.Buffer(k.name("pad"), k.calc, (geo.n_batch, geo.channels, *padded))
    pad = pad_input(
        ctx,
        node.input(0),
        pad_buffer.name,
        k.calc,
        geo.n_batch,
        geo.channels,
        geo.in_spatial,
        padded,
        (_BORDER,) * geo.rank,
        convert=None if k.dtype == k.calc else (lambda e: ir.Cast(e, k.calc)),
    )
    tables, table_buffers = _tables(k)
    columns, cols = _columns(k, pad_buffer.name)
    conv, acc = _convolution(k, cols.name)
    per_image = (*tables, *columns, *conv)
    if geo.n_batch > 1:
        per_image = (ir.Loop("n", 0, geo.n_batch, per_image),)
    return Lowered((*pad, *per_image), (pad_buffer, *table_buffers, cols, *acc))
