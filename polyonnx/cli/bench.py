"""``polyonnx bench``: the benchmark set on this host, written as a report folder
(:func:`polyonnx.bench.report`)."""

from __future__ import annotations

import argparse
import sys

from polyonnx.bench.models import MODELS
from polyonnx.cli.arguments import RAW, Subparsers

EXAMPLES = """\
writes DIR/report.json (host fingerprint, roofs, every figure with its spread: median, min,
max, rounds), DIR/report.md, DIR/report.html and the plots (PNG) beside them. Takes long
(about an hour for the whole set at 1 and 2 threads); progress goes to stderr. Needs the
bench extra: pip install polyonnx[bench].

what it measures, in order:
  the FMA peak and the memory bandwidth at each thread count (the roofline's roofs);
  every model against onnxruntime at each thread count: cold compile time, latency
    (interleaved rounds, medians; polyonnx / ort > 1: polyonnx is slower);
  MatMul shapes against numpy (OpenBLAS, same threads, OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE
    unset in a child process): GFLOP/s, against the peak;
  every kernel of every model on the roofline, at the first thread count.

examples:
  polyonnx bench --out bench-report                   # the whole set, 1..N threads
  polyonnx bench --quick --out /tmp/quick             # two small models, few rounds (~2 min)
  polyonnx bench --models mnist resnet50 --threads 1 2
"""


def add_parser(sub: Subparsers) -> None:
    b = sub.add_parser(
        "bench",
        help="benchmark polyonnx on this host against onnxruntime and OpenBLAS: a report",
        description="Run the benchmark set on this host and write a report folder.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    b.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        choices=list(MODELS),
        help=f"models to run (default: all; --quick: two small ones): {', '.join(MODELS)}",
    )
    b.add_argument(
        "--threads",
        nargs="+",
        type=int,
        metavar="N",
        help="thread counts (default: 1 .. the cores this process may use)",
    )
    b.add_argument(
        "--out",
        metavar="DIR",
        help="the report folder (default: polyonnx-bench-<LLVM cpu name>)",
    )
    b.add_argument(
        "--quick",
        action="store_true",
        help="a couple of small models, few rounds, small GEMMs (what the tests run)",
    )
    b.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    from polyonnx.bench.suite import report
    from polyonnx.codegen.target import host_cpu

    if args.threads and min(args.threads) < 1:
        print("polyonnx: error: --threads: counts must be at least 1", file=sys.stderr)
        return 2
    out = args.out or f"polyonnx-bench-{host_cpu()[1]}"
    try:
        data = report(out, args.models, args.threads, args.quick)
    except ImportError as e:
        print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2
    geo = ", ".join(
        f"{'-' if g is None else f'{g:.2f}'} at {t} thread(s)"
        for t, g in data["summary"]["geomean_ratio"].items()
    )
    print(f"polyonnx / onnxruntime (geometric mean, in time): {geo}")
    print(f"wrote {out}/report.json, report.md, report.html")
    return 0
