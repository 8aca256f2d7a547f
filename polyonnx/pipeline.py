"""The one linear pipeline from an ONNX model to native code.

Each stage is a function of the previous stage's result plus options, and every stage prints::

    onnx   load, check, upgrade opset, infer shapes           (frontend)
    graph  import, fold, simplify, fold BN, DCE, blocked layout (graph passes)
    krnl   fusion groups lowered to loop-nest kernels, then   (krnl)
           the krnl passes (``after``: stop after one)
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

import contextlib
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence

import onnx

from polyonnx import cache
from polyonnx.codegen import aot
from polyonnx.codegen import loopast as la
from polyonnx.codegen.target import l1_data_bytes, thread_count, vector_bits
from polyonnx.compiled import Compiled
from polyonnx.errors import PolyonnxError, ScheduleError
from polyonnx.forked import forked_map
from polyonnx.frontend.importer import import_model
from polyonnx.frontend.load import ModelSource, load_model
from polyonnx.graph.ir import Graph
from polyonnx.graph.passes import optimize
from polyonnx.graph.passes.fuse import fuse
from polyonnx.graph.passes.layout import blocked_layout
from polyonnx.graph.validate import validate
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import plan_memory
from polyonnx.krnl.passes import AFTER
from polyonnx.krnl.program import Program, build_program
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.budget import isl_exclusive, schedule_kernel
from polyonnx.schedule.default import ScheduledKernel, Tiling, default_schedule
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.trace import TraceLike, replay_schedules

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


def lower(graph: Graph, *, after: str | None = None) -> Program:
    """Fusion grouping and lowering of every group to a krnl kernel, each through the krnl
    passes (:data:`polyonnx.krnl.passes.PASSES`; up to the one named ``after`` when given)."""
    return build_program(graph, [g.nodes for g in fuse(graph)], after=after)


#: Distinct kernels to schedule below which a pool of forked processes costs more than it saves.
PARALLEL_MIN_KERNELS = 8


def schedule(program: Program, options: Options,
             schedules: Mapping[str, TraceLike] | None = None, *, trees: bool = False
             ) -> tuple[tuple[ScheduledKernel | None, tuple[la.LNode, ...]], ...]:
    """The schedule tree of every kernel and the loops isl generates from it (read into
    codegen's loop AST), within the isl budget (a kernel over it falls back to its own loop
    order: see :mod:`polyonnx.schedule.budget`). ``schedules`` maps kernel names or
    signatures to traces that replace the default strategy (see
    :func:`polyonnx.schedule.trace.replay_schedules`).

    The schedule of a default-scheduled kernel is None when its loops came from the on-disk
    cache (``options.cache``: that kernel, by signature, was scheduled before) or from a
    forked worker process (a model with at least :data:`PARALLEL_MIN_KERNELS` distinct
    kernels to schedule is scheduled by a pool, one process per core). With ``trees``, every
    kernel not served by the cache is scheduled in this process and keeps its schedule.
    """
    threads = thread_count(options)
    tiling = Tiling.for_vector_bits(vector_bits(options), threads, l1_data_bytes(options))
    # On one thread no loop runs in parallel: no parallel loops to prove (a third of the
    # default strategy's isl work).
    strategy = functools.partial(default_schedule, tiling=tiling, parallel=threads > 1)
    chosen = {i: s.scheduled() for i, s in replay_schedules(program.kernels,
                                                             schedules or {}).items()}
    # Kernels that differ only in their buffers (ResNet50 repeats most of its convolutions)
    # share one schedule and one AST.
    by_signature: dict[str, tuple[ScheduledKernel | None, tuple[la.LNode, ...]]] = {}
    todo: dict[str, Kernel] = {}  # signature -> the first kernel with it, not in the cache
    signatures = [None if i in chosen else kernel_signature(k)
                  for i, k in enumerate(program.kernels)]
    for sig, k in zip(signatures, program.kernels, strict=True):
        if sig is None or sig in by_signature or sig in todo:
            continue
        hit = cache.get("loops", _loops_key(sig, tiling, options)) if options.cache else None
        if hit is not None:
            by_signature[sig] = None, la.from_data(json.loads(hit))
        else:
            todo[sig] = k
    workers = min(len(todo), os.cpu_count() or 1)
    if not trees and workers > 1 and len(todo) >= PARALLEL_MIN_KERNELS:
        by_signature.update(_forked_loops(todo, strategy, options, workers))
    for sig, k in todo.items():
        if sig not in by_signature:
            scheduled, ast = schedule_kernel(k, strategy, options)
            by_signature[sig] = scheduled, la.from_isl(ast)
        if options.cache:
            cache.put("loops", _loops_key(sig, tiling, options),
                      json.dumps(la.to_data(by_signature[sig][1])).encode())
    out = []
    for i, (sig, k) in enumerate(zip(signatures, program.kernels, strict=True)):
        if sig is None:
            out.append((chosen[i], la.from_isl(build_ast(chosen[i].schedule))))
            continue
        first, loops = by_signature[sig]
        out.append((dataclasses.replace(first, kernel=k) if first else None, loops))
    return tuple(out)


def _loops_key(signature: str, tiling: Tiling, options: Options) -> str:
    return cache.key("loops", signature, repr(tiling), str(options.isl_max_operations))


_Job = tuple[Kernel, Callable[[Kernel], ScheduledKernel], Options]

def _forked_loops(todo: Mapping[str, Kernel], strategy: Callable[[Kernel], ScheduledKernel],
                  options: Options, workers: int
                  ) -> dict[str, tuple[None, tuple[la.LNode, ...]]]:
    """The loops of the kernels in ``todo`` (by signature), scheduled by a pool of forked
    processes. A kernel whose worker failed is left out: the caller schedules it again in this
    process, which raises the error as if there had been no pool (scheduling is
    deterministic). What a worker printed on stderr (``Options.verbose``) is printed here."""
    sigs = list(todo)
    # Most statements first, so that no worker is left alone with a long kernel at the end.
    order = sorted(range(len(sigs)), key=lambda j: -sum(1 for _ in todo[sigs[j]].statements()))
    jobs = [(todo[sigs[j]], strategy, options) for j in order]
    # fork: the workers inherit the jobs (initargs are not pickled with fork) and need no
    # imports; no thread of ours is inside isl while the process is copied.
    with isl_exclusive():
        results = forked_map(_forked_job, jobs, workers, ScheduleError)
    out: dict[str, tuple[None, tuple[la.LNode, ...]]] = {}
    for j, (data, err) in sorted(zip(order, results, strict=True)):
        if data is not None:
            sys.stderr.write(err)
            out[sigs[j]] = None, la.from_data(data)
    return out


def _forked_job(job: _Job) -> tuple[list | None, str]:
    """One kernel's loops as data (JSON-able) and its stderr; None on any error (in a worker)."""
    kernel, strategy, options = job
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _, ast = schedule_kernel(kernel, strategy, options)
            return la.to_data(la.from_isl(ast)), err.getvalue()
    except Exception:  # the parent schedules the kernel again, to raise the error itself
        return None, ""


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
         input_shapes: Mapping[str, Sequence[int]] | None = None, *,
         after: str | None = None) -> str | bytes:
    """The printed form of ``stage`` for ``model`` (text, or bytes for ``obj``).

    ``after`` (``krnl`` only) prints the kernels as they are after the krnl pass of that name
    (:data:`polyonnx.krnl.passes.AFTER`), or as lowered, before any pass, for ``"lower"``.

    Example:
        >>> print(emit("model.onnx", "krnl", after="lower"))   # doctest: +SKIP
    """
    if stage not in STAGES:
        raise PolyonnxError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    if after is not None and (stage != "krnl" or after not in AFTER):
        raise PolyonnxError(f"after={after!r} shows the kernels after a krnl pass: it needs "
                            f"stage 'krnl' and one of {', '.join(AFTER)}")
    options = options or Options()
    if stage == "onnx":
        return onnx.printer.to_text(load_model(model))
    graph = to_graph(model, input_shapes, options)
    if stage == "graph":
        return str(graph)
    if stage == "krnl":
        return str(lower(graph, after=after))
    # The isl stages print schedule trees, which cached loops and forked workers do not keep.
    compiled = compile_graph(graph, dataclasses.replace(options, cache=False), trees=True)
    if stage == "isl":
        return "\n\n".join(describe_isl(s) for s in compiled.scheduled)
    if stage == "ast":
        return "\n\n".join(f"// kernel {s.kernel.name}\n{build_ast(s.schedule).to_C_str()}"
                           for s in compiled.scheduled)
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
