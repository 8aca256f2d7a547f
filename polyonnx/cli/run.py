"""``polyonnx run``: compile (or load) a model, run it on given or random inputs, print its
outputs and timing, and compare them with a reference."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import polyonnx.cli.arguments as arguments
from polyonnx import Compiled, Options, Trace
from polyonnx.cli.arguments import RAW, Subparsers
from polyonnx.errors import InputError
from polyonnx.pipeline import compile_graph, to_graph
from polyonnx.runtime.session import Executable, NodeArg
from polyonnx.testing import import_onnxruntime, max_errors, onnxruntime_outputs, random_feeds

#: The model ``polyonnx run`` compiles when given none: ResNet50 from the onnx package's
#: "light" backend-test models (real architecture, placeholder weights).
DEFAULT_MODEL = os.path.join(
    os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx"
)

#: The largest max |output - reference| / max |reference| with which `run` exits 0.
MAX_RELATIVE_ERROR = 1e-3

EXAMPLES = """\
examples:
  polyonnx run                                     embedded light ResNet50: compile, run, check
  polyonnx run model.onnx --compare                random inputs, compare with onnxruntime
  polyonnx run model.onnx --input x=x.npy --repeat 50
  polyonnx run model.so                            a library written by `polyonnx compile -o`

Without --input, inputs are random (seeded by --seed): floats ~ N(0, 1), integers in [0, 10),
booleans fair coins; symbolic dimensions are taken as 1 unless --input-shape fixes them.
"""


def input_arg(text: str) -> tuple[str, str]:
    """``NAME=FILE.npy`` -> ``("NAME", "FILE.npy")``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, got {text!r}")
    return name, path


def add_parser(sub: Subparsers) -> None:
    r = sub.add_parser(
        "run",
        help="compile and run a model; print outputs and timing",
        description="Compile MODEL (default: the light ResNet50 shipped with "
        "onnx), run it,\nprint its outputs and the median run time. For the "
        "default model the outputs\nare checked against the expected output "
        "shipped with it and, when installed,\nagainst onnxruntime.",
        epilog=EXAMPLES,
        formatter_class=RAW,
    )
    r.add_argument(
        "model",
        metavar="MODEL",
        nargs="?",
        help="an .onnx file or a polyonnx shared library (default: light ResNet50)",
    )
    r.add_argument(
        "--input",
        metavar="NAME=FILE.npy",
        type=input_arg,
        action="append",
        default=[],
        help="feed an input from a .npy file (repeatable)",
    )
    r.add_argument(
        "--repeat",
        metavar="N",
        type=int,
        default=10,
        help="timed runs after the first (default 10; fewer when a run is slow)",
    )
    r.add_argument(
        "--threads",
        metavar="N",
        type=int,
        help="threads for the model (and for onnxruntime with --compare)",
    )
    r.add_argument(
        "--compare",
        action="store_true",
        help="also run onnxruntime (if installed) and print the differences",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    arguments.add_codegen_options(r)
    arguments.add_model_options(r)
    arguments.add_schedule_option(r)
    r.set_defaults(execute=execute)


@dataclass
class _Loaded:
    """A model ready to run, and what the report says about it."""

    executable: Executable
    proto: onnx.ModelProto | None
    compiled: Compiled | None
    stage_seconds: dict[str, float]


def _load(
    model: str,
    options: Options,
    shapes: Mapping[str, Sequence[int]] | None,
    schedules: Mapping[str, Trace] | None = None,
) -> _Loaded:
    if Path(model).suffix in (".so", ".dylib"):
        t = time.perf_counter()
        exe = Executable.from_library(model)
        return _Loaded(exe, None, None, {"load library": time.perf_counter() - t})
    from polyonnx.frontend.load import load_model

    times: dict[str, float] = {}
    t = time.perf_counter()
    proto = load_model(model)
    graph = to_graph(proto, shapes)
    times["frontend + graph"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = compile_graph(graph, options, schedules)
    times["krnl + schedule + ast"] = time.perf_counter() - t
    t = time.perf_counter()
    exe = Executable.from_compiled(compiled)
    times["llvm + jit"] = time.perf_counter() - t
    return _Loaded(exe, proto, compiled, times)


def _backend_suite_input(arg: NodeArg) -> np.ndarray:
    """The input onnx's backend runner feeds light models: ``arange(n).reshape(shape) / n``."""
    shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _feeds(
    exe: Executable, files: Sequence[tuple[str, str]], seed: int, default_model: bool
) -> list[np.ndarray]:
    by_name = dict(files)
    names = [a.name for a in exe.inputs]
    unknown = sorted(set(by_name) - set(names))
    if unknown:
        raise InputError(
            f"--input: unknown input name(s) {unknown}; the model's inputs are {names}"
        )
    try:
        random = (
            {}
            if default_model
            else random_feeds([a for a in exe.inputs if a.name not in by_name], seed)
        )
    except InputError as e:
        raise InputError(f"{e}; give it with --input NAME=FILE.npy") from None
    feeds = []
    for arg in exe.inputs:
        if arg.name not in by_name:
            feeds.append(_backend_suite_input(arg) if default_model else random[arg.name])
            continue
        try:
            value = np.load(by_name[arg.name], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {arg.name}={by_name[arg.name]}: {e}") from None
        want = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
        if value.dtype != np.dtype(arg.dtype) or value.shape != want:
            raise InputError(
                f"--input {arg.name}: expected {arg.dtype}{list(want)}, got "
                f"{value.dtype}{list(value.shape)} from {by_name[arg.name]}"
            )
        feeds.append(np.ascontiguousarray(value))
    return feeds


def _summary(name: str, a: np.ndarray) -> str:
    head = f"{name}  {a.dtype}{list(a.shape)}"
    if a.size == 0:
        return f"{head}  (empty)"
    flat = a.ravel()
    first = np.array2string(flat[:5], precision=5, separator=", ")
    if a.dtype.kind in "fiub":
        f = flat.astype(np.float64)
        return f"{head}  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}  first {first}"
    return f"{head}  first {first}"


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


def execute(args: argparse.Namespace) -> int:
    default_model = args.model is None
    model = DEFAULT_MODEL if default_model else args.model
    if args.repeat < 0:
        raise InputError("--repeat must be >= 0")
    loaded = _load(
        model, arguments.options(args), arguments.shapes(args), arguments.schedules(args)
    )
    exe = loaded.executable
    feeds = _feeds(exe, args.input, args.seed, default_model)

    print(f"model      {model}" + ("  (embedded default)" if default_model else ""))
    if loaded.proto is not None and loaded.compiled is not None:
        print(
            f"nodes      {len(loaded.proto.graph.node)} ONNX nodes, "
            f"{len(loaded.compiled.graph.nodes)} after graph passes"
        )
        print(f"kernels    {len(loaded.compiled.program.kernels)}")
    total = sum(loaded.stage_seconds.values())
    stages = ", ".join(f"{k} {_seconds(v)}" for k, v in loaded.stage_seconds.items())
    print(f"{'compile' if loaded.compiled else 'load':10} {_seconds(total)}  ({stages})")
    for arg, f in zip(exe.inputs, feeds, strict=True):
        source = (
            "file"
            if arg.name in dict(args.input)
            else "backend-suite input arange(n)/n"
            if default_model
            else f"random, seed {args.seed}"
        )
        print(f"input      {arg.name}  {f.dtype}{list(f.shape)}  ({source})")

    t = time.perf_counter()
    outputs = exe.run(feeds)
    first = time.perf_counter() - t
    # Slow models get fewer timed runs: at most ~10 s of timing beyond the first run.
    repeat = min(args.repeat, max(1, int(10.0 / max(first, 1e-9)))) if args.repeat else 0
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        exe.run(feeds)
        times.append(time.perf_counter() - t)
    timing = f"first {_seconds(first)}"
    if times:
        timing += (
            f", median {_seconds(statistics.median(times))} of {len(times)}, "
            f"min {_seconds(min(times))}"
        )
    print(f"run        {timing}")
    print("outputs")
    for arg, out in zip(exe.outputs, outputs, strict=True):
        print(f"  {_summary(arg.name, out)}")

    ok = True
    if default_model:
        expected = numpy_helper.to_array(
            onnx.load_tensor(
                os.path.join(os.path.dirname(DEFAULT_MODEL), "light_resnet50_output_0.pb")
            )
        )
        errors = max_errors(outputs[:1], [expected])
        ok &= errors.relative <= MAX_RELATIVE_ERROR
        print(f"vs expected output (light_resnet50_output_0.pb): {errors}")
    if (default_model or args.compare) and loaded.proto is not None:
        try:
            version = import_onnxruntime().__version__
        except ImportError:
            print("vs onnxruntime: not installed")
        else:
            named = dict(zip([a.name for a in exe.inputs], feeds, strict=True))
            errors = max_errors(outputs, onnxruntime_outputs(model, named, threads=args.threads))
            ok &= errors.relative <= MAX_RELATIVE_ERROR
            print(f"vs onnxruntime {version}: {errors}")
    elif args.compare:
        print("vs onnxruntime: needs an .onnx model, not a compiled library")
    return 0 if ok else 1
