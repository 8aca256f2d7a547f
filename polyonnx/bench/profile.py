"""Per-kernel profile of a compiled model: which kernels hold its latency.

Each kernel is JIT-compiled with its own loops and timed; the table is sorted by time, with
GFLOP/s from :func:`polyonnx.schedule.signature.kernel_flops`. By default each kernel runs
alone, repeatedly, on arrays of its buffer shapes filled with small random values (hot caches).
With ``in_model=True`` the kernels run in the model's order on the model's own memory (its
weights blob and one workspace laid out by the memory plan, random feeds), each call timed:
every kernel then starts with the caches its predecessors left, as in an inference.

Example:
    >>> import polyonnx
    >>> from polyonnx.testing.examples import conv_model
    >>> rows = profile(polyonnx.compile(conv_model()), in_model=True)
    >>> print(format_profile(rows))  # doctest: +ELLIPSIS
    | kernel | nodes | ms | share | GFLOP/s |
    | --- | --- | ---: | ---: | ---: |
    | k0_Conv | conv, relu | ... | 100.0% | ... |
    | total (1 kernels) | | ... | 100% | |
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from polyonnx.bench.timing import Spread
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.compiled import Compiled
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import aligned_array, aligned_empty
from polyonnx.schedule.signature import kernel_flops


@dataclass(frozen=True)
class KernelTime:
    """A kernel's time (median, min, max of the calls timed) and FLOPs."""

    name: str
    ops: tuple[str, ...]
    time: Spread
    flops: int

    @property
    def seconds(self) -> float:
        return self.time.median

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds else 0.0


def profile(compiled: Compiled, repeat: int = 10, in_model: bool = False) -> list[KernelTime]:
    """The time of every kernel of ``compiled`` (a :class:`polyonnx.Compiled`): each alone
    (``repeat`` calls in a row), or with ``in_model`` in the model's order and memory
    (``repeat`` passes over the whole model)."""
    rng = np.random.default_rng(0)
    kernels = compiled.asts
    runs = [kernel_callable(k, loops, compiled.options) for k, loops in kernels]
    if in_model:
        places = _model_memory(compiled, rng)
        arrays = [{b.name: places(b.name, b.shape, b.dtype) for b in k.buffers} for k, _ in kernels]
        times: list[list[float]] = [[] for _ in kernels]
        for _ in range(repeat + 1):  # (the first pass warms up)
            for run, a, t in zip(runs, arrays, times, strict=True):
                start = time.perf_counter()
                run(a)
                t.append(time.perf_counter() - start)
        spreads = [Spread.of(t[1:]) for t in times]
    else:
        spreads = [_alone(run, k, rng, repeat) for run, (k, _) in zip(runs, kernels, strict=True)]
    rows = [
        KernelTime(k.name, k.ops, m, kernel_flops(k))
        for (k, _), m in zip(kernels, spreads, strict=True)
    ]
    return sorted(rows, key=lambda r: -r.seconds)


def _alone(
    run: Callable[[Mapping[str, np.ndarray]], None],
    kernel: Kernel,
    rng: np.random.Generator,
    repeat: int,
) -> Spread:
    arrays = {}
    for b in kernel.buffers:
        values = (
            rng.uniform(0.1, 1.0, b.shape).astype(b.dtype)
            if b.dtype.startswith("float")
            else np.zeros(b.shape, b.dtype)
        )
        arrays[b.name] = aligned_array(values)  # as the workspace aligns them
    run(arrays)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        run(arrays)
        times.append(time.perf_counter() - t)
    return Spread.of(times)


_Place = Callable[[str, tuple[int, ...], str], np.ndarray]


def _model_memory(compiled: Compiled, rng: np.random.Generator) -> _Place:
    """``place(buffer, shape, dtype)``: the array where the compiled model keeps ``buffer``
    (a view of its weights blob or workspace, or of one array per feed and output)."""
    program, plan = compiled.program, compiled.plan
    weights = plan.weights_blob(program)
    workspace = aligned_empty(max(plan.workspace_size, 64))
    sizes: dict[tuple[str, int], int] = {}
    for k, _ in compiled.asts:
        for b in k.buffers:
            slot = plan.slot(program, b.name)
            if slot.region in ("input", "output"):
                key = (slot.region, slot.where)
                sizes[key] = max(sizes.get(key, 0), b.nbytes)
    io = {key: aligned_empty(max(n, 1)) for key, n in sizes.items()}
    for v in program.inputs:  # random feeds
        area = io.get(("input", plan.slot(program, v.name).where))
        if area is not None and v.dtype.startswith("float"):
            n = area.size // np.dtype(v.dtype).itemsize
            area[: n * np.dtype(v.dtype).itemsize].view(v.dtype)[:] = rng.uniform(0.1, 1.0, n)

    def place(name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        slot = plan.slot(program, name)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if slot.region in ("input", "output"):
            base, start = io[(slot.region, slot.where)], 0
        else:
            base = weights if slot.region == "weights" else workspace
            start = slot.where
        return base[start : start + nbytes].view(dtype).reshape(shape)

    return place


def format_profile(rows: list[KernelTime], top: int = 20) -> str:
    total = sum(r.seconds for r in rows) or 1.0
    lines = ["| kernel | nodes | ms | share | GFLOP/s |", "| --- | --- | ---: | ---: | ---: |"]
    for r in rows[:top]:
        nodes = ", ".join(r.ops)[:40]
        lines.append(
            f"| {r.name} | {nodes} | {r.seconds * 1e3:.3f} | "
            f"{100 * r.seconds / total:.1f}% | {r.gflops:.1f} |"
        )
    lines.append(f"| total ({len(rows)} kernels) | | {total * 1e3:.3f} | 100% | |")
    return "\n".join(lines)
