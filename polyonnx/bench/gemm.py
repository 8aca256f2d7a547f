"""GEMM throughput: polyonnx's MatMul against numpy's matmul (OpenBLAS) in the same run.

polyonnx runs a one-node MatMul ONNX model (``Y[M,N] = A[M,K] @ B[K,N]``) through
``InferenceSession`` with ``num_threads=t`` (compiled cold: kernel cache off); numpy runs
``A @ B`` with OpenBLAS limited to ``t`` threads (through threadpoolctl when it is installed;
otherwise OpenBLAS uses its own default). Runs alternate (:func:`interleaved_times`).

OpenBLAS picks its kernels by the CPU it detects unless ``OPENBLAS_CORETYPE`` or
``OPENBLAS_L2_SIZE`` override it, and it reads them once, when numpy loads it.
:func:`measure_apart` measures OpenBLAS as it runs on this host without touching the calling
process: it runs the comparison in a child process whose environment lacks the overrides and
sets ``OPENBLAS_NUM_THREADS`` to the thread count.

Example (a measurement: it takes seconds to minutes)::

    rows = measure_apart([(256, 256, 256)], 1, repeat=10, budget_s=2.0)
    print(table(rows))
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import polyonnx
from polyonnx.bench.progress import Progress
from polyonnx.bench.timing import WARM_S, Spread, interleaved_times

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
DEFAULT_SIZES = tuple((s, s, s) for s in SQUARE) + RESNET50


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
    """One shape at one thread count: cold compile time, both times, the output error."""

    m: int
    n: int
    k: int
    threads: int
    compile_s: float
    polyonnx: Spread
    numpy: Spread
    max_rel_err: float

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def label(self) -> str:
        if self.m == self.n == self.k:
            return f"{self.m}³"
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def polyonnx_s(self) -> float:
        return self.polyonnx.median

    @property
    def numpy_s(self) -> float:
        return self.numpy.median

    @property
    def runs(self) -> int:
        return self.polyonnx.rounds

    @property
    def ratio(self) -> float:
        """polyonnx / numpy in throughput, of the medians (> 1: polyonnx is faster)."""
        return self.numpy_s / self.polyonnx_s

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Row:
        spreads = {key: Spread(**d[key]) for key in ("polyonnx", "numpy")}
        return Row(**{**d, **spreads})


def measure(
    m: int,
    n: int,
    k: int,
    threads: int,
    repeat: int,
    budget_s: float,
    step: Callable[[str], None] = lambda _: None,
) -> Row:
    """Compile the MatMul for ``threads`` threads and time it against numpy, interleaved, in
    this process (with the OpenBLAS this process loaded)."""
    step("compiling (cold)")
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
    step("GFLOP/s vs numpy")
    with blas_threads(threads):
        want = a @ b
        got = sess.run(None, feeds)[0]
        err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
        poly, ref = interleaved_times(
            [lambda: sess.run(None, feeds), lambda: a @ b],
            repeat,
            budget_s,
            warm_s=WARM_S if threads > 1 else 0.0,
        )
    return Row(m, n, k, threads, compile_s, poly, ref, err)


def measure_apart(
    sizes: Sequence[tuple[int, int, int]],
    threads: int,
    repeat: int,
    budget_s: float,
    progress: Progress | None = None,
) -> list[Row]:
    """:func:`measure` of every shape in a child process without the OpenBLAS overrides and
    with ``OPENBLAS_NUM_THREADS=threads`` (``progress`` continues in the child, one step per
    shape)."""
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="polyonnx-gemm-") as tmp:
        out = Path(tmp) / "rows.json"
        spec = {
            "sizes": [list(s) for s in sizes],
            "threads": threads,
            "repeat": repeat,
            "budget_s": budget_s,
            "out": str(out),
            "progress": [progress.total, progress.started, progress.done] if progress else None,
        }
        subprocess.run(
            [sys.executable, "-m", "polyonnx.bench.gemm", json.dumps(spec)], env=env, check=True
        )
        rows = [Row.from_json(d) for d in json.loads(out.read_text())]
    if progress is not None:
        progress.done += len(sizes)
    return rows


def _child(spec: dict[str, Any]) -> None:
    """The child process of :func:`measure_apart`."""
    shown = spec["progress"]
    progress = Progress(shown[0], started=shown[1], done=shown[2]) if shown else None
    rows = []
    for m, n, k in spec["sizes"]:
        label = f"GEMM {m}x{n}x{k}, {spec['threads']} thread(s)"
        if progress:
            progress.step(label)

        def step(what: str, label: str = label) -> None:
            if progress:
                progress.note(f"{label}: {what}")

        row = measure(m, n, k, spec["threads"], spec["repeat"], spec["budget_s"], step)
        rows.append(row.to_json())
    Path(spec["out"]).write_text(json.dumps(rows))


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


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
