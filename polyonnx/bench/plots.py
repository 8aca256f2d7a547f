"""The plots of a benchmark report (matplotlib, the ``bench`` extra), drawn from the report's
JSON alone: latency per model against onnxruntime, compile time per model, GEMM GFLOP/s against
OpenBLAS and the peak, and the roofline with every kernel.

Example (a measurement: it takes seconds to minutes)::

    files = draw(json.load(open("report.json")), Path("out"))
    files["roofline"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from polyonnx.bench.roofline import Point, plot
from polyonnx.bench.timing import Spread


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, or an ImportError naming the extra."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(
            "matplotlib is not installed; polyonnx bench draws its plots with it: "
            "pip install polyonnx[bench]"
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(report: dict[str, Any], out: Path) -> dict[str, str]:
    """Every plot of ``report`` as a PNG in ``out``: {plot name: file name}."""
    files = {}
    for name, fn in (
        ("latency", latency),
        ("compile", compile_time),
        ("gemm", gemm),
        ("roofline", roofline),
    ):
        if fn(report, out / f"{name}.png"):
            files[name] = f"{name}.png"
    return files


def _threads(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({r["threads"] for r in rows})


def _errors(spreads: list[dict[str, float]], scale: float) -> np.ndarray:
    """Error bars from the median down to the min and up to the max."""
    return np.array(
        [
            [(s["median"] - s["min"]) * scale for s in spreads],
            [(s["max"] - s["median"]) * scale for s in spreads],
        ]
    )


def latency(report: dict[str, Any], path: Path) -> bool:
    """Per thread count: each model's median latency (bars: min to max) for polyonnx and
    onnxruntime, log scale, with polyonnx / onnxruntime written above each pair."""
    rows = report["models"]
    if not rows:
        return False
    plt = pyplot()
    counts = _threads(rows)
    fig, axes = plt.subplots(len(counts), 1, figsize=(max(8, 0.7 * len(rows)), 4 * len(counts)))
    for ax, t in zip(np.atleast_1d(axes), counts, strict=True):
        mine = [r for r in rows if r["threads"] == t]
        x = np.arange(len(mine))
        for offset, key, label in (
            (-0.2, "polyonnx_s", "polyonnx"),
            (0.2, "onnxruntime_s", "onnxruntime"),
        ):
            spreads = [r[key] for r in mine]
            ax.bar(
                x + offset,
                [s["median"] * 1e3 for s in spreads],
                0.4,
                yerr=_errors(spreads, 1e3),
                label=label,
                capsize=2,
            )
        for i, r in enumerate(mine):
            top = max(r["polyonnx_s"]["max"], r["onnxruntime_s"]["max"]) * 1e3
            ax.annotate(f"{r['ratio']:.2f}", (i, top), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(x, [r["model"] for r in mine], rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{t} thread(s): latency, polyonnx / onnxruntime above each pair", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def compile_time(report: dict[str, Any], path: Path) -> bool:
    """Cold compile time per model, one bar per thread count."""
    rows = report["models"]
    if not rows:
        return False
    plt = pyplot()
    counts = _threads(rows)
    names = list(dict.fromkeys(r["model"] for r in rows))
    seconds = {(r["model"], r["threads"]): r["compile_s"]["median"] for r in rows}
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(names)), 4))
    width = 0.8 / len(counts)
    x = np.arange(len(names))
    for i, t in enumerate(counts):
        ax.bar(
            x + (i - (len(counts) - 1) / 2) * width,
            [seconds.get((n, t), 0.0) for n in names],
            width,
            label=f"{t} thread(s)",
        )
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("cold compile (s)")
    ax.set_title("compile time per model (on-disk kernel cache off)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def gemm(report: dict[str, Any], path: Path) -> bool:
    """Per thread count: GFLOP/s of polyonnx and numpy (OpenBLAS) by GEMM shape (bars: min to
    max), and the measured FMA peak."""
    rows = report["gemm"]
    if not rows:
        return False
    plt = pyplot()
    peaks = {p["threads"]: p["best_gflops"] for p in report["peak"]}
    counts = _threads(rows)
    fig, axes = plt.subplots(
        len(counts), 1, figsize=(max(8, 0.8 * len(rows) / len(counts)), 4 * len(counts))
    )
    for ax, t in zip(np.atleast_1d(axes), counts, strict=True):
        mine = [r for r in rows if r["threads"] == t]
        x = np.arange(len(mine))
        for offset, key, label in (
            (-0.2, "polyonnx_gflops", "polyonnx"),
            (0.2, "numpy_gflops", "numpy (OpenBLAS)"),
        ):
            spreads = [r[key] for r in mine]
            ax.bar(
                x + offset,
                [s["median"] for s in spreads],
                0.4,
                yerr=_errors(spreads, 1.0),
                label=label,
                capsize=2,
            )
        ax.axhline(peaks[t], color="black", lw=1, ls="--", label=f"FMA peak {peaks[t]:.0f}")
        labels = [f"{r['m']}x{r['n']}x{r['k']}" for r in mine]
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"MatMul M x N x K, {t} thread(s)", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def roofline(report: dict[str, Any], path: Path) -> bool:
    """The roofline of the report's host with every kernel
    (:func:`polyonnx.bench.roofline.plot`)."""
    roof = report["roofline"]
    if not roof["kernels"]:
        return False
    pyplot()
    pts = [
        Point(
            k["model"],
            k["kernel"],
            tuple(k["ops"]),
            Spread(**k["time_s"]),
            k["flops"],
            k["bytes"],
            roof["peak_gflops"],
            roof["bandwidth_gbs"],
        )
        for k in roof["kernels"]
    ]
    models = ", ".join(dict.fromkeys(p.model for p in pts))
    host = report["host"]
    title = f"{host['cpu']['name']} ({host['llvm']['cpu']}), {roof['threads']} thread(s): {models}"
    plot(pts, roof["peak_gflops"], roof["bandwidth_gbs"], title, str(path))
    return True
