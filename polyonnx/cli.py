"""The ``polyonnx`` command: a thin layer over the public API.

Example::

    polyonnx run                                   # the embedded light ResNet50, with a report
    polyonnx compile model.onnx -o model.so        # model.so + model.h
    polyonnx compile model.onnx --emit krnl        # print one pipeline stage
    polyonnx kernels model.onnx                    # the kernels the model compiles to
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from polyonnx import __version__
from polyonnx.errors import InputError, PolyonnxError
from polyonnx.graph.ir import Graph, Node
from polyonnx.krnl.passes import AFTER
from polyonnx.options import Options
from polyonnx.pipeline import STAGES, Compiled, compile, compile_graph, emit, lower, to_graph
from polyonnx.runtime.session import Executable, NodeArg
from polyonnx.schedule.trace import Trace, load_schedules

#: The model ``polyonnx run`` compiles when given none: ResNet50 from the onnx package's
#: "light" backend-test models (real architecture, placeholder weights).
DEFAULT_MODEL = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                             "light_resnet50.onnx")

_COMPILE_EXAMPLES = """\
examples:
  polyonnx compile model.onnx -o model.so          shared library + C header model.h
  polyonnx compile model.onnx --emit krnl          print the loop-nest kernels
  polyonnx compile model.onnx --emit krnl --after lower   the kernels before the krnl passes
  polyonnx compile model.onnx --emit ast           print isl's generated loops
  polyonnx compile model.onnx --emit asm -O2 --cpu znver3
  polyonnx compile model.onnx --emit obj -o model.o
  polyonnx compile model.onnx --input-shape x=1x3x224x224 -o model.so

stages (in pipeline order): onnx graph krnl isl ast llvm asm obj lib
"""

_RUN_EXAMPLES = """\
examples:
  polyonnx run                                     embedded light ResNet50: compile, run, check
  polyonnx run model.onnx --compare                random inputs, compare with onnxruntime
  polyonnx run model.onnx --input x=x.npy --repeat 50
  polyonnx run model.so                            a library written by `polyonnx compile -o`

Without --input, inputs are random (seeded by --seed): floats ~ N(0, 1), integers in [0, 10),
booleans fair coins; symbolic dimensions are taken as 1 unless --input-shape fixes them.
"""

_KERNELS_EXAMPLES = """\
examples:
  polyonnx kernels model.onnx
  polyonnx kernels model.onnx --input-shape x=4x3x224x224
"""


# --------------------------------------------------------------------------- argument parsing


def _shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1x3x224x224`` -> ``("NAME", (1, 3, 224, 224))``."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x")) if dims else ()
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME=D1xD2x..., got {text!r}")
    return name, shape


def _input_arg(text: str) -> tuple[str, str]:
    """``NAME=FILE.npy`` -> ``("NAME", "FILE.npy")``."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE.npy, got {text!r}")
    return name, path


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", metavar="NAME=DIMS", type=_shape_arg, action="append",
                   default=[], help="fix an input's shape, e.g. x=1x3x224x224 (repeatable)")


def _add_schedule_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schedules", metavar="FILE",
                   help="JSON object mapping kernel names or signatures to schedule traces "
                   "(as written by examples/explore_resnet50_conv.py; see docs/schedule.md)")


def _schedules(args: argparse.Namespace) -> dict[str, Trace] | None:
    return load_schedules(args.schedules) if args.schedules else None


def _add_codegen_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=3,
                   metavar="N", help="LLVM optimisation level: -O0 .. -O3 (default -O3)")
    p.add_argument("--target", metavar="TRIPLE", help="LLVM target triple (default: this host)")
    p.add_argument("--cpu", metavar="NAME", help="target CPU, e.g. znver3 (default: this host's)")
    p.add_argument("--checked", action="store_true",
                   help="bounds-check every buffer access at run time")


def build_parser() -> argparse.ArgumentParser:
    """The ``polyonnx`` argument parser (exposed for tests and documentation)."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="polyonnx", formatter_class=raw,
        description="Compile ONNX models to native code through a polyhedral optimizer.",
        epilog="run `polyonnx COMMAND --help` for a command's options and examples")
    parser.add_argument("--version", action="version", version=f"polyonnx {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="show the full traceback when an error occurs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser("compile", help="compile a model; write a library or print a stage",
                       description="Compile MODEL. With -o OUT.so write a shared library and\n"
                       "its C header OUT.h; with --emit STAGE print that pipeline stage.",
                       epilog=_COMPILE_EXAMPLES, formatter_class=raw)
    c.add_argument("model", metavar="MODEL", help="an .onnx file")
    c.add_argument("-o", dest="output", metavar="OUT",
                   help="output file: the shared library (default), or where --emit writes")
    c.add_argument("--emit", choices=STAGES, metavar="STAGE",
                   help=f"print one stage instead: {', '.join(STAGES)} (obj and lib are "
                   "binary: obj goes to -o or stdout, lib needs -o)")
    c.add_argument("--after", choices=AFTER, metavar="PASS",
                   help=f"with --emit krnl: the kernels after this krnl pass ({', '.join(AFTER)};"
                   " lower: as lowered, before any)")
    _add_codegen_options(c)
    _add_model_options(c)
    _add_schedule_option(c)
    c.set_defaults(func=_cmd_compile)

    r = sub.add_parser("run", help="compile and run a model; print outputs and timing",
                       description="Compile MODEL (default: the light ResNet50 shipped with "
                       "onnx), run it,\nprint its outputs and the median run time. For the "
                       "default model the outputs\nare checked against the expected output "
                       "shipped with it and, when installed,\nagainst onnxruntime.",
                       epilog=_RUN_EXAMPLES, formatter_class=raw)
    r.add_argument("model", metavar="MODEL", nargs="?",
                   help="an .onnx file or a polyonnx shared library (default: light ResNet50)")
    r.add_argument("--input", metavar="NAME=FILE.npy", type=_input_arg, action="append",
                   default=[], help="feed an input from a .npy file (repeatable)")
    r.add_argument("--repeat", metavar="N", type=int, default=10,
                   help="timed runs after the first (default 10; fewer when a run is slow)")
    r.add_argument("--threads", metavar="N", type=int,
                   help="threads for the model (and for onnxruntime with --compare)")
    r.add_argument("--compare", action="store_true",
                   help="also run onnxruntime (if installed) and print the differences")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    _add_codegen_options(r)
    _add_model_options(r)
    _add_schedule_option(r)
    r.set_defaults(func=_cmd_run)

    k = sub.add_parser("kernels", help="list the kernels a model compiles to",
                       description="List MODEL's kernels: name, the ONNX nodes each computes,\n"
                       "its buffers and a rough FLOP count.",
                       epilog=_KERNELS_EXAMPLES, formatter_class=raw)
    k.add_argument("model", metavar="MODEL", help="an .onnx file")
    _add_model_options(k)
    k.set_defaults(func=_cmd_kernels)
    return parser


def _options(args: argparse.Namespace) -> Options:
    return Options(opt_level=args.opt_level, target=args.target, cpu=args.cpu,
                   checked=args.checked or Options().checked,
                   num_threads=getattr(args, "threads", None),
                   verbose=getattr(args, "verbose", False))


def _shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]] | None:
    return dict(args.input_shape) or None


# --------------------------------------------------------------------------- compile


def _cmd_compile(args: argparse.Namespace) -> int:
    options = _options(args)
    if args.emit in (None, "lib"):
        if args.after:
            raise PolyonnxError("--after shows a krnl pass's result: add --emit krnl")
        if args.output is None:
            if args.emit == "lib":
                raise PolyonnxError("--emit lib writes a file: add -o OUT.so")
            args.output = Path(args.model).with_suffix(".so").name
        from polyonnx.codegen.aot import write_library

        lib = write_library(compile(args.model, options, _shapes(args), _schedules(args)),
                            args.output)
        print(f"wrote {lib} and {lib.with_suffix('.h')}")
        return 0
    if args.schedules:
        raise PolyonnxError("--schedules applies to libraries (-o OUT.so) and `run`, not to "
                            "--emit")
    text = emit(args.model, args.emit, options, _shapes(args), after=args.after)
    if args.output is not None:
        data = text if isinstance(text, bytes) else text.encode()
        Path(args.output).write_bytes(data)
    elif isinstance(text, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
    else:
        print(text)
    return 0


# --------------------------------------------------------------------------- run


@dataclass
class _Loaded:
    """A model ready to run, and what the report says about it."""

    executable: Executable
    proto: onnx.ModelProto | None
    compiled: Compiled | None
    stage_seconds: dict[str, float]


def _load(model: str, options: Options, shapes: Mapping[str, Sequence[int]] | None,
          schedules: Mapping[str, Trace] | None = None) -> _Loaded:
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


def _random_input(arg: NodeArg, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
    dtype = np.dtype(arg.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(f"input {arg.name!r}: cannot make random data of dtype {arg.dtype}; "
                     "give it with --input NAME=FILE.npy")


def _backend_suite_input(arg: NodeArg) -> np.ndarray:
    """The input onnx's backend runner feeds light models: ``arange(n).reshape(shape) / n``."""
    shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _feeds(exe: Executable, files: Sequence[tuple[str, str]], seed: int,
           default_model: bool) -> list[np.ndarray]:
    by_name = dict(files)
    names = [a.name for a in exe.inputs]
    unknown = sorted(set(by_name) - set(names))
    if unknown:
        raise InputError(f"--input: unknown input name(s) {unknown}; the model's inputs are "
                         f"{names}")
    rng = np.random.default_rng(seed)
    feeds = []
    for arg in exe.inputs:
        if arg.name not in by_name:
            feeds.append(_backend_suite_input(arg) if default_model
                         else _random_input(arg, rng))
            continue
        try:
            value = np.load(by_name[arg.name], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {arg.name}={by_name[arg.name]}: {e}") from None
        want = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
        if value.dtype != np.dtype(arg.dtype) or value.shape != want:
            raise InputError(f"--input {arg.name}: expected {arg.dtype}{list(want)}, got "
                             f"{value.dtype}{list(value.shape)} from {by_name[arg.name]}")
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
        return (f"{head}  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}  "
                f"first {first}")
    return f"{head}  first {first}"


def _errors(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> tuple[float, float]:
    """(max abs error, max abs error / max |reference|) over all outputs."""
    abs_err, rel_err = 0.0, 0.0
    for a, b in zip(got, want, strict=True):
        if a.shape != b.shape:
            return float("inf"), float("inf")
        d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
        scale = float(np.max(np.abs(b.astype(np.float64)), initial=0.0))
        abs_err = max(abs_err, d)
        rel_err = max(rel_err, d / scale if scale else (0.0 if d == 0 else float("inf")))
    return abs_err, rel_err


def _onnxruntime_outputs(model: str, names: Sequence[str],
                         feeds: Sequence[np.ndarray], threads: int | None
                         ) -> tuple[str, list[np.ndarray]] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only: no warnings about unused initializers
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, so,
                                providers=["CPUExecutionProvider"])
    outs = sess.run(None, dict(zip(names, feeds, strict=True)))
    return ort.__version__, [np.asarray(o) for o in outs]


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


def _cmd_run(args: argparse.Namespace) -> int:
    default_model = args.model is None
    model = DEFAULT_MODEL if default_model else args.model
    if args.repeat < 0:
        raise InputError("--repeat must be >= 0")
    loaded = _load(model, _options(args), _shapes(args), _schedules(args))
    exe = loaded.executable
    feeds = _feeds(exe, args.input, args.seed, default_model)

    print(f"model      {model}" + ("  (embedded default)" if default_model else ""))
    if loaded.proto is not None and loaded.compiled is not None:
        print(f"nodes      {len(loaded.proto.graph.node)} ONNX nodes, "
              f"{len(loaded.compiled.graph.nodes)} after graph passes")
        print(f"kernels    {len(loaded.compiled.program.kernels)}")
    total = sum(loaded.stage_seconds.values())
    stages = ", ".join(f"{k} {_seconds(v)}" for k, v in loaded.stage_seconds.items())
    print(f"{'compile' if loaded.compiled else 'load':10} {_seconds(total)}  ({stages})")
    for arg, f in zip(exe.inputs, feeds, strict=True):
        source = "file" if arg.name in dict(args.input) else \
            "backend-suite input arange(n)/n" if default_model else f"random, seed {args.seed}"
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
        timing += f", median {_seconds(statistics.median(times))} of {len(times)}, " \
                  f"min {_seconds(min(times))}"
    print(f"run        {timing}")
    print("outputs")
    for arg, out in zip(exe.outputs, outputs, strict=True):
        print(f"  {_summary(arg.name, out)}")

    ok = True
    if default_model:
        expected = numpy_helper.to_array(onnx.load_tensor(
            os.path.join(os.path.dirname(DEFAULT_MODEL), "light_resnet50_output_0.pb")))
        a, r = _errors(outputs[:1], [expected])
        ok &= r <= 1e-3
        print(f"vs expected output (light_resnet50_output_0.pb): max abs err {a:.3g}, "
              f"max rel err {r:.3g}")
    if (default_model or args.compare) and loaded.proto is not None:
        ref = _onnxruntime_outputs(model, [a.name for a in exe.inputs], feeds,
                                   args.threads)
        if ref is None:
            print("vs onnxruntime: not installed")
        else:
            version, want = ref
            a, r = _errors(outputs, want)
            ok &= r <= 1e-3
            print(f"vs onnxruntime {version}: max abs err {a:.3g}, max rel err {r:.3g}")
    elif args.compare:
        print("vs onnxruntime: needs an .onnx model, not a compiled library")
    return 0 if ok else 1


# --------------------------------------------------------------------------- kernels


def _numel(shape: Sequence[int | str]) -> int:
    return int(np.prod([d if isinstance(d, int) else 1 for d in shape], dtype=np.int64))


def _node_flops(graph: Graph, node: Node) -> int:
    """Rough floating-point operation count of one node (multiply-add = 2)."""
    out = _numel(graph.value(node.outputs[0]).shape) if node.outputs else 0
    if node.op_type == "Conv":
        w = graph.value(node.inputs[1]).shape
        return 2 * out * _numel(w[1:])
    if node.op_type in ("MatMul", "Gemm"):
        a = graph.value(node.inputs[0]).shape
        k = a[0] if node.op_type == "Gemm" and node.attr("transA", 0) else a[-1]
        return 2 * out * (k if isinstance(k, int) else 1)
    if node.op_type in ("MaxPool", "AveragePool"):
        return out * _numel(node.attr("kernel_shape", ()))
    if node.op_type in ("GlobalAveragePool", "GlobalMaxPool"):
        return _numel(graph.value(node.inputs[0]).shape)
    return out


def _cmd_kernels(args: argparse.Namespace) -> int:
    graph = to_graph(args.model, _shapes(args))
    program = lower(graph)
    nodes = {n.name: n for n in graph.nodes}
    total = 0
    for k in program.kernels:
        flops = sum(_node_flops(graph, nodes[n]) for n in k.ops if n in nodes)
        total += flops
        ops = ", ".join(f"{n} ({nodes[n].op_type})" if n in nodes else n for n in k.ops)
        print(f"{k.name}  ~{flops / 1e6:.3f} MFLOP  nodes: {ops or '-'}")
        for b in k.buffers:
            print(f"    {b}")
    print(f"{len(program.kernels)} kernels, ~{total / 1e9:.3f} GFLOP in total")
    return 0


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``polyonnx`` command; returns the exit status (2 on a polyonnx error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (PolyonnxError, OSError) as e:
        if args.verbose:
            traceback.print_exc()
        else:
            print(f"polyonnx: error: {e}", file=sys.stderr)
        return 2

