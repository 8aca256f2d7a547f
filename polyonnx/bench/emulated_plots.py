"""The plots of an emulated report (matplotlib, the ``bench`` extra), drawn from its JSON
alone: the instruction mix of each model's kernels, and the code size of each kernel function.

:func:`mix_bars` draws one stacked bar per (label, mix): what the comparison of two reports
draws too.

Example (from a report's data)::

    files = draw(json.load(open("report.json")), Path("out"))
    files["mix"]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyonnx.bench.disassembly import CLASSES, LABELS
from polyonnx.bench.plots import pyplot

#: A colour per instruction class: vector classes in blues, scalar float orange, other grey.
COLOURS = {
    "vector_fma": "#08519c",
    "vector_memory": "#4292c6",
    "vector_other": "#9ecae1",
    "scalar_float": "#fd8d3c",
    "other": "#bdbdbd",
}


def draw(report: dict[str, Any], out: Path) -> dict[str, str]:
    """Every plot of ``report`` as a PNG in ``out``: {plot name: file name}."""
    files = {}
    for name, fn in (("mix", mix), ("code", code_size)):
        if fn(report, out / f"{name}.png"):
            files[name] = f"{name}.png"
    return files


def mix_bars(ax: Any, labels: Sequence[str], mixes: Sequence[dict[str, int]]) -> None:
    """Horizontal bars, one per label, each the shares of the instruction classes."""
    y = np.arange(len(labels))
    totals = np.array([max(sum(m.values()), 1) for m in mixes], dtype=float)
    left = np.zeros(len(labels))
    for cls in CLASSES:
        part = np.array([m[cls] for m in mixes]) / totals * 100
        ax.barh(y, part, left=left, color=COLOURS[cls], label=LABELS[cls])
        left += part
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the kernels' instructions (%, static counts)")
    ax.legend(fontsize=7, ncol=len(CLASSES), loc="lower center", bbox_to_anchor=(0.5, 1.0))


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def mix(report: dict[str, Any], path: Path) -> bool:
    """Each model's kernel instructions by class."""
    rows = report["models"]
    if not rows:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.35 * len(rows)))
    mix_bars(ax, [r["model"] for r in rows], [r["code"]["mix"] for r in rows])
    ax.set_title(f"{report['target']['name']}: instruction mix of the kernels", fontsize=9, pad=24)
    _save(fig, path)
    return True


def code_size(report: dict[str, Any], path: Path) -> bool:
    """Per model, the size of each kernel function (a point each; log scale) and of all."""
    rows = report["models"]
    if not rows:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.35 * len(rows)))
    for i, r in enumerate(rows):
        sizes = sorted({k["symbol"]: k["bytes"] for k in r["code"]["kernels"]}.values())
        ax.scatter(sizes, [i] * len(sizes), s=10, color=COLOURS["vector_fma"], alpha=0.6)
        ax.scatter([r["code"]["kernel_bytes"]], [i], marker="|", s=200, color="black")
    ax.set_yticks(range(len(rows)), [r["model"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("bytes of code: each kernel function (dots), all of them (bar)")
    ax.set_title(f"{report['target']['name']}: code size per kernel", fontsize=9)
    ax.grid(True, axis="x", which="both", lw=0.3)
    _save(fig, path)
    return True
