"""DFT and STFT: the discrete Fourier transform along one axis (of each frame), as a direct sum.

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
