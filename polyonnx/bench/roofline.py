"""Every kernel of a model against this host's roofline: where the model's time is lost.

The roofline (Williams, Waterman & Patterson, CACM 2009) of this host, both roofs measured
here: the FP32 FMA peak (:mod:`polyonnx.bench.peak`) and the memory bandwidth
(:func:`measure_bandwidth`: STREAM-like copy and triad in numpy on arrays far larger than the
L3, one contiguous part per thread; the triad ``a = b + s * c`` is the roof). Per kernel of a
compiled model (timed by :func:`polyonnx.bench.profile.profile` with ``in_model=True``: the
model's order and memory), a :class:`Point`: FLOPs as :func:`polyonnx.kernel_flops` counts
them, bytes as the sizes of the kernel's input and output buffers (each moved once: the
traffic no schedule avoids), the bound min(peak, intensity x bandwidth) and the time lost
against it. :func:`plot` draws them (matplotlib).

Example (a measurement: it takes seconds to minutes)::

    bw = measure_bandwidth(threads=1)
    pts = points("mnist", compiled, 110.0, bw.triad.median, repeat=10)
    print(table(pts, top=10))
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

import polyonnx
from polyonnx.bench.host import last_level_cache_bytes
from polyonnx.bench.profile import profile
from polyonnx.bench.timing import Spread

# ---- the memory roof


def l3_bytes() -> int:
    """The host's last-level cache (32 MiB where sysfs does not say)."""
    return last_level_cache_bytes() or 32 << 20


#: Elements of a triad step: its product goes to a temporary of this many floats, which stays
#: in L1/L2 while the three arrays stream (numpy has no fused a = b + s * c).
_TRIAD_CHUNK = 1 << 16


@dataclass(frozen=True)
class Bandwidth:
    """GB/s of the copy (``a = b``: 2 arrays moved) and the triad (3 arrays)."""

    copy: Spread
    triad: Spread
    array_mib: int


def measure_bandwidth(
    threads: int = 1, repeat: int = 7, array_bytes: int | None = None
) -> Bandwidth:
    """STREAM-like copy and triad on float32 arrays of ``array_bytes`` each (default: four
    times the L3, at least 64 MiB), each of ``threads`` Python threads on its own contiguous
    part (numpy releases the GIL in its loops); copy and triad rounds interleaved."""
    nbytes = array_bytes or max(4 * l3_bytes(), 64 << 20)
    n = nbytes // 4 // threads * threads
    a, b, c = (np.full(n, v, np.float32) for v in (0.0, 1.0, 2.0))  # touched: pages mapped
    parts = [slice(i * n // threads, (i + 1) * n // threads) for i in range(threads)]
    temps = [np.empty(_TRIAD_CHUNK, np.float32) for _ in range(threads)]

    def copy(k: int) -> None:
        np.copyto(a[parts[k]], b[parts[k]])

    def triad(k: int) -> None:
        part, tmp = parts[k], temps[k]
        for i in range(part.start, part.stop, _TRIAD_CHUNK):
            j = min(i + _TRIAD_CHUNK, part.stop)
            np.multiply(c[i:j], np.float32(3.0), out=tmp[: j - i])
            np.add(b[i:j], tmp[: j - i], out=a[i:j])

    times: dict[str, list[float]] = {"copy": [], "triad": []}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for r in range(repeat + 1):  # (the first round warms up)
            for kind, fn in (("copy", copy), ("triad", triad)):
                t = time.perf_counter()
                list(pool.map(fn, range(threads)))
                if r:
                    times[kind].append(time.perf_counter() - t)
    if not np.all(a[:: max(1, n // 1000)] == 7.0):
        raise RuntimeError("triad computed a wrong result")
    size = n * 4
    return Bandwidth(
        Spread.of(times["copy"]).rate(2 * size / 1e9),
        Spread.of(times["triad"]).rate(3 * size / 1e9),
        size >> 20,
    )


# ---- kernels on the roofline


@dataclass(frozen=True)
class Point:
    """One kernel on the roofline of a host (``peak`` GFLOP/s, ``bandwidth`` GB/s)."""

    model: str
    kernel: str
    ops: tuple[str, ...]
    time: Spread
    flops: int
    bytes: int
    peak: float
    bandwidth: float

    @property
    def seconds(self) -> float:
        return self.time.median

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def gbytes(self) -> float:
        return self.bytes / self.seconds / 1e9

    @property
    def memory_bound(self) -> bool:
        return self.intensity * self.bandwidth < self.peak

    @property
    def bound_seconds(self) -> float:
        """The time the roofline allows: the compute or the traffic, whichever is longer."""
        return max(self.flops / (self.peak * 1e9), self.bytes / (self.bandwidth * 1e9))

    @property
    def bound_gflops(self) -> float:
        return min(self.peak, self.intensity * self.bandwidth)

    @property
    def fraction(self) -> float:
        """Achieved share of the bound (GFLOP/s, or GB/s where nothing is computed)."""
        return self.bound_seconds / self.seconds

    @property
    def lost_seconds(self) -> float:
        return self.seconds - self.bound_seconds


def kernel_bytes(kernel: object) -> int:
    """Bytes a kernel must move: every input and output buffer once (temporaries are the
    kernel's own scratch, cache-resident by design)."""
    return sum(
        b.nbytes
        for b in kernel.buffers  # type: ignore[attr-defined]
        if b.kind in ("input", "output")
    )


def points(
    name: str, compiled: polyonnx.Compiled, peak: float, bandwidth: float, repeat: int
) -> list[Point]:
    """Every kernel of ``compiled`` timed in the model, sorted by time lost."""
    moved = {k.name: kernel_bytes(k) for k, _ in compiled.asts}
    rows = profile(compiled, repeat=repeat, in_model=True)
    out = [
        Point(name, r.name, r.ops, r.time, r.flops, moved[r.name], peak, bandwidth)
        for r in rows
        if r.seconds > 0
    ]
    return sorted(out, key=lambda p: -p.lost_seconds)


def table(pts: Sequence[Point], top: int) -> str:
    """The ``top`` kernels losing most time, and the model's total, as a Markdown table."""
    lines = [
        "| kernel | nodes | ms | MFLOP | MB | FLOP/B | GFLOP/s | GB/s | bound (GFLOP/s) | "
        "of bound | lost (ms) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for p in pts[:top]:
        nodes = ", ".join(p.ops)
        nodes = nodes if len(nodes) <= 48 else nodes[:45] + "..."
        limit = "memory" if p.memory_bound else "compute"
        lines.append(
            f"| {p.kernel} | {nodes} | {p.seconds * 1e3:.3f} | {p.flops / 1e6:.3g} | "
            f"{p.bytes / 1e6:.3g} | {p.intensity:.3g} | {p.gflops:.1f} | "
            f"{p.gbytes:.1f} | {p.bound_gflops:.1f} {limit} | {p.fraction:.0%} | "
            f"{p.lost_seconds * 1e3:.3f} |"
        )
    total = sum(p.seconds for p in pts)
    bound = sum(p.bound_seconds for p in pts)
    flops = sum(p.flops for p in pts)
    lines.append(
        f"| total ({len(pts)} kernels) | | {total * 1e3:.3f} | {flops / 1e6:.1f} | | | "
        f"{flops / total / 1e9:.1f} | | | {bound / total:.0%} | "
        f"{(total - bound) * 1e3:.3f} |"
    )
    return "\n".join(lines)


def plot(
    pts: Sequence[Point], peak: float, bandwidth: float, title: str, path: str, labels: int = 6
) -> None:
    """The roofline, log-log, with every kernel that computes as a point (area ~ its share of
    its model's time); the ``labels`` kernels losing most time are named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in pts if p.flops and p.bytes]
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    lo = min([p.intensity for p in shown] + [peak / bandwidth / 100]) / 2
    hi = max([p.intensity for p in shown] + [peak / bandwidth * 10]) * 2
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, np.minimum(peak, x * bandwidth), color="black", lw=1.5)
    ax.annotate(f"FMA peak {peak:.0f} GFLOP/s", (hi, peak), ha="right", va="bottom")
    ax.annotate(
        f"memory {bandwidth:.1f} GB/s",
        (lo * 1.5, lo * 1.5 * bandwidth),
        xytext=(0, 8),
        textcoords="offset points",
        va="bottom",
    )
    models = list(dict.fromkeys(p.model for p in pts))
    model_s = {m: sum(p.seconds for p in pts if p.model == m) or 1.0 for m in models}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, model in enumerate(models):
        mine = [p for p in shown if p.model == model]
        color = colors[i % len(colors)]
        ax.scatter(
            [p.intensity for p in mine],
            [p.gflops for p in mine],
            s=[6 + 1500 * p.seconds / model_s[model] for p in mine],
            alpha=0.55,
            color=color,
            edgecolors="black",
            linewidths=0.3,
        )
        ax.scatter([], [], s=40, color=color, label=model)  # the legend's marker
    for p in sorted(shown, key=lambda p: -p.lost_seconds)[:labels]:
        name = p.kernel if len(models) == 1 else f"{p.model}: {p.kernel}"
        ax.annotate(
            name, (p.intensity, p.gflops), fontsize=7, xytext=(4, -8), textcoords="offset points"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte of the kernel's buffers)")
    ax.set_ylabel("achieved GFLOP/s")
    hidden = len(pts) - len(shown)
    ax.set_title(
        title + (f"\n({hidden} kernels without arithmetic not shown)" if hidden else ""), fontsize=9
    )
    ax.grid(True, which="both", lw=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
