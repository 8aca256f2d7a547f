"""Report folders: the schemas of ``report.json`` and reading one back.

Two kinds of report share the ``polyonnx-bench`` family of schemas: :data:`MEASURED`, what
``polyonnx bench`` measures on the host it runs on (timings against onnxruntime and OpenBLAS,
roofs, roofline), and :data:`EMULATED`, what ``polyonnx bench --target T`` finds for a target
run under qemu-user (correctness and static facts of the generated code, no timings).

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> read(d)
    Traceback (most recent call last):
    ...
    polyonnx.bench.folder.ReportError: ... is not a report folder: it has no report.json
    >>> _ = (d / "report.json").write_text(json.dumps({"schema": EMULATED}))
    >>> kind(read(d))
    'emulated'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The schema of a report measured on its host (``polyonnx bench``).
MEASURED = "polyonnx-bench/1"
#: The schema of a report of a target run under qemu-user (``polyonnx bench --target T``).
EMULATED = "polyonnx-bench-emulated/1"
SCHEMAS = {MEASURED: "measured", EMULATED: "emulated"}


class ReportError(ValueError):
    """A folder that is not a report this polyonnx reads, or two reports that cannot be
    compared."""


def report_file(path: str | os.PathLike[str]) -> Path:
    """The ``report.json`` of a report folder (or the file itself, given one)."""
    p = Path(path)
    return p if p.is_file() else p / "report.json"


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The report of folder ``path`` (or of the ``report.json`` it names). Raises
    :class:`ReportError` saying why it is not one."""
    p = Path(path)
    if not p.exists():
        raise ReportError(f"{p}: no such folder")
    file = report_file(p)
    if not file.is_file():
        raise ReportError(f"{p} is not a report folder: it has no report.json")
    try:
        data = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{file} is not a report: not JSON ({e})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema not in SCHEMAS:
        known = " or ".join(SCHEMAS)
        found = f"schema {schema!r}" if schema is not None else "no schema"
        raise ReportError(f"{file} is not a polyonnx bench report: {found} (expected {known})")
    return data


def kind(report: dict[str, Any]) -> str:
    """``"measured"`` or ``"emulated"``."""
    return SCHEMAS[report["schema"]]
