"""LLVM targets: initialisation, target machines for the host or a cross triple, optimisation."""

from __future__ import annotations

import functools
import os
import threading

import llvmlite.binding as llvm

from polyonnx.errors import CodegenError
from polyonnx.options import Options

# llvmlite holds global state; one lock serialises everything that touches it.
LLVM_LOCK = threading.RLock()


@functools.cache
def init_llvm() -> None:
    """Initialise LLVM's native target once (``llvm.initialize()`` is gone in llvmlite 0.45+)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@functools.cache
def _init_all_targets() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.cache
def host_cpu() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of this machine."""
    init_llvm()
    return llvm.get_process_triple(), llvm.get_host_cpu_name(), \
        llvm.get_host_cpu_features().flatten()


def thread_count(options: Options) -> int:
    """Threads parallel loops run on: ``options.num_threads``, else every core; 1 when the
    thread pool cannot be built (no C compiler)."""
    from polyonnx.codegen.parallel_runtime import shared_library

    if (options.num_threads or os.cpu_count() or 1) > 1 and shared_library() is None:
        return 1
    return options.num_threads or os.cpu_count() or 1


def vector_bits(options: Options) -> int:
    """The widest vector register of the target: 512 (AVX-512), 256 (AVX) or 128 bits."""
    if options.target and options.target != host_cpu()[0]:
        features = options.features or ""
    else:
        features = options.features or host_cpu()[2]
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    if "avx512f" in enabled:
        return 512
    if "avx" in enabled or "avx2" in enabled:
        return 256
    return 128


def target_machine(options: Options, *, jit: bool = False) -> llvm.TargetMachine:
    """A target machine for ``options.target`` (the host when None)."""
    init_llvm()
    triple, cpu, features = host_cpu()
    if options.target and options.target != triple:
        _init_all_targets()
        triple, cpu, features = options.target, options.cpu or "", options.features or ""
    else:
        cpu, features = options.cpu or cpu, options.features or features
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise CodegenError(f"unknown target triple {triple!r}: {e}") from None
    return target.create_target_machine(cpu=cpu, features=features, opt=min(options.opt_level, 3),
                                        reloc="default" if jit else "pic",
                                        codemodel="jitdefault" if jit else "default",
                                        jit=jit)


def optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int) -> None:
    """Run LLVM's standard O``opt_level`` pipeline (new pass manager) on ``module``."""
    if opt_level == 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
