"""``polyonnx bench --quick``: the report folder's structure (no timing assertions)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from polyonnx.bench.suite import SCHEMA, Settings, require_extras
from polyonnx.cli import main

pytest.importorskip("matplotlib")
pytest.importorskip("onnxruntime")

SPREAD = {"median", "min", "max", "rounds"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert main(["bench", "--quick", "--threads", "1", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def report(folder):
    return json.loads((folder / "report.json").read_text())


def _positive(s):
    assert set(s) == SPREAD
    assert 0 < s["min"] <= s["median"] <= s["max"] and s["rounds"] >= 1


def test_report_keys(report):
    assert report["schema"] == SCHEMA
    assert set(report) >= {
        "created",
        "duration_s",
        "settings",
        "host",
        "load_after",
        "versions",
        "peak",
        "bandwidth",
        "models",
        "refused",
        "gemm",
        "roofline",
        "summary",
    }
    host = report["host"]
    assert {"cpu", "llvm", "caches", "cores", "memory_bytes", "load"} <= set(host)
    assert host["llvm"]["features"] and host["cores"]["logical"] >= 1
    for lib in ("polyonnx", "onnxruntime", "numpy", "llvmlite", "islpy", "llvm"):
        assert report["versions"][lib]
    assert report["settings"]["quick"] and report["settings"]["threads"] == [1]


def test_roofs_are_measured(report):
    (peak,) = report["peak"]
    _positive(peak["per_core_gflops"])
    assert peak["best_gflops"] == peak["per_core_gflops"]["max"] * peak["threads"]
    (bw,) = report["bandwidth"]
    _positive(bw["copy_gbs"])
    _positive(bw["triad_gbs"])


def test_models_with_ratios_of_the_same_run(report):
    assert {r["model"] for r in report["models"]} == set(Settings.of(quick=True).models)
    for r in report["models"]:
        for key in ("compile_s", "polyonnx_s", "onnxruntime_s"):
            _positive(r[key])
        assert r["ratio"] == r["polyonnx_s"]["median"] / r["onnxruntime_s"]["median"]
        assert not r["mismatch"] and r["parameters"] > 0 and r["multiply_adds"] > 0
    ratios = [r["ratio"] for r in report["models"]]
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    assert report["summary"]["geomean_ratio"]["1"] == pytest.approx(mean)


def test_gemm_against_numpy_and_the_peak(report):
    peak = report["peak"][0]["best_gflops"]
    assert len(report["gemm"]) == len(report["settings"]["gemm_sizes"])
    for g in report["gemm"]:
        _positive(g["polyonnx_gflops"])
        _positive(g["numpy_gflops"])
        assert g["flops"] == 2 * g["m"] * g["n"] * g["k"]
        assert g["ratio"] == pytest.approx(
            g["polyonnx_gflops"]["median"] / g["numpy_gflops"]["median"]
        )
        assert g["of_peak"] == pytest.approx(g["polyonnx_gflops"]["median"] / peak)


def test_roofline_has_every_kernel(report):
    roof = report["roofline"]
    assert roof["peak_gflops"] == report["peak"][0]["best_gflops"]
    assert roof["bandwidth_gbs"] == report["bandwidth"][0]["triad_gbs"]["median"]
    assert {k["model"] for k in roof["kernels"]} == {r["model"] for r in report["models"]}
    for k in roof["kernels"]:
        _positive(k["time_s"])
        assert k["bytes"] > 0 and k["of_bound"] > 0


def test_markdown_and_html_show_the_tables_and_plots(folder, report):
    md = (folder / "report.md").read_text()
    page = (folder / "report.html").read_text()
    for title in ("Summary", "Host", "Roofs", "Models against onnxruntime", "Compile time"):
        assert f"## {title}" in md and f"<h2>{title}</h2>" in page
    for plot in ("latency.png", "compile.png", "gemm.png", "roofline.png"):
        assert (folder / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({plot})" in md and f'src="{plot}"' in page
    for r in report["models"]:
        assert f"| {r['model']} | 1 |" in md and f"{r['ratio']:.2f}" in page


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install polyonnx\[bench\]"):
        require_extras()
    assert main(["bench", "--quick", "--out", str(tmp_path)]) == 2
    assert "pip install polyonnx[bench]" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_settings_refuse_unknown_models():
    with pytest.raises(ValueError, match="unknown model"):
        Settings.of(models=["nope"])


def test_compare_with_another_machines_report(folder, report, tmp_path):
    """A real --quick report against itself as another machine would have it: polyonnx
    twice as slow there, the same onnxruntime."""
    from polyonnx.bench.compare import compare

    other = json.loads(json.dumps(report))
    other["host"]["cpu"]["name"] = "Another CPU"
    for r in other["models"]:
        for key in ("median", "min", "max"):
            r["polyonnx_s"][key] *= 2
        r["ratio"] *= 2
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "report.json").write_text(json.dumps(other))
    page = compare(folder, tmp_path / "other", tmp_path / "cmp")
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "Another CPU" in md and report["host"]["cpu"]["name"] in md
    for r in report["models"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| {r['model']} | 1 | "))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[4] == "2.00" and cells[7] == "1.00" and cells[10] == "2.00"
    assert (tmp_path / "cmp" / "ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.printed.count("| 1 |") >= len(report["models"])


def test_rounds_and_budget_reach_the_settings(monkeypatch, tmp_path):
    seen = {}

    def measured(out, settings=None, **_):
        seen["settings"] = settings
        return {"summary": {"geomean_ratio": {1: 0.9}}}

    monkeypatch.setattr("polyonnx.bench.suite.report", measured)
    argv = ["bench", "--models", "mnist", "--threads", "1", "--out", str(tmp_path)]
    assert main([*argv, "--rounds", "7", "--budget", "3"]) == 0
    s = seen["settings"]
    assert (s.models, s.threads, s.repeat, s.budget_s) == (("mnist",), (1,), 7, 3.0)
    assert main(argv) == 0
    assert (seen["settings"].repeat, seen["settings"].budget_s) == (20, 40.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--quick", "--rounds", "5"], "measured report"),
        (["--rounds", "2"], "at least 3"),
        (["--budget", "0"], "positive"),
    ],
)
def test_rounds_and_budget_usage_errors(extra, message, capsys):
    assert main(["bench", *extra]) == 2
    assert message in capsys.readouterr().err
