"""What codegen and the schedules are told about the target: the host's caches, or defaults;
LLVM's optimiser."""

from __future__ import annotations

import gc
import os

import llvmlite.binding as llvm
import pytest

import polyonnx
from polyonnx.codegen.target import (
    L1_DATA_BYTES,
    L2_BYTES,
    l1_data_bytes,
    l2_bytes,
    optimize,
    prefetch_above,
    target_machine,
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


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_optimize_frees_its_pass_pipeline() -> None:
    # llvmlite's ModulePassManager never freed its O3 pipeline: 45 KB per optimised module.
    options = polyonnx.Options()
    tm = target_machine(options, jit=True)

    def once() -> None:
        optimize(llvm.parse_assembly("define i32 @f(i32 %x) {\n  ret i32 %x\n}"), tm, 3)

    for _ in range(20):
        once()
    gc.collect()
    before = _rss_bytes()
    for _ in range(300):
        once()
    gc.collect()
    assert _rss_bytes() - before < 4 << 20  # (13 MB before the fix)


def test_features_overrule_a_cpu_name_from_a_masked_model_number() -> None:
    """A hypervisor's model number can name a desktop core where the features are a Xeon's
    (AMX tiles): the code is scheduled for the Xeon; other names are kept."""
    from polyonnx.codegen.target import cpu_for_features

    xeon = "+avx512f,+avx512fp16,+amx-bf16,+amx-int8,+amx-tile"
    assert cpu_for_features("rocketlake", xeon) == "sapphirerapids"
    assert cpu_for_features("icelake-client", xeon + ",+amx-fp16") == "graniterapids"
    assert cpu_for_features("emeraldrapids", xeon) == "emeraldrapids"
    assert cpu_for_features("rocketlake", "+avx512f,+avx512fp16,-amx-tile") == "rocketlake"
    assert cpu_for_features("znver5", "+avx512f,+avx512vnni") == "znver5"
