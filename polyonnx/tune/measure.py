"""Build a scheduled kernel into a callable, time it, and check it against the default schedule.

Example:
    >>> from polyonnx.testing.examples import matmul
    >>> m = measure(Schedule.from_kernel(matmul(16, 16, 16)).tile(("i", "j"), (4, 8)))
    >>> m.flops, m.max_error  # checked against the kernel's own loops
    (8192, 0.0)
    >>> print(f"median {m.median_s * 1e3:.4f} ms, {m.gflops:.1f} GFLOP/s")  # doctest: +ELLIPSIS
    median ... ms, ... GFLOP/s
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from polyonnx.codegen import loopast
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.errors import CodegenError
from polyonnx.krnl.ir import FLOAT_DTYPES, Kernel
from polyonnx.krnl.memory import aligned_array
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.signature import kernel_flops

Arrays = dict[str, np.ndarray]


def build(
    schedule: Schedule, options: Options | None = None
) -> Callable[[Mapping[str, np.ndarray]], None]:
    """JIT-compile the kernel with the loops of ``schedule`` (refused unless it is verified);
    call it on named numpy arrays."""
    scheduled = schedule.scheduled()
    ast = loopast.from_isl(build_ast(scheduled.schedule))
    return kernel_callable(scheduled.kernel, ast, options)


def random_arrays(
    kernel: Kernel, seed: int = 0, known: Mapping[str, np.ndarray] | None = None
) -> Arrays:
    """Random inputs (uniform in [-1, 1) for floats, small integers otherwise) and zeroed
    outputs and temporaries for every buffer of ``kernel``, 64-byte aligned; an input in
    ``known`` (of the buffer's shape) takes that value instead: a model's constants, whose
    random stand-ins can hide a wrong schedule (a Clip between two random bounds where the
    lower is above the upper gives one value everywhere, whatever the loops computed)."""
    rng = np.random.default_rng(seed)
    known = known or {}
    out: Arrays = {}
    for b in kernel.buffers:
        value = known.get(b.name)
        if b.kind == "input" and value is not None and tuple(value.shape) == tuple(b.shape):
            values = np.asarray(value, b.dtype)
        elif b.kind != "input":
            values = np.zeros(b.shape, b.dtype)
        elif b.dtype in FLOAT_DTYPES:
            values = rng.uniform(-1, 1, b.shape).astype(b.dtype)
        elif b.dtype == "bool":
            values = rng.integers(0, 2, b.shape).astype(bool)
        else:
            values = rng.integers(0, 4, b.shape).astype(b.dtype)
        out[b.name] = aligned_array(values)  # aligned as in a compiled model's memory
    return out


def run(
    schedule: Schedule,
    arrays: Mapping[str, np.ndarray] | None = None,
    options: Options | None = None,
) -> Arrays:
    """Run the scheduled kernel once on copies of ``arrays`` (random ones by default);
    return every buffer afterwards."""
    work = {
        k: np.array(v, copy=True) for k, v in (arrays or random_arrays(schedule.kernel)).items()
    }
    for b in schedule.kernel.buffers:  # temps a staging verb added
        if b.name not in work and b.kind == "temp":
            work[b.name] = np.zeros(b.shape, b.dtype)
    build(schedule, options)(work)
    return work


@dataclass(frozen=True)
class Measurement:
    """Timing of one schedule."""

    median_s: float
    runs: int
    flops: int
    max_error: float
    """Largest absolute difference from the default schedule's outputs (0 if not checked)."""

    @property
    def gflops(self) -> float:
        return self.flops / self.median_s / 1e9 if self.median_s > 0 else 0.0


def check_outputs(
    kernel: Kernel, got: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], rtol: float
) -> float:
    """The largest absolute difference between the output buffers of ``got`` and
    ``expected``; :class:`CodegenError` naming the buffer if one differs beyond ``rtol``
    (relative to the largest expected magnitude)."""
    error = 0.0
    for b in kernel.buffers:
        if b.kind != "output":
            continue
        have, want = got[b.name].astype(np.float64), expected[b.name].astype(np.float64)
        diff = float(np.max(np.abs(have - want), initial=0.0))
        error = max(error, diff)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        if not np.allclose(have, want, rtol=rtol, atol=rtol * scale):
            raise CodegenError(
                f"kernel {kernel.name}: the scheduled kernel's output {b.name} differs from "
                f"the default schedule's by up to {diff:g}"
            )
    return error


def measure(
    schedule: Schedule,
    *,
    options: Options | None = None,
    min_runs: int = 5,
    min_time: float = 0.2,
    check: bool = True,
    rtol: float = 1e-4,
    reference: Mapping[str, np.ndarray] | None = None,
) -> Measurement:
    """Median wall time of the scheduled kernel over at least ``min_runs`` runs and
    ``min_time`` seconds, on :func:`random_arrays`. With ``check``, its outputs are compared to
    ``reference`` (by default: what the kernel's own loop order computes from the same arrays)
    and a mismatch raises :class:`CodegenError`."""
    fn = build(schedule, options)
    arrays = random_arrays(schedule.kernel)
    error = 0.0
    if check:
        work = {k: v.copy() for k, v in arrays.items()}
        fn(work)
        expected = (
            reference
            if reference is not None
            else run(Schedule.from_kernel(schedule.original), arrays, options)
        )
        error = check_outputs(schedule.kernel, work, expected, rtol)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn(arrays)
        times.append(time.perf_counter() - t0)
    return Measurement(statistics.median(times), len(times), kernel_flops(schedule.kernel), error)
