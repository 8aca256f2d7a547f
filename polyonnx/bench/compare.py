"""``polyonnx bench --compare A B``: two report folders side by side, as a page
(``compare.md``, ``compare.html`` and the plots of :mod:`polyonnx.bench.compare_plots`) and as
the table the command prints.

Both reports must have one schema (:mod:`polyonnx.bench.folder`). Two measured reports give
the hosts' fingerprints side by side, the roofs (FMA peak, memory bandwidth), per model and
thread count the latencies of polyonnx and onnxruntime on each machine, B / A of each, each
machine's polyonnx / onnxruntime and the ratio of those ratios (B's over A's: how polyonnx's
standing against its peer moved between the machines), and the GEMM GFLOP/s. Two emulated
reports give the targets side by side, correctness (models, node cases) and the static facts
of the code (sizes, instruction mix). Rows one report lacks show ``-``.

Example (two report folders)::

    page = compare("benchmarks/reports/aarch64", "benchmarks/reports/riscv64", Path("out"))
    print(page.printed)
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyonnx.bench import compare_plots
from polyonnx.bench.disassembly import LABELS, VECTOR_CLASSES
from polyonnx.bench.emulated_document import kib, percent, share
from polyonnx.bench.folder import ReportError, kind, read
from polyonnx.bench.page import Section, Table, markdown_table, table, write_page

Report = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The page of a comparison and what the command prints (Markdown)."""

    title: str
    sections: tuple[Section, ...]
    printed: str


def labels(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> tuple[str, str]:
    """Short names of two report folders: their own names, or ``A`` and ``B`` when those
    are equal.

    Example:
        >>> labels("benchmarks/reports/aarch64", "benchmarks/reports/riscv64")
        ('aarch64', 'riscv64')
        >>> labels("one/report", "two/report")
        ('A', 'B')
    """
    na, nb = (_folder(p).name for p in (a, b))
    return (na, nb) if na != nb and na and nb else ("A", "B")


def _folder(p: str | os.PathLike[str]) -> Path:
    path = Path(p).resolve()
    return path.parent if path.is_file() else path


def load_pair(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> tuple[Report, Report]:
    """Both reports; a :class:`~polyonnx.bench.folder.ReportError` when either is not one or
    their schemas differ."""
    ra, rb = read(a), read(b)
    if ra["schema"] != rb["schema"]:
        raise ReportError(
            f"{a} is {_a(kind(ra))} report ({ra['schema']}), {b} {_a(kind(rb))} one "
            f"({rb['schema']}): --compare shows two reports of the same schema"
        )
    return ra, rb


def _a(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def compare(
    a: str | os.PathLike[str], b: str | os.PathLike[str], out: Path | None = None
) -> Comparison:
    """Compare report folders ``a`` and ``b``; with ``out``, write ``compare.md``,
    ``compare.html`` and the plots there."""
    ra, rb = load_pair(a, b)
    la, lb = labels(a, b)
    plots: dict[str, str] = {}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        plots = compare_plots.draw(ra, rb, (la, lb), out)
    build = _emulated if kind(ra) == "emulated" else _measured
    comparison = build(ra, rb, (la, lb), plots)
    if out is not None:
        write_page(out, "compare", comparison.title, comparison.sections)
    return comparison


# --- formatting ---------------------------------------------------------------------------------


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def _quotient(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or not den else num / den


def _median(row: Report | None, key: str, scale: float = 1.0) -> float | None:
    return None if row is None else row[key]["median"] * scale


def _printed(summary: str, *tables: Table) -> str:
    lines = [summary, ""]
    for t in tables:
        lines += [*markdown_table(t), ""]
    return "\n".join(lines).rstrip() + "\n"


def _keyed(rows: Iterable[Report], key: Callable[[Report], Any]) -> dict[Any, Report]:
    return {key(r): r for r in rows}


def _union(*keyed: Mapping[Any, Any]) -> list[Any]:
    """The keys of every mapping, in first-seen order."""
    return list(dict.fromkeys(k for d in keyed for k in d))


def _side_by_side(fa: dict[str, str], fb: dict[str, str], names: tuple[str, str]) -> Table:
    rows = [[k, fa.get(k, "-"), fb.get(k, "-")] for k in _union(fa, fb)]
    return table(["", *names], rows)


# --- two measured reports -----------------------------------------------------------------------


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _host_facts(r: Report) -> dict[str, str]:
    h = r["host"]
    cpu, cores, mem = h["cpu"], h["cores"], h["memory_bytes"]
    ident = ", ".join(f"{k} {cpu[k]}" for k in ("vendor", "family", "model") if k in cpu)
    caches = ", ".join(
        f"L{c['level']}{c['type'][0].lower() if c['type'] != 'Unified' else ''} "
        f"{_size(c['size_bytes'])}"
        for c in h["caches"]
    )
    return {
        "CPU": cpu["name"] + (f" ({ident})" if ident else ""),
        "LLVM": f"{h['llvm']['triple']}, cpu {h['llvm']['cpu']}",
        "vector bits": str(h["llvm"]["vector_bits"]),
        "ISA features": str(len(h["llvm"]["features"])),
        "caches": caches or "?",
        "cores": f"{cores['logical']} logical, {cores['usable']} usable",
        "memory": f"{mem / (1 << 30):.1f} GiB" if mem else "?",
        "platform": h["platform"],
        "load (start, end)": f"{h['load'][0]:.1f}, {r['load_after'][0]:.1f}",
        "created": r["created"],
        "run": f"{r['duration_s'] / 60:.1f} min" + (" (--quick)" if r["settings"]["quick"] else ""),
        **{f"version: {k}": str(v) for k, v in r["versions"].items()},
    }


def _feature_rows(a: Report, b: Report, names: tuple[str, str]) -> list[str]:
    fa, fb = set(a["host"]["llvm"]["features"]), set(b["host"]["llvm"]["features"])
    out = []
    for name, only in ((names[0], fa - fb), (names[1], fb - fa)):
        if only:
            shown = " ".join(sorted(only)[:40]) + (" ..." if len(only) > 40 else "")
            out.append(f"- ISA features only {name} has ({len(only)}): {shown}")
    return out


def _geomeans(r: Report) -> dict[str, float | None]:
    return dict(r["summary"]["geomean_ratio"])


def _measured_summary(a: Report, b: Report, names: tuple[str, str]) -> str:
    ga, gb = _geomeans(a), _geomeans(b)
    threads = _union(ga, gb)
    lines = [
        f"**{names[0]}**: {a['host']['cpu']['name']} ({a['host']['llvm']['cpu']}, "
        f"{a['host']['llvm']['vector_bits']}-bit vectors), {a['created']}; "
        f"**{names[1]}**: {b['host']['cpu']['name']} ({b['host']['llvm']['cpu']}, "
        f"{b['host']['llvm']['vector_bits']}-bit vectors), {b['created']}.",
        "",
        "polyonnx / onnxruntime in time, geometric mean over each report's models (> 1: "
        "polyonnx is slower): "
        + "; ".join(
            f"{t} thread(s): {names[0]} **{_num(ga.get(t))}**, {names[1]} **{_num(gb.get(t))}**"
            f" ({names[1]} / {names[0]} {_num(_quotient(gb.get(t), ga.get(t)))})"
            for t in threads
        )
        + ".",
        "",
        "Ratios within a report are of two medians of one run; ratios between the reports "
        "compare two machines (and two runs): latency B / A > 1 means B takes longer, "
        "GFLOP/s B / A > 1 means B is faster.",
    ]
    return "\n".join(lines)


def _roof_rows(a: Report, b: Report) -> list[list[str]]:
    pa, pb = (_keyed(r["peak"], lambda p: p["threads"]) for r in (a, b))
    wa, wb = (_keyed(r["bandwidth"], lambda w: w["threads"]) for r in (a, b))
    rows = []
    for t in _union(pa, pb):
        peak = [p[t]["best_gflops"] if t in p else None for p in (pa, pb)]
        triad = [w[t]["triad_gbs"]["median"] if t in w else None for w in (wa, wb)]
        rows.append(
            [
                str(t),
                *(_num(x, ".1f") for x in peak),
                _num(_quotient(peak[1], peak[0])),
                *(_num(x, ".1f") for x in triad),
                _num(_quotient(triad[1], triad[0])),
            ]
        )
    return rows


def _model_rows(a: Report, b: Report) -> list[list[str]]:
    ma, mb = (_keyed(r["models"], lambda m: (m["model"], m["threads"])) for r in (a, b))
    rows = []
    for key in _union(ma, mb):
        ra, rb = ma.get(key), mb.get(key)
        poly = [_median(r, "polyonnx_s", 1e3) for r in (ra, rb)]
        ort = [_median(r, "onnxruntime_s", 1e3) for r in (ra, rb)]
        ratio = [None if r is None else r["ratio"] for r in (ra, rb)]
        rows.append(
            [
                key[0],
                str(key[1]),
                *(_num(x, ".3f") for x in poly),
                _num(_quotient(poly[1], poly[0])),
                *(_num(x, ".3f") for x in ort),
                _num(_quotient(ort[1], ort[0])),
                *(_num(x) for x in ratio),
                _num(_quotient(ratio[1], ratio[0])),
            ]
        )
    return rows


def _compile_rows(a: Report, b: Report) -> list[list[str]]:
    ma, mb = (_keyed(r["models"], lambda m: (m["model"], m["threads"])) for r in (a, b))
    rows = []
    for key in _union(ma, mb):
        s = [_median(m.get(key), "compile_s") for m in (ma, mb)]
        rows.append([key[0], str(key[1]), *(_num(x) for x in s), _num(_quotient(s[1], s[0]))])
    return rows


def _gemm_rows(a: Report, b: Report) -> list[list[str]]:
    ga, gb = (
        _keyed(r["gemm"], lambda g: (f"{g['m']}x{g['n']}x{g['k']}", g["threads"])) for r in (a, b)
    )
    rows = []
    for key in _union(ga, gb):
        ra, rb = ga.get(key), gb.get(key)
        rate = [_median(r, "polyonnx_gflops") for r in (ra, rb)]
        rows.append(
            [
                key[0],
                str(key[1]),
                *(_num(x, ".1f") for x in rate),
                _num(_quotient(rate[1], rate[0])),
                *("-" if r is None else f"{r['of_peak']:.0%}" for r in (ra, rb)),
                *("-" if r is None else _num(r["ratio"]) for r in (ra, rb)),
            ]
        )
    return rows


def _measured(a: Report, b: Report, names: tuple[str, str], plots: dict[str, str]) -> Comparison:
    na, nb = names
    models = table(
        [
            "model",
            "threads",
            f"{na} polyonnx (ms)",
            f"{nb} polyonnx (ms)",
            f"{nb} / {na}",
            f"{na} ort (ms)",
            f"{nb} ort (ms)",
            f"{nb} / {na}",
            f"{na} polyonnx / ort",
            f"{nb} polyonnx / ort",
            f"{nb} / {na}",
        ],
        _model_rows(a, b),
        "lrrrrrrrrrr",
    )
    gemm = table(
        [
            "M x N x K",
            "threads",
            f"{na} GFLOP/s",
            f"{nb} GFLOP/s",
            f"{nb} / {na}",
            f"{na} of peak",
            f"{nb} of peak",
            f"{na} polyonnx / numpy",
            f"{nb} polyonnx / numpy",
        ],
        _gemm_rows(a, b),
        "lrrrrrrrr",
    )
    summary = _measured_summary(a, b, names)
    features = "\n".join(_feature_rows(a, b, names))
    sections = (
        Section("Summary", summary),
        Section(
            "Hosts",
            features,
            (_side_by_side(_host_facts(a), _host_facts(b), names),),
        ),
        Section(
            "Roofs",
            "FMA peak (best round, all threads) and memory bandwidth (triad, median).",
            (
                table(
                    [
                        "threads",
                        f"{na} GFLOP/s",
                        f"{nb} GFLOP/s",
                        f"{nb} / {na}",
                        f"{na} GB/s",
                        f"{nb} GB/s",
                        f"{nb} / {na}",
                    ],
                    _roof_rows(a, b),
                    "rrrrrrr",
                ),
            ),
        ),
        Section(
            "Models",
            "Median latencies; polyonnx / ort: each machine's ratio of medians timed in "
            f"alternation; the last column, {nb}'s ratio over {na}'s (< 1: polyonnx stands "
            f"better against onnxruntime on {nb}).",
            (models,),
            plots.get("ratios"),
        ),
        Section("Latency between the machines", "", (), plots.get("latency")),
        Section(
            "Compile time",
            "Cold compile of each model (seconds).",
            (
                table(
                    ["model", "threads", f"{na} (s)", f"{nb} (s)", f"{nb} / {na}"],
                    _compile_rows(a, b),
                    "lrrrr",
                ),
            ),
        ),
        Section(
            "GEMM",
            "polyonnx's GFLOP/s (median), against each machine's FMA peak and numpy (OpenBLAS).",
            (gemm,),
            plots.get("gemm"),
        ),
    )
    title = f"polyonnx bench --compare: {na} and {nb}"
    return Comparison(title, sections, _printed(summary, models))


# --- two emulated reports -----------------------------------------------------------------------


def _target_facts(r: Report) -> dict[str, str]:
    t, s = r["target"], r["summary"]
    nodes = "-" if s["node_cases"] is None else f"{s['node_cases_passed']} of {s['node_cases']}"
    return {
        "triple": t["triple"],
        "cpu": t["cpu"],
        "features": " ".join(t["features"]) or "(the CPU's own)",
        "vector bits": str(t["vector_bits"]),
        "vector registers": str(t["vector_registers"]),
        "emulator": t["emulator"],
        "compiler": t["compiler"],
        "host": f"{r['host']['cpu']['name']} ({r['host']['llvm']['cpu']})",
        "created": r["created"],
        "models matching onnxruntime": f"{s['models_matching']} of {s['models']}",
        "node cases matching": nodes,
        "vector FMA (all kernels)": percent(s["vector_fma_share"]),
        "vector, any (all kernels)": percent(s["vector_share"]),
        "version: polyonnx": str(r["versions"].get("polyonnx")),
        "version: llvm": str(r["versions"].get("llvm")),
    }


def _result(row: Report | None) -> str:
    if row is None:
        return "-"
    if row["error"]:
        return "FAILED"
    return f"{_num(row['max_rel_err'], '.1e')} {'MISMATCH' if row['mismatch'] else 'match'}"


def _correctness_rows(a: Report, b: Report) -> list[list[str]]:
    ma, mb = (_keyed(r["models"], lambda m: m["model"]) for r in (a, b))
    refused = [{f["model"]: f for f in r["refused"]} for r in (a, b)]
    rows = []
    for name in _union(ma, mb, *refused):
        cells = [
            "refused" if name in ref else _result(m.get(name))
            for m, ref in zip((ma, mb), refused, strict=True)
        ]
        rows.append([name, *cells])
    return rows


def _code_rows(a: Report, b: Report) -> list[list[str]]:
    ma, mb = (_keyed(r["models"], lambda m: m["model"]) for r in (a, b))
    rows = []
    for name in _union(ma, mb):
        code = [None if name not in m else m[name]["code"] for m in (ma, mb)]
        lib = [None if c is None else c["library_bytes"] for c in code]
        kern = [None if c is None else c["kernel_bytes"] for c in code]
        rows.append(
            [
                name,
                *("-" if x is None else kib(x) for x in kern),
                _num(_quotient(kern[1], kern[0])),
                *("-" if c is None else str(c["instructions"]) for c in code),
                *("-" if c is None else percent(share(c["mix"], ("vector_fma",))) for c in code),
                *("-" if c is None else percent(share(c["mix"], VECTOR_CLASSES)) for c in code),
                *("-" if x is None else kib(x) for x in lib),
            ]
        )
    return rows


def _node_text(a: Report, b: Report, names: tuple[str, str]) -> str:
    failed = [{f["case"] for f in (r["node_cases"] or {"failed": []})["failed"]} for r in (a, b)]
    counts = [
        "not run"
        if r["node_cases"] is None
        else f"{r['node_cases']['passed']} of {r['node_cases']['cases']}"
        for r in (a, b)
    ]
    lines = [
        f"Node cases matching the suite's outputs: {names[0]} {counts[0]}, {names[1]} {counts[1]}."
    ]
    for name, only in ((names[0], failed[0] - failed[1]), (names[1], failed[1] - failed[0])):
        if only:
            lines.append("")
            lines.append(f"- failing on {name} only: {', '.join(sorted(only))}")
    return "\n".join(lines)


def _emulated(a: Report, b: Report, names: tuple[str, str], plots: dict[str, str]) -> Comparison:
    na, nb = names
    code = table(
        [
            "model",
            f"{na} kernel code (KiB)",
            f"{nb} kernel code (KiB)",
            f"{nb} / {na}",
            f"{na} instructions",
            f"{nb} instructions",
            f"{na} {LABELS['vector_fma']}",
            f"{nb} {LABELS['vector_fma']}",
            f"{na} vector (any)",
            f"{nb} vector (any)",
            f"{na} library (KiB)",
            f"{nb} library (KiB)",
        ],
        _code_rows(a, b),
        "l" + "r" * 11,
    )
    correctness = table(["model", na, nb], _correctness_rows(a, b), "lll")
    summary = (
        f"**{na}**: {a['target']['triple']} ({a['target']['vector_bits']}-bit vectors); "
        f"**{nb}**: {b['target']['triple']} ({b['target']['vector_bits']}-bit vectors). "
        f"{a['note']}"
    )
    sections = (
        Section("Summary", summary),
        Section(
            "Targets",
            "What each report's code was generated for, its tools, and what matched.",
            (_side_by_side(_target_facts(a), _target_facts(b), names),),
        ),
        Section(
            "Models against onnxruntime",
            "Max relative error against onnxruntime on each report's host.",
            (correctness,),
        ),
        Section(
            "Code",
            "Kernel functions' code and instructions (static counts from objdump), each "
            "model's library (weights included).",
            (code,),
            plots.get("mix"),
        ),
        Section("Code size between the targets", "", (), plots.get("code")),
        Section("Node cases", _node_text(a, b, names)),
    )
    title = f"polyonnx bench --compare: {na} and {nb} (emulated: no timings)"
    return Comparison(title, sections, _printed(summary, correctness, code))
