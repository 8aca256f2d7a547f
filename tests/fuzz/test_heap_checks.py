"""Memory safety as a standing check: a bounded fuzz campaign under glibc's heap checks.

The campaign fails on any crash (a glibc abort or a segfault inside a case), hang, wrong
answer or non-``PolyonnxError``, and on a worker that aborts when it exits (where glibc
notices a corrupted heap). Long campaigns: docs/memory-safety.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from polyonnx.fuzz.worker import (
    _CANARY,
    MALLOC_DEBUG_LIBRARY,
    heap_check_environment,
    heap_check_interpreter,
)


def test_freed_and_new_memory_are_perturbed():
    assert heap_check_environment()["MALLOC_PERTURB_"] == "165"


def _checked_interpreter():
    found = heap_check_interpreter()
    if found is None:
        pytest.skip(
            f"glibc's MALLOC_CHECK_ works neither with {sys.executable} (a shared libpython "
            "allocating before libc_malloc_debug is initialised) nor with a system Python "
            f"{sys.version_info.major}.{sys.version_info.minor}, or there is no such library"
        )
    return found


def test_the_debugging_malloc_catches_an_overrun_where_the_campaign_runs():
    found = _checked_interpreter()
    env = {**os.environ, **dict(found.environment), **heap_check_environment()}
    if "MALLOC_CHECK_" not in env:  # the system interpreter, not this one, needs them
        env.update(LD_PRELOAD=MALLOC_DEBUG_LIBRARY, MALLOC_CHECK_="3")
    run = subprocess.run([found.executable, "-c", _CANARY], env=env, capture_output=True)
    assert run.returncode != 0 and b"free(): invalid pointer" in run.stderr


@pytest.mark.slow
def test_a_bounded_campaign_under_the_full_heap_checks_has_no_failure():
    found = _checked_interpreter()
    command = [found.executable, "-m", "polyonnx.fuzz", "--heap-checks"]
    command += ["--cases", "45", "--seed", "31000"]
    env = {**os.environ, **dict(found.environment)}
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "cases tried: 45" in out and "failures: 0" in out
    for message in ("malloc", "corrupted", "munmap_chunk", "free()"):
        assert message not in run.stderr, out
