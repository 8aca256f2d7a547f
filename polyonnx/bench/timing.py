"""Timing for benchmarks: interleaved medians, so a noisy machine hurts every contender alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

#: How long benchmarks run a multi-threaded contender before timing it (see
#: :func:`interleaved`): longer than OpenBLAS's idle threads spin.
WARM_S = 0.2


def interleaved(
    runs: Sequence[Callable[[], object]], repeat: int, budget_s: float, warm_s: float = 0.0
) -> tuple[list[float], int]:
    """Median wall time of each of ``runs``, called in turn ``repeat`` times after one warm-up
    round (fewer rounds, at least 3, when they would not fit in ``budget_s`` seconds).

    With ``warm_s``, every timed call follows untimed calls of the same contender for at
    least that long: multi-threaded contenders' worker threads spin for a while after a call
    (onnxruntime's, OpenBLAS's) and would take the cores of whichever contender
    runs next, or sleep when idle and wake slowly (polyonnx's pool; see docs/performance.md,
    "Measuring"). Each contender is then timed as it runs when called back to back.

    Example:
        >>> (a, b), n = interleaved([lambda: None, lambda: None], repeat=5, budget_s=1.0)
        >>> n
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
    return [statistics.median(x) for x in times], n
