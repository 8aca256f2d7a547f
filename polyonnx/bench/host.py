"""The fingerprint of the machine a benchmark runs on: CPU, ISA features, caches, cores,
memory, load and the versions of every library the figures depend on.

CPU and caches come from Linux (``/proc/cpuinfo``, ``/sys/devices/system/cpu``); where those
cannot be read the fields are empty, never guessed. The ISA features are the ones LLVM detects
on the host, i.e. what polyonnx generates code for.

Example:
    >>> info = fingerprint()
    >>> sorted(info) == ["caches", "cores", "cpu", "llvm", "load", "memory_bytes", "platform"]
    True
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

_CPU = Path("/sys/devices/system/cpu")


def fingerprint() -> dict[str, Any]:
    """What the machine is: see the module docstring."""
    from polyonnx.codegen.target import (
        cpu_by_model_number,
        enabled_features,
        host_cpu,
        vector_bits,
    )
    from polyonnx.options import Options

    triple, cpu, features = host_cpu()
    return {
        "cpu": cpu_model(),
        "llvm": {
            "triple": triple,
            "cpu": cpu,
            "cpu_by_model_number": cpu_by_model_number(),
            "vector_bits": vector_bits(Options()),
            "features": sorted(enabled_features(features)),
        },
        "caches": caches(),
        "cores": cores(),
        "memory_bytes": memory_bytes(),
        "load": list(os.getloadavg()),
        "platform": platform.platform(),
    }


#: /proc/cpuinfo fields of the first CPU kept, by the name the report gives them (x86 names;
#: other architectures fill ``name`` from their own field).
_CPUINFO = {
    "model name": "name",
    "cpu": "name",
    "Processor": "name",
    "vendor_id": "vendor",
    "cpu family": "family",
    "model": "model",
    "stepping": "stepping",
}


def cpu_model() -> dict[str, str]:
    """The CPU's name (``model name`` of /proc/cpuinfo, else what Python knows), and its
    vendor, family, model and stepping where /proc/cpuinfo has them (a hypervisor may hide
    the name, not these)."""
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip() and out:
                break  # the end of the first CPU's block
            name = _CPUINFO.get(key.strip())
            if name and value.strip() and name not in out:
                out[name] = value.strip()
    except OSError:
        pass
    out.setdefault("name", platform.processor() or platform.machine())
    return out


def _size_bytes(text: str) -> int:
    """sysfs cache sizes: ``"32K"``, ``"1024K"``, ``"32M"``."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


_CACHE_FIELDS = ("level", "type", "size", "coherency_line_size", "ways_of_associativity")


def caches() -> list[dict[str, Any]]:
    """CPU 0's caches from sysfs: level, type, size, line, ways and the CPUs sharing each."""
    out = []
    for index in sorted((_CPU / "cpu0" / "cache").glob("index*")):
        try:
            read = {
                name: (index / name).read_text().strip()
                for name in (
                    "level",
                    "type",
                    "size",
                    "coherency_line_size",
                    "ways_of_associativity",
                )
            }
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        out.append(
            {
                "level": int(read["level"]),
                "type": read["type"],
                "size_bytes": _size_bytes(read["size"]),
                "line_bytes": int(read["coherency_line_size"]),
                "ways": int(read["ways_of_associativity"]),
                "shared_by_cpus": shared,
            }
        )
    return out


def last_level_cache_bytes() -> int | None:
    """The largest cache of :func:`caches`, or None where sysfs does not say."""
    sizes = [c["size_bytes"] for c in caches() if c["type"] in ("Unified", "Data")]
    return max(sizes) if sizes else None


def cores() -> dict[str, int | None]:
    """Logical CPUs online, those this process may run on, and physical cores (sysfs
    topology; None where it cannot be read)."""
    physical: set[tuple[str, str]] = set()
    for topology in _CPU.glob("cpu[0-9]*/topology"):
        try:
            package = (topology / "physical_package_id").read_text().strip()
            physical.add((package, (topology / "core_id").read_text().strip()))
        except OSError:
            continue
    return {
        "logical": os.cpu_count(),
        "usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "physical": len(physical) or None,
    }


def memory_bytes() -> int | None:
    """Total memory (``MemTotal`` of /proc/meminfo), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


#: Distributions whose versions a report records (the figures depend on each).
LIBRARIES = ("polyonnx", "onnxruntime", "numpy", "llvmlite", "islpy", "onnx", "matplotlib")


def versions() -> dict[str, str | None]:
    """Versions of :data:`LIBRARIES` (None: not installed), polyonnx's commit
    (:func:`source_commit`), LLVM's (llvmlite's), Python's and numpy's BLAS."""
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["polyonnx_commit"] = source_commit()
    from polyonnx.codegen.target import llvm_version

    out["llvm"] = llvm_version()
    out["python"] = platform.python_version()
    out["blas"] = numpy_blas()
    return out


def source_commit() -> str | None:
    """The git commit polyonnx runs from (``+dirty`` when tracked files differ from it), or
    None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True)
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True
        )
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.decode().strip() + ("+dirty" if dirty.stdout.strip() else "")


def numpy_blas() -> str | None:
    """numpy's BLAS as numpy was built with it, e.g. ``"scipy-openblas 0.3.29"``."""
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (TypeError, KeyError):
        return None
    return " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k)) or None
