"""Whole-model latency: polyonnx against onnxruntime measured in the same run.

The benchmark set of issue 17 (random weights): MNIST and the nine light models of the onnx
package (:mod:`polyonnx.testing.zoo`) and the published architectures of
:mod:`polyonnx.testing.architectures` (MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
YOLOv8n at 320, a BERT-base layer, a bidirectional LSTM, a GRU classifier).

:func:`measure` compiles a model cold (on-disk kernel cache off) and times polyonnx and
onnxruntime (CPU provider, ``intra_op_num_threads``) in alternation round by round
(:func:`polyonnx.bench.timing.interleaved_times`); the ratio polyonnx / onnxruntime > 1 means
polyonnx is slower. ``benchmarks/models.py`` prints the tables; ``polyonnx bench`` reports them.

Example (a measurement: it takes seconds to minutes)::

    row = measure("mnist", threads=1, repeat=20, budget_s=5.0)
    print(table([row]))
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx

import polyonnx
from polyonnx.bench.timing import WARM_S, Spread, interleaved_times
from polyonnx.testing import max_errors, onnxruntime_session, random_feeds
from polyonnx.testing.architectures import ARCHITECTURES, EXTRA_ARCHITECTURES
from polyonnx.testing.zoo import LIGHT_MODELS, light_model, mnist_model

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mnist": mnist_model,
    **{name: functools.partial(light_model, name) for name in LIGHT_MODELS},
    **{name: build for name, build in ARCHITECTURES.items()},
}
"""Every model of the set by name, in the table's order."""

EXTRA_MODELS: dict[str, Callable[[], onnx.ModelProto]] = dict(EXTRA_ARCHITECTURES)
"""Models outside the set that ``benchmarks/models.py --models`` also runs (not in reports):
:data:`polyonnx.testing.architectures.EXTRA_ARCHITECTURES`."""


def build(name: str) -> onnx.ModelProto:
    """The model ``name`` of :data:`MODELS` or :data:`EXTRA_MODELS`."""
    return {**MODELS, **EXTRA_MODELS}[name]()


RTOL = 1e-4
"""Relative error (max |polyonnx - ort| / max |ort|) above which a row says MISMATCH."""


@dataclass(frozen=True)
class Row:
    """One model at one thread count: cold compile time, both latencies, the output error."""

    model: str
    threads: int
    compile_s: float
    polyonnx: Spread
    ort: Spread
    max_rel_err: float

    @property
    def polyonnx_s(self) -> float:
        return self.polyonnx.median

    @property
    def ort_s(self) -> float:
        return self.ort.median

    @property
    def runs(self) -> int:
        return self.polyonnx.rounds

    @property
    def ratio(self) -> float:
        """polyonnx / onnxruntime in time, of the medians (> 1: polyonnx is slower)."""
        return self.polyonnx_s / self.ort_s


@dataclass(frozen=True)
class Refused:
    """A model polyonnx did not compile or run: the error it raised."""

    model: str
    threads: int
    error: str


def measure(
    name: str,
    threads: int,
    repeat: int,
    budget_s: float,
    model: onnx.ModelProto | None = None,
    step: Callable[[str], None] = lambda _: None,
) -> Row:
    """Compile ``name`` cold with polyonnx, then time polyonnx and onnxruntime on one input
    (``step`` is told what is being measured, for progress reports)."""
    model = model if model is not None else build(name)
    step("compiling (cold)")
    t = time.perf_counter()
    # Cold: the on-disk cache of compiled kernels is off, so every kernel is compiled.
    sess = polyonnx.InferenceSession(
        model, options=polyonnx.Options(num_threads=threads, cache=False)
    )
    compile_s = time.perf_counter() - t
    feeds = random_feeds(sess.get_inputs())
    ref = onnxruntime_session(model, threads=threads)
    err = max_errors(sess.run(None, feeds), ref.run(None, feeds)).relative
    step("latency vs onnxruntime")
    # Interleaved, so that the machine's drift in speed slows both contenders alike.
    poly, ort = interleaved_times(
        [lambda: sess.run(None, feeds), lambda: ref.run(None, feeds)],
        repeat,
        budget_s,
        WARM_S if threads > 1 else 0.0,
    )
    return Row(name, threads, compile_s, poly, ort, err)


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
