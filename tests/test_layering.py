"""The import layering of docs/architecture.md, read from the source: no module imports from a
layer above its own, no module imports itself through others (no cycle), and isl and LLVM
stay in the packages that own them."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "polyonnx"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors"),
    ("options", "cache", "forked"),
    ("graph",),
    ("frontend", "krnl"),
    ("schedule",),
    ("codegen",),
    ("records",),
    ("compiled", "schedule_driver"),
    ("pipeline",),
    ("runtime", "kernels", "tune"),
    ("backend", "polyonnx"),
    ("testing",),
    ("bench",),
    ("cli", "fuzz"),
    ("__main__",),
)
"""Lowest first. A unit is a subpackage or a top-level module of polyonnx; ``polyonnx`` is the
public API (``polyonnx/__init__.py``). A module may import from its own unit and from units of
lower layers, never from its layer's other units or from above."""

LAYER = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

OWNERS = {
    "islpy": ("schedule", "codegen/loopast.py"),
    "llvmlite": ("codegen", "compiled.py", "cache.py", "bench/peak.py"),
}
"""The only places that may import each native library (isl objects live in the schedule stage
and the AST walk; LLVM in codegen, plus the compiled model's modules, the cache's key and the
FMA-peak loop, which builds its own module)."""


def _unit(module: str) -> str:
    """``polyonnx.schedule.verbs`` -> ``schedule``; ``polyonnx`` -> ``polyonnx``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:`` (annotations, never run)."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(n for stmt in node.body for n in ast.walk(stmt))
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import the module runs, at any depth; ``from
    polyonnx import x`` imports ``polyonnx.x`` when that is a module, else the public API."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_only(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "polyonnx" or node.module.startswith("polyonnx."):
                out += [(node.lineno, _imported(node.module, a.name)) for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def _imported(module: str, name: str) -> str:
    """What ``from module import name`` imports: the submodule ``module.name`` when there is
    one, else ``module`` (``from polyonnx import x``: ``polyonnx.x``, or the public API)."""
    sub = PACKAGE.parent.joinpath(*module.split("."), name)
    return f"{module}.{name}" if sub.is_dir() or sub.with_suffix(".py").exists() else module


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_unit_has_a_layer() -> None:
    units = {_unit(_module_of(p)) for p in SOURCES}
    assert units == set(LAYER), "add the new unit to LAYERS and to docs/architecture.md"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down(path: Path) -> None:
    here = _unit(_module_of(path))
    upward = [
        f"line {line}: {module} ({_unit(module)}, layer {LAYER[_unit(module)]})"
        for line, module in _imports(path)
        if (module == "polyonnx" or module.startswith("polyonnx."))
        and _unit(module) != here
        and LAYER[_unit(module)] >= LAYER[here]
    ]
    assert not upward, f"{here} (layer {LAYER[here]}) imports from its layer or above: {upward}"


@pytest.mark.parametrize("library", sorted(OWNERS))
def test_native_libraries_stay_home(library: str) -> None:
    owners = OWNERS[library]
    strays = [
        str(p.relative_to(PACKAGE))
        for p in SOURCES
        if any(m.split(".")[0] == library for _, m in _imports(p))
        and not any(
            p.relative_to(PACKAGE).as_posix() == o or p.relative_to(PACKAGE).parts[0] == o
            for o in owners
        )
    ]
    assert not strays, f"{library} imported outside {owners}: {strays}"


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check reads what it should: a krnl module importing the pipeline goes up."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from polyonnx.pipeline import compile\n", encoding="utf-8")
    [(line, module)] = _imports(probe)
    assert (line, module) == (2, "polyonnx.pipeline")
    assert LAYER[_unit(module)] > LAYER["krnl"]


def _cycles(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """One cycle (module, the module it imports, ..., back to the first) for each group of
    modules that import one another, directly or through others."""
    graph = nx.DiGraph((m, other) for m, targets in imports.items() for other in targets)
    graph.remove_edges_from(nx.selfloop_edges(graph))
    out = []
    for group in nx.strongly_connected_components(graph):
        if len(group) > 1:
            out.append([a for a, _ in nx.find_cycle(graph.subgraph(group))])
    return out


def test_no_module_imports_itself_through_others() -> None:
    """Function-level imports count (they run, only later); ``TYPE_CHECKING`` ones do not. A
    cycle hides the order in which modules depend on one another (and breaks on the day a
    module-level import joins it)."""
    modules = {_module_of(p): p for p in SOURCES}
    imports = {m: {i for _, i in _imports(p) if i in modules} for m, p in modules.items()}
    cycles = [" -> ".join([*c, c[0]]) for c in _cycles(imports)]
    assert not cycles, f"import cycles: {cycles}"


def test_a_cycle_is_caught(tmp_path: Path) -> None:
    """A function-level import closes a cycle; one under TYPE_CHECKING does not."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from polyonnx.codegen import target\n", encoding="utf-8")
    b.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from polyonnx.codegen.config import CodegenConfig\n"
        "def f():\n    from polyonnx.codegen import isa\n",
        encoding="utf-8",
    )
    assert [m for _, m in _imports(a)] == ["polyonnx.codegen.target"]
    assert [m for _, m in _imports(b)] == ["typing", "polyonnx.codegen.isa"]
    imports = {"t": {"i"}, "i": {"t"}, "c": {"t"}}
    assert _cycles(imports) in ([["t", "i"]], [["i", "t"]])
    assert _cycles({"c": {"t"}, "t": {"i"}}) == []
