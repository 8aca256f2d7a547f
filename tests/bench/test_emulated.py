"""``polyonnx bench --target T``: settings, the documents of an emulated report, and one
small real run under qemu-aarch64 (MNIST and three node cases, ~20 s)."""

from __future__ import annotations

import json

import pytest

from polyonnx.bench import emulated
from polyonnx.bench.document import write
from polyonnx.bench.emulated import (
    NO_TIMINGS,
    PORTABLE_CASES,
    QUICK_NODE_CASES,
    EmulatedSettings,
    read_case_names,
)
from polyonnx.bench.folder import EMULATED
from polyonnx.cli import main
from polyonnx.testing.emulated import TARGETS, EmulatedTarget
from tests.bench import synthetic

PNG = b"\x89PNG\r\n\x1a\n"


def test_settings_default_to_the_checkouts_portable_cases():
    s = EmulatedSettings.of("aarch64")
    assert s.models == emulated.DEFAULT_MODELS
    assert s.node_cases == tuple(read_case_names(PORTABLE_CASES)) and len(s.node_cases) >= 200
    assert s.node_cases_from == "tests/backend/portable_cases.txt"
    quick = EmulatedSettings.of("riscv64", quick=True)
    assert quick.models == ("mnist", "small_cnn") and len(quick.node_cases) == QUICK_NODE_CASES
    assert set(quick.node_cases) < set(s.node_cases)
    assert EmulatedSettings.of("ppc64le", ["mnist"], node_cases=False).node_cases == ()


def test_settings_refuse_unknown_targets_and_models():
    with pytest.raises(ValueError, match="unknown target 'sparc'"):
        EmulatedSettings.of("sparc")
    with pytest.raises(ValueError, match="unknown model"):
        EmulatedSettings.of("aarch64", ["nope"])


def test_case_lists_skip_comments(tmp_path):
    (tmp_path / "cases.txt").write_text("# a comment\ntest_abs\n\n test_add \n")
    assert read_case_names(tmp_path / "cases.txt") == ["test_abs", "test_add"]


def test_documents_say_there_are_no_timings(tmp_path):
    pytest.importorskip("matplotlib")
    report = synthetic.emulated(failed=("test_x",))
    write(report, tmp_path)
    md, page = (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()
    assert "no timings" in md.splitlines()[0]
    assert f"**{report['note']}**" in md and f"<b>{report['note']}</b>" in page
    for title in ("Target", "Host", "Models against onnxruntime", "Code", "Kernels", "Node cases"):
        assert f"## {title}" in md and f"<h2>{title}</h2>" in page
    assert "| vector registers | 32 |" in md
    assert "- failed: test_x: mismatch" in md and "<li>failed: test_x: mismatch</li>" in page
    assert "| mnist | 68.4 | 4.9 | 0.02 | 2 | 0.4 | 100 | 10.0% |" in md
    for plot in ("mix.png", "code.png"):
        assert (tmp_path / plot).read_bytes()[:8] == PNG
        assert f"]({plot})" in md


def test_usage_errors(tmp_path, capsys):
    for argv, message in (
        (["--target", "aarch64", "--threads", "2"], "compiles for 1 thread"),
        (["--node-cases", "x.txt"], "--node-cases goes with --target"),
        (["--models", "small_cnn"], "small_cnn is in emulated reports only"),
        (["--target", "aarch64", "--node-cases", str(tmp_path / "no.txt")], "no such file"),
    ):
        assert main(["bench", *argv, "--out", str(tmp_path / "out")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_missing_tools_are_named(monkeypatch, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(EmulatedTarget, "unavailable", lambda self: f"{self.name}: not installed")
    assert main(["bench", "--target", "riscv64", "--out", str(tmp_path / "out")]) == 2
    assert "riscv64: not installed" in capsys.readouterr().err


@pytest.fixture(scope="module")
def aarch64_report(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    reason = TARGETS["aarch64"].unavailable()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("emulated")
    cases = folder / "cases.txt"
    cases.write_text("test_abs\ntest_relu\ntest_no_such_case\n")
    out = folder / "report"
    argv = ["bench", "--target", "aarch64", "--models", "mnist", "--node-cases", str(cases)]
    assert main([*argv, "--out", str(out)]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_real_report_correctness(aarch64_report):
    _, report = aarch64_report
    assert report["schema"] == EMULATED and report["timings"] is None
    assert report["note"] == NO_TIMINGS
    (mnist,) = report["models"]
    assert not mnist["mismatch"] and mnist["error"] is None and mnist["max_rel_err"] < 1e-4
    nodes = report["node_cases"]
    assert nodes["cases"] == 3 and nodes["passed"] == 2
    assert nodes["failed"] == [
        {"case": "test_no_such_case", "error": "not in this onnx's node suite"}
    ]
    s = report["summary"]
    assert (s["models"], s["models_matching"], s["node_cases_passed"]) == (1, 1, 2)


def test_real_report_static_facts(aarch64_report):
    folder, report = aarch64_report
    t = report["target"]
    assert (t["triple"], t["vector_bits"], t["vector_registers"]) == ("aarch64-linux-gnu", 128, 32)
    assert t["emulator"].startswith("qemu-aarch64 -L ") and "objdump" in t["binutils"]
    code = report["models"][0]["code"]
    assert code["library_bytes"] > code["text_bytes"] >= code["kernel_bytes"] > 0
    assert code["weights_bytes"] > 0 and code["functions"] >= 1
    assert code["instructions"] == sum(code["mix"].values())
    assert code["mix"]["vector_fma"] > 0  # MNIST's convs: NEON FMAs
    for k in code["kernels"]:
        assert k["symbol"].startswith("polyonnx_k_") and k["bytes"] > 0
        assert k["instructions"] == sum(k["mix"].values()) > 0
    assert 0 < report["summary"]["vector_fma_share"] < report["summary"]["vector_share"] <= 1
    md = (folder / "report.md").read_text()
    assert NO_TIMINGS in md and "| mnist |" in md
    assert (folder / "mix.png").read_bytes()[:8] == PNG
