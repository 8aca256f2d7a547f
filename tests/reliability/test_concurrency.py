"""Threads, several sessions in one process, and memory that stays flat over many runs."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np
import pytest

import polyonnx
from polyonnx.errors import InputError
from polyonnx.testing import onnxruntime_outputs
from tests.reliability.models import conv_net, relu


def _rss() -> int:
    """Resident set size of this process in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _in_threads(work: Callable[[int], None], count: int) -> None:
    """Run ``work(k)`` for k < count in threads started together; re-raise the first error."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def target(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _inputs(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(count)]


def test_one_session_from_many_threads_gives_each_thread_its_own_answer():
    m = conv_net()
    sess = polyonnx.InferenceSession(m)
    xs = _inputs(8)
    want = [onnxruntime_outputs(m, {"x": x})[0] for x in xs]

    def work(k: int) -> None:
        for r in range(40):
            j = (k + r) % len(xs)
            np.testing.assert_allclose(
                sess.run(None, {"x": xs[j]})[0], want[j], rtol=1e-4, atol=1e-6
            )

    _in_threads(work, 8)


def test_threads_compiling_and_running_different_models_at_once():
    models = [conv_net(channels=c, size=s, seed=c) for c, s in ((1, 4), (2, 6), (3, 8), (2, 4))]
    rng = np.random.default_rng(1)
    feeds = [
        {"x": rng.standard_normal((1, c, s, s)).astype(np.float32)}
        for c, s in ((1, 4), (2, 6), (3, 8), (2, 4))
    ]

    def work(k: int) -> None:
        sess = polyonnx.InferenceSession(models[k])
        want = onnxruntime_outputs(models[k], feeds[k])[0]
        for _ in range(20):
            np.testing.assert_allclose(sess.run(None, feeds[k])[0], want, rtol=1e-4, atol=1e-6)

    _in_threads(work, len(models))


def test_a_symbolic_model_compiling_new_shapes_from_many_threads():
    sess = polyonnx.InferenceSession(relu(("n", 3)))

    def work(k: int) -> None:
        for n in (1, 2, 3, 1 + k % 3):
            x = np.full((n, 3), k - 2, np.float32)
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))

    _in_threads(work, 6)


def test_several_sessions_of_one_model_are_independent():
    m = conv_net()
    sessions = [polyonnx.InferenceSession(m) for _ in range(3)]
    x = _inputs(1)[0]
    outs = [s.run(None, {"x": x})[0] for s in sessions]
    del sessions[1]
    outs.append(sessions[-1].run(None, {"x": x})[0])
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


@pytest.mark.parametrize("feed_kind", ["good", "bad"])
def test_memory_stays_flat_over_ten_thousand_runs(feed_kind):
    sess = polyonnx.InferenceSession(relu((2, 3)))
    feed = (
        {"x": np.ones((2, 3), np.float32)}
        if feed_kind == "good"
        else {"x": np.ones((3, 2), np.float32)}
    )

    def run() -> None:
        try:
            sess.run(None, feed)
        except InputError:
            assert feed_kind == "bad"

    for _ in range(1000):  # warm up allocator pools and caches
        run()
    before = _rss()
    for _ in range(10_000):
        run()
    grown = _rss() - before
    # A leak of even one 24-byte output per run would show as ~240 KB plus its headers; the
    # bound is loose so that unrelated allocator noise never fails the test.
    assert grown < 4 << 20, f"RSS grew by {grown / 1e6:.1f} MB over 10,000 runs"
