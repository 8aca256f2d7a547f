"""``polyonnx tune``: --show, --export, --merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyonnx.cli import main
from tests.records.test_database import record


def test_show_export_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from polyonnx.records.database import TuningDatabase

    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    with TuningDatabase(a) as db:
        db.add_all([record(factor=4, speedup=1.2), record(factor=8, speedup=1.6)])
    assert main(["tune", "--show", "--db", str(a)]) == 0
    out = capsys.readouterr().out
    assert "1 tuned kernel(s)" in out and "k0_MatMul" in out and "1.60x" in out
    assert "znver4" in out
    assert main(["tune", "--db", str(a), "--export", str(tmp_path / "a.json")]) == 0
    assert "wrote 2 records" in capsys.readouterr().out
    assert main(["tune", "--db", str(b), "--merge", str(tmp_path / "a.json"), "--show"]) == 0
    out = capsys.readouterr().out
    assert "2 new or better records" in out and "1.60x" in out
    assert main(["tune", "--db", str(tmp_path / "none.sqlite")]) == 0
    assert "no records" in capsys.readouterr().out


def test_a_corrupt_database_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"x" * 4096)
    assert main(["tune", "--show", "--db", str(bad)]) == 2
    assert "bad.sqlite" in capsys.readouterr().err


def test_tune_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    from tests.tune.models import gemm_model

    onnx.save(gemm_model(), tmp_path / "m.onnx")
    db = tmp_path / "t.sqlite"
    args = ["tune", str(tmp_path / "m.onnx"), "--budget", "5s", "--threads", "1", "--db", str(db)]
    assert main([*args, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "tuned 1 distinct kernel(s)" in out and "k0_MatMul" in out
    assert "tuned model:" in out and "faster than untuned" in out and "outputs agree" in out
    assert main(["tune", "--db", str(db), "--budget", "soon", str(tmp_path / "m.onnx")]) == 2
    assert "budget 'soon'" in capsys.readouterr().err
