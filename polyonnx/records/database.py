"""The tuning database: measured schedules per kernel signature and target, in SQLite.

A :class:`Record` is one measured candidate: the kernel's signature, the target it was measured
on (a :class:`Fingerprint`: triple, CPU, features, cache sizes, threads), its schedule
:class:`~polyonnx.schedule.trace.Trace`, its median time, its speed-up over the default
schedule (timed in the same process as its incumbent, so load cancels out) and the polyonnx
version. ``compile`` and ``InferenceSession`` use the best record of each kernel for their
target (:func:`polyonnx.records.lookup.tuned_schedules`). The default database lives beside the
compile cache (:func:`default_path`); databases export to JSON and merge.

Example::

    db = TuningDatabase(tmp / "tuning.sqlite")
    db.add(Record(sig, "k0_Conv", target_fingerprint(Options()), trace, 1e-3, 1.4))
    db.best(sig, target_fingerprint(Options())).speedup
    # -> 1.4
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from polyonnx import cache
from polyonnx._version import __version__
from polyonnx.errors import PolyonnxError, TuningError
from polyonnx.options import Options
from polyonnx.schedule.trace import Trace

#: The schema's version, in the ``meta`` table: a database of another format is refused.
FORMAT = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    signature TEXT NOT NULL,
    kernel TEXT NOT NULL,
    target TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    trace TEXT NOT NULL,
    time_s REAL NOT NULL,
    speedup REAL NOT NULL,
    version TEXT NOT NULL,
    created REAL NOT NULL,
    UNIQUE (signature, target, trace)
);
CREATE INDEX IF NOT EXISTS records_by_kernel ON records (signature, target);
"""


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What a measured time depends on besides the kernel: the machine and the threads."""

    triple: str
    cpu: str
    features: str
    l1_bytes: int
    l2_bytes: int
    threads: int

    @property
    def key(self) -> str:
        """A 16-hex-digit hash of every field (what records are looked up by)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Fingerprint:
        return Fingerprint(**json.loads(text))

    def __str__(self) -> str:
        return (
            f"{self.cpu} ({self.triple}), L1d {self.l1_bytes >> 10} KiB, "
            f"L2 {self.l2_bytes >> 10} KiB, {self.threads} thread{'s' * (self.threads > 1)}"
        )


def target_fingerprint(options: Options) -> Fingerprint:
    """The fingerprint of the target ``options`` compile for (the host's by default)."""
    from polyonnx.codegen.parallel_runtime import thread_count
    from polyonnx.codegen.target import l1_data_bytes, l2_bytes, machine

    triple, cpu, features = machine(options)
    return Fingerprint(
        triple, cpu, features, l1_data_bytes(options), l2_bytes(options), thread_count(options)
    )


@dataclass(frozen=True, slots=True)
class Record:
    """One measured schedule of one kernel on one target."""

    signature: str
    kernel: str
    """The name of the kernel it was measured on (for people; records are found by
    ``signature``)."""
    target: Fingerprint
    trace: Trace
    time_s: float
    """Median time of one run, where it was measured."""
    speedup: float
    """The default schedule's time over this one's (> 1: faster than the default)."""
    version: str = __version__
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {
            "signature": self.signature,
            "kernel": self.kernel,
            "target": asdict(self.target),
            "trace": json.loads(self.trace.to_json()),
            "time_s": self.time_s,
            "speedup": self.speedup,
            "version": self.version,
            "created": self.created,
        }

    @staticmethod
    def from_dict(obj: dict) -> Record:
        return Record(
            str(obj["signature"]),
            str(obj["kernel"]),
            Fingerprint(**obj["target"]),
            Trace.from_json(obj["trace"]),
            float(obj["time_s"]),
            float(obj["speedup"]),
            str(obj["version"]),
            float(obj["created"]),
        )


def default_path() -> Path:
    """``tuning.sqlite`` in the compile cache's directory (:func:`polyonnx.cache.directory`)."""
    return cache.directory() / "tuning.sqlite"


def database_path(options: Options) -> Path | None:
    """The database ``options`` name (``Options.tuning_db``): the default one when None, none
    when empty."""
    if options.tuning_db is None:
        return default_path()
    return Path(options.tuning_db) if options.tuning_db else None


class TuningDatabase:
    """A tuning database file (created on first write). Corrupt files and files that are no
    polyonnx tuning database are refused with :class:`~polyonnx.errors.TuningError`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.path.exists():
            return None
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30)
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if tables and "records" not in tables:
                raise TuningError(f"tuning database {self.path}: not a polyonnx tuning database")
            with conn:
                conn.executescript(_SCHEMA)
                row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                if row is None:
                    conn.execute("INSERT INTO meta VALUES ('format', ?)", (str(FORMAT),))
                elif row[0] != str(FORMAT):
                    raise TuningError(
                        f"tuning database {self.path}: format {row[0]}, this polyonnx reads "
                        f"format {FORMAT}"
                    )
        except sqlite3.Error as e:
            raise TuningError(f"tuning database {self.path}: {e}") from None
        except OSError as e:
            raise TuningError(f"tuning database {self.path}: {e}") from None
        self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> TuningDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def add(self, record: Record) -> None:
        """Store ``record``; a record of the same kernel, target and trace keeps the better
        speed-up."""
        self.add_all([record])

    def add_all(self, records: Iterable[Record]) -> int:
        """Store ``records`` (as :meth:`add`); returns how many were new or better."""
        conn = self._connect(create=True)
        assert conn is not None
        changed = 0
        try:
            with conn:
                for r in records:
                    cur = conn.execute(
                        "INSERT INTO records (signature, kernel, target, fingerprint, trace, "
                        "time_s, speedup, version, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (signature, target, trace) DO UPDATE SET "
                        "time_s = excluded.time_s, speedup = excluded.speedup, "
                        "version = excluded.version, created = excluded.created "
                        "WHERE excluded.speedup > records.speedup",
                        (
                            r.signature,
                            r.kernel,
                            r.target.key,
                            r.target.to_json(),
                            r.trace.to_json(),
                            r.time_s,
                            r.speedup,
                            r.version,
                            r.created,
                        ),
                    )
                    changed += cur.rowcount
        except sqlite3.Error as e:
            raise TuningError(f"tuning database {self.path}: {e}") from None
        return changed

    # ------------------------------------------------------------------ reading

    def records(
        self, signature: str | None = None, target: Fingerprint | None = None
    ) -> list[Record]:
        """The records (of one kernel signature, of one target), best speed-up first."""
        where, args = [], []
        if signature is not None:
            where.append("signature = ?")
            args.append(signature)
        if target is not None:
            where.append("target = ?")
            args.append(target.key)
        sql = "SELECT signature, kernel, fingerprint, trace, time_s, speedup, version, created "
        sql += "FROM records" + (" WHERE " + " AND ".join(where) if where else "")
        return list(self._query(sql + " ORDER BY speedup DESC, id", args))

    def best(self, signature: str, target: Fingerprint) -> Record | None:
        """The record of ``signature`` on ``target`` with the best speed-up, or None."""
        found = self.records(signature, target)
        return found[0] if found else None

    def best_records(self, target: Fingerprint | None = None) -> list[Record]:
        """The best record of every (kernel signature, target)."""
        best: dict[tuple[str, str], Record] = {}
        for r in self.records(target=target):
            best.setdefault((r.signature, r.target.key), r)
        return list(best.values())

    def other_targets(self, signatures: Iterable[str], target: Fingerprint) -> list[Fingerprint]:
        """The targets other than ``target`` that records of ``signatures`` were measured on."""
        conn = self._connect(create=False)
        if conn is None:
            return []
        sigs = list(signatures)
        marks = ", ".join("?" * len(sigs))
        try:
            rows = conn.execute(
                f"SELECT DISTINCT fingerprint FROM records WHERE target != ? "
                f"AND signature IN ({marks})",
                [target.key, *sigs],
            ).fetchall()
            return [Fingerprint.from_json(r[0]) for r in rows]
        except (sqlite3.Error, ValueError, TypeError) as e:
            raise TuningError(f"tuning database {self.path}: {e}") from None

    def __len__(self) -> int:
        conn = self._connect(create=False)
        if conn is None:
            return 0
        return int(conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])

    def _query(self, sql: str, args: list) -> Iterator[Record]:
        conn = self._connect(create=False)
        if conn is None:
            return
        try:
            rows = conn.execute(sql, args).fetchall()
            for sig, kernel, fingerprint, trace, time_s, speedup, version, created in rows:
                yield Record(
                    sig,
                    kernel,
                    Fingerprint.from_json(fingerprint),
                    Trace.from_json(trace),
                    time_s,
                    speedup,
                    version,
                    created,
                )
        except (sqlite3.Error, ValueError, TypeError, KeyError, PolyonnxError) as e:
            raise TuningError(f"tuning database {self.path}: unreadable record ({e})") from None

    # ------------------------------------------------------------------ export / merge

    def export(self, path: str | os.PathLike, best_only: bool = False) -> int:
        """Write the records (or only the best of each kernel and target) to a JSON file;
        returns how many."""
        records = self.best_records() if best_only else self.records()
        data = {"polyonnx_tuning": FORMAT, "records": [r.to_dict() for r in records]}
        Path(path).write_text(json.dumps(data, indent=1), encoding="utf-8")
        return len(records)

    def merge(self, source: str | os.PathLike) -> int:
        """Add the records of another database or of a JSON export; returns how many were new
        or better than the ones here."""
        source = Path(source)
        try:
            head = source.read_bytes()[:16]
        except OSError as e:
            raise TuningError(f"tuning records {source}: {e}") from None
        if head.startswith(b"SQLite format 3"):
            with TuningDatabase(source) as other:
                return self.add_all(other.records())
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
            if data.get("polyonnx_tuning") != FORMAT:
                raise ValueError(f"format {data.get('polyonnx_tuning')!r}, expected {FORMAT}")
            records = [Record.from_dict(r) for r in data["records"]]
        except (ValueError, KeyError, TypeError, AttributeError, PolyonnxError) as e:
            raise TuningError(
                f"tuning records {source}: not a tuning database or export ({e})"
            ) from None
        return self.add_all(records)
