"""LLVM types and constants as codegen spells them: the register and memory type of each krnl
dtype, scalar and vector constants, external declarations and the one instruction llvmlite's
builder cannot make (``load volatile``).

Example:
    >>> str(value_type("bool")), str(memory_type("bool"))
    ('i1', 'i8')
    >>> str(const_like(ir.VectorType(I32, 4), -1))
    '<4 x i32> <i32 4294967295, i32 4294967295, i32 4294967295, i32 4294967295>'
    >>> str(zero(ir.VectorType(ir.FloatType(), 8)))
    '<8 x float> zeroinitializer'
"""

from __future__ import annotations

import struct

from llvmlite import ir

from polyonnx.krnl.ir import ENCODED_DTYPES, FLOAT_DTYPES, Const

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()

_I64_CONSTANTS: dict[int, ir.Constant] = {}


def i64(value: int) -> ir.Constant:
    """The i64 constant ``value``, one object per value: index arithmetic makes hundreds of
    thousands of them per model, and llvmlite formats each object's text once (a constant
    is immutable: any number of instructions may share it)."""
    value = int(value)
    c = _I64_CONSTANTS.get(value)
    if c is None:
        c = _I64_CONSTANTS[value] = ir.Constant(I64, value)
    return c


FAST = ("contract",)
"""The fast-math flags of an accumulation's multiply-add and of the vector math's polynomials:
LLVM may fuse them into FMAs, never reassociate them (see :mod:`polyonnx.codegen.scalar`)."""

_SCALAR_TYPES: dict[str, ir.Type] = {
    "float16": ir.HalfType(),
    "float32": ir.FloatType(),
    "float64": ir.DoubleType(),
    "int8": I8,
    "uint8": I8,
    "int16": I16,
    "uint16": I16,
    "int32": I32,
    "uint32": I32,
    "int64": I64,
    "uint64": I64,
    "bool": I1,
}
# An encoded type is its code in registers and memory (see krnl.ir.ENCODED_DTYPES).
_SCALAR_TYPES.update({d: _SCALAR_TYPES[storage] for d, storage in ENCODED_DTYPES.items()})


def value_type(dtype: str) -> ir.Type:
    """The LLVM type a scalar of ``dtype`` has in registers (bool is i1)."""
    return _SCALAR_TYPES[dtype]


def memory_type(dtype: str) -> ir.Type:
    """The LLVM type a scalar of ``dtype`` has in memory (bool is a byte)."""
    return I8 if dtype == "bool" else _SCALAR_TYPES[dtype]


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` is a floating-point krnl dtype."""
    return dtype in FLOAT_DTYPES


def is_signed(dtype: str) -> bool:
    """Whether ``dtype`` is a signed integer krnl dtype (an int4's code is not)."""
    return dtype.startswith("int") and dtype not in ENCODED_DTYPES


def scalar_type(ty: ir.Type) -> ir.Type:
    """The element type of a vector type, else ``ty`` itself."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def like(ty: ir.Type, scalar: ir.Type) -> ir.Type:
    """``scalar``, as a vector of the same width when ``ty`` is a vector."""
    return ir.VectorType(scalar, ty.count) if isinstance(ty, ir.VectorType) else scalar


def const_like(ty: ir.Type, value: float | int) -> ir.Constant:
    """``value`` as a constant of ``ty`` (every lane of a vector; negative integers in two's
    complement of the width)."""
    s = scalar_type(ty)
    if isinstance(s, ir.IntType) and value < 0:
        value &= (1 << s.width) - 1
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def whole(ty: ir.Type, value: None | object) -> ir.Constant:
    """``zeroinitializer`` (None) or ``undef`` (``ir.Undefined``) of ``ty`` in one word:
    llvmlite spells a vector constant element by element (a broadcast printed 48 words)."""
    out = ir.Constant(ty, None)
    out.constant = value
    return out


def zero(ty: ir.Type) -> ir.Constant:
    """The zero of ``ty`` (a scalar or vector, integer or float)."""
    if isinstance(ty, ir.VectorType):
        return whole(ty, None)
    return const_like(
        ty, 0.0 if isinstance(scalar_type(ty), ir.HalfType | ir.FloatType | ir.DoubleType) else 0
    )


_CONSTANTS: dict[tuple[str, bytes | int], ir.Constant] = {}


def constant(c: Const) -> ir.Constant:
    """A krnl constant as an LLVM constant of its register type; one object per dtype and
    value (keyed by the bits of a float: 0.0 and -0.0 differ), since llvmlite formats each
    object's text again (a float as hex: a Winograd kernel's coefficients, thousands of
    times per model)."""
    bits = struct.pack("<d", float(c.value)) if is_float(c.dtype) else int(c.value)
    key = (c.dtype, bits)
    out = _CONSTANTS.get(key)
    if out is None:
        out = _CONSTANTS[key] = _constant(c)
    return out


def _constant(c: Const) -> ir.Constant:
    ty = value_type(c.dtype)
    if is_float(c.dtype):
        return ir.Constant(ty, float(c.value))
    if c.dtype == "bool":
        return ir.Constant(I1, int(bool(c.value)))
    v = int(c.value)
    if v < 0:  # two's complement for the width
        v &= (1 << ty.width) - 1
    return ir.Constant(ty, v)


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    """The module's declaration of the external function ``name`` (made on first use)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name=name)


class _VolatileLoad(ir.LoadInstr):
    """``load volatile`` (llvmlite's builder has no flag for it)."""

    def descr(self, buf: list[str]) -> None:
        text: list[str] = []
        super().descr(text)
        buf.append(text[0].replace("load ", "load volatile ", 1))


def volatile_load(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type, align: int) -> ir.LoadInstr:
    """``load volatile ty, ptr`` at the builder's position: LLVM neither merges nor removes
    it, so each one stays a load of its own."""
    v = _VolatileLoad(b.block, ptr, typ=ty)
    v.align = align
    b._insert(v)
    return v


class _LoopID(ir.values.MDValue):
    """A loop's own metadata node, ``!N = distinct !{!N, hints...}`` (LLVM wants the node to
    name itself first; llvmlite's uniqued nodes cannot)."""

    def __init__(self, module: ir.Module, hints: tuple[ir.values.MDValue, ...]) -> None:
        super().__init__(module, (), name=str(len(module.metadata)))
        self.hints = hints

    def descr(self, buf: list[str]) -> None:
        refs = ", ".join(h.get_reference() for h in (self, *self.hints))
        buf += (f"distinct !{{ {refs} }}", "\n")

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def no_unroll(latch: ir.Instruction) -> None:
    """Ask LLVM not to unroll the loop whose back edge is ``latch``."""
    module = latch.module
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    latch.set_metadata("llvm.loop", _LoopID(module, (hint,)))
