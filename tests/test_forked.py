"""Forked worker pools return results in order and fail, not hang, when a worker dies."""

import gc
import multiprocessing
import os
import signal

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


_meanwhile_ran = multiprocessing.get_context("fork").Event()  # the workers inherit it


def _wait_for_meanwhile(_: int) -> tuple[int, bool]:
    """In a worker: its pid, and whether the parent's ``meanwhile`` ran while this job was
    running. (The timeout only keeps a broken ``forked_map`` from hanging the suite.)"""
    return os.getpid(), _meanwhile_ran.wait(timeout=120)


def test_meanwhile_runs_here_once_while_the_workers_work() -> None:
    _meanwhile_ran.clear()
    calls: list[tuple[int, set[int]]] = []

    def meanwhile() -> None:
        calls.append((os.getpid(), {p.pid for p in multiprocessing.active_children()}))
        _meanwhile_ran.set()

    results = forked_map(
        _wait_for_meanwhile, [0, 1], workers=2, error=CodegenError, meanwhile=meanwhile
    )
    [(where, alive)] = calls  # once
    workers = {pid for pid, _ in results}
    assert where == os.getpid() and where not in workers  # here, not in a worker
    assert workers <= alive  # the workers were alive when it ran
    assert all(saw for _, saw in results)  # and their jobs were not done: they waited for it


def _frozen_objects(_: int) -> int:
    return gc.get_freeze_count()


def test_the_parents_objects_are_frozen_in_the_workers_only() -> None:
    before = gc.get_freeze_count()
    counts = forked_map(_frozen_objects, [0, 1], workers=2, error=CodegenError)
    assert all(c > before for c in counts)  # the workers' collections skip them
    assert gc.get_freeze_count() == before  # and the parent collects them again
