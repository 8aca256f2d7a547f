"""The FMA peak kernel: its hot loop is FMAs, one per accumulator vector and step."""

from __future__ import annotations

import pytest

from polyonnx.bench.peak import build_peak, measure
from polyonnx.codegen.target import host_cpu


@pytest.mark.skipif(not host_cpu()[0].startswith("x86_64"), reason="reads x86 assembly")
def test_the_peak_loop_is_independent_fmas() -> None:
    """Every accumulator vector gets an FMA each step (a multiply and an add apart, or a
    product hoisted out of the loop, would halve the roof every kernel is measured against)."""
    peak = build_peak(iterations=1024)
    fmas = [s for s in peak.loop if s.startswith("vfmadd")]
    assert len(fmas) >= peak.rows
    assert len(fmas) % peak.rows == 0
    assert len(peak.loop) - len(fmas) <= 4  # the counter and the branch
    assert peak.loop_summary.startswith(f"{len(fmas)}/")


def test_the_peak_is_measured_per_thread_count() -> None:
    rows = measure(build_peak(iterations=1 << 12), threads=[1, 2], repeat=3)
    assert [r.threads for r in rows] == [1, 2]
    assert all(r.per_core.median > 0 for r in rows)
