"""Forked worker pools return results in order and fail, not hang, when a worker dies."""

import os
import signal
import time

import pytest

from polyonnx.errors import CodegenError
from polyonnx.forked import forked_map


def _square(x: int) -> int:
    return x * x


def _die_on_three(x: int) -> int:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_results_come_back_in_order() -> None:
    assert forked_map(_square, list(range(7)), workers=2, error=CodegenError) == [
        0,
        1,
        4,
        9,
        16,
        25,
        36,
    ]


def test_a_killed_worker_is_an_error_not_a_hang() -> None:
    with pytest.raises(CodegenError, match="worker process died"):
        forked_map(_die_on_three, list(range(6)), workers=2, error=CodegenError)


def _pid_after_a_while(_: int) -> int:
    time.sleep(0.2)
    return os.getpid()


def test_meanwhile_runs_here_once_while_the_workers_work() -> None:
    seen: list[tuple[int, float]] = []
    start = time.perf_counter()
    pids = forked_map(
        _pid_after_a_while,
        [0, 1],
        workers=2,
        error=CodegenError,
        meanwhile=lambda: seen.append((os.getpid(), time.perf_counter())),
    )
    assert [pid for pid, _ in seen] == [os.getpid()] and os.getpid() not in pids
    # Called before the jobs were done (each sleeps 0.2 s), not after.
    assert seen[0][1] - start < 0.2
