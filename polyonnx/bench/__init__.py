"""Benchmarks and their reports: :func:`report` runs the benchmark set on this host and writes
a report folder (``polyonnx bench``); the measurements it is made of (:mod:`.models`,
:mod:`.gemm`, :mod:`.peak`, :mod:`.roofline`, :mod:`.profile`, :mod:`.timing`) are what the
scripts in ``benchmarks/`` print.

Example (a measurement: it takes seconds to minutes)::

    data = polyonnx.bench.report("out", quick=True)
    data["summary"]["geomean_ratio"]
"""

from __future__ import annotations

from typing import Any

__all__ = ["Settings", "measure", "report"]


def __getattr__(name: str) -> Any:
    # Imported on first use: ``python -m polyonnx.bench.gemm`` (the GEMM child process) and
    # the light modules (timing, profile) must not load the whole suite.
    if name in __all__:
        from polyonnx.bench import suite

        return getattr(suite, name)
    raise AttributeError(f"module 'polyonnx.bench' has no attribute {name!r}")
