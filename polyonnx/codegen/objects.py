"""Object code for kernel modules: compiled in parallel processes and cached on disk.

LLVM's optimizer and code generator are the slowest part of compiling a model, and llvmlite
serialises them behind one lock, so kernels are compiled by a pool of forked worker processes
(one per core), each from the kernel's IR text; with many kernels, the workers also build that
text (emitting the IR is pure Python, as slow as a third of LLVM's work). Objects are cached
by the kernel's symbol, which names its content, and the target machine, so a model compiled
before loads its kernels from disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from polyonnx import cache
from polyonnx.codegen.target import LLVM_LOCK, create_machine, llvm_quiescent, machine, optimize
from polyonnx.errors import CodegenError
from polyonnx.forked import forked_map
from polyonnx.options import Options

#: Below this much IR text a pool costs more than it saves.
PARALLEL_MIN_BYTES = 200_000
#: From this many modules to compile, the workers build their IR too (the parent does not know
#: how much IR there is before building it: a pool is then assumed to pay).
PARALLEL_MIN_MODULES = 8

_Spec = tuple[str, str, str, int, bool]
_Job = tuple[str | Callable[[], ir.Module], _Spec]


def _compile_text(text: str, spec: _Spec) -> bytes:
    """IR text -> optimized object code (runs in the parent or in a worker process)."""
    tm = create_machine(*spec)
    opt = spec[3]
    ref = llvm.parse_assembly(text)
    ref.verify()
    ref.triple = tm.triple
    ref.data_layout = str(tm.target_data)
    optimize(ref, tm, opt)
    return tm.emit_object(ref)


def _worker(job: _Job) -> bytes | str:
    """Object code of IR text, or of the module a function makes; an error as a message."""
    source, spec = job
    try:
        return _compile_text(source if isinstance(source, str) else str(source()), spec)
    except Exception as e:  # reported to the parent, which raises CodegenError
        return f"{type(e).__name__}: {e}"


def compile_objects(
    modules: Sequence[tuple[str, Callable[[], ir.Module]]],
    options: Options,
    *,
    jit: bool,
    meanwhile: Callable[[], object] | None = None,
) -> dict[str, bytes]:
    """Object code of each ``(symbol, make_module)``: from the cache, else compiled (in
    parallel when there is enough of it). The symbol names the module's content (see
    :func:`polyonnx.codegen.module.kernel_symbol`), so a cache hit needs no IR at all.
    ``meanwhile()`` is called once, while worker processes compile if there are any."""
    spec = (*machine(options), options.opt_level, jit)
    out: dict[str, bytes] = {}
    todo: list[tuple[str, str, Callable[[], ir.Module]]] = []  # (symbol, cache key, make)
    for symbol, make in modules:
        key = cache.key(symbol, repr(spec))
        hit = cache.get("objects", key) if options.cache else None
        if hit is not None:
            out[symbol] = hit
        else:
            todo.append((symbol, key, make))
    side_done = False

    def side() -> None:  # meanwhile(), once
        nonlocal side_done
        if meanwhile is not None and not side_done:
            meanwhile()
        side_done = True

    workers = min(len(todo), os.cpu_count() or 1)
    results: list[bytes | str] = []
    if workers > 1 and len(todo) >= PARALLEL_MIN_MODULES:
        results = _forked(workers, [(make, spec) for _, _, make in todo], side)
    elif todo:
        texts = [str(make()) for _, _, make in todo]
        if workers > 1 and sum(map(len, texts)) >= PARALLEL_MIN_BYTES:
            results = _forked(workers, [(t, spec) for t in texts], side)
        else:
            with LLVM_LOCK:
                results = [_worker((t, spec)) for t in texts]
    side()
    for (symbol, key, make), result in zip(todo, results, strict=True):
        if isinstance(result, str):
            str(make())  # an error building the IR (in a worker) is raised as it is
            raise CodegenError(f"compiling kernel {symbol} failed: {result}")
        out[symbol] = result
        if options.cache:
            cache.put("objects", key, result)
    return out


def _forked(workers: int, jobs: list[_Job], meanwhile: Callable[[], object]) -> list[bytes | str]:
    """:func:`_worker` of each job, in a pool of forked processes."""
    # No thread of ours is inside LLVM (or llvmlite) while the process is copied.
    with llvm_quiescent():
        return forked_map(_worker, jobs, workers, CodegenError, meanwhile)
