"""Progress lines of a long benchmark run."""

from __future__ import annotations

import io
import time

from polyonnx.bench.progress import Progress


def test_steps_count_and_show_elapsed_time():
    out = io.StringIO()
    p = Progress(total=4, stream=out, started=time.time() - 61)
    p.step("peak")
    p.note("peak: 2 threads")
    p.step("bandwidth")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/4 ##--------   1m01s] peak")
    assert lines[1].startswith("[1/4 ") and lines[1].endswith("peak: 2 threads")
    assert lines[2].startswith("[2/4 #####-----") and lines[2].endswith("bandwidth")


def test_a_child_continues_the_count():
    out = io.StringIO()
    Progress(total=10, stream=out, done=6).step("GEMM")
    assert out.getvalue().startswith("[ 7/10 #######---")
