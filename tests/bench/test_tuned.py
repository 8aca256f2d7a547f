"""The tuned model against itself untuned (polyonnx.bench.tuned)."""

from __future__ import annotations

from pathlib import Path

from polyonnx.bench.timing import Spread
from polyonnx.bench.tuned import TOLERANCE, TunedCheck, check_tuned
from polyonnx.options import Options
from polyonnx.tune.runner import LocalRunner
from polyonnx.tune.tuner import tune
from tests.tune.models import gemm_model
from tests.tune.test_tuner import _faster_than_the_default

OPTIONS = Options(num_threads=1, cache=False)


def test_a_tuned_model_is_run_and_timed_against_itself(tmp_path: Path) -> None:
    model, db = gemm_model(), tmp_path / "t.sqlite"
    runner = LocalRunner(timeout=120, measure=_faster_than_the_default)
    report = tune(model, budget=600, db=db, options=OPTIONS, progress=False, batch=2,
                  patience=1, runner=runner)  # fmt: skip
    assert report.kernels[0].speedup > 1  # (a record the compile uses)
    check = check_tuned(model, db, OPTIONS, repeat=5, budget_s=5.0)
    assert check.agrees and check.rel_error <= TOLERANCE
    assert check.tuned.rounds >= 3 and check.speedup > 0
    assert "tuned model:" in str(check) and "outputs agree" in str(check)


def test_differing_outputs_are_said_loudly() -> None:
    t = Spread.once(1e-3)
    check = TunedCheck(t, t, abs_error=0.5, rel_error=0.25)
    assert not check.agrees and "OUTPUTS DIFFER" in str(check) and "1.00x" in str(check)
