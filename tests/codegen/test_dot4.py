"""krnl's ``dot4`` (four unsigned-by-signed byte products summed into an int32): x86's
``vpdpbusd`` where the target has VNNI, its bytes widened and multiplied elsewhere, the same
sums either way."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir as lir

import polyonnx
from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.codegen.target import create_machine, dot4_bits, host_cpu, optimize
from polyonnx.krnl.ir import Access, Aff, Binary, Buffer, Const, Kernel, Load, Loop, Stmt
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import default_schedule

AVX512_VNNI = "+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512vnni"
AVX_VNNI = "+avx2,+fma,+avxvnni"


def _gemm(rows: int, columns: int, quads: int) -> tuple[Kernel, tuple]:
    """``c[i, j] = sum over k of dot4(a[i, k], b[k, j])`` (int32s of four bytes each), and its
    loops as the default strategy schedules them (register tiles, a vector loop along j)."""
    i, j, k = Aff.var("i"), Aff.var("j"), Aff.var("k")
    at = Access("c", (i, j))
    update = Load("c", (i, j), "int32") + Binary(
        "dot4", Load("a", (i, k), "int32"), Load("b", (k, j), "int32")
    )
    kernel = Kernel(
        "dot4_gemm",
        (
            Buffer("a", "int32", (rows, quads), "input"),
            Buffer("b", "int32", (quads, columns), "input"),
            Buffer("c", "int32", (rows, columns), "output"),
        ),
        (
            Loop(
                "i",
                0,
                rows,
                (
                    Loop(
                        "j",
                        0,
                        columns,
                        (
                            Stmt("S0", at, Const(0, "int32")),
                            Loop("k", 0, quads, (Stmt("S1", at, update),)),
                        ),
                    ),
                ),
            ),
        ),
    )
    return kernel, la.from_isl(build_ast(default_schedule(kernel).schedule))


def _operands(rows: int, columns: int, quads: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (rows, 4 * quads), dtype=np.uint8)
    b = rng.integers(-128, 128, (4 * quads, columns), dtype=np.int8)
    packed_b = b.reshape(quads, 4, columns).transpose(0, 2, 1).copy().view(np.int32)[..., 0]
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    return a.view(np.int32), np.ascontiguousarray(packed_b), want


def _host_features(*drop: str) -> str:
    features = host_cpu()[2]
    for name in drop:
        features = features.replace(f"+{name}", f"-{name}")
    return features


@pytest.mark.parametrize("vnni", ["host", "none"])
def test_dot4_sums_the_byte_products(vnni: str) -> None:
    """A GEMM of ``dot4``s (20 columns: vector tiles and a scalar remainder) gives the int64
    product of the bytes, with the host's VNNI instruction and from the bytes."""
    options = polyonnx.Options(
        features=None if vnni == "host" else _host_features("avx512vnni", "avxvnni")
    )
    if vnni == "none":
        assert dot4_bits(options) == 0
    kernel, ast = _gemm(9, 20, 24)
    a, b, want = _operands(9, 20, 24)
    got = np.zeros_like(want)
    kernel_callable(kernel, ast, options)({"a": a, "b": b, "c": got})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("features", "bits", "register"),
    [(AVX512_VNNI, 512, "%zmm"), (AVX_VNNI, 256, "%ymm"), ("+avx2,+fma", 0, None)],
    ids=["avx512-vnni", "avx-vnni", "avx2"],
)
def test_dot4_is_vpdpbusd_where_the_target_has_it(
    features: str, bits: int, register: str | None
) -> None:
    """The target's features decide: AVX512-VNNI's ``vpdpbusd`` on zmm registers, AVX-VNNI's
    on ymm, and without VNNI no ``vpdpbusd`` at all (``vpmaddwd`` of the widened bytes)."""
    triple = host_cpu()[0]
    if not triple.startswith("x86_64"):
        pytest.skip("an x86 test")
    options = polyonnx.Options(cpu="x86-64", features=features)
    assert dot4_bits(options) == bits
    kernel, ast = _gemm(8, 64, 16)
    module = lir.Module()
    emit_kernel(module, kernel, ast, CodegenConfig(vector_bits=512, dot4_bits=bits))
    tm = create_machine(triple, "x86-64", features, 3, jit=False)
    ref = llvm.parse_assembly(str(module))
    optimize(ref, tm, 3)
    asm = tm.emit_assembly(ref)
    dots = [line for line in asm.splitlines() if "vpdpbusd" in line]
    if register is None:
        assert not dots and "vpmaddwd" in asm
    else:
        assert dots and all(register in line for line in dots)
