"""Small synthetic reports of both schemas, with every key the documents and the comparison
read: what the tests of :mod:`polyonnx.bench.compare` and the documents use instead of runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyonnx.bench.folder import EMULATED, MEASURED


def spread(median: float, rounds: int = 5) -> dict[str, float | int]:
    return {"median": median, "min": median * 0.9, "max": median * 1.2, "rounds": rounds}


def _host(cpu: str, llvm_cpu: str, bits: int, features: list[str]) -> dict[str, Any]:
    return {
        "cpu": {"name": cpu, "vendor": "Test"},
        "llvm": {
            "triple": "x86_64-unknown-linux-gnu",
            "cpu": llvm_cpu,
            "vector_bits": bits,
            "features": features,
        },
        "caches": [
            {
                "level": 1,
                "type": "Data",
                "size_bytes": 32 << 10,
                "line_bytes": 64,
                "ways": 8,
                "shared_by_cpus": "0",
            },
            {
                "level": 2,
                "type": "Unified",
                "size_bytes": 1 << 20,
                "line_bytes": 64,
                "ways": 16,
                "shared_by_cpus": "0",
            },
        ],
        "cores": {"logical": 2, "usable": 2, "physical": 1},
        "memory_bytes": 8 << 30,
        "load": [0.5, 0.4, 0.3],
        "platform": "Linux-test",
    }


def measured(
    cpu: str = "Test CPU A",
    llvm_cpu: str = "cpu-a",
    slower: float = 1.0,
    models: tuple[str, ...] = ("mnist", "squeezenet"),
    threads: tuple[int, ...] = (1, 2),
    bits: int = 256,
    features: tuple[str, ...] = ("avx", "avx2", "fma"),
) -> dict[str, Any]:
    """A measured report: polyonnx ``slower`` times A's latencies (onnxruntime 1 ms per
    model index + 1, polyonnx 0.9x that on A), a peak of 100 GFLOP/s per thread on A."""
    peak = {t: 100.0 * t / slower for t in threads}
    rows = []
    for i, name in enumerate(models):
        for t in threads:
            ort = (i + 1) * 1e-3 / t
            poly = 0.9 * ort * slower
            rows.append(
                {
                    "model": name,
                    "threads": t,
                    "parameters": 10_000 * (i + 1),
                    "multiply_adds": 1_000_000 * (i + 1),
                    "compile_s": spread(1.0 + i, 1),
                    "polyonnx_s": spread(poly),
                    "onnxruntime_s": spread(ort),
                    "ratio": poly / ort,
                    "max_rel_err": 1e-7,
                    "mismatch": False,
                }
            )
    gemms = [
        {
            "m": 128,
            "n": 128,
            "k": 128,
            "threads": t,
            "flops": 2 * 128**3,
            "compile_s": spread(0.2, 1),
            "polyonnx_gflops": spread(50.0 * t / slower),
            "numpy_gflops": spread(60.0 * t),
            "ratio": 50.0 / slower / 60.0,
            "of_peak": 0.5,
            "max_rel_err": 1e-7,
        }
        for t in threads
    ]
    first = threads[0]
    return {
        "schema": MEASURED,
        "created": "2026-01-01T00:00:00+00:00",
        "duration_s": 60.0,
        "settings": {"models": list(models), "threads": list(threads), "quick": True},
        "host": _host(cpu, llvm_cpu, bits, list(features)),
        "load_after": [0.5, 0.4, 0.3],
        "versions": {"polyonnx": "0.1.0", "onnxruntime": "1.0", "llvm": "22.1.0"},
        "peak": [
            {
                "threads": t,
                "vector_bits": bits,
                "accumulators": 8,
                "per_core_gflops": spread(peak[t] / t),
                "best_gflops": peak[t],
                "loop": "8 / 10",
            }
            for t in threads
        ],
        "bandwidth": [
            {"threads": t, "array_mib": 64, "copy_gbs": spread(10.0), "triad_gbs": spread(12.0)}
            for t in threads
        ],
        "models": rows,
        "refused": [],
        "gemm": gemms,
        "roofline": {
            "threads": first,
            "peak_gflops": peak[first],
            "bandwidth_gbs": 12.0,
            "kernels": [
                {
                    "model": models[0],
                    "kernel": "k0_Conv",
                    "ops": ["Conv_0"],
                    "time_s": spread(1e-4),
                    "flops": 1_000_000,
                    "bytes": 100_000,
                    "intensity": 10.0,
                    "gflops": 10.0,
                    "bound_gflops": 100.0,
                    "memory_bound": False,
                    "of_bound": 0.1,
                    "lost_s": 9e-5,
                }
            ],
        },
        "summary": {
            "geomean_ratio": {str(t): 0.9 * slower for t in threads},
        },
    }


MIX = {"vector_fma": 10, "vector_memory": 20, "vector_other": 30, "scalar_float": 5, "other": 35}


def emulated(
    target: str = "aarch64",
    triple: str = "aarch64-linux-gnu",
    models: tuple[str, ...] = ("mnist", "small_cnn"),
    fma: int = 10,
    failed: tuple[str, ...] = (),
) -> dict[str, Any]:
    """An emulated report: each model's kernels ``fma`` vector FMAs of 100 instructions."""
    mix = {**MIX, "vector_fma": fma, "other": MIX["other"] + MIX["vector_fma"] - fma}
    rows = [
        {
            "model": name,
            "parameters": 10_000,
            "multiply_adds": 1_000_000,
            "outputs": 1,
            "code": {
                "library_bytes": 70_000 * (i + 1),
                "text_bytes": 5_000 * (i + 1),
                "weights_bytes": 20_000,
                "functions": 2,
                "kernel_bytes": 400 * (i + 1),
                "instructions": 100,
                "mix": mix,
                "kernels": [
                    {
                        "kernel": "k0_Conv",
                        "symbol": "polyonnx_k_0",
                        "ops": ["Conv_0"],
                        "flops": 1000,
                        "bytes": 300 * (i + 1),
                        "instructions": 75,
                        "mix": mix,
                    },
                    {
                        "kernel": "k1_Relu",
                        "symbol": "polyonnx_k_1",
                        "ops": ["Relu_1"],
                        "flops": 10,
                        "bytes": 100 * (i + 1),
                        "instructions": 25,
                        "mix": mix,
                    },
                ],
            },
            "max_rel_err": 1e-7,
            "mismatch": False,
            "error": None,
        }
        for i, name in enumerate(models)
    ]
    return {
        "schema": EMULATED,
        "created": "2026-01-01T00:00:00+00:00",
        "duration_s": 120.0,
        "timings": None,
        "note": "No timings: synthetic.",
        "settings": {
            "target": target,
            "models": list(models),
            "node_cases": 3,
            "node_cases_from": "cases.txt",
            "threads": 1,
            "quick": False,
        },
        "host": _host("Host CPU", "hostcpu", 256, ["avx2"]),
        "versions": {"polyonnx": "0.1.0", "llvm": "22.1.0"},
        "target": {
            "name": target,
            "triple": triple,
            "cpu": "generic",
            "features": [],
            "vector_bits": 128,
            "vector_registers": 32,
            "l1_data_bytes": 32 << 10,
            "l2_bytes": 1 << 20,
            "emulator": f"qemu-{target} -L /usr/{triple}",
            "qemu_version": "qemu 7.2",
            "compiler": f"{triple}-gcc: 12",
            "binutils": "GNU objdump 2.40",
        },
        "models": rows,
        "refused": [],
        "node_cases": {
            "reference": "the suite's outputs",
            "cases": 3,
            "passed": 3 - len(failed),
            "failed": [{"case": c, "error": "mismatch"} for c in failed],
            "workarounds": [],
        },
        "summary": {
            "models": len(rows),
            "models_matching": len(rows),
            "node_cases": 3,
            "node_cases_passed": 3 - len(failed),
            "instructions": 100 * len(rows),
            "vector_fma_share": fma / 100,
            "vector_share": (fma + 50) / 100,
        },
    }


def write(report: dict[str, Any], folder: Path) -> Path:
    """``folder/report.json`` (the data alone, no documents)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report))
    return folder
