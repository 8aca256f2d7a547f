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
import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import polyonnx
from polyonnx.bench.timing import WARM_S, interleaved

try:
    import threadpoolctl
except ImportError:  # optional: without it numpy's BLAS threads are OpenBLAS's default
    threadpoolctl = None

OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

SQUARE = (256, 512, 1024, 2048)
RESNET50 = (  # (M, N, K): the 1x1 convolutions (out channels, H*W, in channels) and the FC
    (64, 3136, 256),
    (256, 3136, 64),
    (128, 784, 512),
    (512, 784, 128),
    (256, 196, 1024),
    (1024, 196, 256),
    (512, 49, 2048),
    (2048, 49, 512),
    (1, 1000, 2048),
)


def reexec_without_openblas_overrides() -> None:
    """Restart this script without the OpenBLAS overrides when any is set (OpenBLAS reads them
    once, when numpy loads it, so they cannot be undone in-process)."""
    if any(k in os.environ for k in OPENBLAS_OVERRIDES):
        env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"1024"`` -> (1024, 1024, 1024); ``"64x3136x256"`` -> (64, 3136, 256)."""
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not N or MxNxK: {text!r}") from None
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"not N or MxNxK: {text!r}")
    return dims[0], dims[1], dims[2]


def matmul_model(m: int, n: int, k: int) -> onnx.ModelProto:
    """A one-node MatMul model ``Y[m, n] = A[m, k] @ B[k, n]``."""
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])
    b = helper.make_tensor_value_info("B", TensorProto.FLOAT, [k, n])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["Y"])], f"matmul_{m}x{n}x{k}", [a, b], [y]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def blas_info() -> list[dict[str, Any]]:
    """threadpoolctl's description of numpy's BLAS (empty without threadpoolctl)."""
    if threadpoolctl is None:
        return []
    return [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """numpy's BLAS limited to ``threads`` threads (a no-op without threadpoolctl)."""
    if threadpoolctl is None:
        yield
        return
    with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
        yield


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    m: int
    n: int
    k: int
    threads: int
    compile_s: float
    polyonnx_s: float
    numpy_s: float
    runs: int
    max_rel_err: float

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def label(self) -> str:
        if self.m == self.n == self.k:
            return f"{self.m}³"
        return f"{self.m}x{self.n}x{self.k}"


def measure(m: int, n: int, k: int, threads: int, repeat: int, budget_s: float) -> Row:
    """Compile the MatMul for ``threads`` threads and time it against numpy, interleaved."""
    t = time.perf_counter()
    # Cold: the on-disk kernel cache is off, so the compile column is a real compile.
    sess = polyonnx.InferenceSession(
        matmul_model(m, n, k), options=polyonnx.Options(num_threads=threads, cache=False)
    )
    compile_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    feeds = {"A": a, "B": b}
    with blas_threads(threads):
        want = a @ b
        got = sess.run(None, feeds)[0]
        err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
        (poly_s, numpy_s), runs = interleaved(
            [lambda: sess.run(None, feeds), lambda: a @ b],
            repeat,
            budget_s,
            warm_s=WARM_S if threads > 1 else 0.0,
        )
    return Row(m, n, k, threads, compile_s, poly_s, numpy_s, runs, err)


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (ratio > 1: polyonnx has the higher throughput)."""
    lines = [
        "| M x N x K | threads | GFLOP | compile (s) | polyonnx GFLOP/s | "
        "numpy GFLOP/s | polyonnx / numpy | runs | max rel err |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        poly, ref = r.flops / r.polyonnx_s / 1e9, r.flops / r.numpy_s / 1e9
        lines.append(
            f"| {r.label} | {r.threads} | {r.flops / 1e9:.3f} | {r.compile_s:.2f} | "
            f"{poly:.1f} | {ref:.1f} | {poly / ref:.2f} | {r.runs} | "
            f"{r.max_rel_err:.1e} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    reexec_without_openblas_overrides()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        nargs="+",
        type=parse_shape,
        default=[(s, s, s) for s in SQUARE] + list(RESNET50),
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
