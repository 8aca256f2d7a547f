"""The package face: its public names load on first use, so that a part of polyonnx imports
without the whole pipeline (islpy, llvmlite)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import polyonnx

HEAVY = ("islpy", "llvmlite", "polyonnx.pipeline", "polyonnx.schedule", "polyonnx.codegen")


def _loaded_after(statement: str) -> list[str]:
    """The modules of :data:`HEAVY` loaded after ``statement`` in a fresh interpreter."""
    code = (
        f"import json, sys; {statement}; "
        f"print(json.dumps(sorted(set(sys.modules) & {set(HEAVY)!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


@pytest.mark.parametrize(
    "module",
    [
        "polyonnx.krnl.ir",
        "polyonnx.krnl.program",
        "polyonnx.krnl.memory",
        "polyonnx.krnl.lower",
        "polyonnx.graph.passes",
        "polyonnx.frontend.importer",
        "polyonnx.errors",
        "polyonnx.options",
    ],
)
def test_a_part_of_polyonnx_loads_neither_islpy_nor_llvmlite(module: str) -> None:
    # (nor schedule/ or codegen/: a stage imports only from the stages before it)
    assert _loaded_after(f"import {module}") == []


def test_a_public_name_loads_its_module_on_first_use() -> None:
    assert _loaded_after("import polyonnx; polyonnx.Options; polyonnx.ModelError") == []
    assert "islpy" in _loaded_after("import polyonnx; polyonnx.compile")


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in polyonnx.__all__:
        assert getattr(polyonnx, name) is not None
    assert set(polyonnx.__all__) <= set(dir(polyonnx))
    assert polyonnx.Compiled.__module__ == "polyonnx.compiled"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        polyonnx.nope  # noqa: B018
