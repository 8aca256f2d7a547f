"""What codegen and the schedules are told about the target: the host's caches, or defaults."""

from __future__ import annotations

import polyonnx
from polyonnx.codegen.target import (
    L1_DATA_BYTES,
    L2_BYTES,
    l1_data_bytes,
    l2_bytes,
    prefetch_above,
)
from polyonnx.schedule.strategies.tiling import Tiling


def test_the_host_l1_sizes_the_cache_chunks() -> None:
    host = l1_data_bytes(polyonnx.Options())
    assert 8 * 1024 <= host <= 4 * 1024 * 1024  # read from the OS, or the default
    assert Tiling.for_vector_bits(512, 1, host).chunk_bytes == host // 2


def test_another_target_gets_the_default_l1() -> None:
    for options in (
        polyonnx.Options(target="aarch64-unknown-linux-gnu"),
        polyonnx.Options(cpu="x86-64-v2"),
    ):
        assert l1_data_bytes(options) == L1_DATA_BYTES


def test_weights_beyond_a_quarter_of_l2_are_prefetched() -> None:
    host = polyonnx.Options()
    assert l1_data_bytes(host) < l2_bytes(host) <= 64 * 1024 * 1024
    assert prefetch_above(host) == l2_bytes(host) // 4
    cross = polyonnx.Options(target="aarch64-unknown-linux-gnu")
    assert l2_bytes(cross) == L2_BYTES and prefetch_above(cross) == L2_BYTES // 4


def test_a_named_cpu_brings_its_own_features() -> None:
    """``--cpu haswell`` on an AVX-512 host means AVX2 code, not the host's features."""
    from polyonnx.codegen.target import host_cpu, machine, vector_bits

    if not host_cpu()[0].startswith("x86_64"):
        return
    assert vector_bits(polyonnx.Options(cpu="haswell")) == 256
    assert vector_bits(polyonnx.Options(cpu="x86-64")) == 128
    assert vector_bits(polyonnx.Options(cpu="skylake-avx512")) == 512
    assert machine(polyonnx.Options(cpu="haswell", features="+avx512f"))[2] == "+avx512f"


def test_other_architectures_vectors_and_registers() -> None:
    from polyonnx.codegen.target import vector_bits, vector_registers

    for triple, registers in (
        ("aarch64-linux-gnu", 32),
        ("powerpc64le-linux-gnu", 64),
        ("riscv64-linux-gnu", 32),
    ):
        options = polyonnx.Options(target=triple)
        assert (vector_bits(options), vector_registers(options)) == (128, registers)


def test_riscv64_always_has_hardware_floats() -> None:
    """Without F and D, LLVM calls soft-float routines (``__addsf3``) for float arithmetic, and
    the objects would not link with the lp64d C library."""
    from polyonnx.codegen.target import machine

    assert machine(polyonnx.Options(target="riscv64-linux-gnu"))[2] == "+m,+a,+f,+d,+c,+v"
    assert machine(polyonnx.Options(target="riscv64-linux-gnu", features="-v"))[2] == (
        "+m,+a,+f,+d,+c,-v"
    )
    assert machine(polyonnx.Options(target="aarch64-linux-gnu", features="+sve"))[2] == "+sve"
