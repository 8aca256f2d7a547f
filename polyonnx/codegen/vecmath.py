"""Float32 ``exp``, ``log``, ``tanh``, ``sigmoid`` and ``erf`` as straight-line LLVM IR, on a
scalar or lane-wise on a vector of any width: no libm call, so a vector loop stays a vector
loop (LLVM calls libm once per lane for ``llvm.exp.v16f32``) and a scalar loop can still be
vectorised by LLVM.

The methods are the classic ones of vector math libraries (Cephes, SLEEF, Eigen): reduce the
argument to a short interval with exact steps, approximate there by a polynomial, rebuild the
result with integer exponent arithmetic.

* ``exp(x)``: ``n = round(x / ln 2)`` by adding 1.5 * 2**23 (the float's rounding does it),
  ``r = x - n ln 2`` in two steps (Cody-Waite: ``n * LN2_HI`` is exact), ``e**r = 1 + r +
  r**2 P(r)`` on ``|r| <= ln 2 / 2``, times ``2**n`` built in the exponent field, in two
  factors so that results between the least denormal and the largest float are each rounded
  once; past 89 it is inf, below -104 zero, NaN stays NaN. ``e**x - 1`` (inside tanh and
  erf) is ``2**n (e**r - 1) + (2**n - 1)``: accurate near 0 too, and one factor suffices for
  the arguments it gets.
* ``log(x)``: ``x = 2**e * m`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read off the bits (a
  denormal is scaled by 2**23 first), ``log(1 + f) = f - f**2 / 2 + f**3 Q(f)`` for ``f = m -
  1`` (exact), plus ``e ln 2`` in two parts; 0 gives -inf, negatives and NaN give NaN, inf inf.
* ``tanh(x)``: odd, so on ``a = |x|`` with the sign put back (-0 stays -0): with ``u = e**2a -
  1``, ``u / (u + 2)``, or ``1 - 2 / (u + 2)`` past 0.625 (the quotient is below 1/2 there, so
  its error shrinks): one division either way, no cancellation, and no overflow (``a`` stops
  at 10, where tanh is 1).
* ``sigmoid(x)``: with ``e = exp(-|x|)`` (never overflows), ``1 / (1 + e)`` for ``x >= 0`` and
  ``e / (1 + e)`` below, so large negative inputs keep their relative accuracy down to the
  denormals instead of dividing by an overflowed ``exp(-x)``.
* ``erf(x)``: odd; ``a + a P(a**2)`` below 0.875, else ``-(e**L(a) - 1)`` with ``L`` a
  polynomial for ``log(erfc(a))`` on ``[0.875, 4]`` (erf rounds to 1 past about 3.92).

The polynomials are this module's own minimax fits: Remez exchange on a dense grid in float64,
weighted for the relative error of the function's result, coefficients rounded to float32 one
at a time from the lowest degree with the others refit (``python -m tests.codegen.vecmath_fit``
prints them). Measured errors (float32, against float64 references, through the JIT at 128,
256 and 512 bits, with and without FMA) are in docs/performance.md, "Vector math": at most a
few ulp.

float16 computes through these (converted to float32 and back); float64 keeps LLVM's
intrinsics and libm (see :mod:`polyonnx.codegen.scalar`): double polynomials of ~1 ulp need
about twice the degree, and no model the project runs computes in double.

Floating-point adds and multiplies carry ``contract`` only: LLVM makes FMAs where the target
has them, and every step here is accurate either way (the Cody-Waite products are exact).

Example:
    >>> module = ir.Module()
    >>> v8 = ir.VectorType(ir.FloatType(), 8)
    >>> fn = ir.Function(module, ir.FunctionType(v8, [v8]), name="f")
    >>> b = ir.IRBuilder(fn.append_basic_block())
    >>> y = FUNCTIONS["tanh"](b, fn.args[0])
    >>> str(y.type), "call" in str(module)
    ('<8 x float>', False)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from polyonnx.codegen.llvm_types import FAST, I32, const_like, like

Function = Callable[[ir.IRBuilder, ir.Value], ir.Value]
"""``f(builder, x)``: ``f(x)`` for a float32 scalar or vector ``x``, emitted at the builder."""

# ------------------------------------------------------------------ exp

EXP_MAX = 89.0
"""e**89 is above the largest float32: exp is inf from here on."""
EXP_MIN = -104.0
"""e**-104 is below half the least denormal: exp is 0 from here down."""
LOG2_E = 1.442695
LN2_HI = 0.693359375
"""355 / 512: ln 2 to 9 bits, so ``n * LN2_HI`` is exact for every ``|n| < 2**15``."""
LN2_LO = -2.1219444e-04
"""ln 2 - LN2_HI."""
ROUND_INT = 12582912.0
"""1.5 * 2**23: ``t + ROUND_INT`` rounds ``|t| < 2**22`` to an integer, the low bits of the
sum are that integer."""
EXP_REDUCED = math.log(2) / 2
"""``|r| <= ln 2 / 2`` after the reduction (a little more when ``x / ln 2`` rounds up)."""
EXP_POLY = (0.49999994, 0.16666515, 0.041668084, 0.008369349, 0.0013840399)
"""``(e**r - 1 - r) / r**2`` on ``|r| <= ln 2 / 2``, lowest degree first."""

# ------------------------------------------------------------------ log

SQRT_HALF_BITS = 0x3F3504F3
"""The bits of float32 sqrt(1/2): the mantissa is taken in ``[sqrt(1/2), sqrt(2))``."""
LOG_POLY = (
    0.3333333,
    -0.25000834,
    0.20001274,
    -0.16622879,
    0.14200266,
    -0.13163665,
    0.12774342,
    -0.07641057,
)
"""``(log(1 + f) - f + f**2 / 2) / f**3`` on ``sqrt(1/2) - 1 <= f <= sqrt(2) - 1``."""

# ------------------------------------------------------------------ tanh

TANH_SMALL = 0.625
"""Above it ``tanh(a) = 1 - 2 / (e**2a + 1)``, below ``(e**2a - 1) / (e**2a + 1)``: either
way no cancellation."""
TANH_ONE = 10.0
"""tanh rounds to 1 in float32 past about 9.01: the argument of exp stops here."""

# ------------------------------------------------------------------ erf

ERF_SMALL = 0.875
"""Below it erf is a polynomial; above, ``1 - exp(L(a))``."""
ERF_ONE = 4.0
"""erf(a) rounds to 1 in float32 past about 3.92: the argument of ``L`` stops here."""
ERF_POLY = (0.12837915, -0.37612504, 0.11281922, -0.026770486, 0.004998928, -0.0006020491)
"""``erf(a) / a - 1`` as a polynomial in ``a**2`` on ``a <= ERF_SMALL``."""
ERFC_LOG_POLY = (
    -0.0001314244,
    -1.1279453,
    -0.6367213,
    -0.10434184,
    0.022427276,
    -0.003094086,
    0.00020117877,
)
"""``L(a) = log(erfc(a))`` on ``ERF_SMALL <= a <= ERF_ONE``."""


@dataclass(frozen=True, slots=True)
class _Lanes:
    """float32 arithmetic on values of one type (a scalar or a vector) at the builder."""

    b: ir.IRBuilder
    ty: ir.Type

    def f(self, value: float) -> ir.Constant:
        return const_like(self.ty, value)

    def i(self, value: int) -> ir.Constant:
        return const_like(like(self.ty, I32), value)

    def add(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fadd(x, y, flags=FAST)

    def sub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fsub(x, y, flags=FAST)

    def mul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.fmul(x, y, flags=FAST)

    def mul_add(self, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        """``x * y + z``: one FMA where the target has it."""
        return self.add(self.mul(x, y), z)

    def poly(self, x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
        """``sum(c * x**k)`` by Horner's rule, ``coefficients`` lowest degree first."""
        acc = self.f(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = self.mul_add(acc, x, self.f(c))
        return acc

    def lt(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x < y``; false when either is NaN."""
        return self.b.fcmp_ordered("<", x, y)

    def gt(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """``x > y``; false when either is NaN."""
        return self.b.fcmp_ordered(">", x, y)

    def bits(self, x: ir.Value) -> ir.Value:
        return self.b.bitcast(x, like(self.ty, I32))

    def of_bits(self, n: ir.Value) -> ir.Value:
        return self.b.bitcast(n, self.ty)

    def abs(self, x: ir.Value) -> ir.Value:
        return self.of_bits(self.b.and_(self.bits(x), self.i(0x7FFFFFFF)))

    def copysign(self, magnitude: ir.Value, sign: ir.Value) -> ir.Value:
        """``|magnitude|`` with the sign of ``sign`` (bit operations: one instruction with
        AVX-512, and no call in the IR)."""
        b = self.b
        size = b.and_(self.bits(magnitude), self.i(0x7FFFFFFF))
        return self.of_bits(b.or_(size, b.and_(self.bits(sign), self.i(-0x80000000))))

    def clamp_above(self, x: ir.Value, hi: float) -> ir.Value:
        """``min(x, hi)``; NaN stays NaN."""
        return self.b.select(self.gt(x, self.f(hi)), self.f(hi), x)

    def clamp(self, x: ir.Value, lo: float, hi: float) -> ir.Value:
        """``x`` limited to ``[lo, hi]``; NaN stays NaN."""
        x = self.clamp_above(x, hi)
        return self.b.select(self.lt(x, self.f(lo)), self.f(lo), x)

    def pow2_shifted(self, n: ir.Value) -> ir.Value:
        """``2**k`` for ``n = k + c * 2**9`` (any ``c``) with ``-126 <= k <= 127``: built in the
        exponent field, where ``n << 23`` leaves only ``k``."""
        return self.of_bits(self.b.add(self.b.shl(n, self.i(23)), self.i(127 << 23)))


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``e**x``."""
    m = _Lanes(b, x.type)
    return _exp(m, m.clamp(x, EXP_MIN, EXP_MAX))


def _exp(m: _Lanes, x: ir.Value) -> ir.Value:
    """``e**x`` for ``EXP_MIN <= x <= EXP_MAX`` (or NaN)."""
    b = m.b
    shifted = m.mul_add(x, m.f(LOG2_E), m.f(ROUND_INT))
    n_float = m.sub(shifted, m.f(ROUND_INT))
    r = m.mul_add(n_float, m.f(-LN2_HI), x)
    r = m.mul_add(n_float, m.f(-LN2_LO), r)
    p = m.poly(r, (1.0, 1.0, *EXP_POLY))
    # 2**n in two normal factors (-151 <= n <= 129), so only the second product rounds. The
    # bits of shifted are ROUND_INT's plus n (no fptosi: that is poison for NaN), and
    # ROUND_INT's low 22 bits are 0: shifting left by 23 leaves only n's.
    n_bits = m.bits(shifted)
    half = b.ashr(n_bits, m.i(1))
    p = m.mul(p, m.pow2_shifted(half))
    return m.mul(p, m.pow2_shifted(b.sub(n_bits, half)))


def _expm1(m: _Lanes, x: ir.Value) -> ir.Value:
    """``e**x - 1`` for ``-87 <= x <= 88`` (or NaN), accurate relative to itself also near 0:
    ``2**n (e**r - 1) + (2**n - 1)``, ``e**r - 1`` by the polynomial without its 1."""
    shifted = m.mul_add(x, m.f(LOG2_E), m.f(ROUND_INT))
    n_float = m.sub(shifted, m.f(ROUND_INT))
    r = m.mul_add(n_float, m.f(-LN2_HI), x)
    r = m.mul_add(n_float, m.f(-LN2_LO), r)
    below_one = m.mul_add(m.mul(r, r), m.poly(r, EXP_POLY), r)
    scale = m.pow2_shifted(m.bits(shifted))
    return m.mul_add(scale, below_one, m.sub(scale, m.f(1.0)))


def log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The natural logarithm of ``x``."""
    m = _Lanes(b, x.type)
    denormal = m.lt(x, m.f(2.0**-126))
    normal = b.select(denormal, m.mul(x, m.f(2.0**23)), x)
    # Bits minus those of sqrt(1/2): the exponent field holds e with m in [sqrt(1/2), sqrt(2)).
    offset = b.sub(m.bits(normal), m.i(SQRT_HALF_BITS))
    exponent = b.sub(b.ashr(offset, m.i(23)), b.select(denormal, m.i(23), m.i(0)))
    mantissa = m.of_bits(b.add(b.and_(offset, m.i(0x7FFFFF)), m.i(SQRT_HALF_BITS)))
    e = b.sitofp(exponent, x.type)
    f = m.sub(mantissa, m.f(1.0))
    f2 = m.mul(f, f)
    tail = m.mul(m.mul(f2, f), m.poly(f, LOG_POLY))
    tail = m.mul_add(e, m.f(LN2_LO), tail)
    tail = m.mul_add(f2, m.f(-0.5), tail)
    y = m.mul_add(e, m.f(LN2_HI), m.add(f, tail))
    y = b.select(b.fcmp_ordered("==", x, m.f(math.inf)), m.f(math.inf), y)
    y = b.select(b.fcmp_ordered("==", x, m.f(0.0)), m.f(-math.inf), y)
    return b.select(b.fcmp_unordered("<", x, m.f(0.0)), m.f(math.nan), y)


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The hyperbolic tangent of ``x``."""
    m = _Lanes(b, x.type)
    a = m.abs(x)
    limited = m.clamp_above(a, TANH_ONE)
    above_one = _expm1(m, m.add(limited, limited))  # e**2a - 1
    large = m.gt(a, m.f(TANH_SMALL))
    # One division for either form: (e**2a - 1) / (e**2a + 1), or 1 - 2 / (e**2a + 1).
    q = b.fdiv(b.select(large, m.f(-2.0), above_one), m.add(above_one, m.f(2.0)))
    return m.copysign(b.select(large, m.add(q, m.f(1.0)), q), x)


def sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``1 / (1 + e**-x)``."""
    m = _Lanes(b, x.type)
    e = _exp(m, b.fneg(m.clamp_above(m.abs(x), -EXP_MIN)))
    numerator = b.select(m.lt(x, m.f(0.0)), e, m.f(1.0))
    return b.fdiv(numerator, m.add(m.f(1.0), e))


def erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The error function of ``x``."""
    m = _Lanes(b, x.type)
    a = m.abs(x)
    small = m.mul_add(a, m.poly(m.mul(a, a), ERF_POLY), a)
    # L is between -18 and -0.2 on its interval: within expm1's range.
    large = b.fneg(_expm1(m, m.poly(m.clamp(a, ERF_SMALL, ERF_ONE), ERFC_LOG_POLY)))
    return m.copysign(b.select(m.lt(a, m.f(ERF_SMALL)), small, large), x)


FUNCTIONS: dict[str, Function] = {
    "exp": exp,
    "log": log,
    "tanh": tanh,
    "sigmoid": sigmoid,
    "erf": erf,
}
"""The krnl unary ops computed here for float32 (and through float32 for float16)."""
