"""``polyonnx bench``: the whole benchmark set on this host, as one report.

:func:`measure` runs, in order: the host's fingerprint and library versions
(:mod:`polyonnx.bench.host`), the FMA peak at each thread count (:mod:`polyonnx.bench.peak`),
the memory bandwidth at each thread count (:func:`polyonnx.bench.roofline.measure_bandwidth`),
every model against onnxruntime at each thread count (:mod:`polyonnx.bench.models`: cold
compile time, latencies interleaved), the GEMM sizes against numpy's OpenBLAS at each thread
count (:func:`polyonnx.bench.gemm.measure_apart`, in a child process without the OpenBLAS
overrides) and every kernel of every model on the roofline at the first thread count
(:mod:`polyonnx.bench.roofline`). The result is a JSON-able dict (``report.json``); every
measured figure keeps its spread (``{"median", "min", "max", "rounds"}``) and every ratio is
of two medians of the same run. :func:`report` also writes ``report.md`` and ``report.html``
with the plots (:mod:`polyonnx.bench.document`).

Example (a measurement: it takes seconds to minutes)::

    data = polyonnx.bench.report("bench-out", quick=True)
    data["summary"]["geomean_ratio"]
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import math
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polyonnx
from polyonnx.bench import gemm, peak, roofline
from polyonnx.bench.document import write
from polyonnx.bench.folder import MEASURED
from polyonnx.bench.host import fingerprint, versions
from polyonnx.bench.models import MODELS, RTOL, Refused, geometric_mean
from polyonnx.bench.models import measure as measure_model
from polyonnx.bench.progress import Progress
from polyonnx.bench.timing import Spread
from polyonnx.testing.architectures import multiply_adds, parameters

#: The report format (:data:`polyonnx.bench.folder.MEASURED`); bumped when a key changes meaning.
SCHEMA = MEASURED

QUICK_MODELS = ("mnist", "gru_classifier")
QUICK_GEMMS = ((128, 128, 128), (256, 256, 256), (64, 196, 128))


@dataclass(frozen=True, slots=True)
class Settings:
    """What a run measures and how long it tries (``repeat`` rounds, cut to fit ``budget_s``
    seconds, at least 3)."""

    models: tuple[str, ...]
    threads: tuple[int, ...]
    repeat: int = 20
    budget_s: float = 40.0
    gemm_sizes: tuple[tuple[int, int, int], ...] = gemm.DEFAULT_SIZES
    gemm_repeat: int = 20
    gemm_budget_s: float = 5.0
    peak_repeat: int = 30
    peak_iterations: int = peak.DEFAULT_ITERATIONS
    bandwidth_repeat: int = 7
    bandwidth_bytes: int | None = None  # (None: 4 x the L3, at least 64 MiB)
    roofline_repeat: int = 20
    quick: bool = False

    def __post_init__(self) -> None:
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise ValueError(f"unknown model(s) {', '.join(unknown)}; the set: {', '.join(MODELS)}")
        if not self.models or not self.threads or min(self.threads) < 1:
            raise ValueError("at least one model and thread counts of at least 1")

    @staticmethod
    def of(
        models: Sequence[str] | None = None,
        threads: Sequence[int] | None = None,
        quick: bool = False,
    ) -> Settings:
        """The whole set (or ``models``) at 1..N threads (N: the cores this process may use),
        or with ``quick`` a couple of small models, few rounds and small GEMMs."""
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        chosen = tuple(threads) if threads else tuple(range(1, usable + 1))
        if not quick:
            return Settings(tuple(models or MODELS), chosen)
        return Settings(
            tuple(models or QUICK_MODELS),
            chosen,
            repeat=5,
            budget_s=2.0,
            gemm_sizes=QUICK_GEMMS,
            gemm_repeat=5,
            gemm_budget_s=1.0,
            peak_repeat=5,
            peak_iterations=1 << 18,
            bandwidth_repeat=3,
            bandwidth_bytes=32 << 20,
            roofline_repeat=5,
            quick=True,
        )


def require_extras() -> None:
    """Fail before a long run, not after it: onnxruntime (the peer) and matplotlib (the
    plots) are the ``bench`` extra."""
    for module in ("onnxruntime", "matplotlib"):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ImportError(
                f"{module} is not installed; polyonnx bench needs it: pip install polyonnx[bench]"
            ) from e


def report(
    out: str | os.PathLike[str],
    models: Sequence[str] | None = None,
    threads: Sequence[int] | None = None,
    quick: bool = False,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """Measure (:func:`measure`) and write the report folder ``out``: ``report.json``,
    ``report.md``, ``report.html`` and the plots. Returns the report; progress goes to
    stderr."""
    data = measure(settings or Settings.of(models, threads, quick))
    write(data, Path(out))
    return data


def _spread(s: Spread) -> dict[str, float | int]:
    return dataclasses.asdict(s)


def _finite(x: float) -> float | None:
    """JSON has no infinities: an unbounded figure (a kernel moving no bytes) is null."""
    return x if math.isfinite(x) else None


def measure(settings: Settings) -> dict[str, Any]:
    """Run everything :class:`Settings` asks for; the report as a JSON-able dict."""
    require_extras()
    s = settings
    progress = Progress(
        total=2
        + len(s.threads)
        + len(s.models) * (len(s.threads) + 1)
        + len(s.gemm_sizes) * len(s.threads)
    )
    started = time.time()
    progress.step("host fingerprint and library versions")
    host, libs = fingerprint(), versions()

    progress.step(f"FMA peak at {', '.join(map(str, s.threads))} thread(s)")
    peaks = peak.measure(peak.build_peak(iterations=s.peak_iterations), s.threads, s.peak_repeat)
    peak_best = {row.threads: row.best * row.threads for row in peaks}  # GFLOP/s, all threads
    bandwidth = {}
    for t in s.threads:
        progress.step(f"memory bandwidth (copy, triad), {t} thread(s)")
        bandwidth[t] = roofline.measure_bandwidth(t, s.bandwidth_repeat, s.bandwidth_bytes)

    model_rows, refused, sizes = [], [], {}
    for name in s.models:
        model = MODELS[name]()
        sizes[name] = (
            parameters(model),
            multiply_adds(model),
        )
        for t in s.threads:
            label = f"{name}, {t} thread(s)"
            progress.step(label)
            try:
                row = measure_model(
                    name,
                    t,
                    s.repeat,
                    s.budget_s,
                    model,
                    functools.partial(_note, progress, label),
                )
                model_rows.append(row)
            except Exception as e:  # listed in the report; the other models still run
                traceback.print_exc(file=sys.stderr)
                refused.append(Refused(name, t, f"{type(e).__name__}: {e}"))

    gemm_rows = []
    for t in s.threads:
        gemm_rows += gemm.measure_apart(s.gemm_sizes, t, s.gemm_repeat, s.gemm_budget_s, progress)

    first = s.threads[0]
    failed = {f.model for f in refused if f.threads == first}
    points = []
    for name in s.models:
        progress.step(f"roofline: every kernel of {name}, {first} thread(s)")
        if name in failed:
            continue
        compiled = polyonnx.compile(MODELS[name](), polyonnx.Options(num_threads=first))
        points += roofline.points(
            name, compiled, peak_best[first], bandwidth[first].triad.median, s.roofline_repeat
        )

    ratios = {
        str(t): _finite(geometric_mean([r.ratio for r in model_rows if r.threads == t]))
        for t in s.threads
    }
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "settings": {
            **dataclasses.asdict(s),
            "gemm_sizes": [list(g) for g in s.gemm_sizes],
        },
        "host": host,
        "load_after": list(os.getloadavg()),
        "versions": libs,
        "peak": [
            {
                "threads": row.threads,
                "vector_bits": row.bits,
                "accumulators": row.rows,
                "per_core_gflops": _spread(row.per_core),
                "best_gflops": peak_best[row.threads],
                "loop": row.loop,
            }
            for row in peaks
        ],
        "bandwidth": [
            {
                "threads": t,
                "array_mib": bw.array_mib,
                "copy_gbs": _spread(bw.copy),
                "triad_gbs": _spread(bw.triad),
            }
            for t, bw in bandwidth.items()
        ],
        "models": [
            {
                "model": r.model,
                "threads": r.threads,
                "parameters": sizes[r.model][0],
                "multiply_adds": sizes[r.model][1],
                "compile_s": _spread(Spread.once(r.compile_s)),
                "polyonnx_s": _spread(r.polyonnx),
                "onnxruntime_s": _spread(r.ort),
                "ratio": r.ratio,
                "max_rel_err": _finite(r.max_rel_err),
                "mismatch": not r.max_rel_err <= RTOL,
            }
            for r in model_rows
        ],
        "refused": [dataclasses.asdict(f) for f in refused],
        "gemm": [
            {
                "m": r.m,
                "n": r.n,
                "k": r.k,
                "threads": r.threads,
                "flops": r.flops,
                "compile_s": _spread(Spread.once(r.compile_s)),
                "polyonnx_gflops": _spread(r.polyonnx.rate(r.flops / 1e9)),
                "numpy_gflops": _spread(r.numpy.rate(r.flops / 1e9)),
                "ratio": r.ratio,
                "of_peak": r.flops / r.polyonnx_s / 1e9 / peak_best[r.threads],
                "max_rel_err": _finite(r.max_rel_err),
            }
            for r in gemm_rows
        ],
        "roofline": {
            "threads": first,
            "peak_gflops": peak_best[first],
            "bandwidth_gbs": bandwidth[first].triad.median,
            "kernels": [
                {
                    "model": p.model,
                    "kernel": p.kernel,
                    "ops": list(p.ops),
                    "time_s": _spread(p.time),
                    "flops": p.flops,
                    "bytes": p.bytes,
                    "intensity": _finite(p.intensity),
                    "gflops": p.gflops,
                    "bound_gflops": _finite(p.bound_gflops),
                    "memory_bound": p.memory_bound,
                    "of_bound": p.fraction,
                    "lost_s": p.lost_seconds,
                }
                for p in points
            ],
        },
        "summary": {"geomean_ratio": ratios},
    }


def _note(progress: Progress, label: str, what: str) -> None:
    """A progress note about one measurement (``label``: the model and thread count)."""
    progress.note(f"{label}: {what}")
