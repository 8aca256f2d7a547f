"""Checking cases in a worker process, so that a crash or a hang is an outcome.

With ``heap_checks``, the worker runs under glibc's debugging malloc (``MALLOC_CHECK_=3``,
freed and new memory filled by ``MALLOC_PERTURB_``): a write outside an allocation or a bad
``free`` aborts the worker, inside a case (a ``crash``) or when it exits (reported by
:meth:`Worker.close`), instead of silently changing results later.
"""

from __future__ import annotations

import ctypes.util
import functools
import multiprocessing as mp
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from polyonnx.fuzz.case import Case, Outcome
from polyonnx.fuzz.checker import check

#: glibc's debugging malloc: since glibc 2.34 ``MALLOC_CHECK_`` works only with it preloaded.
MALLOC_DEBUG_LIBRARY = "libc_malloc_debug.so.0"


#: A one-byte heap overrun, then its ``free``: glibc's checks abort it (SIGABRT).
_CANARY = (
    "import ctypes; libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; "
    "libc.free.argtypes = [ctypes.c_void_p]; p = libc.malloc(24); "
    "ctypes.memset(p, 0x55, 25); libc.free(p)"
)


def heap_check_environment() -> dict[str, str]:
    """The environment variables that turn glibc's heap checks on in a new process.

    ``MALLOC_PERTURB_`` always; ``MALLOC_CHECK_=3`` with glibc's debugging malloc preloaded
    when a canary (a one-byte overrun) shows it works with this interpreter: it does not when
    a shared ``libpython`` allocates before the debugging malloc is initialised (pyenv's
    builds), and then only glibc's own checks and the perturbation are on.

    Example (``LD_PRELOAD`` and ``MALLOC_CHECK_`` too where the canary aborts):
        >>> heap_check_environment()["MALLOC_PERTURB_"]
        '165'
    """
    env = {"MALLOC_PERTURB_": "165"}
    if ctypes.util.find_library("c_malloc_debug") is not None:
        preloads = os.environ.get("LD_PRELOAD", "").split()
        preload = " ".join(
            [*preloads, MALLOC_DEBUG_LIBRARY] if MALLOC_DEBUG_LIBRARY not in preloads else preloads
        )
        debug = {"LD_PRELOAD": preload, "MALLOC_CHECK_": "3"}
        if _catches_overrun(tuple(sorted(debug.items()))):
            env.update(debug)
    return env


@functools.cache
def _catches_overrun(extra: tuple[tuple[str, str], ...]) -> bool:
    """Whether a process of this interpreter with ``extra`` set aborts on the canary."""
    run = subprocess.run(
        [sys.executable, "-c", _CANARY],
        env={**os.environ, **dict(extra)},
        capture_output=True,
        timeout=60,
    )
    return run.returncode == -signal.SIGABRT


def heap_checks_catch_overruns() -> bool:
    """Whether :func:`heap_check_environment` includes glibc's debugging malloc here."""
    return "MALLOC_CHECK_" in heap_check_environment()


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A Python interpreter and the environment it needs to import this polyonnx."""

    executable: str
    environment: tuple[tuple[str, str], ...] = ()


def heap_check_interpreter() -> Interpreter | None:
    """An interpreter under which glibc's debugging malloc catches an overrun, or None.

    This one when it does; otherwise a system interpreter of the same minor version (Debian's
    ``/usr/bin/python3`` links ``libpython`` statically) given this one's package directories
    on ``PYTHONPATH``, so that a campaign started from a pyenv virtual environment still runs
    under the full checks.

    Example:
        >>> found = heap_check_interpreter()
        >>> found is None or os.path.exists(found.executable)
        True
    """
    if heap_checks_catch_overruns():
        return Interpreter(sys.executable)
    return _system_interpreter_with_checks()


@functools.cache
def _system_interpreter_with_checks() -> Interpreter | None:
    if ctypes.util.find_library("c_malloc_debug") is None:
        return None
    minor = tuple(sys.version_info[:2])
    version = ".".join(map(str, minor))
    here = os.path.realpath(sys.executable)
    env = {"PYTHONPATH": os.pathsep.join(_package_directories())}
    debug = {"LD_PRELOAD": MALLOC_DEBUG_LIBRARY, "MALLOC_CHECK_": "3"}
    for name in (f"/usr/bin/python{version}", "/usr/bin/python3"):
        if not os.path.exists(name) or os.path.realpath(name) == here:
            continue
        probe = subprocess.run(
            [
                name,
                "-c",
                f"import sys, polyonnx; assert sys.version[:{len(version)}] == {version!r}",
            ],
            env={**os.environ, **env},
            capture_output=True,
            timeout=120,
        )
        if probe.returncode != 0:
            continue
        crashed = subprocess.run(
            [name, "-c", _CANARY], env={**os.environ, **env, **debug}, capture_output=True
        )
        if crashed.returncode == -signal.SIGABRT:
            return Interpreter(name, tuple(sorted(env.items())))
    return None


def _package_directories() -> list[str]:
    """Where this process imports polyonnx and the third-party packages from (an editable
    install's finder lives in a ``.pth`` file, which ``PYTHONPATH`` entries do not run)."""
    import polyonnx

    root = os.path.dirname(os.path.dirname(os.path.abspath(polyonnx.__file__)))
    sites = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    return [root, *sites]


@contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` set while a child process is started (spawn copies it)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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

    def __init__(self, timeout: float = 120.0, heap_checks: bool = False) -> None:
        self.timeout = timeout
        self._environment = heap_check_environment() if heap_checks else {}
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None
        #: Exit codes of workers that ended badly after answering their last case (a heap
        #: check firing at exit: -6 is SIGABRT).
        self.bad_exits: list[int] = []

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child,), daemon=True)
        with _environment(self._environment):
            self._proc.start()
        child.close()
        self._conn = parent

    def close(self) -> None:
        """Stop the worker; a worker that exits with an error is recorded in ``bad_exits``."""
        if self._proc is not None:
            if self._conn is not None:
                self._conn.close()
            self._proc.join(timeout=30)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            elif self._proc.exitcode != 0:
                self.bad_exits.append(self._proc.exitcode)
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
