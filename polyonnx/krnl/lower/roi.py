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
sample counts). With a positive ``sampling_ratio`` the samples are reduction loops ``t``,
``u`` over ``[0, sampling_ratio)`` into the output, as the reference takes them::

    for r: S: geo[r, 0..3] = ...;  S: grid[r, 0..1] = ...
    for r, c, ph, pw:
      S: Y[r, c, ph, pw] = 0 (avg) | -inf (max)
      for t, u: S: Y[r, c, ph, pw] = Y + sample(t, u)  (avg) | max(Y, sample(t, u))  (max)
      S: Y[r, c, ph, pw] = Y / (grid_h * grid_w)  (avg)

With ``sampling_ratio = 0`` the count, ``ceil(bin)``, depends on the rois, known only at run
time. But such samples are at least half a pixel apart (``bin / ceil(bin)``), so at most
``H + 3`` of a bin's fall inside the input: the loop runs over a window of ``H + 5`` samples,
``iy = start[r, ph] + t`` from (one before) the first sample inside, guarded by
``iy < grid_h``; samples outside the window are outside the input. A sample's weight is a
row weight times a column weight, both >= 0, so the bin is computed in two passes of one
window each (see :func:`_separable`) rather than over the window's square: per-sample tables
(pixels, weights, use) along each axis, then per roi ``T[c, ph, q]``, the weighted sum (max)
over the bin's row samples of column ``q``, then the output from ``T`` over the column
samples. For ``max`` a sample outside the input (one the window missed included) is the
candidate 0.
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
    """``x`` (float) clamped to ``[lo, hi]`` and cast to int64: in range for any number. A
    NaN stays NaN (``ir.maximum`` and ``ir.minimum`` propagate it): the index it gives is
    refused by the run-time index check, an InputError, as onnxruntime and the reference
    refuse NaN rois."""
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

    @property
    def adaptive(self) -> bool:
        """Whether the sample counts are the rois' (known at run time): the sample loops are
        windows, guarded by the counts."""
        return self.ratio == 0

    def loop_size(self, axis: int) -> int:
        return self.extent[axis] + 5 if self.adaptive else self.ratio

    def table(self, what: str, axis: int) -> str:
        """The name of a per-sample table along ``axis`` (see :func:`_tables`)."""
        return f"{self.name}__{what}{'hw'[axis]}"

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
        if not k.adaptive:
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
    if k.adaptive:
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


def _missed(k: _Rois, axis: int) -> ir.Expr:
    """Whether bin ``ph`` (``pw``) has samples outside its window along ``axis`` (all of them
    outside the input)."""
    if not k.adaptive:
        return ir.Const(False, "bool")
    start = k.window(axis)
    beyond = ir.Binary("lt", start + _i(k.loop_size(axis)), k.count(axis))
    return _or(ir.Binary("gt", start, _i(0)), beyond)


def _direct(
    k: _Rois, mode: str, x: str, dtype: str, image: ir.Expr, channels: int, n_rois: int, out: str
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """A fixed ``sampling_ratio``: each bin's samples as the reference takes them, the
    four weighted pixels of each summed (``avg``) or their largest kept (``max``)."""
    rows, cols = _tap(k, 0), _tap(k, 1)

    def pixel(row: ir.Expr, col: ir.Expr) -> ir.Expr:
        return k.real(ir.Load(x, (image, var("c"), row, col), dtype))

    weighted = (
        rows.w_low * cols.w_low * pixel(rows.low, cols.low),
        rows.w_low * cols.w_high * pixel(rows.low, cols.high),
        rows.w_high * cols.w_low * pixel(rows.high, cols.low),
        rows.w_high * cols.w_high * pixel(rows.high, cols.high),
    )
    outside = _or(rows.outside, cols.outside)
    out_idx = (_R, var("c"), var("ph"), var("pw"))
    acc_at, acc = ir.Access(out, out_idx), ir.Load(out, out_idx, k.calc)
    zero = k.f(0.0)
    if mode == "avg":
        init: ir.Expr = zero
        update: ir.Expr = acc + ir.Select(
            outside, zero, weighted[0] + weighted[1] + weighted[2] + weighted[3]
        )
        final: ir.Expr = acc / k.real(ir.maximum(k.count(0) * k.count(1), _i(1)))
    else:
        # The largest weighted pixel; a sample outside the input weighs them all 0.
        best = ir.maximum(
            ir.maximum(ir.maximum(weighted[0], weighted[1]), weighted[2]), weighted[3]
        )
        init = k.f(float("-inf"))
        update = ir.maximum(acc, ir.Select(outside, zero, best))
    body: list[ir.Node] = [
        ir.Stmt("S", acc_at, init),
        *nest([("t", k.ratio), ("u", k.ratio)], (ir.Stmt("S", acc_at, update),)),
    ]
    if mode == "avg":
        body.append(ir.Stmt("S", acc_at, final))
    pooling = nest([("r", n_rois), ("c", channels), ("ph", k.pooled[0]), ("pw", k.pooled[1])], body)
    return pooling, []


def _tables(k: _Rois, n_rois: int, axis: int) -> tuple[list[ir.Node], list[ir.Buffer]]:
    """Per roi, bin and sample along ``axis``: the two pixels (``lo``, ``hi``), their weights
    (``wlo``, ``whi``: 0 unless the sample is ``used``: within the bin's count and, along this
    axis, inside the input); per roi and bin, whether some sample is outside (``out``: a
    valid one along this axis, or one the window missed)."""
    p, t = ("ph", "pw")[axis], ("t", "u")[axis]
    tap = _tap(k, axis)
    used = ir.Binary("and", tap.valid, ir.Unary("not", tap.outside))
    at = (_R, var(p), var(t))
    shape = (n_rois, k.pooled[axis], k.loop_size(axis))
    zero = k.f(0.0)
    columns = (
        ("lo", I64, tap.low),
        ("hi", I64, tap.high),
        ("wlo", k.calc, ir.Select(used, tap.w_low, zero)),
        ("whi", k.calc, ir.Select(used, tap.w_high, zero)),
        ("used", I64, ir.Select(used, _i(1), _i(0))),
    )
    temps = [ir.Buffer(k.table(what, axis), dt, shape) for what, dt, _ in columns]
    out = ir.Buffer(k.table("out", axis), I64, shape[:2])
    out_at, out_ld = ir.Access(out.name, at[:2]), ir.Load(out.name, at[:2], I64)
    missed = _missed(k, axis)
    invalid_outside = ir.Binary("and", tap.valid, tap.outside)
    nodes = nest(
        [("r", n_rois), (p, k.pooled[axis])],
        (
            ir.Stmt("S", out_at, ir.Select(missed, _i(1), _i(0))),
            *nest(
                [(t, k.loop_size(axis))],
                (
                    *(ir.Stmt("S", ir.Access(k.table(w, axis), at), v) for w, _, v in columns),
                    ir.Stmt("S", out_at, ir.Select(invalid_outside, _i(1), out_ld)),
                ),
            ),
        ),
    )
    return list(nodes), [*temps, out]


def _separable(
    k: _Rois, mode: str, x: str, dtype: str, image: ir.Expr, channels: int, n_rois: int, out: str
) -> tuple[tuple[ir.Node, ...], list[ir.Buffer]]:
    """Adaptive sampling in two passes. A sample's weight is a product of a row and a column
    weight, both >= 0, so a bin's sum (or max) is ``sum_u wx(u) * T[c, ph, x(u)]`` over
    ``T[c, ph, q] = sum_t wy(t) * X[.., y(t), q]`` (or with max for the sums: scaling by
    ``wx >= 0`` keeps the order). Each pass loops over one axis's window, not over both at
    once. ``T`` holds one roi's (the roi loop is sequential around both passes); for ``max``
    a sample outside the input is the candidate 0, known from the ``out`` tables."""
    nodes: list[ir.Node] = []
    temps: list[ir.Buffer] = []
    for axis in (0, 1):
        more_nodes, more_temps = _tables(k, n_rois, axis)
        nodes += more_nodes
        temps += more_temps
    rows = ir.Buffer(f"{k.name}__rows", k.calc, (channels, k.pooled[0], k.extent[1]))
    temps.append(rows)
    c, ph, pw, q = var("c"), var("ph"), var("pw"), var("q")
    t_at, t_ld = ir.Access(rows.name, (c, ph, q)), ir.Load(rows.name, (c, ph, q), k.calc)
    y_at = (_R, var("ph"), var("t"))
    x_at = (_R, var("pw"), var("u"))

    def tab(what: str, axis: int) -> ir.Load:
        dt = k.calc if what.startswith("w") else I64
        return ir.Load(k.table(what, axis), y_at if axis == 0 else x_at, dt)

    def pixel(row: ir.Expr) -> ir.Expr:
        return k.real(ir.Load(x, (image, c, row, q), dtype))

    def row_value(col: ir.Expr) -> ir.Load:
        return ir.Load(rows.name, (c, ph, col), k.calc)

    used_y = ir.Binary("ne", tab("used", 0), _i(0))
    used_x = ir.Binary("ne", tab("used", 1), _i(0))
    lo_y, hi_y = tab("wlo", 0) * pixel(tab("lo", 0)), tab("whi", 0) * pixel(tab("hi", 0))
    zero, lowest = k.f(0.0), k.f(float("-inf"))
    out_idx = (_R, c, ph, pw)
    acc_at, acc = ir.Access(out, out_idx), ir.Load(out, out_idx, k.calc)
    some = ir.Binary("and", ir.Binary("ge", k.count(0), _i(1)), ir.Binary("ge", k.count(1), _i(1)))
    if mode == "avg":
        t_init: ir.Expr = zero
        t_update: ir.Expr = t_ld + (lo_y + hi_y)
        init: ir.Expr = zero
        terms = tab("wlo", 1) * row_value(tab("lo", 1)) + tab("whi", 1) * row_value(tab("hi", 1))
        update: ir.Expr = acc + terms
        final: ir.Expr = acc / k.real(ir.maximum(k.count(0) * k.count(1), _i(1)))
    else:
        t_init = lowest
        t_update = ir.Select(used_y, ir.maximum(t_ld, ir.maximum(lo_y, hi_y)), t_ld)

        def candidate(w: str, col: str) -> ir.Expr:
            # (-inf: no sample of the bin's rows is used; 0 * -inf would be NaN)
            m = row_value(tab(col, 1))
            return ir.Select(ir.Binary("eq", m, lowest), lowest, tab(w, 1) * m)

        some_out = ir.Binary(
            "or",
            ir.Binary("ne", ir.Load(k.table("out", 0), (_R, ph), I64), _i(0)),
            ir.Binary("ne", ir.Load(k.table("out", 1), (_R, pw), I64), _i(0)),
        )
        init = ir.Select(some_out, zero, lowest)
        best = ir.maximum(candidate("wlo", "lo"), candidate("whi", "hi"))
        update = ir.Select(used_x, ir.maximum(acc, best), acc)
        final = acc
    first = nest(
        [("c", channels), ("ph", k.pooled[0]), ("q", k.extent[1])],
        (
            ir.Stmt("S", t_at, t_init),
            *nest([("t", k.loop_size(0))], (ir.Stmt("S", t_at, t_update),)),
        ),
    )
    second = nest(
        [("c", channels), ("ph", k.pooled[0]), ("pw", k.pooled[1])],
        (
            ir.Stmt("S", acc_at, init),
            *nest([("u", k.loop_size(1))], (ir.Stmt("S", acc_at, update),)),
            ir.Stmt("S", acc_at, ir.Select(some, final, zero)),
        ),
    )
    return (*nodes, ir.Loop("r", 0, n_rois, (*first, *second))), temps


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
    image: ir.Expr = ir.Load(indices, (_R,), ctx.dtype(indices))
    image = image if image.dtype == I64 else ir.Cast(image, I64)
    acc = y if dtype == calc else f"{node.name}__acc"
    if acc != y:  # (float16 output: accumulated in float32, rounded once)
        temps.append(ir.Buffer(acc, calc, ys))
    pooling, more = (_separable if k.ratio == 0 else _direct)(
        k, mode, x, dtype, image, xs[1], n_rois, acc
    )
    temps += more
    if acc != y:
        out_idx = (_R, var("c"), var("ph"), var("pw"))
        pooling += nest(
            [("r", n_rois), ("c", xs[1]), ("ph", k.pooled[0]), ("pw", k.pooled[1])],
            (ir.Stmt("S", ir.Access(y, out_idx), ir.Cast(ir.Load(acc, out_idx, calc), dtype)),),
        )
    return Lowered((*geometry, *starts, *pooling), tuple(temps))
