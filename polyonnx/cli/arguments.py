"""Options that several commands share (model shapes, schedules, code generation), parsed
into what the public API takes."""

from __future__ import annotations

import argparse

from polyonnx.options import Options
from polyonnx.schedule.trace import Trace, load_schedules

#: Help keeps the examples' line breaks.
RAW = argparse.RawDescriptionHelpFormatter

#: What ``add_parser`` of each command module is given: ``parser.add_subparsers()``.
Subparsers = argparse._SubParsersAction  # (argparse exports no public name for it)


def shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1x3x224x224`` -> ``("NAME", (1, 3, 224, 224))``."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME=D1xD2x..., got {text!r}")
    return name, shape


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-shape",
        metavar="NAME=DIMS",
        type=shape_arg,
        action="append",
        default=[],
        help="fix an input's shape, e.g. x=1x3x224x224 (repeatable)",
    )


def add_schedule_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--schedules",
        metavar="FILE",
        help="JSON object mapping kernel names or signatures to schedule traces "
        "(as written by examples/explore_resnet50_conv.py; see docs/schedule.md)",
    )


def add_codegen_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-O",
        dest="opt_level",
        type=int,
        choices=range(4),
        default=3,
        metavar="N",
        help="LLVM optimisation level: -O0 .. -O3 (default -O3)",
    )
    p.add_argument(
        "--target",
        metavar="TRIPLE",
        help="LLVM target triple, e.g. aarch64-linux-gnu, powerpc64le-linux-gnu, "
        "riscv64-linux-gnu (default: this host); libraries for another architecture are "
        "linked by its Debian cross compiler (gcc-<triple>)",
    )
    p.add_argument(
        "--cpu", metavar="NAME", help="target CPU, e.g. znver3, pwr9 (default: this host's)"
    )
    p.add_argument(
        "--features",
        metavar="LIST",
        help="LLVM target features, e.g. +sve or -avx512f (default: the CPU's own)",
    )
    p.add_argument(
        "--checked", action="store_true", help="bounds-check every buffer access at run time"
    )
    p.add_argument(
        "--tuning-db",
        metavar="FILE",
        help="the tuning database whose records replace default schedules (default: "
        "tuning.sqlite beside the compile cache; '' for none; see `polyonnx tune`)",
    )


def options(args: argparse.Namespace) -> Options:
    """The compile options of :func:`add_codegen_options` (and ``--threads``, ``--verbose``)."""
    return Options(
        opt_level=args.opt_level,
        target=args.target,
        cpu=args.cpu,
        features=args.features,
        checked=args.checked or Options().checked,
        num_threads=getattr(args, "threads", None),
        verbose=getattr(args, "verbose", False),
        tuning_db=getattr(args, "tuning_db", None),
    )


def shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]] | None:
    """The ``--input-shape`` values, or None."""
    return dict(args.input_shape) or None


def schedules(args: argparse.Namespace) -> dict[str, Trace] | None:
    """The traces of the ``--schedules`` file, or None."""
    return load_schedules(args.schedules) if args.schedules else None
