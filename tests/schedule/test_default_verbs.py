"""The default strategies are written with the schedule verbs: they produce exactly the loops
the tree-building strategies before them produced (``data/default_asts.json``, regenerated only
on purpose with ``python -m tests.schedule.default_zoo --update``), and their traces replay."""

import json
from pathlib import Path

import numpy as np
import pytest

from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies import default_schedule, parallel
from polyonnx.schedule.trace import Trace
from tests.schedule.default_zoo import FIXTURE, cases, default_ast

EXPECTED = json.loads(Path(FIXTURE).read_text(encoding="utf-8"))
CASES = {key: (k, t, p) for key, k, t, p in cases()}

# A scan (cumsum) carries a dependence along its vector-looking loop: its nest keeps its own
# loops (the hand-built trees before the verbs vectorized it and computed wrong sums), while the
# copy before it is vectorized.
SCANS = {key for key in CASES if key.startswith("zoo/cumsum/")}


@pytest.mark.parametrize("key", sorted(CASES))
def test_default_schedule_makes_the_pinned_loops(key):
    kernel, tiling, min_parallel = CASES[key]
    got = default_ast(kernel, tiling, min_parallel)
    assert got == EXPECTED[key]
    if key in SCANS:
        scan = got[got.rindex("for (int c0") :]
        assert "c1 = 1;" in scan and "// vector" not in scan


@pytest.mark.parametrize("key", [k for k in sorted(CASES) if "/avx2" in k])
def test_default_trace_replays_to_the_same_loops(key, monkeypatch):
    kernel, tiling, min_parallel = CASES[key]
    if min_parallel is not None:
        monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", min_parallel)
    sk = default_schedule(kernel, tiling=tiling)
    want = build_ast(sk.schedule).to_C_str()
    assert sk.trace is not None
    again = Trace.from_json(sk.trace.to_json())
    assert again == sk.trace
    assert Schedule.from_kernel(kernel).replay(again).ast_text() == want


def test_a_scan_is_not_vectorized():
    from polyonnx.codegen import loopast as la
    from polyonnx.codegen.kernel_call import kernel_callable
    from polyonnx.options import Options
    from tests.schedule.zoo import cumsum

    k = cumsum(3, 40)
    loops = la.from_isl(build_ast(default_schedule(k).schedule))
    x = np.random.default_rng(0).random((3, 40), np.float32)
    y = np.zeros_like(x)
    kernel_callable(k, loops, Options(num_threads=1))({"X": x, "Y": y})
    np.testing.assert_allclose(y, np.cumsum(x, 1), rtol=1e-5)


def test_the_default_trace_uses_the_mark_forms():
    from polyonnx.testing.examples import matmul

    trace = default_schedule(matmul(64, 64, 32)).trace
    text = str(trace)
    assert "split(i, 4, floor=True)" in text or "floor=True" in text
    assert "unroll(" in text and "mark=True" in text and "vectorize(" in text
    steps = json.loads(trace.to_json())["steps"]
    assert any(s["verb"] == "vectorize" and s.get("mark") for s in steps)
