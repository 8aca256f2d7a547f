"""Conversions between float32 and the encoded types (bfloat16, the float8 and float4 formats,
int4/uint4/int2/uint2), as integer arithmetic on bit patterns.

No CPU here computes in these types, so a value of one is its code (see
:data:`polyonnx.krnl.ir.ENCODED_DTYPES`) and a conversion is spelled out in krnl expressions:
the float32's bits taken apart, the mantissa shifted to the target's width and rounded to
nearest even, the exponent rebased, overflow saturated or turned into infinity or NaN as the
ONNX reference (``onnx.numpy_helper.saturate_cast`` and ml_dtypes) does. Decoding is exact:
every value of these types is a float32. All the arithmetic is in int64, where no shift or sum
here can overflow. Example, float32 to float8_e4m3fn (saturating)::

    u = int64(bits_uint32(x)); a = u & 0x7fffffff; e = (a >> 23) - 127
    shift = min(20 + max(-6 - e, 0), 30)   # subnormal targets shift further
    r = ((a & 0x7fffff) | 0x800000) >> shift, rounded half to even
    code = (max(e + 6, 0) << 3) + r        # a carry out of the mantissa bumps the exponent
"""

from __future__ import annotations

from dataclasses import dataclass

from polyonnx.krnl import ir

I64 = "int64"
F32 = "float32"


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """A small float format: ``bits`` wide, one sign bit, ``exp_bits``, ``man_bits``, exponent
    ``bias``; ``max_code`` the code (sign cleared) of its largest finite value; ``nan`` how it
    spells NaN: ``"ones"`` (all magnitude bits set: the fn types), ``"uz"`` (the negative zero
    code: the fnuz types), ``"ieee"`` (exponent all ones, with infinities) or ``""`` (none)."""

    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    max_code: int
    nan: str


FLOAT_FORMATS: dict[str, FloatFormat] = {
    "float8_e4m3fn": FloatFormat(8, 4, 3, 7, 0x7E, "ones"),
    "float8_e4m3fnuz": FloatFormat(8, 4, 3, 8, 0x7F, "uz"),
    "float8_e5m2": FloatFormat(8, 5, 2, 15, 0x7B, "ieee"),
    "float8_e5m2fnuz": FloatFormat(8, 5, 2, 16, 0x7F, "uz"),
    "float4_e2m1fn": FloatFormat(4, 2, 1, 1, 0x7, ""),
}
#: Saturation applies to the float8 formats only (Cast's ``saturate``); float4 always saturates.
SATURABLE = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})

#: The small integer types: (lowest, highest) value.
INT_RANGES: dict[str, tuple[int, int]] = {
    "int4": (-8, 7),
    "uint4": (0, 15),
    "int2": (-2, 1),
    "uint2": (0, 3),
}


def _c(v: int) -> ir.Const:
    return ir.Const(v, I64)


def _shl(a: ir.Expr, b: ir.Expr | int) -> ir.Expr:
    return ir.Binary("shl", a, b if isinstance(b, ir.Expr) else _c(b))


def _shr(a: ir.Expr, b: ir.Expr | int) -> ir.Expr:
    return ir.Binary("shr", a, b if isinstance(b, ir.Expr) else _c(b))


def _and(a: ir.Expr, mask: int) -> ir.Expr:
    return ir.Binary("bitand", a, _c(mask))


def _or(a: ir.Expr, b: ir.Expr | int) -> ir.Expr:
    return ir.Binary("bitor", a, b if isinstance(b, ir.Expr) else _c(b))


def _cmp(op: str, a: ir.Expr, b: int) -> ir.Expr:
    return ir.Binary(op, a, _c(b))


def _sel(cond: ir.Expr, a: ir.Expr | int, b: ir.Expr | int) -> ir.Expr:
    lift = lambda v: v if isinstance(v, ir.Expr) else _c(v)  # noqa: E731
    return ir.Select(cond, lift(a), lift(b))


def code_of(x: ir.Expr) -> ir.Expr:
    """The code of an encoded value, as int64."""
    return ir.Cast(ir.Bitcast(x, ir.ENCODED_DTYPES[x.dtype]), I64)


def from_code(code: ir.Expr, dtype: str) -> ir.Expr:
    """The int64 ``code`` as a value of the encoded ``dtype``."""
    return ir.Bitcast(ir.Cast(code, ir.ENCODED_DTYPES[dtype]), dtype)


def float32_bits(x: ir.Expr) -> ir.Expr:
    """The bits of a float32 (or exactly widened float16) ``x``, as a non-negative int64."""
    f = x if x.dtype == F32 else ir.Cast(x, F32)
    return ir.Cast(ir.Bitcast(f, "uint32"), I64)


def float32_from_bits(bits: ir.Expr) -> ir.Expr:
    """The float32 whose bits are the int64 ``bits`` (below 2**32)."""
    return ir.Bitcast(ir.Cast(bits, "uint32"), F32)


# --------------------------------------------------------------------------- float32 -> code


def encode(x: ir.Expr, dtype: str, *, saturate: bool, round_mode: str = "up") -> ir.Expr:
    """``x`` (float16 or float32) converted to the encoded ``dtype``."""
    if dtype == "bfloat16":
        return from_code(_encode_bfloat16(float32_bits(x)), dtype)
    if dtype == "float8_e8m0fnu":
        return from_code(_encode_e8m0(float32_bits(x), saturate, round_mode), dtype)
    if dtype in FLOAT_FORMATS:
        fmt = FLOAT_FORMATS[dtype]
        sat = saturate or dtype not in SATURABLE
        return from_code(_encode_float(float32_bits(x), fmt, sat), dtype)
    lo, hi = INT_RANGES[dtype]
    f = x if x.dtype == F32 else ir.Cast(x, F32)
    # Truncation toward zero, as C converts; a value out of range (or NaN) gives 0, as
    # ml_dtypes does. The range test comes first: converting an out-of-range float is undefined.
    inside = ir.Binary(
        "and",
        ir.Binary("gt", f, ir.Const(float(lo - 1), F32)),
        ir.Binary("lt", f, ir.Const(float(hi + 1), F32)),
    )
    return int_code(ir.Cast(ir.Select(inside, f, ir.Const(0.0, F32)), I64), dtype)


def int_code(v: ir.Expr, dtype: str) -> ir.Expr:
    """The int64 ``v`` (in range) as a value of the small integer type ``dtype``: its low
    bits."""
    return from_code(_and(v, (1 << _width(dtype)) - 1), dtype)


def _width(dtype: str) -> int:
    return 4 if dtype.endswith("4") else 2


def round_bfloat16(x: ir.Expr) -> ir.Expr:
    """The float32 ``x`` rounded to the nearest bfloat16 (ties to even, NaN kept a NaN), as a
    float32: what storing a result to a bfloat16 tensor and reading it back gives. The ops that
    compute bfloat16 themselves round with it where ONNX's function bodies produce a
    bfloat16 tensor."""
    return float32_from_bits(_shl(_encode_bfloat16(float32_bits(x)), 16))


def widen(x: ir.Expr, dtype: str = F32) -> ir.Expr:
    """``x`` as ``dtype`` (float32 or float64): a bfloat16 decoded (exactly), any other float
    converted, a value of ``dtype`` as it is."""
    if x.dtype == "bfloat16":
        x = decode(x)
    return x if x.dtype == dtype else ir.Cast(x, dtype)


def _encode_bfloat16(u: ir.Expr) -> ir.Expr:
    # Round to nearest even on the upper half; NaNs keep their payload's top bits, made quiet.
    a = _and(u, 0x7FFFFFFF)
    rounded = _shr(u + _c(0x7FFF) + _and(_shr(u, 16), 1), 16)
    return _sel(_cmp("gt", a, 0x7F800000), _or(_shr(u, 16), 0x40), rounded)


def _encode_e8m0(u: ir.Expr, saturate: bool, round_mode: str) -> ir.Expr:
    # onnx.numpy_helper.to_float8e8m0: the exponent field, rounded by the mantissa; the sign
    # is dropped and NaN/inf become 0xff.
    exponent = _and(_shr(u, 23), 0xFF)
    if round_mode == "nearest":
        g = _cmp("ne", _and(u, 0x400000), 0)
        rest = ir.Binary(
            "or",
            ir.Binary("or", _cmp("ne", _and(u, 0x200000), 0), _cmp("ne", _and(u, 0x1FFFFF), 0)),
            _cmp("gt", exponent, 0),
        )
        up: ir.Expr = ir.Binary("and", g, rest)
    elif round_mode == "up":
        up = _cmp("ne", _and(u, 0x7FFFFF), 0)
    else:  # "down"
        up = ir.Const(False, "bool")
    if saturate:
        up = ir.Binary("and", up, _cmp("ne", exponent, 0xFE))
    return _sel(_cmp("eq", exponent, 0xFF), 0xFF, exponent + _sel(up, 1, 0))


def _encode_float(u: ir.Expr, fmt: FloatFormat, saturate: bool) -> ir.Expr:
    sign = _shr(u, 31)
    a = _and(u, 0x7FFFFFFF)
    e = _shr(a, 23) - _c(127)
    mant = _or(_and(a, 0x7FFFFF), 0x800000)
    emin = 1 - fmt.bias
    # Keep man_bits bits below the leading one; a value under the smallest normal shifts
    # further (a subnormal). Past 30 every 24-bit mantissa rounds to 0 alike.
    shift = ir.minimum(_c(23 - fmt.man_bits) + ir.maximum(_c(emin) - e, _c(0)), _c(30))
    r = _shr(mant, shift)
    rem = ir.Binary("bitand", mant, _shl(_c(1), shift) - _c(1))
    half = _shl(_c(1), shift - _c(1))
    up = ir.Binary(
        "or",
        ir.Binary("gt", rem, half),
        ir.Binary("and", ir.Binary("eq", rem, half), _cmp("eq", _and(r, 1), 1)),
    )
    # A carry out of the mantissa moves the code to the next exponent, as it should.
    mag = _shl(ir.maximum(e - _c(emin), _c(0)), fmt.man_bits) + r + _sel(up, 1, 0)
    top = 1 << (fmt.bits - 1)
    if saturate:
        over: int = fmt.max_code
    elif fmt.nan == "ieee":
        over = fmt.max_code + 1  # infinity
    elif fmt.nan == "ones":
        over = top - 1  # NaN
    else:  # "uz": NaN is the negative zero code, without a sign
        over = top
    finite = _sel(_cmp("gt", mag, fmt.max_code), over, mag)  # infinities overflow too
    is_nan = _cmp("gt", a, 0x7F800000)
    if fmt.nan == "uz":
        signed = _sel(
            ir.Binary("or", _cmp("eq", finite, 0), _cmp("eq", finite, top)),
            finite,
            _or(finite, _shl(sign, fmt.bits - 1)),
        )
        return _sel(is_nan, top, signed)
    if not fmt.nan:  # no NaN: ml_dtypes gives a zero of the opposite sign
        return _sel(is_nan, _shl(_c(1) - sign, fmt.bits - 1), _or(finite, _shl(sign, fmt.bits - 1)))
    nan = top - 1 if fmt.nan == "ones" else top - 2
    return _or(_sel(is_nan, nan, finite), _shl(sign, fmt.bits - 1))


# --------------------------------------------------------------------------- code -> float32


def decode(x: ir.Expr) -> ir.Expr:
    """The encoded value ``x`` as float32 (exact), or as int64 for the small integer types."""
    code = code_of(x)
    dtype = x.dtype
    if dtype == "bfloat16":
        return float32_from_bits(_shl(code, 16))
    if dtype == "float8_e8m0fnu":
        bits = _sel(_cmp("eq", code, 0), 0x400000, _shl(code, 23))  # code 0 is 2**-127
        return _nan_if(_cmp("eq", code, 0xFF), float32_from_bits(bits))
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        low = _and(code, (1 << _width(dtype)) - 1)
        return _sel(_cmp("gt", low, hi), low - _c(hi - lo + 1), low) if lo < 0 else low
    fmt = FLOAT_FORMATS[dtype]
    top = 1 << (fmt.bits - 1)
    mag = _and(code, top - 1)
    exp = _shr(mag, fmt.man_bits)
    man = _and(mag, (1 << fmt.man_bits) - 1)
    normal = float32_from_bits(
        _or(_shl(exp + _c(127 - fmt.bias), 23), _shl(man, 23 - fmt.man_bits))
    )
    subnormal = ir.Cast(man, F32) * ir.Const(2.0 ** (1 - fmt.bias - fmt.man_bits), F32)
    v: ir.Expr = ir.Select(_cmp("eq", exp, 0), subnormal, normal)
    if fmt.nan == "ieee":
        v = ir.Select(_cmp("eq", mag, fmt.max_code + 1), ir.Const(float("inf"), F32), v)
    v = ir.Select(_cmp("ne", _and(code, top), 0), -v, v)
    if fmt.nan == "ones":
        return _nan_if(_cmp("eq", mag, top - 1), v)
    if fmt.nan == "ieee":
        return _nan_if(_cmp("gt", mag, fmt.max_code + 1), v)
    if fmt.nan == "uz":  # (its code has the sign bit set: a negative NaN, as ml_dtypes gives)
        return _nan_if(_cmp("eq", code, top), v, negative=True)
    return v


def _nan_if(cond: ir.Expr, v: ir.Expr, *, negative: bool = False) -> ir.Expr:
    return ir.Select(cond, ir.Const(-float("nan") if negative else float("nan"), F32), v)
