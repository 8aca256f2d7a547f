"""A benchmark report's folder: ``report.json`` (the data), ``report.md`` and ``report.html``
(the same tables, and the plots as PNG files beside them; :mod:`polyonnx.bench.page` renders
both documents from one description).

A measured report (``polyonnx bench``) gets the sections of :func:`sections_of` and the plots
of :mod:`polyonnx.bench.plots`; an emulated one (``polyonnx bench --target T``), those of
:mod:`polyonnx.bench.emulated_document`.

Rewriting the documents of an earlier report from its data::

    write(json.loads(Path("old/report.json").read_text()), Path("old"))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyonnx.bench import emulated_document, emulated_plots
from polyonnx.bench.folder import EMULATED
from polyonnx.bench.page import Section, write_page
from polyonnx.bench.page import table as _table
from polyonnx.bench.plots import draw

#: Kernels listed under the roofline (those losing most time against their bound).
TOP_KERNELS = 20


def write(report: dict[str, Any], out: Path) -> None:
    """``report.json``, the plots, ``report.md`` and ``report.html`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    if report["schema"] == EMULATED:
        drawn = emulated_plots.draw(report, out)
        heading = emulated_document.title(report)
        sections = emulated_document.sections(report, drawn)
    else:
        drawn = draw(report, out)
        heading, sections = title(report), sections_of(report, drawn)
    write_page(out, "report", heading, sections)


def _spread(s: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    """``median (min-max, n=rounds)``; a figure measured once is just its value."""
    med = f"{s['median'] * scale:.{digits}f}"
    if s["rounds"] == 1:
        return med
    return f"{med} ({s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}, n={s['rounds']})"


def title(report: dict[str, Any]) -> str:
    host = report["host"]
    return (
        f"polyonnx bench: {host['cpu']['name']} ({host['llvm']['cpu']}, "
        f"{host['llvm']['vector_bits']}-bit vectors), {report['created']}"
    )


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def sections_of(report: dict[str, Any], plots: dict[str, str]) -> list[Section]:
    """The report's sections: headline, host, roofs, models, compile time, GEMM, roofline."""
    host, s = report["host"], report["settings"]
    peaks = {p["threads"]: p for p in report["peak"]}
    bws = {b["threads"]: b for b in report["bandwidth"]}
    geo = report["summary"]["geomean_ratio"]
    load = ", ".join(f"{x:.1f}" for x in host["load"])
    load_after = ", ".join(f"{x:.1f}" for x in report["load_after"])
    headline = "\n".join(
        [
            "polyonnx / onnxruntime in time, geometric mean over the models (> 1: polyonnx is "
            "slower): "
            + ", ".join(f"**{_ratio(g)}** at {t} thread(s)" for t, g in geo.items())
            + ".",
            "",
            "FMA peak (best round, all threads): "
            + ", ".join(f"{p['best_gflops']:.1f} GFLOP/s at {t}" for t, p in peaks.items())
            + "; memory bandwidth (triad, median): "
            + ", ".join(f"{b['triad_gbs']['median']:.1f} GB/s at {t}" for t, b in bws.items())
            + " thread(s).",
            "",
            f"Load average (1, 5, 15 min) {load} at the start, {load_after} at the end; "
            f"{report['duration_s'] / 60:.1f} min{' (--quick)' if s['quick'] else ''}. Ratios "
            "are of medians of polyonnx and its peer timed in alternation in this run; absolute "
            "figures are only as good as the machine was quiet.",
        ]
    )
    busy = max(host["load"][0], report["load_after"][0])
    usable = host["cores"]["usable"] or host["cores"]["logical"] or 1
    if busy > usable:
        headline += (
            f"\n\n**The machine was busy** (load average {busy:.1f} on {usable} usable "
            "core(s)): the roofs were measured low (a GEMM or kernel above 100% of its bound "
            "says so), and multi-threaded peers that spin-wait (OpenBLAS) can lose far more than "
            "polyonnx. Re-run on a quiet machine before quoting absolute figures."
        )
    out = [Section("Summary", headline)]

    caches = "; ".join(
        f"L{c['level']} {c['type'].lower()} {_size(c['size_bytes'])} ({c['ways']}-way, "
        f"{c['line_bytes']} B lines, CPUs {c['shared_by_cpus']})"
        for c in host["caches"]
    )
    cpu = host["cpu"]
    ident = ", ".join(
        f"{k} {cpu[k]}" for k in ("vendor", "family", "model", "stepping") if k in cpu
    )
    cores = host["cores"]
    mem = host["memory_bytes"]
    facts = [
        ["CPU", f"{cpu['name']}" + (f" ({ident})" if ident else "")],
        [
            "LLVM",
            f"{host['llvm']['triple']}, cpu {host['llvm']['cpu']}, "
            f"{host['llvm']['vector_bits']}-bit vectors",
        ],
        ["ISA features", " ".join(host["llvm"]["features"])],
        ["caches", caches or "(sysfs not readable)"],
        [
            "cores",
            f"{cores['logical']} logical, {cores['usable']} usable, {cores['physical']} physical",
        ],
        ["memory", f"{mem / (1 << 30):.1f} GiB" if mem else "?"],
        ["platform", host["platform"]],
    ]
    libs = [[k, str(v)] for k, v in report["versions"].items()]
    out.append(
        Section("Host", tables=(_table(["", ""], facts), _table(["library", "version"], libs)))
    )

    peak_rows = [
        [
            str(t),
            str(p["vector_bits"]),
            _spread(p["per_core_gflops"], digits=1),
            f"{p['best_gflops']:.1f}",
            p["loop"],
        ]
        for t, p in peaks.items()
    ]
    bw_rows = [
        [
            str(t),
            str(b["array_mib"]),
            _spread(b["copy_gbs"], digits=1),
            _spread(b["triad_gbs"], digits=1),
        ]
        for t, b in bws.items()
    ]
    out.append(
        Section(
            "Roofs",
            "The FP32 FMA peak of a generated loop of independent FMAs (per core: median "
            "(min-max, rounds); best: the fastest round times the threads, the roofline's "
            "roof) and a STREAM-like memory bandwidth in numpy.",
            (
                _table(
                    [
                        "threads",
                        "vector bits",
                        "GFLOP/s per core",
                        "best, all threads",
                        "FMAs / insns in loop",
                    ],
                    peak_rows,
                    "rrrrl",
                ),
                _table(["threads", "array MiB", "copy GB/s", "triad GB/s"], bw_rows, "rrrr"),
            ),
        )
    )

    model_rows = [
        [
            r["model"],
            str(r["threads"]),
            f"{r['compile_s']['median']:.2f}",
            _spread(r["polyonnx_s"], 1e3),
            _spread(r["onnxruntime_s"], 1e3),
            f"{r['ratio']:.2f}",
            "?"
            if r["max_rel_err"] is None
            else f"{r['max_rel_err']:.1e}" + (" MISMATCH" if r["mismatch"] else ""),
        ]
        for r in report["models"]
    ]
    counts = sorted(
        {r["threads"] for r in report["models"]} | {f["threads"] for f in report["refused"]}
    )
    ratio = {(r["model"], r["threads"]): r["ratio"] for r in report["models"]}
    failed = {(f["model"], f["threads"]) for f in report["refused"]}
    sizes = {r["model"]: (r["parameters"], r["multiply_adds"]) for r in report["models"]}
    summary_rows = [
        [name, f"{p / 1e6:.2f}", f"{m / 1e9:.3f}"]
        + [
            f"{ratio[name, t]:.2f}"
            if (name, t) in ratio
            else "refused"
            if (name, t) in failed
            else ""
            for t in counts
        ]
        for name, (p, m) in sizes.items()
    ]
    summary_rows.append(["geometric mean", "", ""] + [_ratio(geo.get(str(t))) for t in counts])
    refused = "\n".join(
        f"- refused: {f['model']} ({f['threads']} thread(s)): {f['error']}"
        for f in report["refused"]
    )
    out.append(
        Section(
            "Models against onnxruntime",
            "Latency in ms: median (min-max, rounds), polyonnx and onnxruntime (CPU provider, "
            "same threads) timed in alternation; compile: cold (on-disk kernel cache off)."
            + ("\n\n" + refused if refused else ""),
            (
                _table(
                    [
                        "model",
                        "threads",
                        "compile (s)",
                        "polyonnx (ms)",
                        "onnxruntime (ms)",
                        "polyonnx / ort",
                        "max rel err",
                    ],
                    model_rows,
                    "lrrrrrr",
                ),
                _table(
                    ["model", "params (M)", "G multiply-adds"] + [f"{t} thread(s)" for t in counts],
                    summary_rows,
                    "lrr" + "r" * len(counts),
                ),
            ),
            plots.get("latency"),
        )
    )
    out.append(
        Section("Compile time", "Cold compile of each model (seconds).", (), plots.get("compile"))
    )

    gemm_rows = [
        [
            f"{g['m']}x{g['n']}x{g['k']}",
            str(g["threads"]),
            f"{g['compile_s']['median']:.2f}",
            _spread(g["polyonnx_gflops"], digits=1),
            _spread(g["numpy_gflops"], digits=1),
            f"{g['ratio']:.2f}",
            f"{g['of_peak']:.0%}",
            "?" if g["max_rel_err"] is None else f"{g['max_rel_err']:.1e}",
        ]
        for g in report["gemm"]
    ]
    out.append(
        Section(
            "GEMM against OpenBLAS",
            "A one-node MatMul Y[M,N] = A[M,K] @ B[K,N] against numpy's `A @ B` "
            f"({report['versions'].get('blas')}, OPENBLAS_NUM_THREADS = threads, "
            "OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset) in a child process; GFLOP/s: median "
            "(min-max, rounds); polyonnx / numpy in throughput (> 1: polyonnx is faster); "
            "of peak: polyonnx's median against the FMA peak.",
            (
                _table(
                    [
                        "M x N x K",
                        "threads",
                        "compile (s)",
                        "polyonnx GFLOP/s",
                        "numpy GFLOP/s",
                        "polyonnx / numpy",
                        "of peak",
                        "max rel err",
                    ],
                    gemm_rows,
                    "lrrrrrrr",
                ),
            ),
            plots.get("gemm"),
        )
    )

    roof = report["roofline"]
    worst = sorted(roof["kernels"], key=lambda k: -k["lost_s"])[:TOP_KERNELS]
    kernel_rows = [
        [
            k["model"],
            k["kernel"],
            _short(", ".join(k["ops"])),
            _spread(k["time_s"], 1e3),
            f"{k['flops'] / 1e6:.3g}",
            "-" if k["intensity"] is None else f"{k['intensity']:.3g}",
            f"{k['gflops']:.1f}",
            f"{k['bound_gflops']:.1f} {'memory' if k['memory_bound'] else 'compute'}",
            f"{k['of_bound']:.0%}",
            f"{k['lost_s'] * 1e3:.3f}",
        ]
        for k in worst
    ]
    out.append(
        Section(
            "Roofline",
            f"Every kernel of the models at {roof['threads']} thread(s), timed in the model's "
            f"order and memory, against peak {roof['peak_gflops']:.1f} GFLOP/s and bandwidth "
            f"{roof['bandwidth_gbs']:.1f} GB/s (bytes: the kernel's inputs and outputs once; "
            "a kernel whose data an earlier one left in cache can exceed 100%). The "
            f"{len(worst)} of {len(roof['kernels'])} kernels losing most time against their "
            "bound:",
            (
                _table(
                    [
                        "model",
                        "kernel",
                        "nodes",
                        "ms",
                        "MFLOP",
                        "FLOP/B",
                        "GFLOP/s",
                        "bound (GFLOP/s)",
                        "of bound",
                        "lost (ms)",
                    ],
                    kernel_rows,
                    "lllrrrrlrr",
                ),
            ),
            plots.get("roofline"),
        )
    )
    return out


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
