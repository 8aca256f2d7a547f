"""The ``polyonnx`` command: a thin layer over the public API, one module per command.

Example::

    polyonnx run                                   # the embedded light ResNet50, with a report
    polyonnx compile model.onnx -o model.so        # model.so + model.h
    polyonnx compile model.onnx --emit krnl        # print one pipeline stage
    polyonnx kernels model.onnx                    # the kernels the model compiles to
    polyonnx bench --out report                    # benchmark this host: report.json/md/html
    polyonnx tune --show                           # the tuning database
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from polyonnx import __version__
from polyonnx.cli import bench, compile, kernels, run, tune
from polyonnx.cli.arguments import RAW
from polyonnx.errors import PolyonnxError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``polyonnx`` argument parser (exposed for tests and documentation)."""
    parser = argparse.ArgumentParser(
        prog="polyonnx",
        formatter_class=RAW,
        description="Compile ONNX models to native code through a polyhedral optimizer.",
        epilog="run `polyonnx COMMAND --help` for a command's options and examples",
    )
    parser.add_argument("--version", action="version", version=f"polyonnx {__version__}")
    parser.add_argument(
        "--verbose", action="store_true", help="show the full traceback when an error occurs"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in (compile, run, kernels, tune, bench):
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``polyonnx`` command; returns the exit status (2 on a polyonnx error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.execute(args)
    except (PolyonnxError, OSError) as e:
        if args.verbose:
            traceback.print_exc()
        else:
            print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2
