"""A long-running process: memory stays flat over many sessions and many runs (issue 16)."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import polyonnx
from tests.reliability.models import conv_net

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc"),
]


def _rss_mb() -> float:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_sessions_created_and_dropped_do_not_grow_the_process():
    model = conv_net().SerializeToString()
    x = {"x": np.ones((1, 3, 8, 8), np.float32)}
    for _ in range(20):
        polyonnx.InferenceSession(model, num_threads=2).run(None, x)
    before = _rss_mb()
    for _ in range(1000):
        polyonnx.InferenceSession(model, num_threads=2).run(None, x)
    # (100 MB before: the O3 pipeline of every entry module and the module itself stayed.)
    assert _rss_mb() - before < 8


def test_runs_of_one_session_do_not_grow_the_process():
    sess = polyonnx.InferenceSession(conv_net(), num_threads=2)
    x = {"x": np.ones((1, 3, 8, 8), np.float32)}
    for _ in range(1000):
        sess.run(None, x)
    before = _rss_mb()
    for _ in range(100_000):
        sess.run(None, x)
    assert _rss_mb() - before < 2
