"""``polyonnx bench --target T``: a report of a target this host runs under qemu-user.

Emulated code runs at the emulator's speed, not the target's, so this report holds **no
timings**. It holds what can be known without the machine:

- the target: triple, CPU, features, the vector width and vector registers polyonnx plans
  its schedules and code for, the caches it assumes; the emulator, cross compiler and
  binutils that built, ran and read the code;
- correctness: each model of the set compiled for the target (one thread), linked by the
  cross gcc and run under qemu-user on random feeds (:mod:`polyonnx.testing.emulated`),
  against onnxruntime on this host; and node cases of the ONNX node suite (by default the
  checkout's ``tests/backend/portable_cases.txt``) against the outputs the suite ships;
- static facts of each model's library (:mod:`polyonnx.bench.disassembly`): its size, the
  size of its code and weights, and per kernel its function's size and instruction mix
  (vector FMAs, vector loads and stores, other vector, scalar float, other).

Example (minutes of compiling and emulation)::

    data = polyonnx.bench.emulated.report("aarch64-report", "aarch64", quick=True)
    data["summary"]["models_matching"], data["summary"]["vector_fma_share"]
"""

from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import onnx
from onnx import numpy_helper

import polyonnx
from polyonnx.bench.disassembly import Library, Mix, binutil, inspect
from polyonnx.bench.document import write
from polyonnx.bench.folder import EMULATED
from polyonnx.bench.host import fingerprint, versions
from polyonnx.bench.models import MODELS, RTOL
from polyonnx.bench.progress import Progress
from polyonnx.testing import assert_close, max_errors, onnxruntime_outputs, random_feeds
from polyonnx.testing.architectures import multiply_adds, parameters
from polyonnx.testing.emulated import (
    TARGETS,
    EmulatedTarget,
    Job,
    emulator_workaround,
    graph_input_names,
    library_feeds,
    run_libraries,
)
from polyonnx.testing.zoo import small_cnn

#: Every model an emulated report can run: the benchmark set and the small CNN of the tests.
ALL_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mnist": MODELS["mnist"],
    "small_cnn": small_cnn,
    **MODELS,
}
#: The models run by default: those that compile and run under qemu in about a minute or less
#: each (ResNet50 the longest: ~1 min emulated on AArch64).
DEFAULT_MODELS = (
    "mnist",
    "small_cnn",
    "gru_classifier",
    "lstm_speech",
    "bert_base_layer",
    "squeezenet",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "resnet50",
)
QUICK_MODELS = ("mnist", "small_cnn")
#: Node cases a ``--quick`` report runs (spread over the list).
QUICK_NODE_CASES = 12
#: The node cases a shared library runs as they are (see ``tests/backend/suite.py``), in a
#: checkout of polyonnx.
PORTABLE_CASES = Path(__file__).resolve().parents[2] / "tests" / "backend" / "portable_cases.txt"
#: What a report says instead of timings.
NO_TIMINGS = (
    "No timings: the code ran under qemu-user, at the emulator's speed, not the target's. "
    "This report holds correctness and static facts of the generated code."
)


class Unavailable(RuntimeError):
    """The target's cross compiler, binutils or emulator is not installed."""


@dataclass(frozen=True, slots=True)
class EmulatedSettings:
    """What an emulated report runs: the target (a name of
    :data:`polyonnx.testing.emulated.TARGETS`), the models, and the node cases (names of the
    ONNX node suite; ``node_cases_from``: where the list was read)."""

    target: str
    models: tuple[str, ...]
    node_cases: tuple[str, ...] = ()
    node_cases_from: str | None = None
    quick: bool = False

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; the targets: {', '.join(TARGETS)}")
        unknown = [m for m in self.models if m not in ALL_MODELS]
        if unknown:
            known = ", ".join(ALL_MODELS)
            raise ValueError(f"unknown model(s) {', '.join(unknown)}; the set: {known}")
        if not self.models:
            raise ValueError("at least one model")

    @staticmethod
    def of(
        target: str,
        models: Sequence[str] | None = None,
        node_cases: bool | str | os.PathLike[str] = True,
        quick: bool = False,
    ) -> EmulatedSettings:
        """The default models (or ``models``; with ``quick``, MNIST and the small CNN) and
        the node cases listed in the file ``node_cases`` (True: the checkout's
        :data:`PORTABLE_CASES` when there is one; False: none; with ``quick``, a dozen of
        them)."""
        chosen = tuple(models or (QUICK_MODELS if quick else DEFAULT_MODELS))
        found = PORTABLE_CASES if PORTABLE_CASES.exists() else None
        listed = found if node_cases is True else node_cases or None
        if listed is None:
            return EmulatedSettings(target, chosen, quick=quick)
        path = Path(listed)
        names = read_case_names(path)
        if quick:
            names = names[:: max(1, len(names) // QUICK_NODE_CASES)][:QUICK_NODE_CASES]
        return EmulatedSettings(target, chosen, tuple(names), _shown(path), quick)


def read_case_names(path: Path) -> list[str]:
    """Node case names, one a line (``#`` starts a comment line)."""
    lines = path.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _shown(path: Path) -> str:
    """``path`` relative to the checkout when it is in it (a report does not name the
    folder it was made in)."""
    try:
        return str(path.resolve().relative_to(PORTABLE_CASES.parents[2]))
    except ValueError:
        return str(path)


def report(
    out: str | os.PathLike[str],
    target: str,
    models: Sequence[str] | None = None,
    node_cases: bool | str | os.PathLike[str] = True,
    quick: bool = False,
    settings: EmulatedSettings | None = None,
) -> dict[str, Any]:
    """Build, run and read (:func:`measure`) and write the report folder ``out``."""
    data = measure(settings or EmulatedSettings.of(target, models, node_cases, quick))
    write(data, Path(out))
    return data


def check_tools(target: EmulatedTarget) -> None:
    """Raise :class:`Unavailable` naming the Debian package of what is missing."""
    reason = target.unavailable()
    if reason is not None:
        raise Unavailable(reason)
    try:
        binutil(target.architecture, "objdump")
    except FileNotFoundError as e:
        raise Unavailable(f"{target.name}: {e}") from None


@dataclass(frozen=True)
class _Built:
    """A model compiled and linked for the target: its run, what to compare it with, and its
    row of the report so far."""

    name: str
    job: Job
    reference: list[np.ndarray]
    row: dict[str, Any]


def measure(settings: EmulatedSettings, stream: TextIO | None = None) -> dict[str, Any]:
    """Everything ``settings`` asks for, as the report's JSON-able dict (progress to
    ``stream``, default stderr)."""
    from polyonnx.bench.suite import require_extras

    require_extras()
    target = TARGETS[settings.target]
    check_tools(target)
    s = settings
    progress = Progress(len(s.models) + 2 + 2 * bool(s.node_cases), stream)
    started = time.time()
    progress.step(f"host fingerprint, {target.name} and its tools")
    host, libs, facts = fingerprint(), versions(), target_facts(target)
    built, refused = [], []
    with tempfile.TemporaryDirectory(prefix="polyonnx-emulated-") as tmp:
        folder = Path(tmp)
        for name in s.models:
            progress.step(f"{name}: compiling for {target.name}, linking, disassembling")
            try:
                built.append(_build(name, target, folder))
            except Exception as e:  # listed in the report; the other models still run
                traceback.print_exc(file=sys.stderr)
                refused.append({"model": name, "error": f"{type(e).__name__}: {e}"})
        progress.step(f"running {len(built)} model(s) under {target.qemu[0]}")
        results = run_libraries(target, [b.job for b in built], folder / "models") if built else []
        rows = [_checked(b, got) for b, got in zip(built, results, strict=True)]
        nodes = node_suite(target, s, folder / "nodes", progress) if s.node_cases else None
    return {
        "schema": EMULATED,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "duration_s": time.time() - started,
        "timings": None,
        "note": NO_TIMINGS,
        "settings": {
            "target": s.target,
            "models": list(s.models),
            "node_cases": len(s.node_cases),
            "node_cases_from": s.node_cases_from,
            "threads": 1,
            "quick": s.quick,
        },
        "host": host,
        "versions": libs,
        "target": facts,
        "models": rows,
        "refused": refused,
        "node_cases": nodes,
        "summary": summary(rows, refused, nodes),
    }


def target_facts(target: EmulatedTarget) -> dict[str, Any]:
    """What polyonnx generates code for on ``target``, and the tools that built and ran it."""
    from polyonnx.codegen.target import (
        l1_data_bytes,
        l2_bytes,
        machine,
        vector_bits,
        vector_registers,
    )
    from polyonnx.codegen.toolchain import CROSS

    options = target.options(num_threads=1)
    triple, cpu, features = machine(options)
    compiler = CROSS[target.architecture].compiler
    return {
        "name": target.name,
        "triple": triple,
        "cpu": cpu or "generic",
        "features": [f for f in features.split(",") if f],
        "vector_bits": vector_bits(options),
        "vector_registers": vector_registers(options),
        "l1_data_bytes": l1_data_bytes(options),
        "l2_bytes": l2_bytes(options),
        "emulator": " ".join(target.command()),
        "qemu_version": _first_line([target.qemu[0], "--version"]),
        "compiler": f"{compiler}: {_first_line([compiler, '--version'])}",
        "binutils": _first_line([binutil(target.architecture, "objdump"), "--version"]),
    }


def _first_line(command: list[str]) -> str:
    out = subprocess.run(command, capture_output=True, text=True).stdout
    return out.strip().splitlines()[0] if out.strip() else "?"


def _build(name: str, target: EmulatedTarget, folder: Path) -> _Built:
    from polyonnx.codegen.aot import write_library

    model = ALL_MODELS[name]()
    compiled = polyonnx.compile(model, target.options(num_threads=1))
    library = write_library(compiled, folder / f"{name}.so")
    meta = json.loads(compiled.metadata())
    args = [polyonnx.NodeArg(i["name"], i["shape"], i["dtype"]) for i in meta["inputs"]]
    feeds = random_feeds(args)
    job = Job(library, compiled.metadata(), tuple(feeds[i["name"]] for i in meta["inputs"]))
    row = {
        "model": name,
        "parameters": parameters(model),
        "multiply_adds": multiply_adds(model),
        "outputs": len(meta["outputs"]),
        "code": code_facts(compiled, inspect(library, target.architecture)),
    }
    return _Built(name, job, onnxruntime_outputs(model, feeds), row)


def _checked(built: _Built, got: list[np.ndarray] | str) -> dict[str, Any]:
    """The model's row with its error against onnxruntime (or why its run failed)."""
    if isinstance(got, str):
        return {**built.row, "max_rel_err": None, "mismatch": True, "error": got}
    err = max_errors(got, built.reference).relative
    return {
        **built.row,
        "max_rel_err": err if math.isfinite(err) else None,
        "mismatch": not err <= RTOL,
        "error": None,
    }


def code_facts(compiled: polyonnx.Compiled, library: Library) -> dict[str, Any]:
    """Sizes of ``library`` and, per kernel of ``compiled``, its function's size and
    instruction mix; ``mix`` sums the distinct kernel functions (kernels of one signature
    share one)."""
    from polyonnx.schedule.signature import kernel_flops

    kernels, distinct = [], {}
    for (kernel, _), symbol in zip(compiled.asts, compiled.symbols, strict=True):
        fn = library.function(symbol)
        size, mix = (fn.size, fn.mix) if fn else (0, Mix())
        distinct[symbol] = (size, mix)
        kernels.append(
            {
                "kernel": kernel.name,
                "symbol": symbol,
                "ops": list(kernel.ops),
                "flops": kernel_flops(kernel),
                "bytes": size,
                "instructions": mix.total,
                "mix": mix.counts(),
            }
        )
    total = sum((mix for _, mix in distinct.values()), Mix())
    return {
        "library_bytes": library.file_bytes,
        "text_bytes": library.section(".text"),
        "weights_bytes": compiled.plan.weights_size,
        "functions": len(distinct),
        "kernel_bytes": sum(size for size, _ in distinct.values()),
        "instructions": total.total,
        "mix": total.counts(),
        "kernels": kernels,
    }


@dataclass(frozen=True)
class NodeCase:
    """One case of the ONNX node suite: its model, one data set, its tolerances."""

    name: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    rtol: float
    atol: float


def load_node_cases(names: Sequence[str]) -> tuple[list[NodeCase], list[str]]:
    """The cases ``names`` of the installed onnx's node suite (onnx builds them in Python,
    ~20 s) with their first data set, and the names it does not have."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        generated = {c.name: c for c in load_model_tests(kind="node")}
    found = []
    for name in names:
        case = generated.get(name)
        if case is not None and case.model is not None and case.data_sets:
            inputs, outputs = case.data_sets[0]
            found.append(
                NodeCase(name, case.model, _arrays(inputs), _arrays(outputs), case.rtol, case.atol)
            )
    return found, [n for n in names if n not in {c.name for c in found}]


def _arrays(values: Sequence[Any]) -> list[np.ndarray]:
    return [
        numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)
        for v in values
    ]


def node_suite(
    target: EmulatedTarget, settings: EmulatedSettings, folder: Path, progress: Progress
) -> dict[str, Any]:
    """Every node case of ``settings`` compiled for ``target``, run under qemu-user in one
    process and compared with the suite's outputs (the case's rtol and atol)."""
    from polyonnx.codegen.aot import write_library

    progress.step(f"node cases: loading {len(settings.node_cases)} from onnx's node suite")
    cases, missing = load_node_cases(settings.node_cases)
    failed = [{"case": name, "error": "not in this onnx's node suite"} for name in missing]
    workarounds, jobs, ran = [], [], []
    progress.step(f"node cases: compiling {len(cases)} for {target.name}, running under qemu")
    folder.mkdir(parents=True, exist_ok=True)
    for k, case in enumerate(cases):
        if k % 25 == 0:
            progress.note(f"node cases: {k}/{len(cases)} compiled")
        options = target.options(num_threads=1)
        workaround = emulator_workaround(target, case.name, options)
        if workaround is not None:
            workarounds.append({"case": case.name, "features": workaround.features})
        try:
            compiled = polyonnx.compile(case.model, workaround or options)
            library = write_library(compiled, folder / f"{case.name}.so")
            feeds = library_feeds(graph_input_names(case.model), case.inputs, compiled.metadata())
        except Exception as e:
            failed.append({"case": case.name, "error": f"{type(e).__name__}: {e}"[:300]})
            continue
        jobs.append(Job(library, compiled.metadata(), feeds))
        ran.append(case)
    progress.note(f"node cases: running {len(jobs)} under {target.qemu[0]}")
    results = run_libraries(target, jobs, folder / "run") if jobs else []
    passed = 0
    for case, got in zip(ran, results, strict=True):
        error = _compare(case, got)
        if error is None:
            passed += 1
        else:
            failed.append({"case": case.name, "error": error})
    return {
        "reference": f"the outputs onnx {onnx.__version__}'s node suite ships",
        "cases": len(settings.node_cases),
        "passed": passed,
        "failed": sorted(failed, key=lambda f: f["case"]),
        "workarounds": workarounds,
    }


def _compare(case: NodeCase, got: list[np.ndarray] | str) -> str | None:
    """Why ``got`` does not match the case's outputs, or None."""
    if isinstance(got, str):
        return got[:300]
    try:
        assert_close(got, case.outputs, rtol=case.rtol, atol=case.atol)
    except AssertionError as e:
        return (str(e).strip().splitlines() or ["mismatch"])[0][:300]
    return None


def summary(
    rows: Sequence[dict[str, Any]],
    refused: Sequence[dict[str, Any]],
    nodes: dict[str, Any] | None,
) -> dict[str, Any]:
    """Counts of what matched, and the instruction mix of every model's kernels together."""
    mix = sum((Mix(**r["code"]["mix"]) for r in rows), Mix())
    return {
        "models": len(rows) + len(refused),
        "models_matching": sum(not r["mismatch"] for r in rows),
        "node_cases": nodes["cases"] if nodes else None,
        "node_cases_passed": nodes["passed"] if nodes else None,
        "instructions": mix.total,
        "vector_fma_share": mix.share("vector_fma"),
        "vector_share": mix.vector_share,
    }
