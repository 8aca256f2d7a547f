"""``polyonnx bench``: the benchmark set on this host, written as a report folder
(:func:`polyonnx.bench.report`); with ``--target T``, a report of a target run under qemu-user
(:func:`polyonnx.bench.emulated.report`: correctness and static facts, no timings); with
``--compare A B``, two report folders side by side (:func:`polyonnx.bench.compare.compare`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from polyonnx.bench.emulated import ALL_MODELS
from polyonnx.bench.models import MODELS
from polyonnx.cli.arguments import RAW, Subparsers
from polyonnx.testing.emulated import TARGETS

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

with --target T (aarch64, aarch64-sve, ppc64le, riscv64): no timings (emulated code runs at
the emulator's speed). Each model is compiled for T, linked by Debian's cross gcc and run
under qemu-user against onnxruntime on this host, node cases of the ONNX node suite against
the suite's outputs; each library is read with the cross objdump: vector width and registers,
code size per kernel, instruction mix (vector FMA, vector load/store, other vector, scalar
float, other). Needs qemu-user and the target's gcc-<triple> package.

with --compare A B: two report folders of the same kind side by side (hosts or targets,
per model latency ratios and their ratio between the machines, GEMM GFLOP/s, peaks; for
emulated reports correctness and static facts): printed as a table, written with plots to
--out (default polyonnx-compare-A-B) as compare.md and compare.html.

examples:
  polyonnx bench --out bench-report                   # the whole set, 1..N threads
  polyonnx bench --quick --out /tmp/quick             # two small models, few rounds (~2 min)
  polyonnx bench --models mnist resnet50 --threads 1 2
  polyonnx bench --rounds 15 --budget 12 --out reports/znver4   # the set in ~half an hour
  polyonnx bench --target aarch64 --out reports/aarch64     # under qemu-aarch64 (~10 min)
  polyonnx bench --target riscv64 --quick --out /tmp/rv     # MNIST, small CNN, 12 node cases
  polyonnx bench --compare reports/aarch64 reports/riscv64 --out /tmp/cmp
"""


def add_parser(sub: Subparsers) -> None:
    b = sub.add_parser(
        "bench",
        help="benchmark polyonnx on this host against onnxruntime and OpenBLAS: a report",
        description="Run the benchmark set on this host (or for a target under qemu-user) and "
        "write a report folder; or compare two report folders.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    b.add_argument(
        "--models",
        nargs="+",
        metavar="MODEL",
        choices=list(ALL_MODELS),
        help=f"models to run (default: all; --quick: two small ones): {', '.join(MODELS)}; "
        "with --target also small_cnn",
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
        help="the report folder (default: polyonnx-bench-<LLVM cpu name or target>)",
    )
    b.add_argument(
        "--quick",
        action="store_true",
        help="a couple of small models, few rounds, small GEMMs (what the tests run)",
    )
    b.add_argument(
        "--rounds",
        type=int,
        metavar="N",
        help="timed rounds per model and thread count (default 20; at least 3)",
    )
    b.add_argument(
        "--budget",
        type=float,
        metavar="S",
        help="seconds of timed rounds per model and thread count before --rounds is cut "
        "(default 40): a shorter run of the whole set",
    )
    b.add_argument(
        "--target",
        choices=list(TARGETS),
        help="a report of this target run under qemu-user: correctness and static facts of "
        "the code, no timings",
    )
    b.add_argument(
        "--node-cases",
        metavar="FILE",
        help="with --target: node cases to run, one name a line (default: the checkout's "
        "tests/backend/portable_cases.txt; 'none' for none)",
    )
    b.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="compare two report folders (of the same kind) side by side",
    )
    b.set_defaults(execute=execute)


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the combination of options, or None."""
    if args.compare and (args.target or args.models or args.threads or args.quick):
        return "--compare takes two report folders and --out, nothing else"
    if args.threads and min(args.threads) < 1:
        return "--threads: counts must be at least 1"
    if args.target and args.threads:
        return "--threads: an emulated report compiles for 1 thread (no timings)"
    if (args.rounds is not None or args.budget is not None) and (args.target or args.quick):
        return "--rounds and --budget go with a measured report (no --target, no --quick)"
    if args.rounds is not None and args.rounds < 3:
        return "--rounds: at least 3"
    if args.budget is not None and args.budget <= 0:
        return "--budget: a positive number of seconds"
    if args.node_cases and not args.target:
        return "--node-cases goes with --target"
    if not args.target and args.models and "small_cnn" in args.models:
        return "--models: small_cnn is in emulated reports only (--target)"
    return None


def execute(args: argparse.Namespace) -> int:
    error = _usage_error(args)
    if error:
        print(f"polyonnx: error: {error}", file=sys.stderr)
        return 2
    try:
        if args.compare:
            return _compare(args)
        return _emulated(args) if args.target else _measured(args)
    except ImportError as e:
        print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2


def _measured(args: argparse.Namespace) -> int:
    from polyonnx.bench.suite import Settings, report
    from polyonnx.codegen.target import host_cpu

    out = args.out or f"polyonnx-bench-{host_cpu()[1]}"
    settings = Settings.of(args.models, args.threads, args.quick)
    if args.rounds is not None:
        settings = dataclasses.replace(settings, repeat=args.rounds)
    if args.budget is not None:
        settings = dataclasses.replace(settings, budget_s=args.budget)
    data = report(out, settings=settings)
    geo = ", ".join(
        f"{'-' if g is None else f'{g:.2f}'} at {t} thread(s)"
        for t, g in data["summary"]["geomean_ratio"].items()
    )
    print(f"polyonnx / onnxruntime (geometric mean, in time): {geo}")
    print(f"wrote {out}/report.json, report.md, report.html")
    return 0


def _emulated(args: argparse.Namespace) -> int:
    from polyonnx.bench.emulated import Unavailable, report

    out = args.out or f"polyonnx-bench-{args.target}"
    cases = args.node_cases
    node_cases = True if cases is None else False if cases == "none" else cases
    if isinstance(node_cases, str) and not Path(node_cases).is_file():
        print(f"polyonnx: error: --node-cases: no such file {node_cases}", file=sys.stderr)
        return 2
    try:
        data = report(out, args.target, args.models, node_cases, args.quick)
    except Unavailable as e:
        print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2
    s = data["summary"]
    nodes = (
        f"; node cases: {s['node_cases_passed']} of {s['node_cases']} match the suite"
        if s["node_cases"]
        else ""
    )
    print(
        f"{args.target}: {s['models_matching']} of {s['models']} models match onnxruntime{nodes}"
        f"; kernel code: {s['vector_fma_share']:.1%} vector FMA, {s['vector_share']:.1%} vector"
    )
    print(f"wrote {out}/report.json, report.md, report.html (emulated: no timings)")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from polyonnx.bench.compare import compare, labels
    from polyonnx.bench.folder import ReportError

    a, b = args.compare
    names = labels(a, b)
    out = Path(args.out or f"polyonnx-compare-{names[0]}-{names[1]}")
    try:
        comparison = compare(a, b, out)
    except ReportError as e:
        print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2
    print(comparison.printed)
    print(f"wrote {out}/compare.md, compare.html")
    return 0
