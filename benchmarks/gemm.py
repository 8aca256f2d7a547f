"""GEMM throughput: polyonnx's MatMul against numpy's matmul (OpenBLAS) in the same run.

Shapes: square 256, 512, 1024, 2048 and the GEMMs of ResNet50 at batch 1 — each 1x1
convolution as ``M = out channels, N = H*W, K = in channels`` and the final FC layer
(1x1000x2048). polyonnx runs a one-node MatMul ONNX model (``Y[M,N] = A[M,K] @ B[K,N]``) through
``InferenceSession`` with ``num_threads=t`` (compiled cold: kernel cache off); numpy runs
``A @ B`` with OpenBLAS limited to ``t`` threads (through threadpoolctl when it is installed;
otherwise OpenBLAS uses its own default).

OpenBLAS picks its kernels by the CPU it detects unless ``OPENBLAS_CORETYPE`` or
``OPENBLAS_L2_SIZE`` override it. This benchmark measures OpenBLAS as it runs on this host, so
when either variable is set it re-executes itself without them (only this process and its
children are affected) and prints the kernel set OpenBLAS chose.

The machine is shared and noisy: polyonnx and numpy runs alternate, each reported figure is a
median, and the ratio is of medians measured in the same run. Large shapes get fewer runs (at
least 3) when ``--repeat`` runs would not fit in ``--budget`` seconds.

Usage::

    python benchmarks/gemm.py                              # every shape, 1 and 2 threads
    python benchmarks/gemm.py --sizes 1024 --threads 1 --repeat 20
    python benchmarks/gemm.py --sizes 256 64x3136x256      # N (square) or MxNxK
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import numpy as np

import polyonnx
from polyonnx.bench.gemm import (
    DEFAULT_SIZES,
    OPENBLAS_OVERRIDES,
    blas_info,
    measure,
    parse_shape,
    table,
    threadpoolctl,
)


def reexec_without_openblas_overrides() -> None:
    """Restart this script without the OpenBLAS overrides when any is set (OpenBLAS reads them
    once, when numpy loads it, so they cannot be undone in-process)."""
    if any(k in os.environ for k in OPENBLAS_OVERRIDES):
        env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main(argv: Sequence[str] | None = None) -> int:
    reexec_without_openblas_overrides()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        nargs="+",
        type=parse_shape,
        default=list(DEFAULT_SIZES),
        help="N (square) or MxNxK shapes (default: square 256..2048 and ResNet50's)",
    )
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument(
        "--repeat",
        type=int,
        default=20,
        help="timed rounds per measurement (default 20; at least 3)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=5.0,
        help="seconds of timed rounds per measurement before --repeat is cut",
    )
    args = p.parse_args(argv)
    print(
        f"polyonnx {polyonnx.__version__}, numpy {np.__version__}; "
        f"{', '.join(OPENBLAS_OVERRIDES)} unset"
    )
    info = blas_info()
    if threadpoolctl is None:
        print("numpy BLAS: threadpoolctl not installed, BLAS threads not set (OpenBLAS default)")
    for i in info:
        print(
            f"numpy BLAS: {i.get('internal_api')} {i.get('version')}, kernels for "
            f"{i.get('architecture')!r} ({i.get('threading_layer')}), {i.get('filepath')}"
        )
    print(
        "Shared, noisy machine: polyonnx and numpy runs interleaved, medians; ratio > 1 means "
        "polyonnx has the higher throughput.\n",
        flush=True,
    )
    rows = []
    for m, n, k in args.sizes:
        for threads in args.threads:
            rows.append(measure(m, n, k, threads, args.repeat, args.budget))
            print(f"  done: {rows[-1].label}, {threads} thread(s)", file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
