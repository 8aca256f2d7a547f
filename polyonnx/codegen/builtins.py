"""The compiler-runtime functions LLVM may call from generated code, defined in LLVM IR.

LLVM lowers some operations to calls of runtime functions when the target has no instruction
for them: converting ``double`` to ``half`` (``__truncdfhf2``) on every x86 CPU without
AVX512-FP16, any ``half`` arithmetic on x86 CPUs without F16C (``__extendhfsf2``,
``__truncsfhf2``). Those functions live in compiler-rt or libgcc, which a Python process does
not necessarily load: an unresolved call in JIT code jumps to address 0. So polyonnx defines
them itself, here, with integer operations only (no instruction that could become a call
again), rounding to nearest even as IEEE 754 and the ONNX reference do. The JIT adds this
module once per process; shared libraries link its object with hidden visibility.

Example:
    >>> sorted(BUILTINS)
    ['__extendhfdf2', '__extendhfsf2', '__truncdfhf2', '__truncsfhf2']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """An IEEE 754 binary format: its width and the bits of its significand (no hidden bit)."""

    bits: int
    significand: int

    @property
    def exponent(self) -> int:
        return self.bits - 1 - self.significand

    @property
    def bias(self) -> int:
        return (1 << (self.exponent - 1)) - 1

    @property
    def inf_exponent(self) -> int:
        return (1 << self.exponent) - 1

    def type(self) -> ir.Type:
        return {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}[self.bits]


HALF, SINGLE, DOUBLE = FloatFormat(16, 10), FloatFormat(32, 23), FloatFormat(64, 52)

#: Runtime function name -> (source format, destination format).
BUILTINS: dict[str, tuple[FloatFormat, FloatFormat]] = {
    "__truncdfhf2": (DOUBLE, HALF),
    "__truncsfhf2": (SINGLE, HALF),
    "__extendhfsf2": (HALF, SINGLE),
    "__extendhfdf2": (HALF, DOUBLE),
}


def builtins_module(triple: str = "") -> ir.Module:
    """A module defining every function of :data:`BUILTINS`."""
    module = ir.Module(name="polyonnx_builtins")
    if triple:
        module.triple = triple
    for name, (src, dst) in BUILTINS.items():
        fn = ir.Function(module, ir.FunctionType(dst.type(), [src.type()]), name=name)
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        rep = b.bitcast(fn.args[0], ir.IntType(src.bits))
        out = _truncate(b, rep, src, dst) if dst.bits < src.bits else _extend(b, rep, src, dst)
        b.ret(b.bitcast(out, dst.type()))
    return module


def _declared(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    """``name`` declared in ``module`` (once). (llvmlite's ``declare_intrinsic`` gives
    ``llvm.ctlz`` one parameter instead of two.)"""
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, fnty, name=name)


def _constants(bits: int) -> Callable[[int], ir.Constant]:
    """A maker of ``i<bits>`` constants (two's complement for negative values)."""
    return lambda value: ir.Constant(ir.IntType(bits), value & ((1 << bits) - 1))


def _truncate(b: ir.IRBuilder, rep: ir.Value, src: FloatFormat, dst: FloatFormat) -> ir.Value:
    """The bits of ``dst`` nearest to the ``src`` number with bits ``rep`` (ties to even),
    with overflow to infinity, gradual underflow and quiet NaNs keeping their payload's top.
    Every case is computed and the right one selected: no branches, so it vectorises."""
    n, shift = src.bits, src.significand - dst.significand
    c = _constants(n)
    min_normal = 1 << src.significand
    sign_mask = 1 << (n - 1)
    infinity = src.inf_exponent << src.significand
    round_mask, halfway = (1 << shift) - 1, 1 << (shift - 1)
    underflow = (src.bias + 1 - dst.bias) << src.significand
    overflow = (src.bias + dst.inf_exponent - dst.bias) << src.significand

    def rounded(value: ir.Value, low_bits: ir.Value) -> ir.Value:
        """``value`` rounded up when the dropped ``low_bits`` are over half, or half and
        ``value`` odd."""
        up = b.icmp_unsigned(">", low_bits, c(halfway))
        tie = b.icmp_unsigned("==", low_bits, c(halfway))
        bump = b.select(up, c(1), b.select(tie, b.and_(value, c(1)), c(0)))
        return b.add(value, bump)

    magnitude = b.and_(rep, c(sign_mask - 1))
    sign = b.lshr(b.and_(rep, c(sign_mask)), c(n - dst.bits))
    # Normal in the destination: drop the low bits, rebias the exponent, round.
    normal = b.sub(b.lshr(magnitude, c(shift)), c((src.bias - dst.bias) << dst.significand))
    normal = rounded(normal, b.and_(magnitude, c(round_mask)))
    in_range = b.icmp_unsigned("<", b.sub(magnitude, c(underflow)), b.sub(magnitude, c(overflow)))
    # NaN: a quiet NaN with the top of the payload.
    quiet = dst.inf_exponent << dst.significand | 1 << (dst.significand - 1)
    payload = b.and_(
        b.lshr(b.and_(magnitude, c((1 << (src.significand - 1)) - 1)), c(shift)),
        c((1 << (dst.significand - 1)) - 1),
    )
    nan = b.or_(c(quiet), payload)
    # Subnormal (or zero) in the destination: shift the significand with its hidden bit right,
    # keeping a sticky bit of what falls off, then round.
    exponent = b.lshr(magnitude, c(src.significand))
    # (>= 1 where this case is selected; clamped so that no shift below is out of range)
    amount = b.sub(c(src.bias - dst.bias + 1), exponent)
    amount = b.select(
        b.icmp_unsigned(">", amount, c(src.significand + 1)), c(src.significand + 1), amount
    )
    amount = b.select(b.icmp_unsigned("==", amount, c(0)), c(1), amount)
    significand = b.or_(b.and_(rep, c(min_normal - 1)), c(min_normal))
    sticky = b.zext(
        b.icmp_unsigned("!=", b.shl(significand, b.sub(c(n), amount)), c(0)), ir.IntType(n)
    )
    denormal = b.or_(b.lshr(significand, amount), sticky)
    subnormal = rounded(b.lshr(denormal, c(shift)), b.and_(denormal, c(round_mask)))
    result = b.select(
        b.icmp_unsigned(">=", magnitude, c(overflow)),
        c(dst.inf_exponent << dst.significand),
        subnormal,
    )
    result = b.select(b.icmp_unsigned(">", magnitude, c(infinity)), nan, result)
    result = b.select(in_range, normal, result)
    return b.trunc(b.or_(result, sign), ir.IntType(dst.bits))


def _extend(b: ir.IRBuilder, rep: ir.Value, src: FloatFormat, dst: FloatFormat) -> ir.Value:
    """The bits of ``dst`` equal to the ``src`` number with bits ``rep`` (exact)."""
    n, wide = src.bits, ir.IntType(dst.bits)
    c, w = _constants(n), _constants(dst.bits)
    shift = dst.significand - src.significand
    min_normal = 1 << src.significand
    infinity = src.inf_exponent << src.significand
    sign_mask = 1 << (n - 1)
    magnitude = b.and_(rep, c(sign_mask - 1))
    wide_magnitude = b.zext(magnitude, wide)
    sign = b.shl(b.zext(b.and_(rep, c(sign_mask)), wide), w(dst.bits - n))
    normal = b.add(b.shl(wide_magnitude, w(shift)), w((dst.bias - src.bias) << dst.significand))
    special = b.or_(w(dst.inf_exponent << dst.significand), b.shl(wide_magnitude, w(shift)))
    # Subnormal: normalise by the leading zeros of the significand.
    ctlz = _declared(
        b.module, f"llvm.ctlz.i{n}", ir.FunctionType(ir.IntType(n), [ir.IntType(n), ir.IntType(1)])
    )
    scale = b.sub(
        b.call(ctlz, [magnitude, ir.Constant(ir.IntType(1), 0)]), c(n - 1 - src.significand)
    )
    wide_scale = b.zext(scale, wide)
    shifted = b.xor(b.shl(wide_magnitude, b.add(w(shift), wide_scale)), w(1 << dst.significand))
    exponent = b.sub(w(dst.bias - src.bias + 1), wide_scale)
    subnormal = b.or_(shifted, b.shl(exponent, w(dst.significand)))
    is_normal = b.icmp_unsigned("<", b.sub(magnitude, c(min_normal)), c(infinity - min_normal))
    result = b.select(b.icmp_unsigned("==", magnitude, c(0)), w(0), subnormal)
    result = b.select(b.icmp_unsigned(">=", magnitude, c(infinity)), special, result)
    result = b.select(is_normal, normal, result)
    return b.or_(result, sign)
