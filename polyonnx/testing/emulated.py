"""Running shared libraries written for other architectures under ``qemu-user``.

A library for another target (``polyonnx compile --target T -o model.so``) cannot be loaded
into this process; :func:`run_libraries` runs many of them in one emulated process instead,
through a small C driver (``driver.c`` beside this file) built by the target's cross
compiler: the inputs go in files, the outputs come back in files.

Example:
    >>> import polyonnx
    >>> from polyonnx.codegen.aot import write_library
    >>> target = TARGETS["aarch64"]
    >>> compiled = polyonnx.compile("model.onnx", target.options())      # doctest: +SKIP
    >>> lib = write_library(compiled, "model.so")                         # doctest: +SKIP
    >>> run_libraries(target, [Job(lib, compiled.metadata(), (x,))], tmp)  # doctest: +SKIP
    [[array(...)]]
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from polyonnx.codegen.toolchain import CROSS
from polyonnx.options import Options

DRIVER = Path(__file__).with_name("driver.c")
#: The driver's status for a job whose library or inputs it could not load.
UNREADABLE = "-1000"


@dataclass(frozen=True, slots=True)
class EmulatedTarget:
    """A target polyonnx compiles for and ``qemu-user`` runs: its LLVM triple, CPU and
    features, and the emulator's command (its ``-L`` sysroot is added from the toolchain)."""

    name: str
    triple: str
    cpu: str | None
    features: str | None
    qemu: tuple[str, ...]

    def options(self, **fields: Any) -> Options:
        """Compile options for this target (``fields``: any other :class:`Options` field)."""
        return Options(target=self.triple, cpu=self.cpu, features=self.features, **fields)

    @property
    def architecture(self) -> str:
        return self.triple.split("-", 1)[0]

    def unavailable(self) -> str | None:
        """Why libraries for this target cannot be built and run here, or None."""
        cross = CROSS[self.architecture]
        missing = [
            f"{tool} (Debian package {package})"
            for tool, package in ((cross.compiler, cross.package), (self.qemu[0], "qemu-user"))
            if shutil.which(tool) is None
        ]
        return f"{self.name}: not installed: {', '.join(missing)}" if missing else None

    def qemu_version(self) -> tuple[int, ...]:
        """The emulator's version, e.g. (7, 2); (0, 0) when it does not say."""
        return _qemu_version(self.qemu[0])

    def command(self) -> tuple[str, ...]:
        """The emulator's command line, its sysroot included (the driver and manifest
        follow)."""
        return (*self.qemu, "-L", CROSS[self.architecture].sysroot)


#: The emulated targets: AArch64 (NEON; and SVE), POWER9, RISC-V with the V extension.
TARGETS: dict[str, EmulatedTarget] = {
    t.name: t
    for t in (
        EmulatedTarget("aarch64", "aarch64-linux-gnu", None, None, ("qemu-aarch64",)),
        EmulatedTarget(
            "aarch64-sve", "aarch64-linux-gnu", None, "+sve", ("qemu-aarch64", "-cpu", "max")
        ),
        EmulatedTarget(
            "ppc64le", "powerpc64le-linux-gnu", "pwr9", None, ("qemu-ppc64le", "-cpu", "power9")
        ),
        EmulatedTarget(
            "riscv64",
            "riscv64-linux-gnu",
            None,
            None,
            ("qemu-riscv64", "-cpu", "rv64,v=true,vext_spec=v1.0"),
        ),
    )
}


@functools.cache
def _qemu_version(command: str) -> tuple[int, ...]:
    out = subprocess.run([command, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"version (\d+)\.(\d+)", out)
    return tuple(map(int, found.groups())) if found else (0, 0)


#: Node cases whose RISC-V V code QEMU before 8.1 (Debian 12 has 7.2) aborts on, in its
#: translation of a narrowing float-to-int conversion (``vfncvt.rtz.x.f.w``; QEMU issue 1441).
QEMU_7_RVV_ABORTS = frozenset(
    {
        "test_qlinearconv",
        "test_qlinearmatmul_2D_int8_float16",
        "test_qlinearmatmul_3D_int8_float32",
        "test_quantizelinear_blocked_asymmetric",
        "test_quantizelinear_blocked_symmetric",
    }
)


def emulator_workaround(target: EmulatedTarget, case: str, options: Options) -> Options | None:
    """Options that keep node case ``case`` clear of a known defect of ``target``'s emulator
    (under QEMU before 8.1, the cases of :data:`QEMU_7_RVV_ABORTS` run as scalar RISC-V
    code), or None when it needs none.

    Example:
        >>> emulator_workaround(TARGETS["aarch64"], "test_abs", TARGETS["aarch64"].options())
    """
    if (
        case in QEMU_7_RVV_ABORTS
        and target.architecture == "riscv64"
        and target.qemu_version() < (8, 1)
    ):
        return replace(options, features="-v")
    return None


def graph_input_names(model: onnx.ModelProto) -> list[str]:
    """The names of ``model``'s inputs that are not initializers, in the graph's order (what
    a node case's data set feeds)."""
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def library_feeds(
    graph_inputs: Sequence[str], values: Sequence[np.ndarray], metadata: str
) -> tuple[np.ndarray, ...]:
    """``values`` (one per name of ``graph_inputs``, the model's inputs that are not
    initializers) in the library's input order, each of the dtype the library takes.

    Example:
        >>> meta = json.dumps({"inputs": [{"name": "b", "dtype": "float32"},
        ...                               {"name": "a", "dtype": "int64"}]})
        >>> [f.dtype.name for f in library_feeds(["a", "b"], [np.zeros(1), np.zeros(2)], meta)]
        ['float32', 'int64']
    """
    by_name: Mapping[str, np.ndarray] = dict(zip(graph_inputs, values, strict=True))
    return tuple(
        np.ascontiguousarray(by_name[i["name"]], dtype=i["dtype"])
        for i in json.loads(metadata)["inputs"]
    )


@dataclass(frozen=True)
class Job:
    """One run of a library: its path, its metadata (:meth:`polyonnx.compiled.Compiled.
    metadata`, which tells the outputs' shapes) and the feeds, in the model's input order."""

    library: Path
    metadata: str
    feeds: tuple[np.ndarray, ...]


def build_driver(target: EmulatedTarget, folder: Path) -> Path:
    """The driver program for ``target``, compiled into ``folder``."""
    out = folder / f"driver-{target.architecture}"
    if not out.exists():
        cc = CROSS[target.architecture].compiler
        proc = subprocess.run(
            [cc, "-O2", "-o", str(out), str(DRIVER), "-ldl"], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building the {target.name} driver failed: {proc.stderr}")
    return out


def run_libraries(
    target: EmulatedTarget, jobs: Sequence[Job], folder: Path, timeout: float = 900
) -> list[list[np.ndarray] | str]:
    """Run every job in one ``qemu-user`` process (a job that kills it fails, and the jobs
    after it run in a new one); per job, its outputs (data-dependent extents cut to what the
    run computed) or why it failed. ``folder`` holds the files."""
    folder.mkdir(parents=True, exist_ok=True)
    driver = build_driver(target, folder)
    manifests, expected = [], []
    for k, job in enumerate(jobs):
        lines = []
        meta = json.loads(job.metadata)
        specs = [
            (tuple(o.get("max_shape", o["shape"])), np.dtype(o["dtype"])) for o in meta["outputs"]
        ]
        specs += [((1,), np.dtype(np.int64))] * meta["count_outputs"]
        lines.append(f"{job.library.resolve()} {len(job.feeds)} {len(specs)}")
        for i, feed in enumerate(job.feeds):
            path = folder / f"job{k}-in{i}.bin"
            path.write_bytes(np.ascontiguousarray(feed).tobytes())
            lines.append(f"{path.resolve()} {feed.nbytes}")
        outputs = []
        for j, (shape, dtype) in enumerate(specs):
            path = folder / f"job{k}-out{j}.bin"
            lines.append(f"{path.resolve()} {int(np.prod(shape)) * dtype.itemsize}")
            outputs.append((path, shape, dtype))
        manifests.append("\n".join(lines) + "\n")
        expected.append((meta, outputs))
    command = [*target.command(), str(driver)]
    statuses: dict[int, str] = {}
    first = 0
    while first < len(jobs):  # from the first job not run (after one that crashed the driver)
        manifest = folder / f"manifest{first}.txt"
        manifest.write_text("".join(manifests[first:]))
        proc = subprocess.run(
            [*command, str(manifest)], capture_output=True, text=True, timeout=timeout
        )
        done = {
            first + int(k): status
            for k, status in (line.split() for line in proc.stdout.splitlines() if line.strip())
        }
        statuses.update(done)
        crashed = first + len(done)
        if crashed < len(jobs):
            statuses[crashed] = (
                f"the driver died running it (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
            )
        first = crashed + 1
    results: list[list[np.ndarray] | str] = []
    for k, (meta, outputs) in enumerate(expected):
        status = statuses[k]
        if status == UNREADABLE:
            results.append(f"{target.name}: the library or an input could not be loaded")
        elif status != "0":
            number = status.lstrip("-").isdigit()
            results.append(f"{target.name}: {'polyonnx_run returned ' * number}{status}")
        else:
            arrays = [np.fromfile(path, dtype).reshape(shape) for path, shape, dtype in outputs]
            results.append(_valid_parts(meta, arrays))
    return results


def _valid_parts(meta: dict, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs, each data-dependent one cut to the extents the run wrote."""
    described = meta["outputs"]
    counts = arrays[len(described) :]
    out = []
    for o, array in zip(described, arrays, strict=False):
        if "counts" in o:
            index = tuple(
                slice(None) if c is None else slice(0, int(counts[c][0])) for c in o["counts"]
            )
            array = np.ascontiguousarray(array[index])
        out.append(array)
    return out
