"""The arithmetic of krnl expressions in LLVM IR, on scalars or lane-wise on vectors: unary and
binary ops, integer division and power, casts, LLVM intrinsics and libm calls; float32 (and
float16) exp, log, tanh, sigmoid and erf inline from :mod:`polyonnx.codegen.vecmath`.

Which instructions an op becomes is data: a table per operand kind (float, signed and unsigned
integer; bool is unsigned) from op name to its emitter. :class:`ScalarEmitter` needs only a
builder and a way to declare the external functions it calls.

Floating-point adds and multiplies round as ONNX says, each on its own (a ``Mul`` then an
``Add`` round twice, as the reference does), except an accumulation's multiply-add
(:meth:`ScalarEmitter.multiply_add`, a Conv's or MatMul's ``acc + x * w``), whose ``contract``
lets LLVM form an FMA: the order of such a sum is the schedule's anyway. Nothing carries
``reassoc``: every output element is summed in the order its loops say, the same order for
every element (with it, equal outputs came out unequal; see docs/performance.md). Vector code
comes from the schedule's vector loops, which never need it.

Example:
    >>> from polyonnx.codegen.llvm_types import declare
    >>> module = ir.Module()
    >>> fn = ir.Function(module, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), name="f")
    >>> s = ScalarEmitter(ir.IRBuilder(fn.append_basic_block()),
    ...                   lambda *a: declare(module, *a))
    >>> x = fn.args[0]
    >>> s.unary("abs", x, "float32").callee.name
    'llvm.fabs.f32'
    >>> s.unary("sinh", x, "float32").callee.name  # (libm)
    'sinhf'
    >>> "call" in str(s.unary("tanh", x, "float32"))  # inline: codegen/vecmath.py
    False
    >>> product = s.binary("mul", x, x, "float32")
    >>> product.opname, product.flags
    ('fmul', [])
    >>> s.multiply_add(x, x, x).flags
    ['contract']
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from polyonnx.codegen import vecmath
from polyonnx.codegen.llvm_types import (
    FAST,
    I1,
    I32,
    const_like,
    is_float,
    is_signed,
    like,
    scalar_type,
    value_type,
    whole,
    zero,
)
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import MATH_OPS

Declare = Callable[[str, ir.Type, list[ir.Type]], ir.Function]
"""``declare(name, return type, argument types)``: the external function ``name``."""

UnaryEmit = Callable[["ScalarEmitter", ir.Value, str], ir.Value]
"""How a unary op is emitted: ``emit(scalars, x, operand dtype)``."""
BinaryEmit = Callable[["ScalarEmitter", ir.Value, ir.Value, str], ir.Value]
"""How a binary op is emitted: ``emit(scalars, x, y, operand dtype)``."""

_LLVM_SUFFIX = {"float16": "f16", "float32": "f32", "float64": "f64"}

_I32_ZERO = ir.Constant(I32, 0)


@functools.cache
def _zeros(width: int) -> ir.Constant:
    """The all-zero shuffle mask of ``width`` lanes (one object: llvmlite formats each once)."""
    return ir.Constant(ir.VectorType(I32, width), [0] * width)


_SPLATS: dict[tuple[str, bytes | int, int], ir.Constant] = {}


def _splat_constant(c: ir.Constant, width: int) -> ir.Value | None:
    """The number ``c`` in every lane, one object per type, value (a float's bits: 0.0 and
    -0.0 differ) and width; None when ``c`` is no number (undef, null)."""
    value = c.constant
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    bits = struct.pack("<d", value) if isinstance(value, float) else value
    key = (str(c.type), bits, width)
    out = _SPLATS.get(key)
    if out is None:
        out = _SPLATS[key] = ir.Constant(ir.VectorType(c.type, width), [value] * width)
    return out


@dataclass(frozen=True, slots=True)
class ScalarEmitter:
    """Emits krnl arithmetic at ``builder``'s position; ``declare`` provides the intrinsics
    and libm functions it calls."""

    builder: ir.IRBuilder
    declare: Declare
    dot4_bits: int = 0
    """The widest vector the target's byte dot-product instruction takes (0: none; see
    :attr:`~polyonnx.codegen.config.CodegenConfig.dot4_bits`)."""

    def unary(self, op: str, x: ir.Value, dtype: str) -> ir.Value:
        """``op(x)`` for an operand of ``dtype``."""
        table = _FLOAT_UNARY if is_float(dtype) else _INT_UNARY[is_signed(dtype)]
        emit = table.get(op)
        if emit is None:
            raise CodegenError(f"unary op {op} is not supported for {dtype}")
        return emit(self, x, dtype)

    def binary(self, op: str, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
        """``x op y`` for operands of ``dtype`` (of one type: see :meth:`match`)."""
        table = _FLOAT_BINARY if is_float(dtype) else _INT_BINARY[is_signed(dtype)]
        emit = table.get(op)
        if emit is None:
            raise CodegenError(f"binary op {op} is not supported for {dtype}")
        return emit(self, x, y, dtype)

    def multiply_add(self, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        """``acc + x * y`` of floats, which LLVM may compute as one FMA (one rounding)."""
        b = self.builder
        return b.fadd(acc, b.fmul(x, y, flags=FAST), flags=FAST)

    def dot4_add(self, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        """``acc + dot4(x, y)`` of int32s (krnl's ``dot4``: the four products of ``x``'s bytes,
        unsigned, by ``y``'s, signed): one ``vpdpbusd`` per vector register the target's
        instruction takes, else from the bytes (:meth:`dot4`)."""
        ty = acc.type
        lanes = ty.count if isinstance(ty, ir.VectorType) else 0
        per = self.dot4_bits // 32
        if not per or lanes < 4 or (lanes % per and lanes > per):
            return self.builder.add(acc, self.dot4(x, y))
        b = self.builder
        step = min(lanes, per)
        parts = []
        for first in range(0, lanes, step):
            pick = ir.Constant(ir.VectorType(I32, step), list(range(first, first + step)))
            a_, x_, y_ = (v if step == lanes else b.shuffle_vector(v, v, pick) for v in (acc, x, y))
            vty = ir.VectorType(I32, step)
            fn = self.declare(f"llvm.x86.avx512.vpdpbusd.{32 * step}", vty, [vty] * 3)
            parts.append(b.call(fn, [a_, x_, y_]))
        while len(parts) > 1:  # (concatenate the halves back)
            width = parts[0].type.count * 2
            parts = [
                b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, width), list(range(width))))
                for lo, hi in zip(parts[::2], parts[1::2], strict=True)
            ]
        return parts[0]

    def dot4(self, x: ir.Value, y: ir.Value) -> ir.Value:
        """krnl's ``dot4`` of int32s (scalars or vectors) from their bytes: widened, multiplied
        and summed four by four (LLVM makes ``vpmaddwd`` of it on x86)."""
        b = self.builder
        ty = x.type
        lanes = ty.count if isinstance(ty, ir.VectorType) else 1
        wide = ir.VectorType(I32, 4 * lanes)
        xb = b.zext(b.bitcast(x, ir.VectorType(ir.IntType(8), 4 * lanes)), wide)
        yb = b.sext(b.bitcast(y, ir.VectorType(ir.IntType(8), 4 * lanes)), wide)
        products = b.mul(xb, yb)
        quarters = [
            b.shuffle_vector(
                products,
                products,
                ir.Constant(ir.VectorType(I32, lanes), [4 * k + q for k in range(lanes)]),
            )
            for q in range(4)
        ]
        total = b.add(b.add(quarters[0], quarters[1]), b.add(quarters[2], quarters[3]))
        return (
            total
            if lanes > 1 or isinstance(ty, ir.VectorType)
            else b.extract_element(total, ir.Constant(I32, 0))
        )

    def cast(self, x: ir.Value, src: str, dst: str) -> ir.Value:
        """``x`` of dtype ``src`` converted to ``dst`` (bool: whether it is non-zero)."""
        b = self.builder
        if src == dst:
            return x
        to = like(x.type, value_type(dst))
        if dst == "bool":
            if is_float(src):
                return b.fcmp_unordered("!=", x, zero(x.type))
            return b.icmp_unsigned("!=", x, zero(x.type))
        if is_float(src) and is_float(dst):
            return (
                b.fpext(x, to)
                if np.dtype(dst).itemsize > np.dtype(src).itemsize
                else b.fptrunc(x, to)
            )
        if is_float(src):
            return self._float_to_int(x, dst, to)
        signed_src = is_signed(src)
        if is_float(dst):
            return b.sitofp(x, to) if signed_src else b.uitofp(x, to)
        width_src, width_dst = scalar_type(x.type).width, scalar_type(to).width
        if width_src == width_dst:
            return x
        if width_src > width_dst:
            return b.trunc(x, to)
        return b.sext(x, to) if signed_src else b.zext(x, to)

    def _float_to_int(self, x: ir.Value, dst: str, to: ir.Type) -> ir.Value:
        """A float converted to integer type ``dst`` as the machine converts it: toward zero,
        an 8- or 16-bit one through int32 and truncated (as C compilers, and so numpy and
        onnxruntime, do). LLVM calls a value out of range (NaN, 300 to uint8) poison, which
        later instructions would be free to turn into anything (a Cast to uint8 and back to
        float gave -2^31 for NaN in one kernel, 0 through memory); frozen, it is the
        instruction's own answer wherever it is read."""
        b = self.builder
        width = scalar_type(to).width
        if width < 32:
            wide = b.fptosi(x, like(x.type, I32))
            return b.trunc(_freeze(b, wide), to)
        return _freeze(b, b.fptosi(x, to) if is_signed(dst) else b.fptoui(x, to))

    def splat(self, v: ir.Value, width: int) -> ir.Value:
        """The scalar ``v`` in every lane of a ``width``-lane vector (a constant one as a
        vector constant)."""
        if isinstance(v, ir.Constant) and (c := _splat_constant(v, width)) is not None:
            return c
        b = self.builder
        vec_ty = ir.VectorType(v.type, width)
        one = b.insert_element(whole(vec_ty, ir.Undefined), v, _I32_ZERO)
        return b.shuffle_vector(one, whole(vec_ty, ir.Undefined), _zeros(width))

    def match(self, *values: ir.Value) -> list[ir.Value]:
        """Splat scalars to the width of any vector among ``values``."""
        widths = {v.type.count for v in values if isinstance(v.type, ir.VectorType)}
        if not widths:
            return list(values)
        w = widths.pop()
        return [v if isinstance(v.type, ir.VectorType) else self.splat(v, w) for v in values]

    def float_call(
        self, base: str, args: list[ir.Value], dtype: str, libm: bool = False
    ) -> ir.Value:
        """``llvm.<base>.<type>(args...)``, or with ``libm`` the C library's ``base`` (lane by
        lane on vectors; half precision through float)."""
        b = self.builder
        ty = args[0].type
        if libm and isinstance(ty, ir.VectorType):
            # libm has no vector entry points: call it lane by lane.
            out = whole(ty, ir.Undefined)
            for lane in range(ty.count):
                idx = ir.Constant(I32, lane)
                r = self.float_call(base, [b.extract_element(a, idx) for a in args], dtype, True)
                out = b.insert_element(out, r, idx)
            return out
        if libm:
            # libm has float and double versions; half goes through float.
            work = "float64" if dtype == "float64" else "float32"
            wty = value_type(work)
            name = base if work == "float64" else base + "f"
            xs = [b.fpext(a, wty) if dtype == "float16" else a for a in args]
            out = b.call(self.declare(name, wty, [wty] * len(xs)), xs)
            return b.fptrunc(out, value_type(dtype)) if dtype == "float16" else out
        suffix = _LLVM_SUFFIX[dtype]
        if isinstance(ty, ir.VectorType):
            suffix = f"v{ty.count}{suffix}"
        return b.call(self.declare(f"llvm.{base}.{suffix}", ty, [ty] * len(args)), args)

    def int_arith(self, op: str, x: ir.Value, y: ir.Value, signed: bool) -> ir.Value:
        """Integer ``div``, ``mod`` (the divisor's sign), ``fmod`` (the dividend's) and
        ``pow``; dividing by zero (or ``INT_MIN / -1``) yields 0 instead of trapping."""
        b = self.builder
        ty = x.type
        scalar = scalar_type(ty)
        zero_, one = zero(ty), const_like(ty, 1)
        if op == "pow":
            # Integer power by repeated squaring is not affine; go through double.
            dty = like(ty, ir.DoubleType())
            fx = b.sitofp(x, dty) if signed else b.uitofp(x, dty)
            fy = b.sitofp(y, dty) if signed else b.uitofp(y, dty)
            p = self.float_call("pow", [fx, fy], "float64")
            return b.fptosi(p, ty) if signed else b.fptoui(p, ty)
        # Division by zero (and INT_MIN / -1) traps on x86: divide by 1 there and yield 0.
        bad = b.icmp_unsigned("==", y, zero_)
        if signed:
            minus_one = const_like(ty, -1)
            int_min = const_like(ty, -(1 << (scalar.width - 1)))
            bad = b.or_(
                bad, b.and_(b.icmp_signed("==", y, minus_one), b.icmp_signed("==", x, int_min))
            )
        safe = b.select(bad, one, y)
        if op == "div":
            q = b.sdiv(x, safe) if signed else b.udiv(x, safe)
            return b.select(bad, zero_, q)
        r = b.srem(x, safe) if signed else b.urem(x, safe)
        if op == "mod" and signed:
            fix = b.and_(
                b.icmp_signed("!=", r, zero_),
                b.xor(b.icmp_signed("<", r, zero_), b.icmp_signed("<", y, zero_)),
            )
            r = b.select(fix, b.add(r, y), r)
        return b.select(bad, zero_, r)


def _freeze(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """LLVM's ``freeze`` of ``v`` (llvmlite's builder has none): a poison value becomes one
    fixed value of its type."""
    instr = ir.Instruction(b.block, v.type, "freeze", [v])
    b._insert(instr)  # noqa: SLF001 - llvmlite's own way to add an instruction
    return instr


# ---------------------------------------------------------------------- unary ops


def _intrinsic(name: str) -> UnaryEmit:
    return lambda s, x, dtype: s.float_call(name, [x], dtype)


def _libm(name: str) -> UnaryEmit:
    return lambda s, x, dtype: s.float_call(name, [x], dtype, libm=True)


def _sigmoid(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    b = s.builder
    e = s.float_call("exp", [b.fneg(x)], dtype)
    one = const_like(x.type, 1.0)
    return b.fdiv(one, b.fadd(one, e))


def _vecmath(op: str, double: UnaryEmit) -> UnaryEmit:
    """``op`` by :mod:`polyonnx.codegen.vecmath` in float32 (half precision converted to
    float32 and back), by ``double`` in float64."""
    compute = vecmath.FUNCTIONS[op]

    def emit(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
        b = s.builder
        if dtype == "float64":
            return double(s, x, dtype)
        if dtype == "float16":
            wide = compute(b, b.fpext(x, like(x.type, ir.FloatType())))
            return b.fptrunc(wide, x.type)
        return compute(b, x)

    return emit


def _is_inf(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    inf = const_like(x.type, float("inf"))
    return s.builder.fcmp_ordered("==", s.float_call("fabs", [x], dtype), inf)


def _float_sign(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    b = s.builder
    zero_, one = zero(x.type), const_like(x.type, 1.0)
    pos = b.select(b.fcmp_ordered(">", x, zero_), one, x)
    return b.select(b.fcmp_ordered("<", x, zero_), const_like(x.type, -1.0), pos)


#: The float ops LLVM has an intrinsic for (``round``: to nearest even, as ONNX rounds).
_INTRINSICS = {
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "floor": "floor",
    "ceil": "ceil",
    "round": "roundeven",
    "abs": "fabs",
}
#: The float ops :mod:`~polyonnx.codegen.vecmath` writes out for float32, with what the other
#: types call.
_VECMATH: dict[str, UnaryEmit] = {
    "exp": _intrinsic("exp"),
    "log": _intrinsic("log"),
    "tanh": _libm("tanh"),
    "erf": _libm("erf"),
    "sigmoid": _sigmoid,
}

_FLOAT_UNARY: dict[str, UnaryEmit] = {
    "neg": lambda s, x, dtype: s.builder.fneg(x),
    **{op: _intrinsic(name) for op, name in _INTRINSICS.items()},
    # (the other math functions: the C library's)
    **{op: _libm(op) for op in sorted(MATH_OPS - _INTRINSICS.keys() - _VECMATH.keys())},
    **{op: _vecmath(op, other) for op, other in _VECMATH.items()},
    "isnan": lambda s, x, dtype: s.builder.fcmp_unordered("uno", x, x),
    "isinf": _is_inf,
    "isposinf": lambda s, x, dtype: s.builder.fcmp_ordered(
        "==", x, const_like(x.type, float("inf"))
    ),
    "isneginf": lambda s, x, dtype: s.builder.fcmp_ordered(
        "==", x, const_like(x.type, float("-inf"))
    ),
    "sign": _float_sign,
}


def _signed_abs(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    b, zero_ = s.builder, zero(x.type)
    return b.select(b.icmp_signed("<", x, zero_), b.sub(zero_, x), x)


def _signed_sign(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    b, zero_ = s.builder, zero(x.type)
    gt = b.zext(b.icmp_signed(">", x, zero_), x.type)
    return b.select(b.icmp_signed("<", x, zero_), const_like(x.type, -1), gt)


def _unsigned_sign(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    return s.builder.zext(s.builder.icmp_unsigned("!=", x, zero(x.type)), x.type)


def _unchanged(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    return x


def _never(s: ScalarEmitter, x: ir.Value, dtype: str) -> ir.Value:
    return const_like(like(x.type, I1), 0)


def _int_unary(signed: bool) -> dict[str, UnaryEmit]:
    return {
        "not": lambda s, x, dtype: s.builder.xor(x, const_like(x.type, 1)),
        "bitnot": lambda s, x, dtype: s.builder.xor(x, const_like(x.type, -1)),
        "neg": lambda s, x, dtype: s.builder.sub(zero(x.type), x),
        "abs": _signed_abs if signed else _unchanged,
        "sign": _signed_sign if signed else _unsigned_sign,
        **dict.fromkeys(("isnan", "isinf", "isposinf", "isneginf"), _never),
        **dict.fromkeys(("floor", "ceil", "round"), _unchanged),
    }


_INT_UNARY = {signed: _int_unary(signed) for signed in (False, True)}
"""Integer unary ops, by whether the operand is signed."""


# ---------------------------------------------------------------------- binary ops


def _instr(name: str, **flags: tuple[str, ...]) -> BinaryEmit:
    """The builder's instruction ``name`` on the two operands."""
    return lambda s, x, y, dtype: getattr(s.builder, name)(x, y, **flags)


def _compare(method: str, predicate: str) -> BinaryEmit:
    return lambda s, x, y, dtype: getattr(s.builder, method)(predicate, x, y)


def _float_calls(name: str) -> BinaryEmit:
    return lambda s, x, y, dtype: s.float_call(name, [x, y], dtype)


def _float_pick(predicate: str) -> BinaryEmit:
    """``max`` (``>``) or ``min`` (``<``) of floats: NaN if either is NaN, as ONNX's reference
    (numpy) gives. ``select(x > y, x, y)`` is the x86 ``maxps``/``minps`` instruction, which
    gives ``y`` when either is NaN; only ``x`` needs the extra check, so in a running
    ``acc = max(x, acc)`` the check stays off the chain through ``acc``. (LLVM's
    ``llvm.maximum`` also orders -0 below +0, which took two more instructions per use on x86;
    numpy's ``maximum`` does not either.)"""

    def emit(s: ScalarEmitter, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
        b = s.builder
        pick = b.select(b.fcmp_ordered(predicate, x, y), x, y)
        return b.select(b.fcmp_unordered("uno", x, x), x, pick)

    return emit


def _float_pick_number(predicate: str) -> BinaryEmit:
    """``max`` (``>``) or ``min`` (``<``) of a float ``x`` and a ``y`` known not to be NaN (a
    constant): ``select(y > x, y, x)`` is ``x`` when ``x`` is NaN, one compare and one select,
    x86's ``maxps y, x``, where :func:`_float_pick` takes four instructions (a ReLU6
    epilogue: 8 per vector -> 2)."""

    def emit(s: ScalarEmitter, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
        b = s.builder
        return b.select(b.fcmp_ordered(predicate, y, x), y, x)

    return emit


def _float_mod(s: ScalarEmitter, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
    """Python-style: the result takes the divisor's sign."""
    b = s.builder
    r = b.frem(x, y)
    zero_ = zero(x.type)
    fix = b.and_(
        b.fcmp_ordered("!=", r, zero_),
        b.xor(b.fcmp_ordered("<", r, zero_), b.fcmp_ordered("<", y, zero_)),
    )
    return b.select(fix, b.fadd(r, y), r)


_FLOAT_BINARY: dict[str, BinaryEmit] = {
    "add": _instr("fadd"),
    "sub": _instr("fsub"),
    "mul": _instr("fmul"),
    "div": _instr("fdiv"),
    "max": _float_pick(">"),
    "min": _float_pick("<"),
    "max_number": _float_pick_number(">"),
    "min_number": _float_pick_number("<"),
    "pow": _float_calls("pow"),
    "fmod": _instr("frem"),
    "mod": _float_mod,
    **{
        op: _compare("fcmp_ordered", p)
        for op, p in (("eq", "=="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))
    },
    "ne": _compare("fcmp_unordered", "!="),
}


def _pick(compare: str, predicate: str) -> BinaryEmit:
    """``x`` where ``x predicate y`` holds, else ``y`` (integer max and min)."""

    def emit(s: ScalarEmitter, x: ir.Value, y: ir.Value, dtype: str) -> ir.Value:
        return s.builder.select(getattr(s.builder, compare)(predicate, x, y), x, y)

    return emit


def _int_arith(op: str, signed: bool) -> BinaryEmit:
    return lambda s, x, y, dtype: s.int_arith(op, x, y, signed)


def _int_binary(signed: bool) -> dict[str, BinaryEmit]:
    compare = "icmp_signed" if signed else "icmp_unsigned"
    return {
        "add": _instr("add"),
        "sub": _instr("sub"),
        "mul": _instr("mul"),
        **dict.fromkeys(("and", "bitand"), _instr("and_")),
        **dict.fromkeys(("or", "bitor"), _instr("or_")),
        **dict.fromkeys(("xor", "bitxor"), _instr("xor")),
        "shl": _instr("shl"),
        "shr": _instr("ashr" if signed else "lshr"),
        **{
            op: _compare(compare, p)
            for op, p in (
                ("eq", "=="),
                ("ne", "!="),
                ("lt", "<"),
                ("le", "<="),
                ("gt", ">"),
                ("ge", ">="),
            )
        },
        "max": _pick(compare, ">"),
        "min": _pick(compare, "<"),
        **{op: _int_arith(op, signed) for op in ("div", "mod", "fmod", "pow")},
        "dot4": lambda s, x, y, dtype: s.dot4(x, y),
    }


_INT_BINARY = {signed: _int_binary(signed) for signed in (False, True)}
"""Integer binary ops, by whether the operands are signed."""
