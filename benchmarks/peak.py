"""The host's FP32 FMA peak, measured by a kernel polyonnx generates.

The kernel is a krnl statement ``acc[r, l] = acc[r, l] * ab[0] + ab[1]`` run for ``iterations``
steps over a small accumulator block: ``rows`` rows (unrolled) of one vector of ``l`` lanes each
(the widest float32 vector of the target, :func:`polyonnx.codegen.target.vector_bits`). The loops
are a hand-built loop AST (``for t { unroll: for r { vector: for l { S0 } } }``) JIT-compiled with
:func:`polyonnx.codegen.kernel_call.kernel_callable`; LLVM keeps the block in registers and fuses
the multiply-add into one FMA (polyonnx emits ``contract``), so the loop is ``rows`` independent
FMA chains: enough to cover the FMA latency on every port. The script checks the assembly of the
hot loop and prints how many of its instructions are FMAs.

Several threads: that many Python threads call the kernel at once, each on its own block (ctypes
releases the GIL); the per-core figure is the total divided by the thread count. Single- and
multi-thread runs are interleaved round by round and the medians reported, because the machine
this runs on is shared and noisy; "best" is the fastest round.

Usage::

    python benchmarks/peak.py                          # host vector width, 1 and 2 threads
    python benchmarks/peak.py --threads 1 --repeat 50
    python benchmarks/peak.py --vector-bits 256 512    # AVX2-width code on an AVX-512 host too
    python benchmarks/peak.py --asm                    # also print the hot loop's assembly
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import polyonnx
from polyonnx.bench.peak import DEFAULT_ITERATIONS, PeakRow, build_peak, measure, table
from polyonnx.codegen.target import host_cpu, vector_bits
from polyonnx.options import Options


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--repeat", type=int, default=30, help="timed rounds (default 30)")
    p.add_argument(
        "--vector-bits",
        nargs="+",
        type=int,
        default=[None],
        help="vector widths to measure (256 and/or the host's; default: the host's)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help="loop trips per call (default %(default)s, a few ms)",
    )
    p.add_argument("--asm", action="store_true", help="print the hot loop's assembly")
    args = p.parse_args(argv)
    triple, cpu, _ = host_cpu()
    print(
        f"polyonnx {polyonnx.__version__}; host {triple}, LLVM cpu {cpu!r}, widest vectors "
        f"{vector_bits(Options())} bits"
    )
    print(
        "Note: this host is an Intel CPU with AVX-512 (the docs' figures are from a 2-core Zen 3"
        " with AVX2); the generated code uses the widest vectors the host has."
    )
    print(
        "Shared, noisy machine: thread counts interleaved round by round; medians (and the "
        "best round) of --repeat rounds.\n"
    )
    rows: list[PeakRow] = []
    for bits in args.vector_bits:
        try:
            peak = build_peak(bits, iterations=args.iterations)
        except ValueError as e:
            p.error(f"--vector-bits: {e}")
        if args.asm:
            print(f"hot loop ({peak.bits}-bit):\n    " + "\n    ".join(peak.loop) + "\n")
        rows.extend(measure(peak, args.threads, args.repeat))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
