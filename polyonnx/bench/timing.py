"""Timing for benchmarks: interleaved rounds, so a noisy machine hurts every contender alike,
and the spread of every figure (median, min, max, rounds)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: How long benchmarks run a multi-threaded contender before timing it (see
#: :func:`interleaved`): longer than OpenBLAS's idle threads spin.
WARM_S = 0.2


@dataclass(frozen=True, slots=True)
class Spread:
    """A measured figure: the median of ``rounds`` values, and their min and max.

    Example:
        >>> Spread.of([3.0, 1.0, 2.0])
        Spread(median=2.0, min=1.0, max=3.0, rounds=3)
        >>> Spread.of([1.0, 2.0, 4.0]).rate(8.0)   # times of 8 units of work -> units / s
        Spread(median=4.0, min=2.0, max=8.0, rounds=3)
    """

    median: float
    min: float
    max: float
    rounds: int

    def __post_init__(self) -> None:
        if self.rounds < 1 or not self.min <= self.median <= self.max:
            raise ValueError(f"not a spread: {self}")

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        return Spread(statistics.median(values), min(values), max(values), len(values))

    @staticmethod
    def once(value: float) -> Spread:
        """A figure measured once (a cold compile)."""
        return Spread(value, value, value, 1)

    def rate(self, work: float) -> Spread:
        """``work / value``: the spread of a throughput from the spread of its times (the
        fastest round gives the highest rate)."""
        return Spread(work / self.median, work / self.max, work / self.min, self.rounds)

    def scaled(self, factor: float) -> Spread:
        return Spread(self.median * factor, self.min * factor, self.max * factor, self.rounds)


def interleaved_times(
    runs: Sequence[Callable[[], object]], repeat: int, budget_s: float, warm_s: float = 0.0
) -> list[Spread]:
    """The wall times of each of ``runs``, called in turn ``repeat`` times after one warm-up
    round (fewer rounds, at least 3, when they would not fit in ``budget_s`` seconds).

    With ``warm_s``, every timed call follows untimed calls of the same contender for at
    least that long: multi-threaded contenders' worker threads spin for a while after a call
    (onnxruntime's, OpenBLAS's) and would take the cores of whichever contender
    runs next, or sleep when idle and wake slowly (polyonnx's pool; see docs/performance.md,
    "Measuring"). Each contender is then timed as it runs when called back to back.

    Example:
        >>> a, b = interleaved_times([lambda: None, lambda: None], repeat=5, budget_s=1.0)
        >>> a.rounds
        5
    """
    t = time.perf_counter()
    for run in runs:
        run()
    first = time.perf_counter() - t
    n = max(3, min(repeat, int(budget_s / max(first, 1e-9))))
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(n):
        for run, out in zip(runs, times, strict=True):
            end = time.perf_counter() + warm_s
            while warm_s and time.perf_counter() < end:
                run()
            t = time.perf_counter()
            run()
            out.append(time.perf_counter() - t)
    return [Spread.of(x) for x in times]


def interleaved(
    runs: Sequence[Callable[[], object]], repeat: int, budget_s: float, warm_s: float = 0.0
) -> tuple[list[float], int]:
    """The median wall time of each of ``runs`` and the rounds timed
    (:func:`interleaved_times`).

    Example:
        >>> (a, b), n = interleaved([lambda: None, lambda: None], repeat=5, budget_s=1.0)
        >>> n
        5
    """
    spreads = interleaved_times(runs, repeat, budget_s, warm_s)
    return [s.median for s in spreads], spreads[0].rounds
