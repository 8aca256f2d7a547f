"""RoiAlign: each region of interest pooled to ``output_height x output_width`` bins, every bin
the average (or the max) of bilinear samples of the input.

As onnxruntime and the ONNX reference compute it: roi ``r`` reads image
``batch_indices[r]``; its corners are scaled by ``spatial_scale`` and shifted by half a pixel
(``coordinate_transformation_mode = half_pixel``, opset 16's default; opset 10 and
``output_half_pixel`` do not shift, and stretch a roi smaller than a pixel to one). A bin of
size ``bin_h x bin_w`` takes ``grid_h x grid_w`` samples, ``sampling_ratio`` per axis or, for 0,
``ceil(bin)``; the sample at ``y = start + ph * bin_h + (iy + 0.5) * bin_h / grid_h`` reads the
four pixels around ``max(y, 0)`` (the last row repeated at the bottom edge), and a sample
outside ``[-1, H] x [-1, W]`` reads 0. ``avg`` divides the sum by ``grid_h * grid_w``; ``max``
takes the largest of the four *weighted* pixels of each sample (the reference's definition,
not the max of the interpolated values).

The per-roi geometry goes to temps first (``geo``: start and bin size per axis, ``grid``: the
sample counts); the samples are then reduction loops ``t``, ``u`` into the output::

    for r: S: geo[r, 0..3] = ...;  S: grid[r, 0..1] = ...
    for r, c, ph, pw:
      S: Y[r, c, ph, pw] = 0 (avg) | missed ? 0 : -inf (max)
      for t, u:
        S: Y[r, c, ph, pw] = Y + (iy < grid_h and ix < grid_w ? sample(iy, ix) : 0)   (avg)
      S: Y[r, c, ph, pw] = Y / max(grid_h * grid_w, 1)                                (avg)

With a positive ``sampling_ratio`` the loops run ``iy = t`` over ``[0, sampling_ratio)``.
With ``sampling_ratio = 0`` the count, ``ceil(bin)``, depends on the rois, known only at run
time; but such samples are at least half a pixel apart (``bin / ceil(bin)``), so at most
``H + 3`` of a bin's fall inside the input: the loop runs over a window of ``H + 5``
samples, ``iy = start[r, ph] + t`` from (one before) the first sample inside, guarded by
``iy < grid_h``. Samples outside the window are outside the input: they add 0 to an average,
and for ``max`` a 0 candidate (``missed``) when there are any. (Exact for any roi, but the
window costs ``(H + 5) (W + 5)`` samples per bin where a fixed ratio costs its square.)
"""

from __future__ import annotations

from dataclasses import dataclass

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, nest, opset, require_float, str_attr, var
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"
_BIG = float(1 << 30)  # (a sample count or index past this is clamped before the int cast)
_R = var("r")


def _i(v: int) -> ir.Const:
    return ir.Const(v, I64)


def _clamp_int(x: ir.Expr, lo: float, hi: float) -> ir.Expr:
    """``x`` (float) clamped to ``[lo, hi]`` and cast to int64: in range whatever ``x`` is
    (NaN included: min and max take the other operand)."""
    return ir.Cast(ir.minimum(ir.maximum(x, ir.Const(lo, x.dtype)), ir.Const(hi, x.dtype)), I64)


def _or(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary("or", a, b)


@dataclass(frozen=True)
class _Rois:
    """One RoiAlign node's sizes, attributes and the loads of its per-roi temps."""

    name: str
    calc: str  # the arithmetic type: float64 for float64 input, else float32
    pooled: tuple[int, int]
    extent: tuple[int, int]  # H, W
    ratio: int
    scale: float
    half_pixel: bool

    def f(self, v: float) -> ir.Const:
        return ir.Const(float(v), self.calc)

    def real(self, e: ir.Expr) -> ir.Expr:
        return e if e.dtype == self.calc else ir.Cast(e, self.calc)

    @property
    def geo(self) -> str:
        return f"{self.name}__geo"

    @property
    def grid(self) -> str:
        return f"{self.name}__grid"

    def start(self, axis: int) -> ir.Load:
        """Where roi ``r`` starts along ``axis`` (0: rows, 1: columns)."""
        return ir.Load(self.geo, (_R, ir.Aff.lift(axis)), self.calc)

    def bin(self, axis: int) -> ir.Load:
        return ir.Load(self.geo, (_R, ir.Aff.lift(2 + axis)), self.calc)

    def count(self, axis: int) -> ir.Load:
        """The samples per bin of roi ``r`` along ``axis`` (may be <= 0 for an empty roi)."""
        return ir.Load(self.grid, (_R, ir.Aff.lift(axis)), I64)

    def windowed(self, axis: int) -> bool:
        """Whether the sample loop along ``axis`` is a window over a run-time count."""
        return self.ratio == 0

    def loop_size(self, axis: int) -> int:
        return self.extent[axis] + 5 if self.windowed(axis) else self.ratio

    def window(self, axis: int) -> ir.Load:
        p = ("ph", "pw")[axis]
        return ir.Load(f"{self.name}__window{'hw'[axis]}", (_R, var(p)), I64)


def _geometry(k: _Rois, rois: str, rois_dtype: str, n_rois: int) -> tuple[ir.Node, ...]:
    """Per roi: start and bin size per axis into ``geo``, sample counts into ``grid``."""
    offset = 0.5 if k.half_pixel else 0.0

    def corner(c: int) -> ir.Expr:
        return k.real(ir.Load(rois, (_R, ir.Aff.lift(c)), rois_dtype)) * k.f(k.scale) - k.f(offset)

    stmts: list[ir.Node] = []
    for axis, (lo, hi) in enumerate(((1, 3), (0, 2))):  # rois are [x1, y1, x2, y2]
        size = corner(hi) - corner(lo)
        if not k.half_pixel:  # (malformed rois are stretched to one pixel)
            size = ir.maximum(size, k.f(1.0))
        stmts += [
            ir.Stmt("S", ir.Access(k.geo, (_R, axis)), corner(lo)),
            ir.Stmt("S", ir.Access(k.geo, (_R, 2 + axis)), size / k.f(k.pooled[axis])),
        ]
    for axis in (0, 1):
        samples: ir.Expr = (
            _i(k.ratio) if k.ratio > 0 else _clamp_int(ir.unary("ceil", k.bin(axis)), -1.0, _BIG)
        )
        stmts.append(ir.Stmt("S", ir.Access(k.grid, (_R, axis)), samples))
    return nest([("r", n_rois)], stmts)


def _spacing(k: _Rois, axis: int) -> ir.Expr:
    return k.bin(axis) / k.real(ir.maximum(k.count(axis), _i(1)))


def _windows(k: _Rois, n_rois: int) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """The first sample of each windowed loop: one before the first inside ``[-1, extent]``."""
    nodes: list[ir.Node] = []
    temps = []
    for axis in (0, 1):
        if not k.windowed(axis):
            continue
        p = ("ph", "pw")[axis]
        win = ir.Buffer(f"{k.name}__window{'hw'[axis]}", I64, (n_rois, k.pooled[axis]))
        temps.append(win)
        bin_start = k.start(axis) + k.real(ir.Iter(p)) * k.bin(axis)
        first_inside = ir.unary("ceil", (k.f(-1.0) - bin_start) / _spacing(k, axis) - k.f(0.5))
        start = ir.maximum(_clamp_int(first_inside, -2.0, _BIG) - _i(1), _i(0))
        nodes += nest(
            [("r", n_rois), (p, k.pooled[axis])],
            (ir.Stmt("S", ir.Access(win.name, (_R, var(p))), start),),
        )
    return tuple(nodes), temps


@dataclass(frozen=True)
class _Tap:
    """Along one axis, a sample's two pixels, their weights, and whether it is valid (within
    the bin's count) and outside the input."""

    low: ir.Expr
    high: ir.Expr
    w_low: ir.Expr
    w_high: ir.Expr
    valid: ir.Expr
    outside: ir.Expr


def _tap(k: _Rois, axis: int) -> _Tap:
    """Sample ``t`` (rows) or ``u`` (columns) of bin ``ph`` / ``pw`` of roi ``r``, as the
    reference interpolates it."""
    extent, p, t = k.extent[axis], ("ph", "pw")[axis], ("t", "u")[axis]
    index: ir.Expr = ir.Iter(t)
    if k.windowed(axis):
        index = k.window(axis) + index
    samples = k.real(ir.maximum(k.count(axis), _i(1)))
    pos = (
        k.start(axis)
        + k.real(ir.Iter(p)) * k.bin(axis)
        + (k.real(index) + k.f(0.5)) * k.bin(axis) / samples
    )
    outside = _or(ir.Binary("lt", pos, k.f(-1.0)), ir.Binary("gt", pos, k.f(extent)))
    clipped = ir.maximum(pos, k.f(0.0))
    low = _clamp_int(clipped, 0.0, float(extent))
    edge = ir.Binary("ge", low, _i(extent - 1))  # the last row repeats past the edge
    frac = ir.Select(edge, k.f(extent - 1), clipped) - k.real(ir.Select(edge, _i(extent - 1), low))
    return _Tap(
        ir.Select(edge, _i(extent - 1), low),
        ir.Select(edge, _i(extent - 1), low + _i(1)),
        k.f(1.0) - frac,
        frac,
        ir.Binary("lt", index, k.count(axis)),
        outside,
    )


def _missed(k: _Rois) -> ir.Expr:
    """Whether a bin has samples outside its windows (all outside the input)."""
    missed: ir.Expr = ir.Const(False, "bool")
    for axis in (0, 1):
        if k.windowed(axis):
            start = k.window(axis)
            beyond = ir.Binary("lt", start + _i(k.loop_size(axis)), k.count(axis))
            missed = _or(missed, _or(ir.Binary("gt", start, _i(0)), beyond))
    return missed


def _attrs(node: Node, ctx: LowerContext, calc: str, extent: tuple[int, int]) -> tuple[_Rois, str]:
    """The node's attributes, checked, and its mode."""
    mode = str_attr(node, "mode", "avg")
    if mode not in ("avg", "max"):
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    default_ct = "half_pixel" if opset(ctx) >= 16 else "output_half_pixel"
    transform = str_attr(node, "coordinate_transformation_mode", default_ct)
    if transform not in ("half_pixel", "output_half_pixel"):
        raise bad_attr(node, "coordinate_transformation_mode", f"has unknown value {transform!r}")
    pooled = (int(node.attr("output_height", 1)), int(node.attr("output_width", 1)))
    if min(pooled) < 1:
        raise bad_attr(node, "output_height", f"and output_width must be positive, got {pooled}")
    ratio = int(node.attr("sampling_ratio", 0))
    if ratio < 0:
        raise bad_attr(node, "sampling_ratio", f"must be >= 0, got {ratio}")
    scale = float(node.attr("spatial_scale", 1.0))
    k = _Rois(node.name, calc, pooled, extent, ratio, scale, transform == "half_pixel")
    return k, mode


@register("RoiAlign", since=10)
def lower_roi_align(node: Node, ctx: LowerContext) -> Lowered:
    """RoiAlign (opsets 10, 16, 22): ``Y[r, c, ph, pw]`` (see the module docstring).

    Example: one roi ``[0, 0, 4, 4]`` over a 4x4 image with ``output_height = output_width
    = 2``, ``sampling_ratio = 2``, ``half_pixel``: bins of 2x2 pixels, each the mean of
    4 samples at ``-0.5 + 0.5, -0.5 + 1.5`` (rows and columns 0 and 1 for the first bin).
    """
    x, rois, indices, y = node.input(0), node.input(1), node.input(2), node.outputs[0]
    dtype = require_float(node, ctx, x)
    calc = "float64" if dtype == "float64" else "float32"
    xs, rs, ys = ctx.shape(x), ctx.shape(rois), ctx.shape(y)
    if len(xs) != 4 or len(rs) != 2 or rs[1] != 4 or ctx.shape(indices) != (rs[0],):
        raise ShapeError(
            f"node {node.name!r} (RoiAlign): X {x!r} {list(xs)}, rois {rois!r} {list(rs)} and "
            f"batch_indices {indices!r} {list(ctx.shape(indices))} must be [N, C, H, W], "
            "[num_rois, 4] and [num_rois]"
        )
    k, mode = _attrs(node, ctx, calc, (xs[2], xs[3]))
    n_rois = rs[0]
    if ys != (n_rois, xs[1], *k.pooled):
        raise ShapeError(
            f"node {node.name!r} (RoiAlign): output {y!r} {list(ys)} does not match "
            f"{[n_rois, xs[1], *k.pooled]}"
        )
    if 0 in ys:
        return Lowered(())
    if 0 in k.extent:
        raise ShapeError(f"node {node.name!r} (RoiAlign): X {x!r} {list(xs)} has no pixels")

    temps = [ir.Buffer(k.geo, calc, (n_rois, 4)), ir.Buffer(k.grid, I64, (n_rois, 2))]
    geometry = _geometry(k, rois, ctx.dtype(rois), n_rois)
    starts, windows = _windows(k, n_rois)
    temps += windows

    rows, cols = _tap(k, 0), _tap(k, 1)
    image: ir.Expr = ir.Load(indices, (_R,), ctx.dtype(indices))
    image = image if image.dtype == I64 else ir.Cast(image, I64)

    def pixel(row: ir.Expr, col: ir.Expr) -> ir.Expr:
        return k.real(ir.Load(x, (image, var("c"), row, col), dtype))

    weighted = (
        rows.w_low * cols.w_low * pixel(rows.low, cols.low),
        rows.w_low * cols.w_high * pixel(rows.low, cols.high),
        rows.w_high * cols.w_low * pixel(rows.high, cols.low),
        rows.w_high * cols.w_high * pixel(rows.high, cols.high),
    )
    valid = ir.Binary("and", rows.valid, cols.valid)
    outside = _or(rows.outside, cols.outside)
    some = ir.Binary("and", ir.Binary("ge", k.count(0), _i(1)), ir.Binary("ge", k.count(1), _i(1)))
    out_idx = (_R, var("c"), var("ph"), var("pw"))
    acc_buf = y if dtype == calc else f"{node.name}__acc"
    if acc_buf != y:  # (float16 output: accumulated in float32, rounded once)
        temps.append(ir.Buffer(acc_buf, calc, ys))
    acc_at, acc = ir.Access(acc_buf, out_idx), ir.Load(acc_buf, out_idx, calc)
    zero = k.f(0.0)
    if mode == "avg":
        value = ir.Select(outside, zero, weighted[0] + weighted[1] + weighted[2] + weighted[3])
        init: ir.Expr = zero
        update: ir.Expr = acc + ir.Select(valid, value, zero)
        final: ir.Expr = acc / k.real(ir.maximum(k.count(0) * k.count(1), _i(1)))
    else:
        # The largest weighted pixel; a sample outside the input weighs them all 0.
        best = ir.maximum(
            ir.maximum(ir.maximum(weighted[0], weighted[1]), weighted[2]), weighted[3]
        )
        init = ir.Select(_missed(k), zero, k.f(float("-inf")))
        update = ir.Select(valid, ir.maximum(acc, ir.Select(outside, zero, best)), acc)
        final = acc
    body: list[ir.Node] = [
        ir.Stmt("S", acc_at, init),
        *nest([("t", k.loop_size(0)), ("u", k.loop_size(1))], (ir.Stmt("S", acc_at, update),)),
        ir.Stmt("S", acc_at, ir.Select(some, final, zero)),  # (an empty roi's bins are 0)
    ]
    if acc_buf != y:
        body.append(ir.Stmt("S", ir.Access(y, out_idx), ir.Cast(acc, dtype)))
    pooling = nest([("r", n_rois), ("c", xs[1]), ("ph", k.pooled[0]), ("pw", k.pooled[1])], body)
    return Lowered((*geometry, *starts, *pooling), tuple(temps))
