"""A map over forked worker processes, for the compile stages that parallelise (scheduling,
LLVM) and that must fail, not hang, when a worker dies.

The workers are forked, so they inherit the jobs (and every import) instead of receiving them
pickled; only job indices go to them and only results come back. A worker killed mid-job (out
of memory, a crash in a native library) breaks the pool, which is reported as ``error``.

Python's garbage collector is frozen while the workers are forked (``gc.freeze``): each full
collection in a worker would otherwise walk every object the parent had (a model's graph,
lowered kernels, llvmlite's IR of the entry point), touching their pages (copy on write) and
spending the time again in each worker. DenseNet-121's LLVM workers: IR emission 1.5 -> 0.9 s
CPU, their page faults 27,000 -> 17,600.

Example:
    >>> forked_map(len, [[1], [1, 2]], workers=2, error=RuntimeError)
    [1, 2]
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

R = TypeVar("R")

# In a worker: the function and the jobs it was forked with.
_function: Callable[[Any], Any] | None = None
_jobs: Sequence[Any] = ()


def forked_map(
    fn: Callable[[Any], R],
    jobs: Sequence[Any],
    workers: int,
    error: Callable[[str], Exception],
    meanwhile: Callable[[], object] | None = None,
) -> list[R]:
    """``[fn(job) for job in jobs]``, computed by ``workers`` forked processes; raises
    ``error(message)`` when a worker dies. The caller holds whatever lock keeps other threads
    out of native code while the process is copied (the workers fork during this call).
    ``meanwhile()`` runs in this process while the workers work (after they are forked)."""
    context = multiprocessing.get_context("fork")
    # (Not when the caller froze objects itself: unfreeze() would undo that too.)
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_start, initargs=(fn, jobs)
        ) as pool:
            # With fork, the first submit starts every worker (none is started later).
            futures = [pool.submit(_call, index) for index in range(len(jobs))]
            if meanwhile is not None:
                meanwhile()
            return [f.result() for f in futures]
    except BrokenProcessPool:
        raise error(
            f"a worker process died while compiling ({len(jobs)} jobs on {workers} "
            "processes): out of memory, or a crash in native code"
        ) from None
    finally:
        if freeze:
            gc.unfreeze()


def _start(fn: Callable[[Any], Any], jobs: Sequence[Any]) -> None:
    global _function, _jobs
    _function, _jobs = fn, jobs


def _call(index: int) -> Any:
    assert _function is not None
    return _function(_jobs[index])
