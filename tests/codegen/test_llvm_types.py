"""Shared LLVM constants: one object per value (llvmlite formats each object's text again)."""

from __future__ import annotations

from llvmlite import ir

from polyonnx.codegen.llvm_types import constant
from polyonnx.codegen.scalar import ScalarEmitter
from polyonnx.krnl.ir import Const


def test_equal_constants_are_one_object_and_signed_zeros_are_two() -> None:
    assert constant(Const(0.5, "float32")) is constant(Const(0.5, "float32"))
    assert constant(Const(0.5, "float32")) is not constant(Const(0.5, "float64"))
    zero, negative = constant(Const(0.0, "float32")), constant(Const(-0.0, "float32"))
    assert zero is not negative
    assert str(negative) == "float 0x8000000000000000"
    # A bool and an integer of the same value are typed apart.
    assert str(constant(Const(True, "bool"))) == "i1 1"
    assert str(constant(Const(1, "int32"))) == "i32 1"


def test_a_constant_splats_to_a_vector_constant_and_a_value_to_a_shuffle() -> None:
    fn = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), [ir.FloatType()]), "f")
    scalars = ScalarEmitter(ir.IRBuilder(fn.append_basic_block()), lambda *_: fn)
    two = scalars.splat(constant(Const(2.0, "float32")), 8)
    assert two is scalars.splat(constant(Const(2.0, "float32")), 8)
    assert isinstance(two, ir.Constant) and str(two.type) == "<8 x float>"
    assert str(scalars.splat(constant(Const(-0.0, "float32")), 8)).count("0x80000") == 8
    assert isinstance(scalars.splat(fn.args[0], 8), ir.instructions.Instruction)
