"""The tuning example runs (a tiny conv, a 10 s budget) and the tuned model matches
onnxruntime."""

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tune_resnet50.py")


def test_example_tunes_a_small_conv(tmp_path):
    db = tmp_path / "t.sqlite"
    proc = subprocess.run(
        [sys.executable, EXAMPLE, "--small", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # the conv, and the layout changes around it when the host's vectors block its channels
    assert re.search(r"tuned [1-3] distinct kernel\(s\)", proc.stdout), proc.stdout
    assert "tuned / onnxruntime" in proc.stdout and db.exists()
