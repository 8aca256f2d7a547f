"""A tuned model against itself untuned: the same answers, and how much faster as a whole.

The tuner times each kernel alone, on hot caches and random data, and checks it against the
kernel's own loop order there. The model is what the user runs: :func:`check_tuned` compiles
it twice (with the tuning database's records and with none), runs both on the same random
feeds and times them interleaved, so a run ends with the model's own answer to "did it help,
and is it still right". (A kernel 1.1x faster alone can be no faster in the model, where it
starts with the caches the kernel before it left.)

Example::

    report = polyonnx.tune("model.onnx", budget="5m", threads=1, db="t.sqlite")
    print(check_tuned("model.onnx", "t.sqlite", polyonnx.Options(num_threads=1)))
    # tuned model: 1.07x faster than untuned (median of 30 interleaved runs: ...), outputs ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from polyonnx.bench.timing import Spread, interleaved_times
from polyonnx.frontend.load import ModelSource
from polyonnx.options import Options
from polyonnx.runtime.session import InferenceSession
from polyonnx.testing import max_errors, random_feeds

#: Largest relative error (to the largest output magnitude) a tuned model may show against the
#: untuned one: a schedule reorders float sums, no more (issue target: 1e-4 on the model).
TOLERANCE = 1e-4


@dataclass(frozen=True)
class TunedCheck:
    """The model with and without its tuned schedules: times and the largest differences."""

    untuned: Spread
    tuned: Spread
    abs_error: float
    rel_error: float

    @property
    def speedup(self) -> float:
        return self.untuned.median / self.tuned.median

    @property
    def agrees(self) -> bool:
        return self.rel_error <= TOLERANCE

    def __str__(self) -> str:
        answer = (
            f"outputs agree (max relative difference {self.rel_error:.1e})"
            if self.agrees
            else f"OUTPUTS DIFFER by up to {self.abs_error:.3g} (relative {self.rel_error:.1e}, "
            f"more than {TOLERANCE:g}): do not use these records"
        )
        return (
            f"tuned model: {self.speedup:.2f}x faster than untuned (medians of "
            f"{self.tuned.rounds} interleaved runs: {self.untuned.median * 1e3:.3f} ms -> "
            f"{self.tuned.median * 1e3:.3f} ms); {answer}"
        )


def check_tuned(
    model: ModelSource,
    db: str | Path,
    options: Options,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    repeat: int = 30,
    budget_s: float = 30.0,
    seed: int = 0,
) -> TunedCheck:
    """Compile ``model`` with the records of tuning database ``db`` and without any, run both
    on the same random feeds, and time them interleaved (wall time, ``repeat`` rounds or as
    many as fit in ``budget_s``)."""
    untuned = InferenceSession(
        model, options=dataclasses.replace(options, tuning_db=""), input_shapes=input_shapes
    )
    tuned = InferenceSession(
        model, options=dataclasses.replace(options, tuning_db=str(db)), input_shapes=input_shapes
    )
    feeds = random_feeds(untuned.get_inputs(), seed)
    errors = max_errors(tuned.run(None, feeds), untuned.run(None, feeds))
    before, after = interleaved_times(
        [lambda: untuned.run(None, feeds), lambda: tuned.run(None, feeds)], repeat, budget_s
    )
    return TunedCheck(before, after, errors.absolute, errors.relative)
