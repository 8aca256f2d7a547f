"""Timing for benchmarks: interleaved medians, so a noisy machine hurts every contender alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

#: What benchmarks sleep between multi-threaded runs (see :func:`interleaved`).
SETTLE_S = 0.02


def interleaved(runs: Sequence[Callable[[], object]], repeat: int, budget_s: float,
                settle_s: float = 0.0) -> tuple[list[float], int]:
    """Median wall time of each of ``runs``, called in turn ``repeat`` times after one warm-up
    round (fewer rounds, at least 3, when they would not fit in ``budget_s`` seconds).

    ``settle_s`` is slept (untimed) after every run: the worker threads of onnxruntime and
    OpenBLAS spin for a while after a parallel call, and would otherwise take cores from
    whichever contender runs next (measured here: +40% on ResNet50 at 2 threads).

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
            t = time.perf_counter()
            run()
            out.append(time.perf_counter() - t)
            if settle_s:
                time.sleep(settle_s)
    return [statistics.median(x) for x in times], n
