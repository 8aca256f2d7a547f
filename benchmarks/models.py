"""Whole-model latency: polyonnx against onnxruntime measured in the same run.

For each model (random weights, from ``tests/models/builders.py``) and thread count, prints
polyonnx's cold compile time (on-disk kernel cache off), the median latency of polyonnx and of
onnxruntime (CPU provider, ``intra_op_num_threads``), timed in alternation round by round
(:func:`polyonnx.bench.timing.interleaved`), and the ratio polyonnx / onnxruntime (> 1:
polyonnx is slower).

Usage::

    python benchmarks/models.py                         # mnist and resnet50, 1 and 2 threads
    python benchmarks/models.py --models mnist --repeat 100
    python benchmarks/models.py --threads 1 --budget 30
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import onnx

import polyonnx
from polyonnx.bench.timing import WARM_S, interleaved
from polyonnx.testing import import_onnxruntime, max_errors, onnxruntime_session, random_feeds


def _builders() -> ModuleType:
    """tests/models/builders.py, imported by path (tests are not an installed package)."""
    path = Path(__file__).resolve().parent.parent / "tests" / "models" / "builders.py"
    spec = importlib.util.spec_from_file_location("polyonnx_test_builders", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_B = _builders()
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mnist": _B.mnist_model,
    "resnet50": lambda: _B.light_model("resnet50"),
}


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    model: str
    threads: int
    compile_s: float
    polyonnx_s: float
    ort_s: float
    runs: int
    max_rel_err: float


def measure(name: str, threads: int, repeat: int, budget_s: float) -> Row:
    """Compile ``name`` cold with polyonnx, then time polyonnx and onnxruntime on one input."""
    model = MODELS[name]()
    t = time.perf_counter()
    # Cold: the on-disk cache of compiled kernels is off, so every kernel is compiled.
    sess = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads,
                                                                     cache=False))
    compile_s = time.perf_counter() - t
    feeds = random_feeds(sess.get_inputs())
    ref = onnxruntime_session(model, threads=threads)
    err = max_errors(sess.run(None, feeds), ref.run(None, feeds)).relative
    # Interleaved, so that the machine's drift in speed slows both contenders alike.
    (poly_s, ort_s), runs = interleaved(
        [lambda: sess.run(None, feeds), lambda: ref.run(None, feeds)], repeat, budget_s,
        WARM_S if threads > 1 else 0.0)
    return Row(name, threads, compile_s, poly_s, ort_s, runs, err)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = ["| model | threads | compile (s) | polyonnx (ms) | onnxruntime (ms) | runs | "
             "polyonnx / ort | max rel err |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.model} | {r.threads} | {r.compile_s:.2f} | {_ms(r.polyonnx_s)} | "
                     f"{_ms(r.ort_s)} | {r.runs} | {r.polyonnx_s / r.ort_s:.2f} | "
                     f"{r.max_rel_err:.1e} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--repeat", type=int, default=20,
                   help="timed rounds per measurement, each one run of either contender "
                        "(default 20; at least 3)")
    p.add_argument("--budget", type=float, default=40.0,
                   help="seconds of timed rounds per measurement before --repeat is cut")
    args = p.parse_args(argv)
    print(f"polyonnx {polyonnx.__version__}, onnxruntime {import_onnxruntime().__version__}",
          flush=True)
    rows = []
    for name in args.models:
        for threads in args.threads:
            rows.append(measure(name, threads, args.repeat, args.budget))
            print(f"  done: {name}, {threads} thread(s)", file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
