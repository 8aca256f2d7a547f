"""The schedule-exploration example runs (small grid) and saves a replayable trace."""

import json
import os
import subprocess
import sys

EXAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "..", "examples", "explore_resnet50_conv.py"
)


def test_example_runs_with_a_small_grid(tmp_path):
    out = tmp_path / "best.json"
    proc = subprocess.run(
        [sys.executable, EXAMPLE, "--small", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "GFLOP/s" in proc.stdout
    assert "refused as expected: parallel(ic)" in proc.stdout
    assert "model compiled with the best trace" in proc.stdout
    traces = json.loads(out.read_text())
    assert list(traces) == ["k0_Conv"] and traces["k0_Conv"]["steps"]
