"""``polyonnx kernels``: the kernels a model compiles to, with their nodes, buffers and FLOPs
(as :func:`polyonnx.list_kernels` gives them)."""

from __future__ import annotations

import argparse

import polyonnx
from polyonnx.cli.arguments import RAW, Subparsers, add_model_options, shapes

EXAMPLES = """\
examples:
  polyonnx kernels model.onnx
  polyonnx kernels model.onnx --input-shape x=4x3x224x224
"""


def add_parser(sub: Subparsers) -> None:
    k = sub.add_parser(
        "kernels",
        help="list the kernels a model compiles to",
        description="List MODEL's kernels: name, the ONNX nodes each computes,\n"
        "its buffers and its FLOP count (polyonnx.kernel_flops).",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    k.add_argument("model", metavar="MODEL", help="an .onnx file")
    add_model_options(k)
    k.set_defaults(execute=execute)


def execute(args: argparse.Namespace) -> int:
    infos = polyonnx.list_kernels(args.model, shapes(args))
    total = 0
    for info in infos:
        total += info.flops
        ops = ", ".join(
            f"{n} ({t})" if t != "?" else n for n, t in zip(info.nodes, info.op_types, strict=True)
        )
        print(f"{info.name}  ~{info.flops / 1e6:.3f} MFLOP  nodes: {ops or '-'}")
        for b in info.kernel.buffers:
            print(f"    {b}")
    print(f"{len(infos)} kernels, ~{total / 1e9:.3f} GFLOP in total")
    return 0
