"""Whole-model latency: polyonnx against onnxruntime measured in the same run.

The benchmark set of issue 17 (random weights): MNIST and the nine light models of the onnx
package (:mod:`polyonnx.testing.zoo`) and the published architectures of
:mod:`polyonnx.testing.architectures` (MobileNetV2, MobileNetV3-Small, EfficientNet-B0,
YOLOv8n at 320, a BERT-base layer, a bidirectional LSTM, a GRU classifier).

For each model and thread count, prints polyonnx's cold compile time (on-disk kernel cache
off), the median latency of polyonnx and of onnxruntime (CPU provider,
``intra_op_num_threads``), timed in alternation round by round
(:func:`polyonnx.bench.models.measure`), and the ratio polyonnx / onnxruntime (> 1:
polyonnx is slower); then a summary per model (parameters, multiply-adds, ratio per thread
count) with the geometric mean of the ratios per thread count. A model polyonnx refuses (or
fails on) is listed with the error instead; the other models still run.

Usage::

    python benchmarks/models.py                         # the whole set, 1 and 2 threads
    python benchmarks/models.py --models mnist resnet50 mobilenet_v2
    python benchmarks/models.py --models mnist --repeat 100
    python benchmarks/models.py --threads 1 --budget 30
    python benchmarks/models.py --models gpt2_blocks regnetx_400mf deeplabv3_aspp  # extras
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

import polyonnx
from polyonnx.bench.models import (
    EXTRA_MODELS,
    MODELS,
    Refused,
    Row,
    build,
    measure,
    summary,
    table,
)
from polyonnx.testing import import_onnxruntime
from polyonnx.testing.architectures import multiply_adds, parameters


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        nargs="+",
        choices=[*MODELS, *EXTRA_MODELS],
        default=list(MODELS),
        help="models to run (default: the whole set; also: " + ", ".join(EXTRA_MODELS) + ")",
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
        model = build(name)
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
