"""Whole-model latency: polyonnx against onnxruntime measured in the same run.

The benchmark set of issue 17 (random weights): MNIST and the nine light models of the onnx
package (from ``tests/models/builders.py``) and the published architectures of
:mod:`polyonnx.testing.architectures` (MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
YOLOv8n at 320, a BERT-base layer, a bidirectional LSTM, a GRU classifier).

For each model and thread count, prints polyonnx's cold compile time (on-disk kernel cache
off), the median latency of polyonnx and of onnxruntime (CPU provider,
``intra_op_num_threads``), timed in alternation round by round
(:func:`polyonnx.bench.timing.interleaved`), and the ratio polyonnx / onnxruntime (> 1:
polyonnx is slower); then a summary per model (parameters, multiply-adds, ratio per thread
count) with the geometric mean of the ratios per thread count. A model polyonnx refuses (or
fails on) is listed with the error instead; the other models still run.

Usage::

    python benchmarks/models.py                         # the whole set, 1 and 2 threads
    python benchmarks/models.py --models mnist resnet50 mobilenet_v2
    python benchmarks/models.py --models mnist --repeat 100
    python benchmarks/models.py --threads 1 --budget 30
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import onnx

import polyonnx
from polyonnx.bench.timing import WARM_S, interleaved
from polyonnx.testing import import_onnxruntime, max_errors, onnxruntime_session, random_feeds
from polyonnx.testing.architectures import ARCHITECTURES, multiply_adds, parameters


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
    **{name: (lambda name=name: _B.light_model(name)) for name in _B.LIGHT_MODELS},
    **{name: build for name, build in ARCHITECTURES.items()},
}
"""Every model of the set by name, in the table's order."""

RTOL = 1e-4
"""Relative error (max |polyonnx - ort| / max |ort|) above which a row says MISMATCH."""


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

    @property
    def ratio(self) -> float:
        return self.polyonnx_s / self.ort_s


@dataclass(frozen=True)
class Refused:
    """A model polyonnx did not compile or run: the error it raised."""

    model: str
    threads: int
    error: str


def measure(
    name: str, threads: int, repeat: int, budget_s: float, model: onnx.ModelProto | None = None
) -> Row:
    """Compile ``name`` cold with polyonnx, then time polyonnx and onnxruntime on one input."""
    model = model if model is not None else MODELS[name]()
    t = time.perf_counter()
    # Cold: the on-disk cache of compiled kernels is off, so every kernel is compiled.
    sess = polyonnx.InferenceSession(
        model, options=polyonnx.Options(num_threads=threads, cache=False)
    )
    compile_s = time.perf_counter() - t
    feeds = random_feeds(sess.get_inputs())
    ref = onnxruntime_session(model, threads=threads)
    err = max_errors(sess.run(None, feeds), ref.run(None, feeds)).relative
    # Interleaved, so that the machine's drift in speed slows both contenders alike.
    (poly_s, ort_s), runs = interleaved(
        [lambda: sess.run(None, feeds), lambda: ref.run(None, feeds)],
        repeat,
        budget_s,
        WARM_S if threads > 1 else 0.0,
    )
    return Row(name, threads, compile_s, poly_s, ort_s, runs, err)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f}"


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| model | threads | compile (s) | polyonnx (ms) | onnxruntime (ms) | runs | "
        "polyonnx / ort | max rel err |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        flag = " MISMATCH" if r.max_rel_err > RTOL else ""
        lines.append(
            f"| {r.model} | {r.threads} | {r.compile_s:.2f} | {_ms(r.polyonnx_s)} | "
            f"{_ms(r.ort_s)} | {r.runs} | {r.ratio:.2f} | "
            f"{r.max_rel_err:.1e}{flag} |"
        )
    return "\n".join(lines)


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summary(
    rows: Sequence[Row],
    refused: Sequence[Refused],
    threads: Sequence[int],
    sizes: dict[str, tuple[int, int]],
) -> str:
    """Per model: parameters, multiply-adds and polyonnx / ort per thread count; the geometric
    mean per thread count over the models measured; the refused models with their errors."""
    ratio = {(r.model, r.threads): r.ratio for r in rows}
    failed = {(f.model, f.threads) for f in refused}
    heads = " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in threads)
    lines = [
        f"| model | params (M) | G multiply-adds | {heads} |",
        "| --- | ---: | ---: |" + " ---: |" * len(threads),
    ]
    for name, (params, macs) in sizes.items():
        cells = " | ".join(
            f"{ratio[name, t]:.2f}"
            if (name, t) in ratio
            else "refused"
            if (name, t) in failed
            else ""
            for t in threads
        )
        lines.append(f"| {name} | {params / 1e6:.2f} | {macs / 1e9:.3f} | {cells} |")
    means = " | ".join(
        f"**{geometric_mean([r.ratio for r in rows if r.threads == t]):.2f}**" for t in threads
    )
    lines.append(f"| geometric mean ({len({r.model for r in rows})} model(s)) | | | {means} |")
    for f in refused:
        lines.append("")
        lines.append(f"- refused: {f.model} ({f.threads} thread(s)): {f.error}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        nargs="+",
        choices=list(MODELS),
        default=list(MODELS),
        help="models to run (default: the whole set)",
    )
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument(
        "--repeat",
        type=int,
        default=20,
        help="timed rounds per measurement, each one run of either contender "
        "(default 20; at least 3)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=40.0,
        help="seconds of timed rounds per measurement before --repeat is cut",
    )
    args = p.parse_args(argv)
    print(
        f"polyonnx {polyonnx.__version__}, onnxruntime {import_onnxruntime().__version__}",
        flush=True,
    )
    rows: list[Row] = []
    refused: list[Refused] = []
    sizes: dict[str, tuple[int, int]] = {}
    for name in args.models:
        model = MODELS[name]()
        sizes[name] = (parameters(model), multiply_adds(model))
        for threads in args.threads:
            try:
                rows.append(measure(name, threads, args.repeat, args.budget, model))
            except Exception as e:  # listed in the summary; the other models still run
                traceback.print_exc(file=sys.stderr)
                refused.append(Refused(name, threads, f"{type(e).__name__}: {e}"))
            print(f"  done: {name}, {threads} thread(s)", file=sys.stderr, flush=True)
    print(table(rows))
    print()
    print(summary(rows, refused, args.threads, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
