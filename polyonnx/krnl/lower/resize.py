"""Resize (and the deprecated Upsample): separable interpolation through per-axis tap tables.

Resize is separable: along each resized axis, output position ``o`` reads a few input
positions (1 for nearest, 2 for linear, 4 for cubic, more with antialias) with fixed weights.
Those positions and weights depend only on shapes, scales and attributes, so they are computed
at compile time into constant tables ``<node>__idx<k>[O, taps]`` (int64) and
``<node>__w<k>[O, taps]``; the kernel gathers through the tables (run-time computed indices,
range-checked) and sums the weighted taps::

    for n, c, oh, ow:
      S: Y[n, c, oh, ow] = 0.0
      for t2, t3:
        S: Y[n, c, oh, ow] += w2[oh, t2] * w3[ow, t3] * X[n, c, idx2[oh, t2], idx3[ow, t3]]

Axes that are not resized read ``X`` through an affine index. Nearest resizes copy (one tap, no
weights). ``tf_crop_and_resize`` positions outside the input get ``extrapolation_value`` from a
boolean table per axis. The tables follow the ONNX reference implementation exactly
(coordinate transformation, tie breaking, edge clamping, ``exclude_outside``, antialias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    nest,
    opset,
    str_attr,
    unsupported,
    var,
)
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
    "tf_half_pixel_for_nn",  # (opset 11 only; tf2onnx's half_pixel_centers nearest resize)
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _coeffs(
    mode: str, nearest_mode: str, a: float, antialias: bool, ratio: float, scale: float
) -> np.ndarray:
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        pick = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }[nearest_mode]
        return np.array([0.0, 1.0]) if pick else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    # cubic
    if not antialias:
        r1 = 1 - ratio
        return np.array(
            [
                ((a * (ratio + 1) - 5 * a) * (ratio + 1) + 8 * a) * (ratio + 1) - 4 * a,
                ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                ((a + 2) * r1 - (a + 3)) * r1 * r1 + 1,
                ((a * (r1 + 1) - 5 * a) * (r1 + 1) + 8 * a) * (r1 + 1) - 4 * a,
            ]
        )
    s = min(scale, 1.0)

    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    i_start = int(np.floor(-2 / s) + 1)
    c = np.array([kernel(s * (i - ratio)) for i in range(i_start, 2 - i_start)])
    return c / c.sum()


def axis_table(
    *,
    mode: str,
    ctm: str,
    nearest_mode: str,
    cubic_a: float,
    antialias: bool,
    exclude_outside: bool,
    in_w: int,
    out_w: int,
    scale: float,
    roi: tuple[float, float] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Tap indices ``[out_w, n]``, weights ``[out_w, n]`` and the extrapolated positions.

    Input positions are computed as onnxruntime computes them: in float32, in its order of
    operations, with the integer output length ``out_w`` where the spec says length_resized
    (onnx.reference uses ``scale * in_w`` there and float64; the two disagree on a tap when a
    position lands on an integer, or when ``scale * in_w`` is not one)."""
    f32 = np.float32
    y = np.arange(out_w, dtype=f32)
    s, length, resized = f32(scale), f32(in_w), f32(out_w)
    half, one = f32(0.5), f32(1.0)
    extrapolated = None
    if ctm == "align_corners":
        x = np.zeros(out_w, f32) if out_w == 1 else y * (length - one) / (resized - one)
    elif ctm == "asymmetric":
        x = y / s
    elif ctm == "tf_half_pixel_for_nn":
        x = (y + half) / s
    elif ctm == "tf_crop_and_resize":
        assert roi is not None
        start, end = f32(roi[0]), f32(roi[1])
        if out_w == 1:
            x = np.full(out_w, half * (start + end) * (length - one), f32)
        else:
            x = start * (length - one) + y * (end - start) * (length - one) / (resized - one)
        extrapolated = (x < 0) | (x > in_w - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.zeros(out_w, f32) if out_w == 1 else (y + half) / s - half
    elif ctm == "half_pixel":
        x = (y + half) / s - half
    else:  # half_pixel_symmetric
        offset = length / f32(2) * (one - resized / (s * length))
        x = offset + (y + half) / s - half
    x = x.astype(np.float64)
    x_int = np.floor(x).astype(np.int64)
    ratios = np.where(x == x_int, 1.0, x - x_int)
    coeffs = (
        np.stack([_coeffs(mode, nearest_mode, cubic_a, antialias, float(r), scale) for r in ratios])
        if out_w
        else np.zeros((0, 2))
    )
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        offset_from_p = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset_from_p = np.where(frac <= 0.5, base, base + 1)
    idx = (p + offset_from_p)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_w), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, in_w - 1)
    if mode == "nearest":  # one weight is 1, the other 0: keep the chosen tap only
        pick = np.argmax(coeffs, axis=1)
        idx = idx[np.arange(out_w), pick][:, None]
        coeffs = np.ones((out_w, 1))
    if extrapolated is not None and not extrapolated.any():
        extrapolated = None
    return idx.astype(np.int64), coeffs, extrapolated


def _floats(ctx: LowerContext, node: Node, name: str) -> np.ndarray | None:
    if not name:
        return None
    value = ctx.constant(name)
    if value is None:
        raise unsupported(
            node,
            ctx,
            f"input {name!r} computed at run time (scales, sizes and roi must be constants)",
        )
    arr = np.asarray(value).reshape(-1)
    return arr if arr.size else None


@dataclass(frozen=True, slots=True)
class _Interpolation:
    """What a Resize's attributes and constant inputs ask for: how each output position maps
    to input positions (``ctm``), how taps are weighted (``mode``), and the per-axis ``scale``
    and region of interest (``roi``: the begins of every axis, then the ends)."""

    mode: str
    ctm: str
    nearest_mode: str
    antialias: bool
    exclude_outside: bool
    cubic_a: float
    extrapolation: float
    scale: tuple[float, ...]
    roi: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class _Tables:
    """The constant tap tables of the resized axes and how the kernel reads them."""

    index: tuple[ir.Index, ...]
    """The input index read: affine on axes kept, a table load on resized ones."""
    weights: tuple[ir.Expr, ...]
    taps: tuple[tuple[str, int], ...]
    """The tap loops (one per axis with more than one tap)."""
    extrapolated: tuple[ir.Expr, ...]
    constants: tuple[tuple[str, np.ndarray], ...]


AxisTable = tuple[np.ndarray, np.ndarray, np.ndarray | None]
"""An axis's tap indices, weights and extrapolated positions (:func:`axis_table`)."""


@register("Resize")
@register("Upsample")
def lower_resize(node: Node, ctx: LowerContext) -> Lowered:
    """Resize: nearest / linear / cubic over any axes, scales or sizes given as constants."""
    x, y = node.input(0), node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    dtype = ctx.dtype(x)
    how = _interpolation(node, ctx, xs, ys)
    out_names = [f"o{d}" for d in range(len(xs))]
    wdtype = dtype if dtype in ir.FLOAT_DTYPES else "float32"
    resized = _resized_axes(node, how, xs, ys)
    tables = _tables(node, how, resized, out_names, wdtype)
    out_index = tuple(var(n) for n in out_names)
    tap = ir.Load(x, tables.index, dtype)
    iters = list(zip(out_names, ys, strict=True))
    if any(s == 0 for s in ys):
        return Lowered((), (), tables.constants)
    if (
        dtype == wdtype
        and (passes := _axis_passes(node, how.mode, resized, xs, ys, dtype)) is not None
    ):
        return passes
    if not tables.weights:
        value: ir.Expr = tap
        for e in tables.extrapolated:
            value = ir.Select(e, ir.Const(_typed(how.extrapolation, dtype), dtype), value)
        return Lowered(
            nest(iters, (ir.Stmt("S", ir.Access(y, out_index), value),)), (), tables.constants
        )
    # Weighted sum of the taps, accumulated in the output (or a float temp for integers).
    acc_name = y if dtype == wdtype else f"{node.name}__acc"
    temps = () if acc_name == y else (ir.Buffer(acc_name, wdtype, tuple(ys)),)
    acc = ir.Access(acc_name, out_index)
    acc_load = ir.Load(acc_name, out_index, wdtype)
    product: ir.Expr = tap if dtype == wdtype else ir.Cast(tap, wdtype)
    for w_load in tables.weights:
        product = w_load * product
    body: list[ir.Node] = [
        ir.Stmt("S", acc, ir.Const(0.0, wdtype)),
        *nest(list(tables.taps), (ir.Stmt("S", acc, acc_load + product),)),
    ]
    final: ir.Expr = acc_load
    for e in tables.extrapolated:
        final = ir.Select(e, ir.Const(how.extrapolation, wdtype), final)
    if dtype != wdtype:
        info = np.iinfo(dtype) if dtype != "bool" else None
        rounded: ir.Expr = ir.unary("round", final)
        if info is not None:
            rounded = ir.minimum(ir.maximum(rounded, float(info.min)), float(info.max))
        body.append(ir.Stmt("S", ir.Access(y, out_index), ir.Cast(rounded, dtype)))
    elif tables.extrapolated:
        body.append(ir.Stmt("S", acc, final))
    return Lowered(nest(iters, body), temps, tables.constants)


def _interpolation(
    node: Node, ctx: LowerContext, xs: tuple[int, ...], ys: tuple[int, ...]
) -> _Interpolation:
    """The node's interpolation, its attributes and constant inputs checked, and its output
    shape checked against its scales or sizes."""
    rank = len(xs)
    mode = str_attr(node, "mode", "nearest")
    if mode not in ("nearest", "linear", "cubic", "bilinear", "trilinear"):
        raise bad_attr(node, "mode", f"has unknown value {mode!r}")
    mode = "linear" if mode in ("bilinear", "trilinear") else mode
    if node.op_type == "Upsample" or opset(ctx) < 11:
        # Upsample and Resize-10: asymmetric coordinates, nearest rounds down.
        ctm, nearest_mode = "asymmetric", "floor"
        scales = (
            np.asarray(node.attr("scales"))
            if node.has_attr("scales")
            else _floats(ctx, node, node.input(1))
        )
        roi_v = sizes = None
        axes = list(range(rank))
    else:
        ctm = str_attr(node, "coordinate_transformation_mode", "half_pixel")
        nearest_mode = str_attr(node, "nearest_mode", "round_prefer_floor")
        roi_v = _floats(ctx, node, node.input(1))
        scales = _floats(ctx, node, node.input(2))
        sizes = _floats(ctx, node, node.input(3))
        axes = [int(a) % rank for a in node.attr("axes", range(rank))]
    if ctm not in COORDINATE_MODES:
        raise bad_attr(node, "coordinate_transformation_mode", f"has unknown value {ctm!r}")
    if nearest_mode not in NEAREST_MODES:
        raise bad_attr(node, "nearest_mode", f"has unknown value {nearest_mode!r}")
    antialias = bool(node.attr("antialias", 0)) and mode != "nearest"
    exclude_outside = bool(node.attr("exclude_outside", 0))
    cubic_a = float(node.attr("cubic_coeff_a", -0.75))
    extrapolation = float(node.attr("extrapolation_value", 0.0))
    policy = str_attr(node, "keep_aspect_ratio_policy", "stretch")
    scale = _scales(node, xs, axes, scales, sizes, policy)
    roi = [0.0] * rank + [1.0] * rank
    if roi_v is not None and ctm == "tf_crop_and_resize":
        for k, a in enumerate(axes):
            roi[a], roi[rank + a] = float(roi_v[k]), float(roi_v[len(axes) + k])
    _check_output_shape(node, xs, ys, axes, scale, sizes, policy)
    return _Interpolation(
        mode,
        ctm,
        nearest_mode,
        antialias,
        exclude_outside,
        cubic_a,
        extrapolation,
        tuple(scale),
        tuple(roi),
    )


def _scales(
    node: Node,
    xs: tuple[int, ...],
    axes: list[int],
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    policy: str,
) -> list[float]:
    """The scale of every axis, from ``sizes`` (with the aspect-ratio ``policy``) or
    ``scales``."""
    rank = len(xs)
    scale = [1.0] * rank
    if sizes is not None:
        out = list(xs)
        for k, a in enumerate(axes):
            out[a] = int(sizes[k])
        scale = [out[d] / xs[d] if xs[d] else 1.0 for d in range(rank)]
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            common = pick(scale[a] for a in axes)
            scale = [common if d in axes else 1.0 for d in range(rank)]
        elif policy != "stretch":
            raise bad_attr(node, "keep_aspect_ratio_policy", f"has unknown value {policy!r}")
    elif scales is not None:
        for k, a in enumerate(axes):
            scale[a] = float(scales[k])
    else:
        raise bad_attr(node, "scales", "or sizes must be given")
    return scale


def _check_output_shape(
    node: Node,
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    axes: list[int],
    scale: list[float],
    sizes: np.ndarray | None,
    policy: str,
) -> None:
    rank = len(xs)
    if sizes is not None and policy == "stretch":
        expected = [int(sizes[axes.index(d)]) if d in axes else xs[d] for d in range(rank)]
    elif sizes is not None:
        expected = [int(scale[d] * xs[d] + 0.5) if d in axes else xs[d] for d in range(rank)]
    else:
        expected = [int(scale[d] * xs[d]) for d in range(rank)]
    if tuple(expected) != tuple(ys):
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): output shape {tuple(ys)} does "
            f"not match the scales / sizes (expected {tuple(expected)})"
        )


def _tables(
    node: Node,
    how: _Interpolation,
    resized: dict[int, AxisTable],
    out_names: list[str],
    wdtype: str,
) -> _Tables:
    """The tap tables of the ``resized`` axes as constants named after the node, and the
    loads that read them."""
    index: list[ir.Index] = []
    weights: list[ir.Expr] = []
    tap_iters: list[tuple[str, int]] = []
    ext: list[ir.Expr] = []
    constants: list[tuple[str, np.ndarray]] = []
    for d, name in enumerate(out_names):
        o = var(name)
        if d not in resized:
            index.append(o)
            continue
        idx, w, extrapolated = resized[d]
        taps = idx.shape[1]
        t = var(f"t{d}") if taps > 1 else Aff.lift(0)
        if taps > 1:
            tap_iters.append((f"t{d}", taps))
        idx_name = f"{node.name}__idx{d}"
        constants.append((idx_name, idx))
        index.append(ir.Load(idx_name, (o, t), "int64"))
        if how.mode != "nearest":
            w_name = f"{node.name}__w{d}"
            constants.append((w_name, w.astype(wdtype)))
            weights.append(ir.Load(w_name, (o, t), wdtype))
        if extrapolated is not None:
            e_name = f"{node.name}__ext{d}"
            constants.append((e_name, extrapolated.astype(bool)))
            ext.append(ir.Load(e_name, (o,), "bool"))
    return _Tables(tuple(index), tuple(weights), tuple(tap_iters), tuple(ext), tuple(constants))


def _resized_axes(
    node: Node, how: _Interpolation, xs: tuple[int, ...], ys: tuple[int, ...]
) -> dict[int, AxisTable]:
    """:func:`axis_table` of each resized axis (an axis kept as it is has none)."""
    rank = len(xs)
    out: dict[int, AxisTable] = {}
    for d in range(rank):
        if (
            math.isclose(how.scale[d], 1.0)
            and ys[d] == xs[d]
            and math.isclose(how.roi[d], 0.0)
            and math.isclose(how.roi[rank + d], 1.0)
        ):
            continue
        if how.scale[d] <= 0:
            raise bad_attr(node, "scales", f"must be positive, got {how.scale[d]}")
        out[d] = axis_table(
            mode=how.mode,
            ctm=how.ctm,
            nearest_mode=how.nearest_mode,
            cubic_a=how.cubic_a,
            antialias=how.antialias,
            exclude_outside=how.exclude_outside,
            in_w=xs[d],
            out_w=ys[d],
            scale=how.scale[d],
            roi=(how.roi[d], how.roi[rank + d]),
        )
    return out


#: Taps per output position up to which an axis's pass sums them in one expression.
MAX_PASS_TAPS = 8


def _axis_passes(
    node: Node,
    mode: str,
    resized: dict[int, AxisTable],
    xs: tuple[int, ...],
    ys: tuple[int, ...],
    dtype: str,
) -> Lowered | None:
    """The interpolation as one pass per resized axis, innermost axis first, through float
    temps; None when it is not worth it (fewer than two axes interpolate) or does not apply
    (extrapolated positions, many antialias taps).

    Each pass sums its few taps in one expression, so every output element is written once;
    the last pass, over an outer axis, reads whole rows of the previous one (unit stride, no
    gather) and writes the large output, while the gathers along the inner axis ran on the
    smaller intermediate: a 16x bilinear upsampling (DeepLabV3's 21x14x14 -> 21x224x224)
    gathers on 66K elements instead of 1M."""
    interpolated = [d for d, (idx, _, _) in resized.items() if idx.shape[1] > 1]
    if mode == "nearest" or len(interpolated) < 2:
        return None
    if any(e is not None or idx.shape[1] > MAX_PASS_TAPS for idx, _, e in resized.values()):
        return None
    names = [f"o{d}" for d in range(len(xs))]
    out_index = tuple(var(n) for n in names)
    shape, source = list(xs), node.input(0)
    nests: list[ir.Node] = []
    temps: list[ir.Buffer] = []
    constants: list[tuple[str, np.ndarray]] = []
    order = sorted(resized, reverse=True)
    for k, d in enumerate(order):
        idx, w, _ = resized[d]
        shape[d] = ys[d]
        target = node.outputs[0] if k == len(order) - 1 else f"{node.name}__pass{k}"
        if target != node.outputs[0]:
            temps.append(ir.Buffer(target, dtype, tuple(shape)))
        idx_name, w_name = f"{node.name}__idx{d}", f"{node.name}__w{d}"
        constants += [(idx_name, idx), (w_name, w.astype(dtype))]
        value: ir.Expr | None = None
        for t in range(idx.shape[1]):
            at = (var(names[d]), Aff.lift(t))
            read = tuple(
                ir.Load(idx_name, at, "int64") if i == d else v for i, v in enumerate(out_index)
            )
            term = ir.Load(w_name, at, dtype) * ir.Load(source, read, dtype)
            value = term if value is None else value + term
        assert value is not None
        nests += nest(
            list(zip(names, shape, strict=True)),
            (ir.Stmt("S", ir.Access(target, out_index), value),),
        )
        source = target
    return Lowered(tuple(nests), tuple(temps), tuple(constants))


def _typed(value: float, dtype: str) -> float | int | bool:
    if dtype in ir.FLOAT_DTYPES:
        return float(value)
    if dtype == "bool":
        return bool(value)
    return int(value)
