"""The scheduling driver: every kernel of a program to its schedule and the loops isl makes.

What :func:`schedule_program` adds to scheduling one kernel (the default strategies, or a
user's trace):

* kernels that differ only in their buffers share one schedule and one AST (by
  :func:`~polyonnx.schedule.signature.kernel_signature`: ResNet50 repeats most of its
  convolutions);
* the best record of a kernel in the tuning database (``Options.tuning_db``, see
  :mod:`polyonnx.records.lookup`) replaces its default schedule;
* loops scheduled before come from the on-disk cache (``Options.cache``);
* a model with many distinct kernels is scheduled by a pool of forked processes, one per core;
* each kernel is scheduled within the isl budget, falling back to its own loop order past it
  (:func:`polyonnx.schedule.budget.schedule_kernel`).

It sits between the schedule stage and codegen: its result is codegen's loop AST
(:mod:`polyonnx.codegen.loopast`), and the strategies' knobs come from the target
(:mod:`polyonnx.codegen.target`).

Example:
    >>> from polyonnx.pipeline import lower, to_graph
    >>> from polyonnx.testing.examples import conv_model
    >>> program = lower(to_graph(conv_model(), None, Options()))
    >>> [(schedule, loops)] = schedule_program(program, Options())  # one kernel
    >>> type(loops[0]).__name__  # codegen's loop AST (schedule: None if the loops were cached)
    'For'
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from polyonnx import cache
from polyonnx.codegen import loopast as la
from polyonnx.codegen.parallel_runtime import thread_count
from polyonnx.codegen.target import l1_data_bytes, l2_bytes, vector_bits, vector_registers
from polyonnx.errors import ScheduleError
from polyonnx.forked import forked_map
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.program import Program
from polyonnx.krnl.window import windowed
from polyonnx.options import Options
from polyonnx.records.lookup import replay_trace, tuned_schedules
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.budget import isl_exclusive, schedule_kernel
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.scheduled import ScheduledKernel
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.strategies import Tiling, default_schedule
from polyonnx.schedule.trace import Trace, TraceLike

KernelLoops = tuple[ScheduledKernel | None, tuple[la.LNode, ...]]
"""A kernel's schedule (None when its loops came from the cache or a worker) and its loops."""

#: Distinct kernels to schedule below which a pool of forked processes costs more than it saves.
PARALLEL_MIN_KERNELS = 8


def _tuned_loops(
    program: Program,
    signatures: list[str | None],
    chosen: dict[int, ScheduledKernel],
    options: Options,
) -> dict[str, KernelLoops]:
    """The loops of the kernels (by signature) the tuning database has a faster schedule for.
    A record whose trace makes a kernel of its own (staging verbs) schedules each kernel of
    that signature apart: they go to ``chosen`` and their ``signatures`` become None."""
    firsts = {sig: k for sig, k in zip(signatures, program.kernels, strict=True) if sig}
    out: dict[str, KernelLoops] = {}
    for sig, tuned in tuned_schedules(firsts, options).items():
        if tuned.kernel is not tuned.original:
            for i in [i for i, other in enumerate(signatures) if other == sig]:
                chosen[i] = replay_trace(program.kernels[i], tuned.trace).scheduled()
                signatures[i] = None
            continue
        scheduled, ast = schedule_kernel(firsts[sig], functools.partial(_given, tuned), options)
        out[sig] = scheduled, la.from_isl(ast)
    return out


def target_tiling(options: Options) -> Tiling:
    """The default strategies' knobs for the target ``options`` ask for (the host's unless
    another is set): its vector width and registers, L1 data cache and threads. The layout
    pass, the scheduler and the tuner's search space all start from it."""
    return Tiling.for_vector_bits(
        vector_bits(options),
        thread_count(options),
        l1_data_bytes(options),
        vector_registers(options),
        l2_bytes(options),
    )


def _given(schedule: Schedule, _kernel: Kernel) -> ScheduledKernel:
    """A strategy that answers ``schedule`` whatever the kernel."""
    return schedule.scheduled()


def schedule_program(
    program: Program,
    options: Options,
    schedules: Mapping[str, TraceLike] | None = None,
    *,
    trees: bool = False,
) -> tuple[KernelLoops, ...]:
    """The schedule tree of every kernel and the loops isl generates from it (read into
    codegen's loop AST), within the isl budget (a kernel over it falls back to its own loop
    order: see :mod:`polyonnx.schedule.budget`). ``schedules`` maps kernel names or
    signatures to traces that replace the default strategy (see :func:`replay_schedules`).

    The schedule of a default-scheduled kernel is None when its loops came from the on-disk
    cache (``options.cache``: that kernel, by signature, was scheduled before) or from a
    forked worker process (a model with at least :data:`PARALLEL_MIN_KERNELS` distinct
    kernels to schedule is scheduled by a pool, one process per core). With ``trees``, every
    kernel not served by the cache is scheduled in this process and keeps its schedule.
    """
    threads = thread_count(options)
    tiling = target_tiling(options)
    # On one thread no loop runs in parallel: no parallel loops to look for and prove.
    strategy = functools.partial(default_schedule, tiling=tiling, parallel=threads > 1)
    chosen = {
        i: s.scheduled() for i, s in replay_schedules(program.kernels, schedules or {}).items()
    }
    by_signature: dict[str, KernelLoops] = {}
    todo: dict[str, Kernel] = {}  # signature -> the first kernel with it, not in the cache
    signatures: list[str | None] = [
        None if i in chosen else kernel_signature(k) for i, k in enumerate(program.kernels)
    ]
    by_signature.update(_tuned_loops(program, signatures, chosen, options))
    # (printed schedules, ``trees``, keep the kernels' own accesses)
    kernels = program.kernels if trees else _windows(program.kernels, signatures, by_signature)
    for sig, k in zip(signatures, kernels, strict=True):
        if sig is None or sig in by_signature or sig in todo:
            continue
        hit = cache.get("loops", _loops_key(sig, tiling, options)) if options.cache else None
        if hit is not None:
            by_signature[sig] = None, la.from_data(json.loads(hit))
        else:
            todo[sig] = k
    workers = min(len(todo), os.cpu_count() or 1)
    if not trees and workers > 1 and len(todo) >= PARALLEL_MIN_KERNELS:
        by_signature.update(_forked_loops(todo, strategy, options, workers))
    for sig, k in todo.items():
        if sig not in by_signature:
            scheduled, ast = schedule_kernel(k, strategy, options)
            by_signature[sig] = scheduled, la.from_isl(ast)
        if options.cache:
            cache.put(
                "loops",
                _loops_key(sig, tiling, options),
                json.dumps(la.to_data(by_signature[sig][1])).encode(),
            )
    out: list[KernelLoops] = []
    for i, (sig, k) in enumerate(zip(signatures, program.kernels, strict=True)):
        if sig is None:
            out.append((chosen[i], la.from_isl(build_ast(chosen[i].schedule))))
            continue
        first, loops = by_signature[sig]
        out.append((dataclasses.replace(first, kernel=k) if first else None, loops))
    return tuple(out)


def _windows(
    kernels: Sequence[Kernel], signatures: list[str | None], done: Mapping[str, KernelLoops]
) -> Sequence[Kernel]:
    """The kernels to schedule: kernels that differ only in their place in a buffer (a
    concatenation's slices) have the same loops, so each is scheduled as its window (see
    :mod:`polyonnx.krnl.window`), whose signature replaces its own in ``signatures``."""
    out = list(kernels)
    for i, (sig, k) in enumerate(zip(signatures, kernels, strict=True)):
        if sig is not None and sig not in done:
            w = windowed(k).kernel
            if w is not k:
                out[i], signatures[i] = w, kernel_signature(w)
    return out


def replay_schedules(
    kernels: Sequence[Kernel], schedules: Mapping[str, TraceLike]
) -> dict[int, Schedule]:
    """Replay the trace given for each kernel: ``schedules`` maps a kernel name (``k3_Conv``)
    or a kernel signature (every kernel with it) to a trace; a name wins over a signature.
    Returns kernel index -> schedule; a key that fits no kernel is a ScheduleError."""
    traces = {k: v if isinstance(v, Trace) else Trace.from_json(v) for k, v in schedules.items()}
    used: set[str] = set()
    out: dict[int, Schedule] = {}
    for i, kernel in enumerate(kernels):
        for key in (kernel.name, kernel_signature(kernel)):
            if key in traces:
                used.add(key)
                try:
                    out[i] = Schedule.from_kernel(kernel).replay(traces[key])
                except ScheduleError as e:
                    raise ScheduleError(f"schedule for kernel {kernel.name}: {e}") from None
                break
    unused = [k for k in traces if k not in used]
    if unused:
        raise ScheduleError(
            f"schedules: no kernel named or with signature {unused[0]!r}; "
            f"kernels: {', '.join(k.name for k in kernels)}"
        )
    return out


def _loops_key(signature: str, tiling: Tiling, options: Options) -> str:
    return cache.key("loops", signature, repr(tiling), str(options.isl_max_operations))


_Job = tuple[Kernel, Callable[[Kernel], ScheduledKernel], Options]


def _forked_loops(
    todo: Mapping[str, Kernel],
    strategy: Callable[[Kernel], ScheduledKernel],
    options: Options,
    workers: int,
) -> dict[str, KernelLoops]:
    """The loops of the kernels in ``todo`` (by signature), scheduled by a pool of forked
    processes. A kernel whose worker failed is left out: the caller schedules it again in this
    process, which raises the error as if there had been no pool (scheduling is
    deterministic). What a worker printed on stderr (``Options.verbose``) is printed here."""
    sigs = list(todo)
    # Most statements first, so that no worker is left alone with a long kernel at the end.
    order = sorted(range(len(sigs)), key=lambda j: -sum(1 for _ in todo[sigs[j]].statements()))
    jobs = [(todo[sigs[j]], strategy, options) for j in order]
    # fork: the workers inherit the jobs (initargs are not pickled with fork) and need no
    # imports; no thread of ours is inside isl while the process is copied.
    with isl_exclusive():
        results = forked_map(_forked_job, jobs, workers, ScheduleError)
    out: dict[str, KernelLoops] = {}
    for j, (data, err) in sorted(zip(order, results, strict=True)):
        if data is not None:
            sys.stderr.write(err)
            out[sigs[j]] = None, la.from_data(data)
    return out


def _forked_job(job: _Job) -> tuple[list | None, str]:
    """One kernel's loops as data (JSON-able) and its stderr; None on any error (in a worker)."""
    kernel, strategy, options = job
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, ast = schedule_kernel(kernel, strategy, options)
            return la.to_data(la.from_isl(ast)), err.getvalue()
    except Exception:  # the parent schedules the kernel again, to raise the error itself
        return None, ""
