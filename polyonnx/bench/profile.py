"""Per-kernel profile of a compiled model: which kernels hold its latency.

Each kernel runs alone (JIT-compiled with its own loops, on arrays of its buffer shapes filled
with small random values) and is timed; the table is sorted by time, with GFLOP/s from
:func:`polyonnx.schedule.signature.kernel_flops`.

Example:
    >>> rows = profile(polyonnx.compile("model.onnx"))            # doctest: +SKIP
    >>> print(format_profile(rows))                                # doctest: +SKIP
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.krnl.memory import aligned_array
from polyonnx.schedule.signature import kernel_flops


@dataclass(frozen=True)
class KernelTime:
    name: str
    ops: tuple[str, ...]
    seconds: float
    flops: int

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds else 0.0


def profile(compiled: object, repeat: int = 10) -> list[KernelTime]:
    """Median time of every kernel of ``compiled`` (a :class:`polyonnx.Compiled`)."""
    rng = np.random.default_rng(0)
    rows = []
    for kernel, loops in compiled.asts:  # type: ignore[attr-defined]
        run = kernel_callable(kernel, loops, compiled.options)  # type: ignore[attr-defined]
        arrays = {}
        for b in kernel.buffers:
            values = (rng.uniform(0.1, 1.0, b.shape).astype(b.dtype)
                      if b.dtype.startswith("float") else np.zeros(b.shape, b.dtype))
            arrays[b.name] = aligned_array(values)  # as the workspace aligns them
        run(arrays)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            run(arrays)
            times.append(time.perf_counter() - t)
        rows.append(KernelTime(kernel.name, kernel.ops, statistics.median(times),
                               kernel_flops(kernel)))
    return sorted(rows, key=lambda r: -r.seconds)


def format_profile(rows: list[KernelTime], top: int = 20) -> str:
    total = sum(r.seconds for r in rows) or 1.0
    lines = ["| kernel | nodes | ms | share | GFLOP/s |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows[:top]:
        nodes = ", ".join(r.ops)[:40]
        lines.append(f"| {r.name} | {nodes} | {r.seconds * 1e3:.3f} | "
                     f"{100 * r.seconds / total:.1f}% | {r.gflops:.1f} |")
    lines.append(f"| total ({len(rows)} kernels) | | {total * 1e3:.3f} | 100% | |")
    return "\n".join(lines)
