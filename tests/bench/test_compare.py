"""``polyonnx bench --compare A B`` on small synthetic reports: ratios, rows one side lacks,
the page and its plots, the printed table, and the errors for folders that are not reports
or reports of two schemas."""

from __future__ import annotations

import json

import pytest

from polyonnx.bench.compare import compare, labels, load_pair
from polyonnx.bench.folder import ReportError
from polyonnx.cli import main
from tests.bench import synthetic

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def measured_pair(tmp_path):
    a = synthetic.write(synthetic.measured(), tmp_path / "zen4")
    b = synthetic.write(
        synthetic.measured(
            cpu="Test CPU B",
            llvm_cpu="cpu-b",
            slower=2.0,
            models=("mnist", "squeezenet", "lstm_speech"),
            features=("avx", "avx2", "fma", "avx512f"),
        ),
        tmp_path / "emeraldrapids",
    )
    return a, b


def _rows(md: str, first: str) -> list[list[str]]:
    """The cells of the Markdown table rows starting with ``first``."""
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in md.splitlines()
        if line.startswith(f"| {first} |")
    ]


def test_measured_reports_side_by_side(measured_pair, tmp_path):
    a, b = measured_pair
    out = tmp_path / "cmp"
    page = compare(a, b, out)
    md = (out / "compare.md").read_text()
    html = (out / "compare.html").read_text()
    for title in ("Summary", "Hosts", "Roofs", "Models", "Compile time", "GEMM"):
        assert f"## {title}" in md and f"<h2>{title}</h2>" in html
    # mnist at 1 thread: polyonnx 0.9 ms on A, 1.8 ms on B; ort 1 ms on both
    mnist_1 = _rows(md, "mnist")[0]  # (then 2 threads, then the compile table's rows)
    assert mnist_1 == [
        "mnist",
        "1",
        "0.900",
        "1.800",
        "2.00",
        "1.000",
        "1.000",
        "1.00",
        "0.90",
        "1.80",
        "2.00",
    ]
    # a model only B ran: A's cells are "-"
    lstm_1 = _rows(md, "lstm_speech")[0]
    assert lstm_1[2] == "-" and lstm_1[3] == "5.400" and lstm_1[4] == "-"
    # roofs and GEMM: B has half the peak and half the GFLOP/s
    assert ["1", "100.0", "50.0", "0.50", "12.0", "12.0", "1.00"] in _rows(md, "1")
    assert _rows(md, "128x128x128")[0][2:5] == ["50.0", "25.0", "0.50"]
    # hosts: fingerprints side by side, the features only one has
    assert "| CPU | Test CPU A (vendor Test) | Test CPU B (vendor Test) |" in md
    assert "ISA features only emeraldrapids has (1): avx512f" in md
    assert "zen4 **0.90**, emeraldrapids **1.80** (emeraldrapids / zen4 2.00)" in md
    for plot in ("ratios.png", "latency.png", "gemm.png"):
        assert (out / plot).read_bytes()[:8] == PNG
        assert f"]({plot})" in md and f'src="{plot}"' in html
    assert page.printed.startswith("**zen4**") and "| mnist | 1 | 0.900 |" in page.printed


def test_emulated_reports_side_by_side(tmp_path):
    a = synthetic.write(synthetic.emulated(), tmp_path / "aarch64")
    b = synthetic.write(
        synthetic.emulated(
            "riscv64", "riscv64-linux-gnu", ("mnist", "small_cnn", "resnet50"), 20, ("test_x",)
        ),
        tmp_path / "riscv64",
    )
    out = tmp_path / "cmp"
    page = compare(a, b, out)
    md = (out / "compare.md").read_text()
    assert "no timings" in page.title
    for title in ("Targets", "Models against onnxruntime", "Code", "Node cases"):
        assert f"## {title}" in md
    assert "| triple | aarch64-linux-gnu | riscv64-linux-gnu |" in md
    assert "| node cases matching | 3 of 3 | 2 of 3 |" in md
    assert "- failing on riscv64 only: test_x" in md
    (mnist,) = _rows(md, "mnist")[1:]  # (the first row is correctness)
    assert mnist[:4] == ["mnist", "0.4", "0.4", "1.00"]
    assert mnist[6:8] == ["10.0%", "20.0%"]
    (resnet,) = _rows(md, "resnet50")[1:]
    assert resnet[1] == "-" and resnet[3] == "-"
    for plot in ("mix.png", "code.png"):
        assert (out / plot).read_bytes()[:8] == PNG
    assert "| mnist | 1.0e-07 match | 1.0e-07 match |" in page.printed


def test_labels_fall_back_to_a_and_b(tmp_path):
    assert labels(tmp_path / "x" / "report", tmp_path / "y" / "report") == ("A", "B")
    assert labels(tmp_path / "zen3", tmp_path / "zen4") == ("zen3", "zen4")


def test_not_a_report_is_named(tmp_path):
    good = synthetic.write(synthetic.measured(), tmp_path / "good")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text("{not json")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "report.json").write_text(json.dumps({"schema": "something/9"}))
    for folder, why in (
        ("missing", "no such folder"),
        ("empty", "has no report.json"),
        ("bad", "not JSON"),
        ("other", "schema 'something/9'"),
    ):
        with pytest.raises(ReportError, match=why):
            load_pair(good, tmp_path / folder)


def test_schemas_must_match(tmp_path):
    a = synthetic.write(synthetic.measured(), tmp_path / "a")
    b = synthetic.write(synthetic.emulated(), tmp_path / "b")
    with pytest.raises(ReportError, match="a measured report .* an emulated one"):
        load_pair(a, b)


def test_command_prints_the_table_and_writes_the_page(measured_pair, tmp_path, capsys):
    a, b = measured_pair
    out = tmp_path / "page"
    assert main(["bench", "--compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| mnist | 2 |" in printed and f"wrote {out}/compare.md" in printed
    assert (out / "compare.html").exists()


def test_command_refuses_what_is_not_a_report(tmp_path, capsys):
    a = synthetic.write(synthetic.measured(), tmp_path / "a")
    assert main(["bench", "--compare", str(a), str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    b = synthetic.write(synthetic.emulated(), tmp_path / "b")
    assert main(["bench", "--compare", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "same schema" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["bench", "--compare", str(a), str(a), "--quick"]) == 2
    assert "--compare takes two report folders" in capsys.readouterr().err
