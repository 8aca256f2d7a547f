"""Object code for kernel modules: compiled in parallel processes and cached on disk.

LLVM's optimizer and code generator are the slowest part of compiling a model, and llvmlite
serialises them behind one lock, so kernels are compiled by a pool of forked worker processes
(one per core), each from the kernel's IR text. Objects are cached by a hash of that text and
the target machine, so a model compiled before loads its kernels from disk.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from polyonnx import cache
from polyonnx.codegen.target import LLVM_LOCK, create_machine, machine, optimize
from polyonnx.errors import CodegenError
from polyonnx.options import Options

#: Below this much IR text a pool costs more than it saves.
PARALLEL_MIN_BYTES = 200_000


def _compile_text(text: str, spec: tuple[str, str, str, int, bool]) -> bytes:
    """IR text -> optimized object code (runs in the parent or in a worker process)."""
    tm = create_machine(*spec)
    opt = spec[3]
    ref = llvm.parse_assembly(text)
    ref.verify()
    ref.triple = tm.triple
    ref.data_layout = str(tm.target_data)
    optimize(ref, tm, opt)
    return tm.emit_object(ref)


def _worker(job: tuple[str, tuple[str, str, str, int, bool]]) -> bytes | str:
    try:
        return _compile_text(*job)
    except Exception as e:  # reported to the parent, which raises CodegenError
        return f"{type(e).__name__}: {e}"


def compile_objects(modules: Sequence[tuple[str, Callable[[], ir.Module]]], options: Options,
                    *, jit: bool) -> dict[str, bytes]:
    """Object code of each ``(symbol, make_module)``: from the cache, else compiled (in
    parallel when there is enough of it). The symbol names the module's content (see
    :func:`polyonnx.codegen.module.kernel_symbol`), so a cache hit needs no IR at all."""
    spec = (*machine(options), options.opt_level, jit)
    out: dict[str, bytes] = {}
    todo: list[tuple[str, str, str]] = []  # (symbol, cache key, IR text)
    for symbol, make in modules:
        key = cache.key(symbol, repr(spec))
        hit = cache.get("objects", key) if options.cache else None
        if hit is not None:
            out[symbol] = hit
        else:
            todo.append((symbol, key, str(make())))
    if not todo:
        return out
    size = sum(len(t) for _, _, t in todo)
    workers = min(len(todo), os.cpu_count() or 1)
    with LLVM_LOCK:
        if workers > 1 and size >= PARALLEL_MIN_BYTES:
            # fork: the children need no imports; LLVM_LOCK is held, so no thread of ours is
            # inside LLVM while the process is copied.
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.map(_worker, [(t, spec) for _, _, t in todo], chunksize=1)
        else:
            results = [_worker((t, spec)) for _, _, t in todo]
    for (symbol, key, _), result in zip(todo, results, strict=True):
        if isinstance(result, str):
            raise CodegenError(f"compiling kernel {symbol} failed: {result}")
        out[symbol] = result
        if options.cache:
            cache.put("objects", key, result)
    return out
