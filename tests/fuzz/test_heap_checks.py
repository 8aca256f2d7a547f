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

from polyonnx.fuzz import KINDS, campaign
from polyonnx.fuzz.worker import _CANARY, heap_check_environment, heap_checks_catch_overruns


def test_freed_and_new_memory_are_perturbed():
    assert heap_check_environment()["MALLOC_PERTURB_"] == "165"


def test_the_debugging_malloc_is_used_only_where_it_catches_an_overrun():
    env = heap_check_environment()
    if not heap_checks_catch_overruns():
        pytest.skip(
            f"glibc's MALLOC_CHECK_ does not work with {sys.executable} here (a shared "
            "libpython allocating before libc_malloc_debug is initialised, or no such library)"
        )
    run = subprocess.run(
        [sys.executable, "-c", _CANARY], env={**os.environ, **env}, capture_output=True
    )
    assert run.returncode != 0 and b"free(): invalid pointer" in run.stderr


@pytest.mark.slow
def test_a_bounded_campaign_under_heap_checks_has_no_failure(capsys):
    failures = campaign(KINDS, cases=45, seed=31_000, seconds=None, heap_checks=True)
    out = capsys.readouterr().out
    assert failures == 0, out
    assert "cases tried: 45" in out
