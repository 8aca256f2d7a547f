"""LLVM targets: initialisation, target machines for the host or a cross triple, optimisation."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.binding.ffi as llvm_ffi

from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.isa import architecture, is_x86, x86_vector_registers
from polyonnx.codegen.parallel_runtime import thread_count
from polyonnx.errors import CodegenError
from polyonnx.options import Options

# llvmlite holds global state; one lock serialises everything that touches it.
LLVM_LOCK = threading.RLock()


@contextmanager
def llvm_quiescent() -> Iterator[None]:
    """No thread in LLVM: :data:`LLVM_LOCK` and llvmlite's own C-API lock, held while the
    process forks. llvmlite calls made outside LLVM_LOCK (the host's triple, say) take only
    llvmlite's lock, and a child forked while another thread holds it waits for it forever
    (the forking thread, the child's only one, may take it again: it is reentrant)."""
    with LLVM_LOCK, llvm_ffi.lib._lock:  # (llvmlite has no public name for its lock)
        yield


#: The machine scheduler's largest region (``-dag-maps-huge-region``, see :func:`init_llvm`).
SCHEDULER_REGION_LIMIT = 200


@functools.cache
def init_llvm() -> None:
    """Initialise LLVM's native target once (``llvm.initialize()`` is gone in llvmlite 0.45+)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    # The machine scheduler's dependence graph grows quadratically with a block's memory
    # operations up to this many (LLVM's default: 1000), and a conv's unrolled zero-border
    # fill has thousands of stores in one block (see docs/performance.md, Compile time).
    llvm.set_option("", f"-dag-maps-huge-region={SCHEDULER_REGION_LIMIT}")


@functools.cache
def _init_all_targets() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.cache
def llvm_version() -> str:
    """The version of the LLVM that llvmlite links, e.g. ``"15.0.7"``."""
    return ".".join(str(v) for v in llvm.llvm_version_info)


@functools.cache
def host_cpu() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of this machine (asked once: every kernel's
    codegen configuration starts from it). The name is LLVM's, unless the features
    contradict it (:func:`cpu_for_features`)."""
    init_llvm()
    features = llvm.get_host_cpu_features().flatten()
    return llvm.get_process_triple(), cpu_for_features(cpu_by_model_number(), features), features


def cpu_by_model_number() -> str:
    """LLVM's own name for the host CPU, read from CPUID's family and model (``host_cpu``'s
    name unless the features overrule it: :func:`cpu_for_features`)."""
    init_llvm()
    return llvm.get_host_cpu_name()


def enabled_features(features: str) -> set[str]:
    """The features an LLVM feature string switches on (``+avx2,-avx512f`` -> ``{"avx2"}``).

    Example:
        >>> sorted(enabled_features("+avx2,-avx512f,+fma"))
        ['avx2', 'fma']
    """
    return {f[1:] for f in features.split(",") if f.startswith("+")}


#: x86 CPUs with AMX tiles, as LLVM names them (Emerald Rapids is Sapphire Rapids' model).
AMX_CPUS = frozenset(
    {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"}
)


def cpu_for_features(name: str, features: str) -> str:
    """The CPU LLVM should schedule and tune for, given the host's name and its features.

    LLVM names the host from CPUID's family and model, which a hypervisor may report as
    another part's: KVM has shown a Xeon with AMX and AVX512-FP16 as model 167, which LLVM
    calls ``rocketlake``, a desktop core, and code scheduled for that ran ResNet50 6% slower
    than for ``sapphirerapids`` (docs/performance.md, Codegen). The features come from
    CPUID's feature bits, which a guest must see truly to use them: where they hold AMX tiles
    and the name is no AMX CPU, the name is the first server generation with those features.

    Example:
        >>> cpu_for_features("rocketlake", "+avx512f,+avx512fp16,+amx-tile")
        'sapphirerapids'
        >>> cpu_for_features("rocketlake", "+avx512f,+amx-tile,+amx-fp16")
        'graniterapids'
        >>> cpu_for_features("znver5", "+avx512f")
        'znver5'
    """
    enabled = enabled_features(features)
    if "amx-tile" not in enabled or name in AMX_CPUS:
        return name
    return "graniterapids" if "amx-fp16" in enabled else "sapphirerapids"


def vector_bits(options: Options) -> int:
    """The widest vector register of the target: on x86, 512 (AVX-512), 256 (AVX) or 128 bits
    (SSE); elsewhere 128: NEON, VSX, and SVE and RVV at their minimum length (LLVM lowers
    fixed-length vectors to them, and nothing tells a longer one at compile time)."""
    triple, cpu, features = machine(options)
    if not is_x86(triple):
        return 128
    if not features:  # a CPU by name: what LLVM knows of it
        return _probed_vector_bits(triple, cpu)
    enabled = enabled_features(features)
    if "avx512f" in enabled:
        return 512
    if "avx" in enabled or "avx2" in enabled:
        return 256
    return 128


def vector_registers(options: Options) -> int:
    """The target's vector registers: 32 on x86 with AVX-512, 16 without (x86-64's ``xmm``
    and ``ymm`` registers); 32 on AArch64 (NEON and SVE) and RISC-V (V); 64 on POWER (VSX)."""
    triple = machine(options)[0]
    if is_x86(triple):
        return x86_vector_registers(vector_bits(options))
    return 64 if architecture(triple).startswith("powerpc") else 32


def dot4_bits(options: Options) -> int:
    """The widest vector (bits) the target's unsigned-by-signed byte dot product takes: x86's
    ``vpdpbusd`` sums four ``uint8 * int8`` products into each int32 lane, on 512-bit vectors
    with AVX512-VNNI (and AVX-512 vectors), on 256-bit ones with AVX-VNNI or AVX512-VNNI's VL
    forms; 0 without (other architectures, and a CPU named without features: llvmlite cannot
    list those). Quantized MatMuls sum their bytes with it (:mod:`polyonnx.graph.passes.qlinear`)
    where it is; elsewhere their exact float32 form is as fast."""
    triple, _, features = machine(options)
    enabled = enabled_features(features)
    if not is_x86(triple):
        return 0
    bits = vector_bits(options)
    if "avx512vnni" in enabled and bits >= 512:
        return 512
    if "avxvnni" in enabled or {"avx512vnni", "avx512vl"} <= enabled:
        return min(bits, 256)
    return 0


def codegen_config(options: Options) -> CodegenConfig:
    """The codegen configuration ``options`` ask for on their target (the host's unless
    another is set): checks, vector width and registers, threads, prefetch threshold."""
    return CodegenConfig(
        options.checked,
        vector_bits(options),
        thread_count(options),
        prefetch_above(options),
        vector_registers(options),
        dot4_bits(options),
    )


@functools.cache
def _probed_vector_bits(triple: str, cpu: str) -> int:
    """The vector registers LLVM's code for ``cpu`` uses for a 512-bit add: llvmlite cannot
    list a named CPU's features, but its assembly names its registers."""
    probe = (
        "define void @f(ptr %p) {\n  %a = load <16 x float>, ptr %p\n"
        "  %b = fadd <16 x float> %a, %a\n  store <16 x float> %b, ptr %p\n  ret void\n}"
    )
    with LLVM_LOCK:
        asm = create_machine(triple, cpu, "", 2, jit=False).emit_assembly(
            llvm.parse_assembly(probe)
        )
    return 512 if "zmm" in asm else 256 if "ymm" in asm else 128


L1_DATA_BYTES = 32 * 1024
"""The L1 data cache assumed when the target's is unknown (cross-compiling, or no OS answer)."""
L2_BYTES = 1024 * 1024
"""The L2 cache per core assumed when the target's is unknown."""


def l1_data_bytes(options: Options) -> int:
    """The target's L1 data cache per core: the host's (Linux: sysfs) when compiling for the
    host CPU; else, or when the OS does not say, :data:`L1_DATA_BYTES`."""
    return _cache_bytes(options, 1, L1_DATA_BYTES)


def l2_bytes(options: Options) -> int:
    """The target's L2 cache per core, as :func:`l1_data_bytes` finds it (default
    :data:`L2_BYTES`)."""
    return _cache_bytes(options, 2, L2_BYTES)


def _cache_bytes(options: Options, level: int, default: int) -> int:
    if machine(options)[:2] != host_cpu()[:2]:
        return default
    return _host_cache_bytes(level) or default


def prefetch_above(options: Options) -> int:
    """Operands larger than this many bytes that a register tile streams through are
    prefetched ahead by its code (see :func:`polyonnx.codegen.tiles.streamed`): a quarter of
    the target's L2, which the weights of a layer share with its activations (smaller ones
    stay in L2, where a prefetch only costs load-port slots)."""
    return l2_bytes(options) // 4


@functools.cache
def _host_cache_bytes(level: int) -> int:
    """The data (or unified) cache of ``level`` of CPU 0 from
    ``/sys/devices/system/cpu/cpu0/cache``, or 0."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            found, kind, size = ((index / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20}
        if (
            found == str(level)
            and kind in ("Data", "Unified")
            and size[:-1].isdigit()
            and size[-1] in units
        ):
            return int(size[:-1]) * units[size[-1]]
    return 0


def machine(options: Options) -> tuple[str, str, str]:
    """(triple, cpu, features) ``options`` ask for: the host's, unless another triple or CPU is
    set; a CPU named without features gets that CPU's own (``--cpu haswell`` on an AVX-512 host
    means AVX2 code)."""
    triple, cpu, features = host_cpu()
    if options.target and options.target != triple:
        return cross_machine(options.target, options.cpu, options.features)
    if options.cpu and options.cpu != cpu and options.features is None:
        return triple, options.cpu, ""
    return triple, options.cpu or cpu, options.features or features


#: Features every Linux system of an architecture has and its C library's ABI assumes: RISC-V
#: Linux is RV64GC with hardware floating point (the lp64d ABI); without F and D, LLVM calls
#: soft-float routines (``__addsf3``...) for every float operation.
LINUX_BASELINE_FEATURES = {"riscv64": "+m,+a,+f,+d,+c"}
#: Features a triple gets when neither a CPU nor features are named: RISC-V's V extension.
DEFAULT_FEATURES = {"riscv64": "+v"}


def cross_machine(triple: str, cpu: str | None, features: str | None) -> tuple[str, str, str]:
    """(triple, cpu, features) for another machine: the CPU named (LLVM's generic one for the
    triple when None), its features after the architecture's Linux baseline
    (:data:`LINUX_BASELINE_FEATURES`); with neither, :data:`DEFAULT_FEATURES`.

    Example:
        >>> cross_machine("riscv64-linux-gnu", None, None)
        ('riscv64-linux-gnu', '', '+m,+a,+f,+d,+c,+v')
        >>> cross_machine("aarch64-linux-gnu", "neoverse-v1", None)
        ('aarch64-linux-gnu', 'neoverse-v1', '')
    """
    arch = architecture(triple)
    if features is None and cpu is None:
        features = DEFAULT_FEATURES.get(arch, "")
    wanted = [LINUX_BASELINE_FEATURES.get(arch, ""), features or ""]
    return triple, cpu or "", ",".join(f for f in wanted if f)


def create_machine(
    triple: str, cpu: str, features: str, opt_level: int, jit: bool
) -> llvm.TargetMachine:
    """A target machine; JIT code is not position independent (PIC broke MCJIT modules)."""
    init_llvm()
    if triple != host_cpu()[0]:
        _init_all_targets()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise CodegenError(f"unknown target triple {triple!r}: {e}") from None
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=min(opt_level, 3),
        reloc="default" if jit else "pic",
        codemodel="jitdefault" if jit else "default",
        jit=jit,
    )


def target_machine(options: Options, *, jit: bool = False) -> llvm.TargetMachine:
    """A target machine for ``options.target`` (the host when None)."""
    return create_machine(*machine(options), options.opt_level, jit)


def optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int) -> None:
    """Run LLVM's standard O``opt_level`` pipeline (new pass manager) on ``module``."""
    if opt_level == 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    passes = pb.getModulePassManager()
    try:
        passes.run(module, pb)
    finally:
        _free(passes)


def _free(passes: llvm.ModulePassManager) -> None:
    """Free a pass pipeline. llvmlite 0.50 never does: in ``ModulePassManager``'s bases the
    no-op ``ObjectRef._dispose`` comes before ``NewPassManager._dispose``, so each optimised
    module leaked its O3 pipeline (45 KB: most of a session's memory growth). Detached
    afterwards, so that an llvmlite which frees it itself does not free it twice."""
    llvm.ffi.lib.LLVMPY_DisposeNewModulePassManger(passes)
    passes.detach()
