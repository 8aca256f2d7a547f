"""Measuring candidates so that a bad one costs only itself: each is built and timed in a
worker process with a timeout, against the incumbent in the same process.

A :class:`Job` names a kernel, a candidate trace and the incumbent's trace. :func:`measure_job`
(run in the worker) replays both (each proved legal), JIT-compiles them, checks the candidate's
outputs against the kernel's own loop order (``Job.reference``, computed by the first job of a
kernel and handed back in :attr:`Result.reference`), then times the two interleaved, run for
run (the CPU time of the thread when tuning for one thread: on a loaded machine wall time
measures the OS's time slices; wall time with several threads), and returns both medians:
their ratio is what the search compares, since load on the machine slows both alike.

:class:`LocalRunner` forks one process per job (the kernel is inherited, not pickled): a crash
(a signal, ``os._exit``) or a hang past ``timeout`` seconds ends that process and yields a
:class:`Result` with an ``error``, and the next job runs.
:class:`polyonnx.tune.ray_runner.RayRunner` runs the same function as Ray tasks.

Example::

    job = Job(kernel, candidate_trace, default_trace, Options(num_threads=1))
    (result,) = LocalRunner(timeout=30).run([job])
    result.incumbent_s / result.time_s                     # the speed-up
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from polyonnx.codegen.parallel_runtime import thread_count
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options
from polyonnx.records.lookup import replay_trace
from polyonnx.schedule.budget import isl_exclusive
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.trace import Trace
from polyonnx.tune.measure import build, check_outputs, random_arrays, run


@dataclass(frozen=True)
class Job:
    """Time ``candidate`` against ``incumbent`` (traces of ``kernel``) under ``options``."""

    kernel: Kernel
    candidate: Trace
    incumbent: Trace
    options: Options
    reference: Mapping[str, np.ndarray] | None = field(default=None, repr=False)
    """The kernel's own loop order's buffers after one run on :func:`random_arrays` (with
    ``known``); None: computed by the job (and returned)."""
    target_key: str = ""
    """The fingerprint key of the target the job is for; a worker on another refuses it."""
    min_runs: int = 5
    min_time: float = 0.1
    rtol: float = 1e-4
    known: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    """Values of the kernel's inputs that are the model's constants (see
    :func:`~polyonnx.tune.measure.random_arrays`); the others are random."""


@dataclass(frozen=True)
class Result:
    """What one job measured, or why it did not."""

    job: Job | None = field(repr=False)
    """The job (None between the measuring child and the parent, which has it)."""
    time_s: float | None = None
    """Median time of the candidate."""
    incumbent_s: float | None = None
    """Median time of the incumbent, interleaved with the candidate's runs."""
    error: str = ""
    """Why there is no time: illegal, wrong output, crashed, timed out, foreign node."""
    reference: Mapping[str, np.ndarray] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.error and self.time_s is not None

    @property
    def ratio(self) -> float:
        """The incumbent's time over the candidate's (> 1: the candidate is faster)."""
        assert self.time_s and self.incumbent_s
        return self.incumbent_s / self.time_s


def measure_job(job: Job) -> Result:
    """Run ``job`` here (in a worker process): a candidate that does not replay, is illegal or
    computes other outputs is a Result with an error; a crash is the caller's to contain."""
    from polyonnx.errors import PolyonnxError

    if job.target_key:
        from polyonnx.records.database import target_fingerprint

        if target_fingerprint(job.options).key != job.target_key:
            return Result(job, error="this worker's machine is another target")
    try:
        candidate = replay_trace(job.kernel, job.candidate)
        incumbent = replay_trace(job.kernel, job.incumbent)
        arrays = random_arrays(candidate.kernel, known=job.known)
        reference = job.reference
        if reference is None:
            reference = run(Schedule.from_kernel(job.kernel), arrays, job.options)
        fc, fi = build(candidate, job.options), build(incumbent, job.options)
        work = {k: v.copy() for k, v in arrays.items()}
        fc(work)
        check_outputs(candidate.kernel, work, reference, job.rtol)
        # One thread: the CPU time of this thread, which waiting for a CPU on a loaded machine
        # does not count (wall time there measures the OS's time slices); else wall time.
        one = thread_count(job.options) == 1
        clock = time.thread_time if one else time.perf_counter
        times_c, times_i = _interleaved(fc, fi, arrays, work, job.min_runs, job.min_time, clock)
    except PolyonnxError as e:
        return Result(job, error=f"{type(e).__name__}: {e}")
    return Result(
        job,
        statistics.median(times_c),
        statistics.median(times_i),
        reference=reference if job.reference is None else None,
    )


def _interleaved(
    fc: Callable[[Any], None],
    fi: Callable[[Any], None],
    arrays: Mapping[str, np.ndarray],
    work: Mapping[str, np.ndarray],
    min_runs: int,
    min_time: float,
    clock: Callable[[], float],
) -> tuple[list[float], list[float]]:
    """Times of the candidate and of the incumbent, run alternately (a warm-up run each),
    each pair in the other order than the last: on a loaded machine the run after a long
    wait for the CPU tends to get a fresh time slice, so a fixed order favours one."""
    fi(arrays)
    fc(work)
    times_c: list[float] = []
    times_i: list[float] = []
    start = time.perf_counter()
    while len(times_c) < min_runs or time.perf_counter() - start < 2 * min_time:
        for first in (0, 1) if len(times_c) % 2 == 0 else (1, 0):
            fn, a, out = (fc, work, times_c) if first == 0 else (fi, arrays, times_i)
            t0 = clock()
            fn(a)
            out.append(clock() - t0)
    return times_c, times_i


class Runner(Protocol):
    """Runs jobs and returns one result per job, in order, whatever the jobs do."""

    def run(self, jobs: Sequence[Job]) -> list[Result]: ...

    def close(self) -> None: ...


class LocalRunner:
    """Jobs in forked worker processes on this machine, ``workers`` at a time (1 by default:
    jobs timed side by side on a small machine slow each other), each given ``timeout``
    seconds. ``measure`` is what a worker runs (:func:`measure_job`)."""

    def __init__(
        self,
        timeout: float = 60.0,
        workers: int = 1,
        measure: Callable[[Job], Result] = measure_job,
    ) -> None:
        self.timeout = timeout
        self.workers = max(1, workers)
        self.measure = measure

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        results: list[Result | None] = [None] * len(jobs)
        running: list[tuple[int, Any, Any, float]] = []
        pending = list(range(len(jobs)))
        while pending or running:
            while pending and len(running) < self.workers:
                index = pending.pop(0)
                process, conn = _fork(self.measure, jobs[index])
                running.append((index, process, conn, time.monotonic() + self.timeout))
            index, process, conn, deadline = running.pop(0)
            results[index] = _collect(jobs[index], process, conn, deadline, self.timeout)
        return [r for r in results if r is not None]

    def close(self) -> None:
        return None


def _fork(fn: Callable[[Job], Result], job: Job) -> tuple[Any, Any]:
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(fn, job, send), daemon=True)
    with isl_exclusive():  # (no thread of ours is inside isl while the process is copied)
        process.start()
    send.close()
    return process, receive


def _child(fn: Callable[[Job], Result], job: Job, conn: Any) -> None:
    faulthandler.disable()  # a crashing candidate is expected here: the parent reports it
    try:
        result = fn(job)
        conn.send(replace(result, job=None))  # (the parent has the job)
    except BaseException as e:  # anything but a crash: an error result
        conn.send(Result(None, error=f"{type(e).__name__}: {e}"))
    finally:
        conn.close()
        os._exit(0)  # no atexit handlers, no flushing of the parent's inherited buffers


def _collect(job: Job, process: Any, conn: Any, deadline: float, timeout: float) -> Result:
    try:
        if conn.poll(max(0.0, deadline - time.monotonic())):
            result: Result = conn.recv()
            return replace(result, job=job)
        process.kill()
        return Result(job, error=f"timed out after {timeout:g} s")
    except (EOFError, OSError):
        process.join(5)
        code = process.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        return Result(job, error=f"the worker process crashed ({how})")
    finally:
        process.join(5)
        conn.close()
