"""Checking cases in a worker process, so that a crash or a hang is an outcome."""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing.connection import Connection
from typing import Any

from polyonnx.fuzz.case import Case, Outcome
from polyonnx.fuzz.checker import check


def _serve(conn: Connection) -> None:
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        conn.send(check(case))


class Worker:
    """A worker process that checks cases; a crash or hang is an outcome, and it restarts.

    Example:
        >>> from polyonnx.fuzz import RandomDraw, random_graph
        >>> with Worker() as w:
        ...     w.check(random_graph(RandomDraw(0))).status
        'pass'
    """

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent

    def close(self) -> None:
        if self._proc is not None:
            if self._conn is not None:
                self._conn.close()
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._proc = self._conn = None

    def check(self, case: Case) -> Outcome:
        if self._proc is None:
            self._start()
        assert self._conn is not None
        try:
            self._conn.send(case)
            if self._conn.poll(self.timeout):
                return self._conn.recv()
            self._proc.kill()
            self._proc.join()
            status, detail = "hang", f"no answer in {self.timeout:.0f} s"
        except (EOFError, OSError):
            self._proc.join()
            status, detail = "crash", f"worker died (exit code {self._proc.exitcode})"
        self._proc = self._conn = None
        return Outcome(status, detail)
