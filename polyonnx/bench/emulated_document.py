"""The sections of an emulated report (``polyonnx bench --target T``, schema
:data:`polyonnx.bench.folder.EMULATED`): no timings, says so first; then the target, the host
that compiled and emulated, correctness of the models and node cases, and the static facts of
the code (sizes, instruction mix), with the plots of :mod:`polyonnx.bench.emulated_plots`.

Example (from a report's data)::

    write_page(Path("out"), "report", title(data), sections(data, draw(data, Path("out"))))
"""

from __future__ import annotations

from typing import Any

from polyonnx.bench.disassembly import CLASSES, LABELS, VECTOR_CLASSES
from polyonnx.bench.page import Section, table

#: Kernels listed per model under "Kernels" (those doing most of its arithmetic).
TOP_PER_MODEL = 2


def title(report: dict[str, Any]) -> str:
    t = report["target"]
    return (
        f"polyonnx bench: {t['name']} under qemu-user ({t['triple']}, cpu {t['cpu']}, "
        f"{t['vector_bits']}-bit vectors), {report['created']}: correctness and static "
        "facts, no timings"
    )


def kib(n: int) -> str:
    return f"{n / 1024:.1f}"


def percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def share(mix: dict[str, int], classes: tuple[str, ...]) -> float:
    """The share of ``classes`` among the instructions of ``mix`` (0 when there are none)."""
    total = sum(mix.values())
    return sum(mix[c] for c in classes) / total if total else 0.0


def summary_text(report: dict[str, Any]) -> str:
    s, t, host = report["summary"], report["target"], report["host"]
    lines = [
        f"**{report['note']}**",
        "",
        f"Target {t['triple']} (cpu {t['cpu']}, {t['vector_bits']}-bit vectors, "
        f"{t['vector_registers']} vector registers), run under `{t['emulator']}` on "
        f"{host['cpu']['name']} ({host['llvm']['cpu']}).",
        "",
        f"Models: **{s['models_matching']} of {s['models']}** match onnxruntime (on this "
        f"host; max relative error at most 1e-4)"
        + (
            f"; node cases: **{s['node_cases_passed']} of {s['node_cases']}** match the "
            "outputs the ONNX node suite ships."
            if s["node_cases"]
            else "; no node cases were run."
        ),
        "",
        f"Kernel code of all models: {s['instructions']} instructions, "
        f"{percent(s['vector_fma_share'])} vector FMAs, {percent(s['vector_share'])} vector "
        "instructions of any kind (static counts: the code as laid out, not as executed).",
        "",
        f"{report['duration_s'] / 60:.1f} min{' (--quick)' if report['settings']['quick'] else ''}"
        f"; every model and node case compiled for {report['settings']['threads']} thread.",
    ]
    return "\n".join(lines)


def target_table(report: dict[str, Any]) -> list[list[str]]:
    t = report["target"]
    return [
        ["triple", t["triple"]],
        ["cpu", t["cpu"]],
        ["features", " ".join(t["features"]) or "(the CPU's own)"],
        ["vector bits", str(t["vector_bits"])],
        ["vector registers", str(t["vector_registers"])],
        ["caches assumed", f"L1d {kib(t['l1_data_bytes'])} KiB, L2 {kib(t['l2_bytes'])} KiB"],
        ["emulator", f"{t['emulator']} ({t['qemu_version']})"],
        ["compiler", t["compiler"]],
        ["binutils", t["binutils"]],
    ]


def host_table(report: dict[str, Any]) -> list[list[str]]:
    host = report["host"]
    cores = host["cores"]
    return [
        ["CPU", host["cpu"]["name"]],
        ["LLVM", f"{host['llvm']['triple']}, cpu {host['llvm']['cpu']}"],
        ["cores", f"{cores['logical']} logical, {cores['usable']} usable"],
        ["platform", host["platform"]],
    ]


def model_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in report["models"]:
        if r["error"]:
            result = f"FAILED: {r['error'][:80]}"
        else:
            result = "MISMATCH" if r["mismatch"] else "match"
        err = "-" if r["max_rel_err"] is None else f"{r['max_rel_err']:.1e}"
        rows.append(
            [
                r["model"],
                f"{r['parameters'] / 1e6:.2f}",
                f"{r['multiply_adds'] / 1e9:.3f}",
                err,
                result,
            ]
        )
    rows += [[f["model"], "", "", "-", f"refused: {f['error'][:80]}"] for f in report["refused"]]
    return rows


def code_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in report["models"]:
        c = r["code"]
        rows.append(
            [
                r["model"],
                kib(c["library_bytes"]),
                kib(c["text_bytes"]),
                f"{c['weights_bytes'] / (1 << 20):.2f}",
                str(c["functions"]),
                kib(c["kernel_bytes"]),
                str(c["instructions"]),
                *(percent(share(c["mix"], (k,))) for k in CLASSES),
            ]
        )
    return rows


CODE_HEADERS = [
    "model",
    "library (KiB)",
    ".text (KiB)",
    "weights (MiB)",
    "kernel functions",
    "kernel code (KiB)",
    "instructions",
    *(LABELS[c] for c in CLASSES),
]


def kernel_rows(report: dict[str, Any]) -> list[list[str]]:
    """Per model, the :data:`TOP_PER_MODEL` kernels doing most of its arithmetic."""
    rows = []
    for r in report["models"]:
        kernels = sorted(r["code"]["kernels"], key=lambda k: -k["flops"])[:TOP_PER_MODEL]
        rows += [
            [
                r["model"],
                k["kernel"],
                _short(", ".join(k["ops"])),
                f"{k['flops'] / 1e6:.3g}",
                str(k["bytes"]),
                str(k["instructions"]),
                percent(share(k["mix"], ("vector_fma",))),
                percent(share(k["mix"], VECTOR_CLASSES)),
            ]
            for k in kernels
        ]
    return rows


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def node_text(report: dict[str, Any]) -> str:
    nodes = report["node_cases"]
    if not nodes:
        return "No node cases were run (`--node-cases FILE` names a list)."
    lines = [
        f"**{nodes['passed']} of {nodes['cases']}** node cases (listed in "
        f"`{report['settings']['node_cases_from']}`) compiled for the target, run under "
        f"qemu-user and compared with {nodes['reference']} (each case's rtol and atol)."
    ]
    if nodes["failed"]:
        lines.append("")
        lines += [f"- failed: {f['case']}: {f['error']}" for f in nodes["failed"]]
    if nodes["workarounds"]:
        lines.append("")
        lines += [
            f"- compiled with features `{w['features']}`: {w['case']} (a known defect of this "
            "emulator: `polyonnx.testing.emulated.emulator_workaround`)"
            for w in nodes["workarounds"]
        ]
    return "\n".join(lines)


def sections(report: dict[str, Any], plots: dict[str, str]) -> list[Section]:
    """Summary, target, host, models, code, kernels, node cases."""
    libs = [[k, str(v)] for k, v in report["versions"].items()]
    return [
        Section("Summary", summary_text(report)),
        Section(
            "Target",
            "What polyonnx generated code for (vector width and registers: what its schedules "
            "and register tiles are planned for), and the tools that built, ran and read it.",
            (table(["", ""], target_table(report)),),
        ),
        Section(
            "Host",
            "The machine that compiled the code, emulated it and ran onnxruntime.",
            (table(["", ""], host_table(report)), table(["library", "version"], libs)),
        ),
        Section(
            "Models against onnxruntime",
            "Each model compiled for the target (1 thread), linked by the cross gcc, run under "
            "qemu-user on random feeds and compared with onnxruntime on the host: max |diff| "
            "/ max |onnxruntime| over the outputs (a MISMATCH above 1e-4).",
            (
                table(
                    ["model", "params (M)", "G multiply-adds", "max rel err", "result"],
                    model_rows(report),
                    "lrrrl",
                ),
            ),
        ),
        Section(
            "Code",
            "Each model's shared library: its file, `.text` and weights, and its kernels' "
            "functions (kernels of one signature share one): their size and instruction mix "
            "from binutils' objdump (static counts).",
            (table(CODE_HEADERS, code_rows(report), "l" + "r" * (len(CODE_HEADERS) - 1)),),
            plots.get("mix"),
        ),
        Section(
            "Kernels",
            f"Per model, the {TOP_PER_MODEL} kernels doing most of its arithmetic (MFLOP: "
            "of one run of the kernel), their code (bytes) and instruction mix; the plot "
            "shows every kernel function's size.",
            (
                table(
                    [
                        "model",
                        "kernel",
                        "nodes",
                        "MFLOP",
                        "bytes",
                        "instructions",
                        "vector FMA",
                        "vector (any)",
                    ],
                    kernel_rows(report),
                    "lllrrrrr",
                ),
            ),
            plots.get("code"),
        ),
        Section("Node cases", node_text(report)),
    ]
