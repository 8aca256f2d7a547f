"""compile and InferenceSession use the best tuning record of each kernel for their target;
records that no longer replay are skipped with a warning, other targets' ignored."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

import polyonnx
from polyonnx.errors import TuningError
from polyonnx.options import Options
from polyonnx.records.database import Record, TuningDatabase, target_fingerprint
from polyonnx.records.lookup import TuningWarning
from polyonnx.schedule.strategies import Tiling, default_schedule
from polyonnx.schedule.trace import Trace
from polyonnx.schedule.verbs import Split
from polyonnx.testing import onnxruntime_outputs, random_feeds
from tests.tune.models import gemm_model


def options(db: Path) -> Options:
    return Options(num_threads=1, tuning_db=str(db), cache=False)


def tuned_trace(kernel) -> Trace:
    """A schedule the default strategy would not choose (2-row tiles of 8 lanes)."""
    trace = default_schedule(kernel, Tiling(unroll=2, vector=8), parallel=False).trace
    assert trace is not None
    return trace


def store(db: Path, trace: Trace, opts: Options, speedup: float = 1.3, version: str = "0.1.0"):
    with TuningDatabase(db) as d:
        d.add(
            Record(
                trace.signature,
                trace.kernel,
                target_fingerprint(opts),
                trace,
                1e-4,
                speedup,
                version,
            )
        )


def test_compile_uses_the_best_record(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    (info,) = polyonnx.list_kernels(model)
    trace = tuned_trace(info.kernel)
    store(db, trace, options(db))
    default = polyonnx.compile(model, options(tmp_path / "none.sqlite")).scheduled[0]
    assert default.trace != trace
    compiled = polyonnx.compile(model, options(db))
    assert compiled.scheduled[0].trace == trace
    sess = polyonnx.InferenceSession(model, options=options(db))
    inputs = random_feeds(sess.get_inputs(), seed=1)
    np.testing.assert_allclose(
        sess.run(None, inputs)[0], onnxruntime_outputs(model, inputs)[0], rtol=1e-4, atol=1e-4
    )


def test_a_record_no_faster_than_the_default_is_not_used(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    trace = tuned_trace(polyonnx.list_kernels(model)[0].kernel)
    store(db, trace, options(db), speedup=1.0)
    assert polyonnx.compile(model, options(db)).scheduled[0].trace != trace


def test_a_trace_that_no_longer_replays_is_skipped(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    good = tuned_trace(polyonnx.list_kernels(model)[0].kernel)
    bad = Trace(good.kernel, good.signature, (Split("no_such_loop", 4),))
    store(db, good, options(db), speedup=1.2)
    store(db, bad, options(db), speedup=2.0, version="0.0.1")
    with pytest.warns(TuningWarning, match=r"polyonnx 0\.0\.1\) skipped.*no_such_loop"):
        compiled = polyonnx.compile(model, options(db))
    assert compiled.scheduled[0].trace == good  # the next best record


def test_records_of_another_target_are_ignored_with_a_message(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    trace = tuned_trace(polyonnx.list_kernels(model)[0].kernel)
    foreign = dataclasses.replace(target_fingerprint(options(db)), cpu="another-cpu")
    with TuningDatabase(db) as d:
        d.add(Record(trace.signature, trace.kernel, foreign, trace, 1e-4, 1.5))
    with pytest.warns(TuningWarning, match="tuned only for other targets.*another-cpu"):
        compiled = polyonnx.compile(model, options(db))
    assert compiled.scheduled[0].trace != trace


def test_no_database_no_message(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        polyonnx.compile(gemm_model(), options(tmp_path / "none.sqlite"))
        polyonnx.compile(gemm_model(), Options(num_threads=1, tuning_db="", cache=False))
    assert not (tmp_path / "none.sqlite").exists()


def test_a_corrupt_database_is_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    db.write_bytes(b"garbage" * 1000)
    with pytest.raises(TuningError, match="t.sqlite"):
        polyonnx.compile(gemm_model(), options(db))
