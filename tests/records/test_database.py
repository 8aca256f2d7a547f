"""The tuning database: records keyed by kernel signature and target, export and merge,
refusal of files that are not tuning databases."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from polyonnx.errors import TuningError
from polyonnx.options import Options
from polyonnx.records.database import (
    Fingerprint,
    Record,
    TuningDatabase,
    database_path,
    default_path,
    target_fingerprint,
)
from polyonnx.schedule.trace import Trace
from polyonnx.schedule.verbs import Split

TARGET = Fingerprint("x86_64-unknown-linux-gnu", "znver4", "+avx2,+fma", 32768, 1 << 20, 1)
OTHER = dataclasses.replace(TARGET, threads=2)


def record(sig: str = "0123456789abcdef", factor: int = 8, speedup: float = 1.5, target=TARGET):
    trace = Trace("k0_MatMul", sig, (Split("j", factor),))
    return Record(sig, "k0_MatMul", target, trace, 1e-3 / speedup, speedup)


def test_records_round_trip_best_first(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        db.add_all([record(factor=4, speedup=1.2), record(factor=8, speedup=1.6)])
        db.add(record(factor=16, speedup=0.9, target=OTHER))
        found = db.records("0123456789abcdef", TARGET)
        assert [r.speedup for r in found] == [1.6, 1.2]
        assert found[0].trace == record(factor=8).trace and found[0].target == TARGET
        assert db.best("0123456789abcdef", OTHER).speedup == 0.9
        assert db.best("fedcba9876543210", TARGET) is None
        assert len(db) == 3 and len(db.best_records()) == 2
        assert db.other_targets(["0123456789abcdef"], TARGET) == [OTHER]


def test_a_measured_again_trace_keeps_its_better_speedup(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        db.add(record(speedup=1.5))
        assert db.add_all([record(speedup=1.1)]) == 0
        assert db.add_all([record(speedup=1.7)]) == 1
        assert [r.speedup for r in db.records()] == [1.7]


def test_export_and_merge(tmp_path: Path) -> None:
    with TuningDatabase(tmp_path / "a.sqlite") as a:
        a.add_all([record(factor=4, speedup=1.2), record(factor=8, speedup=1.6)])
        assert a.export(tmp_path / "a.json") == 2
    with TuningDatabase(tmp_path / "b.sqlite") as b:
        b.add(record(sig="fedcba9876543210"))
        assert b.merge(tmp_path / "a.json") == 2
        assert b.merge(tmp_path / "a.sqlite") == 0  # nothing new or better
        assert len(b) == 3


def test_a_missing_database_is_empty_and_not_created(tmp_path: Path) -> None:
    db = TuningDatabase(tmp_path / "none.sqlite")
    assert db.records() == [] and len(db) == 0 and db.best_records() == []
    assert not (tmp_path / "none.sqlite").exists()


@pytest.mark.parametrize("content", [b"not a database at all" * 100, b""])
def test_a_corrupt_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    if content:
        with pytest.raises(TuningError, match="bad.sqlite"):
            TuningDatabase(path).records()
    else:  # an empty file is an empty SQLite database
        assert TuningDatabase(path).records() == []


def test_another_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(TuningError, match="not a polyonnx tuning database"):
        TuningDatabase(path).add(record())


def test_an_unreadable_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    with TuningDatabase(path) as db:
        db.add(record())
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE records SET trace = '{\"steps\": 3}'")
    with pytest.raises(TuningError, match="unreadable record"):
        TuningDatabase(path).records()


def test_a_foreign_json_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"records": []}')
    with pytest.raises(TuningError, match="not a tuning database or export"):
        TuningDatabase(tmp_path / "t.sqlite").merge(tmp_path / "x.json")


def test_fingerprint_of_the_host_and_its_key() -> None:
    one, two = (
        target_fingerprint(Options(num_threads=1)),
        target_fingerprint(Options(num_threads=2)),
    )
    assert one.triple and one.cpu and one.l1_bytes > 0
    assert one.key != two.key and Fingerprint.from_json(one.to_json()) == one
    assert "thread" in str(one)


def test_database_path_from_options(tmp_path: Path) -> None:
    assert database_path(Options()) == default_path()
    assert database_path(Options(tuning_db="")) is None
    assert database_path(Options(tuning_db=str(tmp_path / "t.sqlite"))) == tmp_path / "t.sqlite"
