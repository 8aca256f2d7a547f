"""DFT and STFT: the discrete Fourier transform along one axis (of each frame), as a direct sum;
MelWeightMatrix, the filters that map its bins to mel bands (see its lowering).

Signals are real (last axis 1) or complex (last axis 2: real, imaginary). Output bin ``k`` of
a transform of length ``N`` sums input samples ``j`` (those that exist: the input is cut or
zero-padded to ``N``) times ``e^(∓2πi·kj/N)``; the inverse divides by ``N``; ``onesided``
keeps bins ``0..N/2`` forward, and inverse reads only those (the rest are their conjugates:
NumPy's ``irfft``, each bin but the first and the middle one counted twice, imaginary parts
of those two dropped). The angle is reduced exactly in integers (``kj mod N``) and its cosine
and sine read from a table of the ``N`` twiddle factors made at compile time; the sum is taken
in float64, as the reference (``numpy.fft``) computes it::

    for o0, k, o2, c:
      S: acc[o0, k, o2, c] = 0.0
      for j:
        S: acc[..] = acc[..] + select(c == 0, xr cos θ + xi sin θ, xi cos θ - xr sin θ)
      S: Y[o0, k, o2, c] = float32(acc[..])

``O(N²)`` work per transform: no FFT.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import nest, normalize_axis, require_float, unsupported, var
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

F64 = "float64"
I64 = "int64"


def _scalar_input(node: Node, ctx: LowerContext, k: int) -> int | None:
    """The compile-time value of optional scalar input ``k``, None when absent."""
    name = node.input(k) if len(node.inputs) > k else ""
    if not name:
        return None
    value = ctx.constant(name)
    if value is None:
        raise unsupported(node, ctx, f"input {name!r} known only at run time")
    return int(np.asarray(value).reshape(-1)[0])


@register("DFT", since=17)
def lower_dft(node: Node, ctx: LowerContext) -> Lowered:
    """DFT (forward, inverse, one-sided): see the module docstring."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs, ys = ctx.shape(x), ctx.shape(y)
    rank = len(xs)
    axis_value = _scalar_input(node, ctx, 2) if ctx.graph.opset >= 20 else None
    if axis_value is None:
        axis_value = int(node.attr("axis", -2 if ctx.graph.opset >= 20 else 1))
    axis = normalize_axis(node, axis_value, rank)
    if axis == rank - 1 or xs[-1] not in (1, 2):
        raise unsupported(node, ctx, f"axis {axis} of an input of shape {list(xs)}")
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    length = _scalar_input(node, ctx, 1)
    if length is None:
        length = 2 * (xs[axis] - 1) if inverse and onesided else xs[axis]
    if length <= 0:
        raise unsupported(node, ctx, f"dft_length {length}")
    complex_in = xs[-1] == 2
    names = [f"o{d}" for d in range(rank)]
    k = ir.Iter(names[axis])
    # Forward: every sample; inverse one-sided: the bins 0..N/2 that exist.
    taps = min(xs[axis], length // 2 + 1 if inverse and onesided else length)

    def sample(part: int) -> ir.Expr:
        index = [var(n) for n in names]
        index[axis], index[-1] = var("j"), ir.Aff.lift(part)
        v: ir.Expr = ir.Load(x, tuple(index), dtype)
        return v if dtype == F64 else ir.Cast(v, F64)

    xr = sample(0)
    xi = sample(1) if complex_in else ir.Const(0.0, F64)
    j = ir.Iter("j")
    turn = ir.Binary("mod", k * j, ir.Const(length, I64))
    # The N twiddle factors are a compile-time table, read at the exactly reduced angle.
    angles = 2 * np.pi * np.arange(length) / length
    table = f"{node.name}__twiddle"
    cos = ir.Load(table, (turn, ir.Aff.lift(0)), F64)
    sin = ir.Load(table, (turn, ir.Aff.lift(1)), F64)
    sign = 1.0 if inverse else -1.0  # e^(sign·iθ)
    real = xr * cos - xi * sin * ir.Const(sign, F64)
    imag = xi * cos + xr * sin * ir.Const(sign, F64)
    term: ir.Expr = ir.Select(ir.Binary("eq", ir.Iter(names[-1]), ir.Const(0, I64)), real, imag)
    if inverse and onesided:
        # Bins other than 0 and N/2 stand for their conjugate pair too.
        single = ir.Binary(
            "or",
            ir.Binary("eq", j, ir.Const(0, I64)),
            ir.Binary("eq", j * ir.Const(2, I64), ir.Const(length, I64)),
        )
        term = real * ir.Select(single, ir.Const(1.0, F64), ir.Const(2.0, F64))
    if inverse:
        term = term * ir.Const(1.0 / length, F64)

    return _summed(node, y, dtype, names, ys, taps, term, table, angles)


@register("STFT", since=17)
def lower_stft(node: Node, ctx: LowerContext) -> Lowered:
    """STFT: a DFT of each frame of the signal times the window, as a direct sum per bin::

      for b, f, k, c:
        S: acc[b, f, k, c] = 0.0
        for j < frame_length:
          S: acc[..] = acc[..] + w[j] * (x[b, f * step + j] e^(-2πi·kj/L))[c]
        S: Y[b, f, k, c] = float32(acc[..])

    The frame index ``f * step + j`` is affine: ``frame_step`` must be a constant. The
    window may be an input known only at run time (it is read like the signal)."""
    x, y = node.input(0), node.outputs[0]
    dtype = require_float(node, ctx, x)
    xs, ys = ctx.shape(x), ctx.shape(y)
    # (onnxruntime also takes a real signal without its last axis, [batch, length])
    if not (len(xs) == 3 and xs[-1] in (1, 2) or len(xs) == 2):
        raise unsupported(node, ctx, f"a signal of shape {list(xs)} (want [batch, length, 1|2])")
    step = _scalar_input(node, ctx, 1)
    if step is None or step <= 0:
        raise unsupported(node, ctx, f"frame_step {step}")
    window = node.input(2) if len(node.inputs) > 2 else ""
    length = ctx.shape(window)[0] if window else _scalar_input(node, ctx, 3)
    if length is None or not 0 < length <= xs[1]:
        raise unsupported(node, ctx, f"frame_length {length} for a signal of length {xs[1]}")
    k, c, j = ir.Iter("k"), ir.Iter("c"), ir.Iter("j")

    def f64(v: ir.Load) -> ir.Expr:
        return v if v.dtype == F64 else ir.Cast(v, F64)

    def sample(part: int) -> ir.Expr:
        at = (var("b"), var("f") * step + var("j"), *((ir.Aff.lift(part),) if len(xs) == 3 else ()))
        v = f64(ir.Load(x, at, dtype))
        return v * f64(ir.Load(window, (var("j"),), ctx.dtype(window))) if window else v

    xr = sample(0)
    xi = sample(1) if len(xs) == 3 and xs[-1] == 2 else ir.Const(0.0, F64)
    turn = ir.Binary("mod", k * j, ir.Const(length, I64))
    angles = 2 * np.pi * np.arange(length) / length
    table = f"{node.name}__twiddle"
    cos = ir.Load(table, (turn, ir.Aff.lift(0)), F64)
    sin = ir.Load(table, (turn, ir.Aff.lift(1)), F64)
    real = xr * cos + xi * sin  # e^(-iθ)
    imag = xi * cos - xr * sin
    term = ir.Select(ir.Binary("eq", c, ir.Const(0, I64)), real, imag)
    return _summed(node, y, dtype, ("b", "f", "k", "c"), ys, length, term, table, angles)


def _summed(
    node: Node,
    y: str,
    dtype: str,
    names: Sequence[str],
    ys: Sequence[int],
    taps: int,
    term: ir.Expr,
    table: str,
    angles: np.ndarray,
) -> Lowered:
    """``y[names] = sum over j < taps of term``, summed in float64 in a temp and written as
    ``dtype``; ``table`` holds the cosine and sine of ``angles`` (the twiddle factors)."""
    acc = ir.Buffer(f"{node.name}__acc", F64, tuple(ys), "temp")
    index = tuple(var(n) for n in names)
    at, acc_load = ir.Access(acc.name, index), ir.Load(acc.name, index, F64)
    out: ir.Expr = acc_load if dtype == F64 else ir.Cast(acc_load, dtype)
    body = (
        ir.Stmt("S", at, ir.Const(0.0, F64)),
        *nest([("j", taps)], (ir.Stmt("S", at, acc_load + term),)),
        ir.Stmt("S", ir.Access(y, index), out),
    )
    return Lowered(
        nest(list(zip(names, ys, strict=True)), body),
        (acc,),
        ((table, np.stack([np.cos(angles), np.sin(angles)], axis=1)),),
    )


@register("MelWeightMatrix", since=17)
def lower_mel_weight_matrix(node: Node, ctx: LowerContext) -> Lowered:
    """MelWeightMatrix: ``[dft_length // 2 + 1, num_mel_bins]`` triangular filters, for a
    ``num_mel_bins`` and ``dft_length`` known at compile time (they make the output's shape;
    the backend binds them per value) and a sample rate and edges that may be known only at
    run time (with every input a constant, the node is folded before it gets here).

    The ``num_mel_bins + 2`` edges of the filters are computed as onnx.reference computes them
    (its order of operations, ``log1p`` in the edges' own type, the rest in float64), and
    floored into spectrogram bins with numpy's floor division::

      S: mel[0] = 2595 log1p(lower / 700) / ln 10;  S: mel[1] = (the same of upper)
      for b < num_mel_bins + 2:
        S: hz[b] = b * (mel[1] - mel[0]) / (num_mel_bins + 2) + mel[0]
        S: hz[b] = hz[b] / 2595 * ln 10;  S: grow[b] = exp(hz[b])
        S: hz[b] = (dft_length + 1) * (700 * expm1(hz[b]))        (expm1 from grow)
        S: rest[b] = fmod(hz[b], rate);  S: rest[b] = (hz[b] - rest[b]) / rate - (fix)
        S: edge[b] = int64(numpy's floor of rest[b], or hz[b] / rate for a rate of 0)
      for j, i:
        S: Y[j, i] = edge[i+1] <= j < edge[i+2] ? (edge[i+2] - j) / (edge[i+2] - edge[i+1])
                   : edge[i] <= j <= edge[i+1] ? (j - edge[i]) / (edge[i+1] - edge[i]) (1 if 0/0)
                   : 0

    ``log1p`` and ``expm1`` are Kahan's forms on ``log`` and ``exp``, ``log1p`` rounded once
    to the edges' type (numpy's own float32 ``log1p``, which differs from one machine to
    another, may be half an ulp away: a filter edge within about 1e-7 of a whole bin can then
    land one bin off). A filter edge outside ``[0, dft_length // 2]`` writes nothing there
    (onnx.reference fails on one beyond the end and wraps a negative one around)."""
    y = node.outputs[0]
    mels, dft = _mel_sizes(node, ctx)
    edges, temps = _mel_edges(node, ctx, mels, dft)
    # Y[j, i] from the filter's left, center and right edges.
    j = ir.Iter("j")
    left, center, right = (ir.Load(temps[-1].name, (var("i") + k,), I64) for k in range(3))

    def ratio(num: ir.Expr, den: ir.Expr) -> ir.Expr:
        # (the denominator kept non-zero where the value is not used)
        return ir.Cast(num, F64) / ir.Cast(ir.maximum(den, ir.Const(1, I64)), F64)

    rising = ir.binary("and", ir.binary("le", left, j), ir.binary("le", j, center))
    up = ir.Select(ir.binary("eq", center, left), _f64(1), ratio(j - left, center - left))
    falling = ir.binary("and", ir.binary("le", center, j), ir.binary("lt", j, right))
    down = ratio(right - j, right - center)
    value = ir.Select(falling, down, ir.Select(rising, up, _f64(0)))
    filters = ir.Stmt("S", ir.Access(y, (var("j"), var("i"))), ir.Cast(value, ctx.dtype(y)))
    return Lowered((*edges, *nest([("j", dft // 2 + 1), ("i", mels)], (filters,))), temps)


def _mel_sizes(node: Node, ctx: LowerContext) -> tuple[int, int]:
    """MelWeightMatrix's ``num_mel_bins`` and ``dft_length``, its inputs and output checked."""
    y = node.outputs[0]
    mels, dft = _scalar_input(node, ctx, 0), _scalar_input(node, ctx, 1)
    if mels is None or dft is None or len(node.inputs) < 5 or not all(node.inputs[2:5]):
        raise unsupported(node, ctx, "five inputs are required")
    if mels < 1 or dft < 1:
        raise unsupported(node, ctx, f"num_mel_bins {mels} and dft_length {dft}")
    if ctx.shape(y) != (dft // 2 + 1, mels):
        raise ShapeError(
            f"node {node.name!r} (MelWeightMatrix): output shape {list(ctx.shape(y))}, "
            f"expected {[dft // 2 + 1, mels]}"
        )
    rate, lower, upper = node.inputs[2:5]
    edges = require_float(node, ctx, lower)
    if ctx.dtype(upper) != edges:
        raise unsupported(node, ctx, f"edges of dtypes {edges} and {ctx.dtype(upper)}")
    if ctx.dtype(rate) not in ir.INT_DTYPES:
        raise unsupported(node, ctx, f"sample_rate of dtype {ctx.dtype(rate)} (an integer)")
    if ctx.dtype(y) not in (*ir.FLOAT_DTYPES, *ir.INT_DTYPES):
        raise unsupported(node, ctx, f"output_datatype {ctx.dtype(y)}")
    return mels, dft


def _f64(v: float) -> ir.Const:
    return ir.Const(float(v), F64)


def _scalar64(ctx: LowerContext, name: str) -> ir.Expr:
    """The single element of input ``name``, as float64."""
    load = ir.Load(name, (ir.Aff.lift(0),) * len(ctx.shape(name)), ctx.dtype(name))
    return ir.Cast(load, F64)


def _to_mel(ctx: LowerContext, hertz: str) -> ir.Expr:
    """``2595 * log1p(hertz / 700) / ln 10`` as numpy computes it: in ``hertz``'s type up
    to the division, which is float64's (each step rounded to that type, from float64)."""
    dtype = ctx.dtype(hertz)

    def rounded(e: ir.Expr) -> ir.Expr:
        return e if dtype == F64 else ir.Cast(ir.Cast(e, dtype), F64)

    def beside(v: int) -> ir.Const:  # a Python number as numpy reads it beside ``dtype``
        return _f64(float(np.dtype(dtype).type(v)))

    x = rounded(_scalar64(ctx, hertz) / beside(700))
    u = x + _f64(1)
    log1p = ir.Select(ir.binary("eq", u, _f64(1)), x, ir.unary("log", u) * x / (u - _f64(1)))
    return rounded(beside(2595) * rounded(log1p)) / _f64(np.log(10))


def _mel_edges(
    node: Node, ctx: LowerContext, mels: int, dft: int
) -> tuple[tuple[ir.Node, ...], tuple[ir.Buffer, ...]]:
    """The nests that compute the filters' edges as spectrogram bins, and their temps (the
    int64 edges last)."""
    name = node.name
    mel = ir.Buffer(f"{name}__mel", F64, (2,))
    hz, grow, rest = (ir.Buffer(f"{name}__{w}", F64, (mels + 2,)) for w in ("hz", "grow", "rest"))
    edge = ir.Buffer(f"{name}__edges", I64, (mels + 2,))
    b = var("b")
    at = {buf.name: ir.Access(buf.name, (b,)) for buf in (hz, grow, rest, edge)}
    a, u, q = (ir.Load(buf.name, (b,), F64) for buf in (hz, grow, rest))
    low = ir.Load(mel.name, (ir.Aff.lift(0),), F64)
    high = ir.Load(mel.name, (ir.Aff.lift(1),), F64)
    step = (high - low) / _f64(mels + 2)
    less = u - _f64(1)
    expm1 = ir.Select(
        ir.binary("eq", u, _f64(1)),
        a,
        ir.Select(ir.binary("eq", less, _f64(-1)), _f64(-1), less * a / ir.unary("log", u)),
    )
    sr = _scalar64(ctx, node.inputs[2])
    # numpy's floor division: (a - fmod(a, sr)) / sr, less 1 where the remainder's sign is not
    # the divisor's, then floored (rounding up from past .5).
    wrong_sign = ir.binary(
        "and",
        ir.binary("ne", q, _f64(0)),
        ir.binary("ne", ir.binary("lt", sr, _f64(0)), ir.binary("lt", q, _f64(0))),
    )
    floor = ir.unary("floor", q)
    floored = floor + ir.Select(ir.binary("gt", q - floor, _f64(0.5)), _f64(1), _f64(0))
    per_edge = (
        ir.Stmt("S", at[hz.name], ir.Cast(ir.Iter("b"), F64) * step + low),
        ir.Stmt("S", at[hz.name], a / _f64(2595) * _f64(np.log(10))),
        ir.Stmt("S", at[grow.name], ir.unary("exp", a)),
        ir.Stmt("S", at[hz.name], _f64(dft + 1) * (_f64(700) * expm1)),
        ir.Stmt("S", at[rest.name], ir.binary("fmod", a, sr)),
        ir.Stmt("S", at[rest.name], (a - q) / sr - ir.Select(wrong_sign, _f64(1), _f64(0))),
        ir.Stmt(
            "S",
            at[edge.name],
            ir.Cast(ir.Select(ir.binary("eq", sr, _f64(0)), a / sr, floored), I64),
        ),
    )
    nests = (
        ir.Stmt("S", ir.Access(mel.name, (0,)), _to_mel(ctx, node.inputs[3])),
        ir.Stmt("S", ir.Access(mel.name, (1,)), _to_mel(ctx, node.inputs[4])),
        *nest([("b", mels + 2)], per_edge),
    )
    return nests, (mel, hz, grow, rest, edge)
