"""The command line on hostile models: one line on stderr, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

from polyonnx.cli import main
from tests.reliability.models import const, conv_net, model, relu, tensor


def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


HOSTILE = {
    "truncated.onnx": (lambda: conv_net().SerializeToString()[:300], "truncated"),
    "random.onnx": (lambda: np.random.default_rng(3).bytes(500), "not a valid ONNX"),
    "strides.onnx": (
        lambda: model(
            [helper.make_node("Conv", ["x", "w"], ["y"], name="c1", strides=[0, 1])],
            [tensor("x", [1, 1, 4, 4])],
            [tensor("y", [None] * 4)],
            [const("w", np.ones((1, 1, 2, 2), np.float32))],
        ).SerializeToString(),
        "node 'c1' (Conv): attribute 'strides'",
    ),
    "huge.onnx": (lambda: relu((1 << 20, 1 << 20)).SerializeToString(), "max_tensor_bytes"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", [["compile", "--emit", "graph"], ["run"], ["kernels"]])
def test_hostile_model_is_one_line_and_exit_status_2(tmp_path, capsys, name, command):
    make, needle = HOSTILE[name]
    path = _write(tmp_path, name, make())
    assert main([command[0], path, *command[1:]]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("polyonnx: error: "), captured.err
    assert needle in lines[0]
    assert "Traceback" not in captured.err


def test_the_real_process_exits_with_status_2(tmp_path):
    path = _write(tmp_path, "bad.onnx", b"\x08\x07garbage")
    proc = subprocess.run(
        [sys.executable, "-m", "polyonnx", "compile", path, "--emit", "krnl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("polyonnx: error: ")
    assert "bad.onnx" in proc.stderr and proc.stdout == ""
