"""Candidates are measured in worker processes: a crash or a hang costs that candidate only;
wrong outputs and illegal traces are errors, not times."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import polyonnx
from polyonnx.options import Options
from polyonnx.schedule.strategies import Tiling, default_schedule
from polyonnx.schedule.trace import Trace
from polyonnx.schedule.verbs import Split
from polyonnx.tune.runner import Job, LocalRunner, Result, measure_job
from tests.tune.models import gemm_model

OPTIONS = Options(num_threads=1, cache=False)


@pytest.fixture(scope="module")
def kernel():
    return polyonnx.list_kernels(gemm_model())[0].kernel


def job(kernel) -> Job:
    default = default_schedule(kernel, Tiling.for_vector_bits(256), parallel=False).trace
    candidate = default_schedule(kernel, Tiling(unroll=2, vector=8), parallel=False).trace
    return Job(kernel, candidate, default, OPTIONS, min_runs=3, min_time=0.01)


def test_a_candidate_is_timed_against_the_incumbent(kernel) -> None:
    (r,) = LocalRunner(timeout=120).run([job(kernel)])
    assert r.ok, r.error
    assert r.time_s > 0 and r.incumbent_s > 0 and r.ratio > 0
    assert r.reference is not None and set(r.reference) == {b.name for b in kernel.buffers}
    (again,) = LocalRunner(timeout=120).run(
        [Job(**{**job(kernel).__dict__, "reference": r.reference})]
    )
    assert again.ok and again.reference is None


def test_an_illegal_trace_is_an_error(kernel) -> None:
    j = job(kernel)
    bad = Trace(j.candidate.kernel, j.candidate.signature, (Split("nowhere", 2),))
    r = measure_job(Job(kernel, bad, j.incumbent, OPTIONS))
    assert not r.ok and "ScheduleError" in r.error and "nowhere" in r.error


def test_wrong_outputs_are_an_error(kernel) -> None:
    first = measure_job(job(kernel))
    wrong = {k: v + 1 for k, v in first.reference.items()}
    r = measure_job(Job(**{**job(kernel).__dict__, "reference": wrong}))
    assert not r.ok and "differs from the default schedule" in r.error


def _crash_on_odd(j: Job) -> Result:
    if j.min_runs % 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    return Result(j, 1.0, 2.0)


def _hang(j: Job) -> Result:
    time.sleep(60)
    return Result(j, 1.0, 1.0)


def test_a_crash_costs_one_job(kernel) -> None:
    base = job(kernel)
    jobs = [Job(**{**base.__dict__, "min_runs": n}) for n in (2, 3, 4)]
    results = LocalRunner(timeout=60, measure=_crash_on_odd).run(jobs)
    assert [r.ok for r in results] == [True, False, True]
    assert "crashed (signal 11)" in results[1].error
    assert all(r.job is j for r, j in zip(results, jobs, strict=True))


def test_a_hang_is_ended_by_the_timeout(kernel) -> None:
    (r,) = LocalRunner(timeout=1, measure=_hang).run([job(kernel)])
    assert not r.ok and "timed out after 1 s" in r.error


def test_a_job_for_another_target_is_refused(kernel) -> None:
    r = measure_job(Job(**{**job(kernel).__dict__, "target_key": "0" * 16}))
    assert not r.ok and "another target" in r.error


def test_the_models_constants_are_the_checks_values(kernel) -> None:
    # (Random stand-ins for a Clip's bounds hid a wrong schedule: with the lower bound above
    # the upper, every output is the one bound, whatever the loops computed.)
    first = next(b for b in kernel.buffers if b.kind == "input")
    value = np.full(first.shape, 0.5, first.dtype)
    r = measure_job(Job(**{**job(kernel).__dict__, "known": {first.name: value}}))
    assert r.ok, r.error
    np.testing.assert_array_equal(r.reference[first.name], value)
