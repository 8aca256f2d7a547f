"""Measuring on Ray (the optional extra polyonnx[ray]): a local instance, crash contained."""

from __future__ import annotations

import os
import signal

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install polyonnx[ray]")

from polyonnx.tune.ray_runner import RayRunner  # noqa: E402
from tests.tune.test_runner import job, kernel  # noqa: E402,F401


@pytest.fixture(scope="module")
def runner():
    r = RayRunner("auto", timeout=120)
    yield r
    r.close()


def test_jobs_run_as_ray_tasks(runner, kernel) -> None:  # noqa: F811
    results = runner.run([job(kernel), job(kernel)])
    assert all(r.ok for r in results), [r.error for r in results]
    assert results[0].reference is not None and results[0].ratio > 0


def _crash(j):
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_crashing_task_costs_one_job(runner, kernel) -> None:  # noqa: F811
    crashing = RayRunner("auto", timeout=120, measure=_crash)  # (joins the running instance)
    (r,) = crashing.run([job(kernel)])
    assert not r.ok and "crashed" in r.error
    (again,) = runner.run([job(kernel)])
    assert again.ok, again.error


def test_tune_on_a_local_ray_instance(runner, tmp_path) -> None:  # noqa: F811
    from polyonnx.options import Options
    from polyonnx.records.database import TuningDatabase
    from polyonnx.tune.tuner import tune
    from tests.tune.models import gemm_model

    db = tmp_path / "t.sqlite"
    report = tune(
        gemm_model(),
        budget=120,
        db=db,
        options=Options(num_threads=1),
        ray="auto",
        batch=2,
        patience=1,
    )
    assert report.measured > 0
    with TuningDatabase(db) as d:
        assert len(d) >= report.measured
