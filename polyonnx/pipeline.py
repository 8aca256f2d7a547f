"""The one linear pipeline from an ONNX model to native code.

Each stage is a function of the previous stage's result plus options, and every stage prints::

    onnx   load, check, upgrade opset, infer shapes           (frontend)
    graph  import, fold, simplify, fold BN, DCE, blocked layout (graph passes)
    krnl   fusion groups lowered to loop-nest kernels         (krnl)
    isl    domains, accesses, dependences, schedule trees     (schedule)
    ast    isl's AST of each schedule tree                    (schedule + codegen)
    llvm   the LLVM module; asm / obj / lib from it           (codegen)

Example:
    >>> import onnx.helper as oh, onnx
    >>> m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
    ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
    ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])]))
    >>> print(emit(m, "krnl"))
    kernel k0_Relu(in x: float32[4], out y: float32[4]) {
      for i0 in [0, 4):
        S0: y[i0] = max(x[i0], 0.0)
    }
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import onnx
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.module import CodegenConfig, build_module, kernel_module, kernel_symbol
from polyonnx.codegen.target import vector_bits
from polyonnx.errors import PolyonnxError
from polyonnx.frontend.importer import import_model
from polyonnx.frontend.load import ModelSource, load_model
from polyonnx.graph.ir import Graph
from polyonnx.graph.passes import optimize
from polyonnx.graph.passes.fuse import fuse
from polyonnx.graph.passes.layout import blocked_layout
from polyonnx.graph.validate import validate
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import MemoryPlan, plan_memory
from polyonnx.krnl.program import Program, build_program
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.scheduled import ScheduledKernel
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.trace import TraceLike
from polyonnx.schedule_driver import KernelLoops, schedule_program

STAGES = ("onnx", "graph", "krnl", "isl", "ast", "llvm", "asm", "obj", "lib")

_module_ids = itertools.count()


def to_graph(model: ModelSource | onnx.ModelProto,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             options: Options | None = None) -> Graph:
    """Frontend, validation and graph passes: an optimized graph with static shapes."""
    options = options or Options()
    graph = optimize(validate(import_model(model, input_shapes), options.max_tensor_bytes))
    if options.channel_blocks:
        # A block of channels is one register tile wide.
        graph = blocked_layout(graph, block=Tiling.for_vector_bits(vector_bits(options)).vector)
    return graph


def lower(graph: Graph) -> Program:
    """Fusion grouping and lowering of every group to a krnl kernel."""
    return build_program(graph, [g.nodes for g in fuse(graph)])


def schedule(program: Program, options: Options,
             schedules: Mapping[str, TraceLike] | None = None, *, trees: bool = False
             ) -> tuple[KernelLoops, ...]:
    """Every kernel's schedule and loops (see :func:`polyonnx.schedule_driver.schedule_program`:
    shared by signature, cached, forked, within the isl budget)."""
    return schedule_program(program, options, schedules, trees=trees)


@dataclass(frozen=True)
class Compiled:
    """A compiled model: every stage's result, ready to JIT or to write as a library."""

    graph: Graph
    program: Program
    plan: MemoryPlan
    scheduled: tuple[ScheduledKernel | None, ...]
    """Each kernel's schedule tree; None where the loops came from the compile cache."""
    asts: tuple[tuple[Kernel, tuple[la.LNode, ...]], ...]
    options: Options
    prefix: str

    @property
    def entry(self) -> str:
        return f"{self.prefix}_run"

    @property
    def config(self) -> CodegenConfig:
        return CodegenConfig.for_options(self.options)

    @functools.cached_property
    def symbols(self) -> tuple[str, ...]:
        """Each kernel's function name (:func:`polyonnx.codegen.module.kernel_symbol`)."""
        return tuple(kernel_symbol(k, ast, self.config) for k, ast in self.asts)

    def module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The whole model in one LLVM module (what ``--emit llvm|asm|obj`` shows)."""
        return build_module(self.program, self.plan, self.asts, prefix=self.prefix,
                            config=self.config, aot=aot, metadata=self.metadata(),
                            triple=triple, symbols=self.symbols)

    def entry_module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The entry point alone, calling kernels declared from :meth:`kernel_modules`."""
        return build_module(self.program, self.plan, self.asts, prefix=self.prefix,
                            config=self.config, aot=aot, metadata=self.metadata(),
                            triple=triple, with_kernels=False, symbols=self.symbols)

    def kernel_modules(self, triple: str = "") -> list[tuple[str, Callable[[], ir.Module]]]:
        """Each distinct kernel function: its symbol and how to make its module."""
        config = self.config
        out: dict[str, Callable[[], ir.Module]] = {}
        for (kernel, ast), symbol in zip(self.asts, self.symbols, strict=True):
            if symbol not in out:
                out[symbol] = functools.partial(
                    lambda k, a: kernel_module(k, a, config, triple)[1], kernel, ast)
        return list(out.items())

    def metadata(self) -> str:
        """JSON description of the entry point (inputs, outputs, sizes).

        An output with a data-dependent extent (a str dim in ``shape``) also has
        ``max_shape``, the shape of the buffer the caller passes, and ``counts``: per dim,
        null or the index ``k`` of the extra output (after the graph's outputs, an int64[1]
        the caller passes too) that holds the dim's extent after the run. ``count_outputs``
        says how many such extra outputs the entry point takes.
        """
        program = self.program
        slot = {c: k for k, c in enumerate(program.counts)}

        def describe(vs: Sequence) -> list[dict]:
            out = []
            for v in vs:
                d: dict = {"name": v.name, "dtype": v.dtype, "shape": list(v.shape)}
                dyn = program.dynamic.get(v.name)
                if dyn is not None:
                    d["max_shape"] = list(dyn.shape)
                    d["counts"] = [slot[c] if c else None for c in dyn.counts]
                out.append(d)
            return out
        return json.dumps({"name": self.graph.name, "inputs": describe(program.inputs),
                           "outputs": describe(program.outputs),
                           "count_outputs": len(program.counts),
                           "workspace_bytes": self.plan.workspace_size,
                           "weights_bytes": self.plan.weights_size})


def compile_graph(graph: Graph, options: Options | None = None,
                  schedules: Mapping[str, TraceLike] | None = None, *,
                  trees: bool = False) -> Compiled:
    """``trees``: keep every kernel's schedule tree (see :func:`schedule`)."""
    options = options or Options()
    program = lower(graph)
    scheduled = schedule(program, options, schedules, trees=trees)
    # A trace's staging verbs (cache_read, pack ...) change its kernel (new temp buffers): the
    # program runs the scheduled kernels, so memory is planned after scheduling.
    kernels = tuple(s.kernel if s is not None else k
                    for k, (s, _) in zip(program.kernels, scheduled, strict=True))
    if any(a is not b for a, b in zip(kernels, program.kernels, strict=True)):
        program = dataclasses.replace(program, kernels=kernels)
    plan = plan_memory(program)
    asts = tuple((k, loops) for k, (_, loops) in zip(program.kernels, scheduled, strict=True))
    digest = hashlib.sha1(graph.name.encode()).hexdigest()[:6]
    return Compiled(graph, program, plan, tuple(s for s, _ in scheduled), asts, options,
                    f"polyonnx_{digest}_{next(_module_ids)}")


def compile(model: ModelSource | onnx.ModelProto, options: Options | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            schedules: Mapping[str, TraceLike] | None = None) -> Compiled:
    """Compile a model (path, bytes or ModelProto) through every stage up to the LLVM module.
    ``schedules`` maps kernel names or signatures to schedule traces (JSON text, decoded JSON
    or :class:`~polyonnx.schedule.trace.Trace`) used instead of the default schedules.

    Example:
        >>> c = compile("model.onnx")                  # doctest: +SKIP
        >>> c.program.kernels[0].name                  # doctest: +SKIP
        'k0_Conv'
    """
    return compile_graph(to_graph(model, input_shapes, options), options, schedules)


def emit(model: ModelSource | onnx.ModelProto, stage: str, options: Options | None = None,
         input_shapes: Mapping[str, Sequence[int]] | None = None) -> str | bytes:
    """The printed form of ``stage`` for ``model`` (text, or bytes for ``obj``)."""
    if stage not in STAGES:
        raise PolyonnxError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    options = options or Options()
    if stage == "onnx":
        return onnx.printer.to_text(load_model(model))
    graph = to_graph(model, input_shapes, options)
    if stage == "graph":
        return str(graph)
    program = lower(graph)
    if stage == "krnl":
        return str(program)
    # The isl stages print schedule trees, which cached loops and forked workers do not keep.
    compiled = compile_graph(graph, dataclasses.replace(options, cache=False), trees=True)
    if stage == "isl":
        return "\n\n".join(describe_isl(s) for s in compiled.scheduled)
    if stage == "ast":
        return "\n\n".join(f"// kernel {s.kernel.name}\n{build_ast(s.schedule).to_C_str()}"
                           for s in compiled.scheduled)
    from polyonnx.codegen import aot  # codegen back end: only needed from here on

    if stage == "llvm":
        return aot.optimized_ir(compiled)
    if stage == "asm":
        return aot.assembly(compiled)
    if stage == "obj":
        return aot.object_code(compiled)
    raise PolyonnxError("--emit lib writes a file: use `polyonnx compile MODEL -o OUT.so`")


def describe_isl(s: ScheduledKernel) -> str:
    """A kernel's isl objects: domain, accesses, dependences and schedule tree."""
    deps = s.poly.dependences()
    return "\n".join([
        f"// kernel {s.kernel.name}",
        f"domain: {s.poly.domain}",
        f"reads: {s.poly.reads}",
        f"writes: {s.poly.writes}",
        f"dependences (RAW): {deps.raw}",
        f"dependences (WAR): {deps.war}",
        f"dependences (WAW): {deps.waw}",
        f"schedule: {s.schedule}",
    ])
