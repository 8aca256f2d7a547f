"""``polyonnx compile``: write a shared library and its C header, or print a pipeline stage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polyonnx
from polyonnx.cli.arguments import (
    RAW,
    Subparsers,
    add_codegen_options,
    add_model_options,
    add_schedule_option,
    options,
    schedules,
    shapes,
)
from polyonnx.errors import PolyonnxError
from polyonnx.krnl.passes import AFTER
from polyonnx.pipeline import STAGES

EXAMPLES = """\
examples:
  polyonnx compile model.onnx -o model.so          shared library + C header model.h
  polyonnx compile model.onnx --emit krnl          print the loop-nest kernels
  polyonnx compile model.onnx --emit krnl --after lower   the kernels before the krnl passes
  polyonnx compile model.onnx --emit ast           print isl's generated loops
  polyonnx compile model.onnx --emit asm -O2 --cpu znver3
  polyonnx compile model.onnx --emit obj -o model.o
  polyonnx compile model.onnx --target aarch64-linux-gnu -o model.so
  polyonnx compile model.onnx --target powerpc64le-linux-gnu --cpu pwr9 -o model.so
  polyonnx compile model.onnx --target riscv64-linux-gnu --features +v -o model.so
  polyonnx compile model.onnx --input-shape x=1x3x224x224 -o model.so

stages (in pipeline order): onnx graph krnl isl ast llvm asm obj lib
"""


def add_parser(sub: Subparsers) -> None:
    c = sub.add_parser(
        "compile",
        help="compile a model; write a library or print a stage",
        description="Compile MODEL. With -o OUT.so write a shared library and\n"
        "its C header OUT.h; with --emit STAGE print that pipeline stage.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    c.add_argument("model", metavar="MODEL", help="an .onnx file")
    c.add_argument(
        "-o",
        dest="output",
        metavar="OUT",
        help="output file: the shared library (default), or where --emit writes",
    )
    c.add_argument(
        "--emit",
        choices=STAGES,
        metavar="STAGE",
        help=f"print one stage instead: {', '.join(STAGES)} (obj and lib are "
        "binary: obj goes to -o or stdout, lib needs -o)",
    )
    c.add_argument(
        "--after",
        choices=AFTER,
        metavar="PASS",
        help=f"with --emit krnl: the kernels after this krnl pass ({', '.join(AFTER)};"
        " lower: as lowered, before any)",
    )
    add_codegen_options(c)
    add_model_options(c)
    add_schedule_option(c)
    c.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    if args.emit in (None, "lib"):
        if args.after:
            raise PolyonnxError("--after shows a krnl pass's result: add --emit krnl")
        if args.output is None:
            if args.emit == "lib":
                raise PolyonnxError("--emit lib writes a file: add -o OUT.so")
            args.output = Path(args.model).with_suffix(".so").name
        from polyonnx.codegen.aot import write_library

        compiled = polyonnx.compile(args.model, options(args), shapes(args), schedules(args))
        lib = write_library(compiled, args.output)
        print(f"wrote {lib} and {lib.with_suffix('.h')}")
        return 0
    if args.schedules:
        raise PolyonnxError("--schedules applies to libraries (-o OUT.so) and `run`, not to --emit")
    text = polyonnx.emit(args.model, args.emit, options(args), shapes(args), after=args.after)
    if args.output is not None:
        data = text if isinstance(text, bytes) else text.encode()
        Path(args.output).write_bytes(data)
    elif isinstance(text, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        print(text)
    return 0
