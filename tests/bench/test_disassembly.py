"""Instruction classes per architecture, objdump's output parsed, and real libraries read:
the host's, and RISC-V's (whose vector instructions binutils 2.40 decodes only without LLVM's
mapping symbols)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.bench import disassembly
from polyonnx.bench.disassembly import (
    Mix,
    binutil,
    classify,
    function_sizes,
    inspect,
    instruction_classes,
    sections,
)
from polyonnx.codegen.aot import write_library
from polyonnx.codegen.target import architecture, host_cpu
from polyonnx.testing.emulated import TARGETS
from polyonnx.testing.examples import conv_model


@pytest.mark.parametrize(
    "arch, mnemonic, operands, cls",
    [
        ("aarch64", "fmla", "v0.4s, v1.4s, v2.s[0]", "vector_fma"),
        ("aarch64", "fmla", "z0.s, p0/m, z1.s, z2.s", "vector_fma"),
        ("aarch64", "fmadd", "s0, s1, s2, s3", "scalar_float"),
        ("aarch64", "ld1r", "{v0.4s}, [x8]", "vector_memory"),
        ("aarch64", "str", "q0, [x0, #16]", "vector_memory"),
        ("aarch64", "fmax", "v0.4s, v0.4s, v1.4s", "vector_other"),
        ("aarch64", "ldr", "s0, [x1]", "scalar_float"),
        ("aarch64", "ldr", "x0, [x1]", "other"),
        ("aarch64", "add", "x0, x1, x2", "other"),
        ("powerpc64le", "xvmaddasp", "vs0,vs1,vs2", "vector_fma"),
        ("powerpc64le", "xvmaddmdp", "vs0,vs1,vs2", "vector_fma"),
        ("powerpc64le", "lxvwsx", "vs0,0,r3", "vector_memory"),
        ("powerpc64le", "stxv", "vs0,16(r3)", "vector_memory"),
        ("powerpc64le", "xxsel", "vs0,vs1,vs2,vs3", "vector_other"),
        ("powerpc64le", "xsmaddasp", "vs0,vs1,vs2", "scalar_float"),
        ("powerpc64le", "lfs", "f0,0(r3)", "scalar_float"),
        ("powerpc64le", "xori", "r3,r3,1", "other"),
        ("riscv64", "vfmacc.vf", "v8,fa5,v16", "vector_fma"),
        ("riscv64", "vfmadd.vv", "v8,v9,v10", "vector_fma"),
        ("riscv64", "vle32.v", "v8,(a0)", "vector_memory"),
        ("riscv64", "vsse32.v", "v8,(a0),a1", "vector_memory"),
        ("riscv64", "vs1r.v", "v8,(a0)", "vector_memory"),
        ("riscv64", "vsetvli", "t0,a0,e32,m1,ta,ma", "vector_other"),
        ("riscv64", "vsll.vi", "v8,v8,2", "vector_other"),
        ("riscv64", "fmadd.s", "fa0,fa1,fa2,fa3", "scalar_float"),
        ("riscv64", "fence", "rw,rw", "other"),
        ("x86_64", "vfmadd231ps", "(%rax),%zmm1,%zmm0", "vector_fma"),
        ("x86_64", "vfmadd231ss", "%xmm2,%xmm1,%xmm0", "scalar_float"),
        ("x86_64", "vmovups", "%ymm0,(%rdi)", "vector_memory"),
        ("x86_64", "vbroadcastss", "(%rsi),%zmm1", "vector_memory"),
        ("x86_64", "vaddps", "%ymm1,%ymm2,%ymm3", "vector_other"),
        ("x86_64", "vpminsd", "%xmm1,%xmm2,%xmm3", "vector_other"),
        ("x86_64", "addq", "$0x8,%rax", "other"),
    ],
)
def test_classes(arch, mnemonic, operands, cls):
    assert classify(arch, mnemonic, operands) == cls


def test_unknown_architecture_is_named():
    with pytest.raises(ValueError, match="no instruction classes for 'mips'"):
        classify("mips", "add", "")


LISTING = """
lib.so:     file format elf64-littleaarch64


Disassembly of section .plt:

0000000000000ae0 <polyonnx_k_0@plt>:
 ae0:	adrp	x16, 20000 <x>

Disassembly of section .text:

0000000000000c58 <polyonnx_k_0>:
 c58:	ldp	q0, q1, [x0]
 c5c:	fmla	v0.4s, v1.4s, v2.s[0]
 c60:	fmla	v0.4s, v1.4s, v2.s[1]
 c64:	ret
 c68:	.inst	0x00000000 ; undefined

0000000000000c6c <helper>:
 c6c:	fadd	s0, s0, s1
"""


def test_listing_is_read_per_function():
    classes = instruction_classes(LISTING, "aarch64")
    assert set(classes) == {"polyonnx_k_0", "helper"}  # .plt's stub is not code of ours
    assert Mix.of(classes["polyonnx_k_0"]) == Mix(vector_fma=2, vector_memory=1, other=1)
    assert Mix.of(classes["helper"]).scalar_float == 1


def test_symbols_and_sections_are_read():
    symbols = (
        "0000000000000c58 g     F .text\t0000000000000014              polyonnx_k_0\n"
        "0000000000000c6c l     F .text\t0000000000000004              .hidden helper\n"
        "0000000000002000 g     O .rodata\t00000000000000fa              table\n"
    )
    assert function_sizes(symbols) == {"polyonnx_k_0": 0x14, "helper": 4}
    headers = (
        "Idx Name          Size      VMA               LMA               File off  Algn\n"
        "  9 .text         000005c4  0000000000000bf0  0000000000000bf0  00000bf0  2**4\n"
        "                  CONTENTS, ALLOC, LOAD, READONLY, CODE\n"
    )
    assert sections(headers) == {".text": 0x5C4}


def test_mix_shares():
    mix = Mix(vector_fma=1, vector_memory=1, other=2)
    assert mix.total == 4 and mix.share("vector_fma") == 0.25 and mix.vector_share == 0.5
    assert (mix + mix).counts()["other"] == 4
    assert Mix().share("vector_fma") == 0.0


def test_missing_binutils_name_the_package(monkeypatch):
    monkeypatch.setattr(disassembly.shutil, "which", lambda _: None)
    with pytest.raises(FileNotFoundError, match="gcc-aarch64-linux-gnu"):
        binutil("aarch64", "objdump")
    with pytest.raises(FileNotFoundError, match="package binutils"):
        binutil("x86_64", "objdump")


def _needs(arch: str) -> None:
    try:
        binutil(arch, "objdump")
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_host_library_kernels(tmp_path):
    arch = architecture(host_cpu()[0])
    if arch not in ("x86_64", "aarch64", "powerpc64le", "riscv64") or not shutil.which("cc"):
        pytest.skip(f"no instruction classes or C compiler for {arch}")
    _needs(arch)
    compiled = polyonnx.compile(conv_model(), polyonnx.Options(num_threads=1))
    lib = inspect(write_library(compiled, tmp_path / "conv.so"), arch)
    (symbol,) = compiled.symbols
    fn = lib.function(symbol)
    assert fn is not None and fn.size > 0 and fn.mix.total > 0
    assert fn.mix.vector_share > 0  # a conv of float32 is vector code on every target
    assert lib.section(".text") >= fn.size and lib.file_bytes > lib.section(".text")


def _matmul_model():
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "mm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
            [w],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )


def test_riscv_vector_code_is_decoded(tmp_path):
    target = TARGETS["riscv64"]
    if target.unavailable():
        pytest.skip(target.unavailable())
    _needs("riscv64")
    compiled = polyonnx.compile(_matmul_model(), target.options(num_threads=1))
    lib = inspect(write_library(compiled, tmp_path / "mm.so"), "riscv64")
    fn = lib.function(compiled.symbols[0])
    assert fn is not None and fn.mix.vector_fma > 0 and fn.mix.vector_memory > 0
