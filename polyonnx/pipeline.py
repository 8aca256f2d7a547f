"""The one linear pipeline from an ONNX model to native code.

Each stage is a function of the previous stage's result plus options, and every stage prints::

    onnx   load, check, upgrade opset, infer shapes           (frontend)
    graph  import, fold, simplify, fold BN, DCE               (graph passes)
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import onnx
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.module import build_module
from polyonnx.codegen.target import thread_count, vector_bits
from polyonnx.errors import PolyonnxError
from polyonnx.frontend.importer import import_model
from polyonnx.frontend.load import ModelSource, load_model
from polyonnx.graph.ir import Graph
from polyonnx.graph.passes import optimize
from polyonnx.graph.passes.fuse import fuse
from polyonnx.graph.validate import validate
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import MemoryPlan, plan_memory
from polyonnx.krnl.program import Program, build_program
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.budget import schedule_kernel
from polyonnx.schedule.default import ScheduledKernel, Tiling, default_schedule
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.trace import TraceLike, replay_schedules

if TYPE_CHECKING:
    import islpy as isl

STAGES = ("onnx", "graph", "krnl", "isl", "ast", "llvm", "asm", "obj", "lib")

_module_ids = itertools.count()


def to_graph(model: ModelSource | onnx.ModelProto,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             options: Options | None = None) -> Graph:
    """Frontend, validation and graph passes: an optimized graph with static shapes."""
    limit = (options or Options()).max_tensor_bytes
    return optimize(validate(import_model(load_model(model), input_shapes), limit))


def lower(graph: Graph) -> Program:
    """Fusion grouping and lowering of every group to a krnl kernel."""
    return build_program(graph, [g.nodes for g in fuse(graph)])


def schedule(program: Program, options: Options,
             schedules: Mapping[str, TraceLike] | None = None
             ) -> tuple[tuple[ScheduledKernel, isl.AstNode], ...]:
    """The polyhedral model, schedule tree and isl AST of every kernel, within the isl budget
    (a kernel over it falls back to its own loop order: see :mod:`polyonnx.schedule.budget`).
    ``schedules`` maps kernel names or signatures to traces that replace the default strategy
    (see :func:`polyonnx.schedule.trace.replay_schedules`)."""
    tiling = Tiling.for_vector_bits(vector_bits(options))
    strategy = functools.partial(default_schedule, tiling=tiling)
    chosen = {i: s.scheduled() for i, s in replay_schedules(program.kernels,
                                                             schedules or {}).items()}
    # Kernels that differ only in their buffers (ResNet50 repeats most of its convolutions)
    # share one schedule and one AST.
    by_signature: dict[str, tuple[ScheduledKernel, isl.AstNode]] = {}
    out = []
    for i, k in enumerate(program.kernels):
        if i in chosen:
            out.append((chosen[i], build_ast(chosen[i].schedule)))
            continue
        sig = kernel_signature(k)
        if sig not in by_signature:
            by_signature[sig] = schedule_kernel(k, strategy, options)
        first, ast = by_signature[sig]
        out.append((dataclasses.replace(first, kernel=k), ast))
    return tuple(out)


def generate(scheduled: Sequence[tuple[ScheduledKernel, isl.AstNode]]
             ) -> tuple[tuple[Kernel, tuple[la.LNode, ...]], ...]:
    """isl's AST of each kernel, read into codegen's loop AST."""
    return tuple((s.kernel, la.from_isl(ast)) for s, ast in scheduled)


@dataclass(frozen=True)
class Compiled:
    """A compiled model: every stage's result, ready to JIT or to write as a library."""

    graph: Graph
    program: Program
    plan: MemoryPlan
    scheduled: tuple[ScheduledKernel, ...]
    asts: tuple[tuple[Kernel, tuple[la.LNode, ...]], ...]
    options: Options
    prefix: str

    @property
    def entry(self) -> str:
        return f"{self.prefix}_run"

    def module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        return build_module(self.program, self.plan, self.asts, prefix=self.prefix,
                            checked=self.options.checked, aot=aot, metadata=self.metadata(),
                            triple=triple, vector_bits=vector_bits(self.options),
                            threads=thread_count(self.options))

    def metadata(self) -> str:
        """JSON description of the entry point (inputs, outputs, sizes)."""
        def describe(vs: Sequence) -> list[dict]:
            return [{"name": v.name, "dtype": v.dtype, "shape": list(v.shape)} for v in vs]
        return json.dumps({"name": self.graph.name, "inputs": describe(self.program.inputs),
                           "outputs": describe(self.program.outputs),
                           "workspace_bytes": self.plan.workspace_size,
                           "weights_bytes": self.plan.weights_size})


def compile_graph(graph: Graph, options: Options | None = None,
                  schedules: Mapping[str, TraceLike] | None = None) -> Compiled:
    options = options or Options()
    program = lower(graph)
    plan = plan_memory(program)
    scheduled = schedule(program, options, schedules)
    asts = generate(scheduled)
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
    compiled = compile_graph(graph, options)
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
