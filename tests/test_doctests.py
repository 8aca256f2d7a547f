"""Every ``>>>`` example runs: the package's docstrings and the guides in docs/ are documentation,
and documentation that is not run goes stale."""

from __future__ import annotations

import doctest
import importlib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "polyonnx"
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    _module_name(p)
    for p in PACKAGE.rglob("*.py")
    if p.name != "__main__.py" and ">>>" in p.read_text(encoding="utf-8")
)
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if ">>>" in p.read_text(encoding="utf-8"))


def _run(tests: list[doctest.DocTest]) -> None:
    """Run ``tests``; fail with doctest's report if an example's output differs."""
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = io.StringIO()
    for test in tests:
        runner.run(test, out=report.write)
    results = runner.summarize(verbose=False)
    assert results.attempted > 0
    assert results.failed == 0, report.getvalue()


@pytest.mark.parametrize("name", MODULES)
def test_module_examples(name: str) -> None:
    module = importlib.import_module(name)
    _run([t for t in doctest.DocTestFinder().find(module, name) if t.examples])


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_guide_examples(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    _run([doctest.DocTestParser().get_doctest(text, {}, path.name, str(path), 0)])


def test_the_examples_are_found() -> None:
    assert "polyonnx.schedule.schedule" in MODULES
    assert [p.name for p in DOCS] == ["schedule.md"]
