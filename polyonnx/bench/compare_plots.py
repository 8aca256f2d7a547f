"""The plots of ``polyonnx bench --compare A B`` (matplotlib, the ``bench`` extra), drawn from
the two reports' JSON alone.

Two measured reports: ``ratios.png`` (per thread count, each model's polyonnx / onnxruntime on
each machine), ``latency.png`` (B / A of each model's latency, polyonnx's and onnxruntime's)
and ``gemm.png`` (polyonnx's GFLOP/s by GEMM shape on each machine, with each machine's FMA
peak). Two emulated reports: ``mix.png`` (each model's instruction mix on each target) and
``code.png`` (each model's kernel code size on each target).

Example (two reports' data)::

    files = draw(report_a, report_b, ("zen4", "emeraldrapids"), Path("out"))
    files["ratios"]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from polyonnx.bench.emulated_plots import mix_bars
from polyonnx.bench.folder import kind
from polyonnx.bench.plots import pyplot

Report = dict[str, Any]
Names = tuple[str, str]
Plot = Callable[[Report, Report, Names, Path], bool]


def draw(a: Report, b: Report, names: Names, out: Path) -> dict[str, str]:
    """Every plot of the comparison as a PNG in ``out``: {plot name: file name}."""
    plots: tuple[tuple[str, Plot], ...] = (
        (("mix", mix), ("code", code_size))
        if kind(a) == "emulated"
        else (("ratios", ratios), ("latency", latency), ("gemm", gemm))
    )
    files = {}
    for name, fn in plots:
        if fn(a, b, names, out / f"{name}.png"):
            files[name] = f"{name}.png"
    return files


def plain_numbers() -> Any:
    """A tick formatter writing 0.5, 2 (not 5 x 10^-1) on a log axis."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda y, _: f"{y:g}")


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def _common(a: Report, b: Report, key: str, field: Callable[[Report], Any]) -> list[Any]:
    """The values of ``field`` of rows ``key`` found in both reports, in A's order."""
    theirs = {field(r) for r in b[key]}
    return list(dict.fromkeys(field(r) for r in a[key] if field(r) in theirs))


def _model_key(r: Report) -> tuple[str, int]:
    return (r["model"], r["threads"])


def ratios(a: Report, b: Report, names: Names, path: Path) -> bool:
    """Per thread count: each model's polyonnx / onnxruntime on A and on B (1: parity)."""
    keys = _common(a, b, "models", _model_key)
    if not keys:
        return False
    plt = pyplot()
    counts = sorted({t for _, t in keys})
    width = max(7.0, 0.7 * len(keys) / len(counts))
    fig, axes = plt.subplots(len(counts), 1, figsize=(width, 3.6 * len(counts)))
    for ax, t in zip(np.atleast_1d(axes), counts, strict=True):
        models = [m for m, th in keys if th == t]
        x = np.arange(len(models))
        for offset, report, name in ((-0.2, a, names[0]), (0.2, b, names[1])):
            by = {_model_key(r): r["ratio"] for r in report["models"]}
            ax.bar(x + offset, [by[m, t] for m in models], 0.4, label=name)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(x, models, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("polyonnx / onnxruntime (time)")
        ax.set_title(f"{t} thread(s): < 1, polyonnx is faster than onnxruntime", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", lw=0.3)
    _save(fig, path)
    return True


def latency(a: Report, b: Report, names: Names, path: Path) -> bool:
    """Per model and thread count: B's latency over A's, polyonnx's and onnxruntime's."""
    keys = _common(a, b, "models", _model_key)
    if not keys:
        return False
    plt = pyplot()
    by = [{_model_key(r): r for r in report["models"]} for report in (a, b)]
    x = np.arange(len(keys))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.6 * len(keys)), 4))
    for offset, key, label in ((-0.2, "polyonnx_s", "polyonnx"), (0.2, "onnxruntime_s", "ort")):
        quotients = np.array([by[1][k][key]["median"] / by[0][k][key]["median"] for k in keys])
        ax.bar(x + offset, quotients - 1.0, 0.4, bottom=1.0, label=label)  # from parity
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plain_numbers())
    ax.yaxis.set_minor_formatter(plain_numbers())
    ax.set_xticks(x, [f"{m} ({t})" for m, t in keys], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"latency {names[1]} / {names[0]}")
    ax.set_title(f"> 1: {names[1]} takes longer than {names[0]} (model (threads))", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", lw=0.3)
    _save(fig, path)
    return True


def _gemm_key(g: Report) -> tuple[str, int]:
    return (f"{g['m']}x{g['n']}x{g['k']}", g["threads"])


def gemm(a: Report, b: Report, names: Names, path: Path) -> bool:
    """Per thread count: polyonnx's GFLOP/s by shape on A and on B, and both FMA peaks."""
    keys = _common(a, b, "gemm", _gemm_key)
    if not keys:
        return False
    plt = pyplot()
    counts = sorted({t for _, t in keys})
    fig, axes = plt.subplots(len(counts), 1, figsize=(8, 3.6 * len(counts)))
    for ax, t in zip(np.atleast_1d(axes), counts, strict=True):
        shapes = [s for s, th in keys if th == t]
        x = np.arange(len(shapes))
        for offset, report, name in ((-0.2, a, names[0]), (0.2, b, names[1])):
            by = {_gemm_key(g): g["polyonnx_gflops"]["median"] for g in report["gemm"]}
            bars = ax.bar(x + offset, [by[s, t] for s in shapes], 0.4, label=name)
            peak = {p["threads"]: p["best_gflops"] for p in report["peak"]}.get(t)
            if peak:
                colour = bars.patches[0].get_facecolor()
                ax.axhline(peak, color=colour, lw=1, ls="--", label=f"{name} peak {peak:.0f}")
        ax.set_xticks(x, shapes, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("GFLOP/s")
        ax.set_title(f"MatMul M x N x K, {t} thread(s)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, axis="y", lw=0.3)
    _save(fig, path)
    return True


def mix(a: Report, b: Report, names: Names, path: Path) -> bool:
    """Each model's instruction mix on A and on B, one bar above the other."""
    models = _common(a, b, "models", lambda r: r["model"])
    if not models:
        return False
    plt = pyplot()
    by = [{r["model"]: r["code"]["mix"] for r in report["models"]} for report in (a, b)]
    labels = [f"{m} ({name})" for m in models for name in names]
    mixes = [by[k][m] for m in models for k in (0, 1)]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.3 * len(labels)))
    mix_bars(ax, labels, mixes)
    ax.set_title(f"instruction mix of the kernels: {names[0]} and {names[1]}", fontsize=9, pad=24)
    _save(fig, path)
    return True


def code_size(a: Report, b: Report, names: Names, path: Path) -> bool:
    """Each model's kernel code (KiB) on A and on B."""
    models = _common(a, b, "models", lambda r: r["model"])
    if not models:
        return False
    plt = pyplot()
    x = np.arange(len(models))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.7 * len(models)), 4))
    for offset, report, name in ((-0.2, a, names[0]), (0.2, b, names[1])):
        by = {r["model"]: r["code"]["kernel_bytes"] / 1024 for r in report["models"]}
        ax.bar(x + offset, [by[m] for m in models], 0.4, label=name)
    ax.set_yscale("log")
    ax.set_xticks(x, models, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("kernel code (KiB)")
    ax.set_title("code size of the kernels", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", lw=0.3)
    _save(fig, path)
    return True
