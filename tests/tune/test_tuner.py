"""Tuning a model within a short budget: records found and stored, a later compile uses
them (and still matches onnxruntime), a resumed run goes on, crashing candidates are
contained. No assertion depends on how fast anything ran."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import polyonnx
from polyonnx.errors import TuningError
from polyonnx.options import Options
from polyonnx.records.database import TuningDatabase, target_fingerprint
from polyonnx.testing import onnxruntime_outputs, random_feeds
from polyonnx.tune.runner import Job, LocalRunner, Result, measure_job
from polyonnx.tune.space import SearchSpace
from polyonnx.tune.tuner import parse_budget, tune
from tests.tune.models import conv_model, gemm_model

OPTIONS = Options(num_threads=1, cache=False)


def _default_trace(job: Job):
    space = SearchSpace(job.kernel, job.options)
    return space.schedule(space.default()).trace


def _faster_than_the_default(job: Job) -> Result:
    """The real measurement (legality, outputs), with made-up times: a candidate is twice as
    fast as the default schedule and twice as slow as any other incumbent. So the first win
    is certain and every later round stale: runs end by early stop, however loaded the
    machine (the budgets are only a guard)."""
    r = measure_job(job)
    if not r.ok or job.candidate == job.incumbent:
        return r
    faster = job.incumbent == _default_trace(job)
    return dataclasses.replace(r, time_s=1e-3, incumbent_s=2e-3 if faster else 0.5e-3)


def _crash(job: Job) -> Result:
    if job.candidate != job.incumbent:
        os.kill(os.getpid(), signal.SIGSEGV)
    return measure_job(job)


def matches_onnxruntime(model, options: Options) -> None:
    sess = polyonnx.InferenceSession(model, options=options)
    inputs = random_feeds(sess.get_inputs(), seed=1)
    for got, want in zip(sess.run(None, inputs), onnxruntime_outputs(model, inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_found_record_is_stored_and_used_by_compile(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    out = io.StringIO()
    report = tune(
        model,
        budget=600,
        db=db,
        options=OPTIONS,
        progress=out,
        batch=2,
        patience=1,
        runner=LocalRunner(timeout=120, measure=_faster_than_the_default),
    )
    assert report.stopped == "no kernel improving (early stop)"
    (k,) = report.kernels
    assert k.speedup > 1 and report.model_speedup > 1 and report.measured > 0
    assert "k0_MatMul" in out.getvalue() and "left)" in out.getvalue()
    assert "k0_MatMul" in str(report)
    target = target_fingerprint(OPTIONS)
    with TuningDatabase(db) as d:
        best = d.best(k.signature, target)
    assert best is not None and best.speedup == pytest.approx(k.speedup)
    opts = dataclasses.replace(OPTIONS, tuning_db=str(db))
    assert polyonnx.compile(model, opts).scheduled[0].trace == best.trace
    matches_onnxruntime(model, opts)


def test_a_measured_tune_stores_what_it_measured(tmp_path: Path) -> None:
    """Real timings: whatever they say, the records are stored, compile uses the best one if
    it beat the default, and the model still computes onnxruntime's answer."""
    model, db = conv_model(), tmp_path / "t.sqlite"
    report = tune(model, budget=60, db=db, options=OPTIONS, progress=False, batch=2, patience=1)
    assert report.measured > 0 and report.kernels
    opts = dataclasses.replace(OPTIONS, tuning_db=str(db))
    target = target_fingerprint(OPTIONS)
    compiled = polyonnx.compile(model, opts)
    with TuningDatabase(db) as d:
        assert len(d) >= report.measured
        for sk in compiled.scheduled:
            best = d.best(polyonnx.kernel_signature(sk.kernel), target)
            if best is not None and best.speedup > 1:
                assert sk.trace == best.trace
    matches_onnxruntime(model, opts)


def test_a_second_run_resumes(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    runner = LocalRunner(timeout=120, measure=_faster_than_the_default)
    run = dict(budget=600, db=db, options=OPTIONS, progress=False, batch=2, patience=1)
    first = tune(model, **run, runner=runner)
    with TuningDatabase(db) as d:
        before = {r.trace.to_json() for r in d.records()}
    second = tune(model, **run, runner=runner)
    with TuningDatabase(db) as d:
        after = [r.trace.to_json() for r in d.records()]
    assert second.measured > 0 and len(after) == len(set(after)) > len(before)
    # The second run started from the first one's best record (confirmed against the default).
    assert first.kernels[0].speedup == second.kernels[0].speedup == 2


def test_crashing_candidates_cost_only_themselves(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    report = tune(
        model,
        budget=600,
        db=db,
        options=OPTIONS,
        progress=False,
        batch=3,
        patience=1,
        runner=LocalRunner(timeout=120, measure=_crash),
    )
    (k,) = report.kernels
    assert report.failed >= 1 and report.measured == 0 and k.speedup == 1.0 and k.default_s
    assert report.stopped == "no kernel improving (early stop)"
    assert len(TuningDatabase(db)) == 0


@pytest.mark.parametrize(
    ("text", "seconds"), [("20m", 1200), ("90s", 90), ("1h30m", 5400), ("45", 45), (2.5, 2.5)]
)
def test_budgets(text, seconds) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0", "-5", "5x"])
def test_a_bad_budget_is_refused(text) -> None:
    with pytest.raises(TuningError, match="budget"):
        parse_budget(text)


def test_polyonnx_tune_is_the_tuning_function() -> None:
    assert callable(polyonnx.tune)
    with pytest.raises(TuningError, match="budget"):
        polyonnx.tune(gemm_model(), budget="never")
