"""The one linear pipeline from an ONNX model to native code.

Each stage is a function of the previous stage's result plus options, and every stage prints::

    onnx   load, check, upgrade opset, infer shapes           (frontend)
    graph  import, bfloat16 in float32, fold, simplify,       (graph passes)
           fold BN, DCE, blocked layout, MatMul panel widths
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

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping, Sequence

import onnx

from polyonnx.codegen import aot
from polyonnx.codegen.target import dot4_bits
from polyonnx.compiled import Compiled
from polyonnx.errors import PolyonnxError
from polyonnx.frontend.importer import CONTROL_FLOW, import_model
from polyonnx.frontend.load import ModelSource, load_model
from polyonnx.graph.ir import Graph
from polyonnx.graph.passes import optimize
from polyonnx.graph.passes.bfloat16 import compute_bfloat16
from polyonnx.graph.passes.dense import conv_as_gemm
from polyonnx.graph.passes.fuse import fuse
from polyonnx.graph.passes.layout import blocked_layout
from polyonnx.graph.passes.panels import matmul_panels
from polyonnx.graph.passes.pixels import flat_pixels, flat_rows
from polyonnx.graph.passes.strings import type_strings
from polyonnx.graph.passes.winograd import winograd_convs
from polyonnx.graph.validate import validate
from polyonnx.krnl.lower.registry import has_lowering
from polyonnx.krnl.memory import plan_memory
from polyonnx.krnl.passes import AFTER
from polyonnx.krnl.program import VIEW_OPS, Program, build_program
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.scheduled import ScheduledKernel
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.trace import TraceLike
from polyonnx.schedule_driver import KernelLoops, schedule_program, target_tiling

STAGES = ("onnx", "graph", "krnl", "isl", "ast", "llvm", "asm", "obj", "lib")

_module_ids = itertools.count()


def to_graph(
    model: ModelSource | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    options: Options | None = None,
    string_widths: Mapping[str, int] | None = None,
) -> Graph:
    """Frontend, validation and graph passes: an optimized graph with static shapes.
    ``string_widths`` gives the width (longest string) of each string input
    (:mod:`polyonnx.graph.strings`)."""
    options = options or Options()
    graph = type_strings(import_model(model, input_shapes, expand=_expanded), string_widths or {})
    graph = compute_bfloat16(validate(graph, options.max_tensor_bytes))
    graph = optimize(graph, dot4=dot4_bits(options) > 0)
    # (Guarded nodes, the branches of an If, keep NCHW: layout conversions run unguarded.)
    unguarded = not any(n.guard for n in graph.nodes)
    tiling = target_tiling(options)
    if unguarded:
        graph = choose_layouts(graph, tiling if options.channel_blocks else None)
    return matmul_panels(graph, tiling.vector)


def choose_layouts(graph: Graph, tiling: Tiling | None) -> Graph:
    """The layout passes: the convolutions that fit channel blocks of ``tiling`` blocked
    (None: none), the 3x3 ones among them that pay for it as Winograd convolutions; then,
    of the convolutions left in ONNX's layout, those that are fully-connected layers as
    ``Gemm`` and the 1x1 ones on one row of pixels; MatMuls of a batched ``A`` by a 2-D
    ``B`` on all of ``A``'s rows at once."""
    if tiling is not None:
        graph = blocked_layout(graph, *channel_blocks(tiling))
        graph = winograd_convs(graph, tiling.lanes)
    return flat_rows(flat_pixels(conv_as_gemm(graph)))


def channel_blocks(tiling: Tiling) -> tuple[int, int]:
    """The channel blocks of the blocked layout under ``tiling``: (block, smallest). A block
    is one register tile wide; one vector is allowed where the tiles hold two blocks side by
    side (32 vector registers: AVX-512), where it ran as fast (docs/performance.md)."""
    return tiling.vector, tiling.vector // 2 if tiling.paired_rows else tiling.vector


def _expanded(op_type: str, opset: int) -> bool:
    """An op with no lowering (nor a place elsewhere: views, control flow, constants) but an
    ONNX function body compiles as that body."""
    handled = op_type in VIEW_OPS or op_type in CONTROL_FLOW or op_type == "Constant"
    return not handled and not has_lowering(op_type, opset)


def lower(graph: Graph, tiling: Tiling | None = None, *, after: str | None = None) -> Program:
    """Fusion grouping and lowering of every group to a krnl kernel, each through the krnl
    passes (:data:`polyonnx.krnl.passes.PASSES`; up to the one named ``after`` when given),
    for the target ``tiling`` describes (default: the host's, :func:`target_tiling`)."""
    tiling = tiling or target_tiling(Options())
    tile_bytes = 4 * tiling.vector  # a register tile's width of float32
    return build_program(graph, [g.nodes for g in fuse(graph)], after=after, tile_bytes=tile_bytes)


def schedule(
    program: Program,
    options: Options,
    schedules: Mapping[str, TraceLike] | None = None,
    *,
    trees: bool = False,
) -> tuple[KernelLoops, ...]:
    """Every kernel's schedule and loops (see :func:`polyonnx.schedule_driver.schedule_program`:
    shared by signature, cached, forked, within the isl budget)."""
    return schedule_program(program, options, schedules, trees=trees)


def compile_graph(
    graph: Graph,
    options: Options | None = None,
    schedules: Mapping[str, TraceLike] | None = None,
    *,
    trees: bool = False,
) -> Compiled:
    """``trees``: keep every kernel's schedule tree (see :func:`schedule`)."""
    options = options or Options()
    program = lower(graph, target_tiling(options))
    scheduled = schedule(program, options, schedules, trees=trees)
    # A trace's staging verbs (cache_read, pack ...) change its kernel (new temp buffers): the
    # program runs the scheduled kernels, so memory is planned after scheduling.
    kernels = tuple(
        s.kernel if s is not None else k
        for k, (s, _) in zip(program.kernels, scheduled, strict=True)
    )
    if any(a is not b for a, b in zip(kernels, program.kernels, strict=True)):
        program = dataclasses.replace(program, kernels=kernels)
    plan = plan_memory(program)
    asts = tuple((k, loops) for k, (_, loops) in zip(program.kernels, scheduled, strict=True))
    digest = hashlib.sha1(graph.name.encode()).hexdigest()[:6]
    return Compiled(
        graph,
        program,
        plan,
        tuple(s for s, _ in scheduled),
        asts,
        options,
        f"polyonnx_{digest}_{next(_module_ids)}",
    )


def compile(
    model: ModelSource | onnx.ModelProto,
    options: Options | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    schedules: Mapping[str, TraceLike] | None = None,
    string_widths: Mapping[str, int] | None = None,
) -> Compiled:
    """Compile a model (path, bytes or ModelProto) through every stage up to the LLVM module.
    ``schedules`` maps kernel names or signatures to schedule traces (JSON text, decoded JSON
    or :class:`~polyonnx.schedule.trace.Trace`) used instead of the default schedules;
    ``string_widths`` the width of each string input (see :func:`to_graph`).

    Example:
        >>> from polyonnx.testing.examples import conv_model
        >>> c = compile(conv_model())
        >>> c.program.kernels[0].name, c.program.kernels[0].ops
        ('k0_Conv', ('conv', 'relu'))
    """
    graph = to_graph(model, input_shapes, options, string_widths)
    return compile_graph(graph, options, schedules)


def emit(
    model: ModelSource | onnx.ModelProto,
    stage: str,
    options: Options | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    *,
    after: str | None = None,
) -> str | bytes:
    """The printed form of ``stage`` for ``model`` (text, or bytes for ``obj``).

    ``after`` (``krnl`` only) prints the kernels as they are after the krnl pass of that name
    (:data:`polyonnx.krnl.passes.AFTER`), or as lowered, before any pass, for ``"lower"``.

    Example:
        >>> from polyonnx.testing.examples import conv_model
        >>> print(emit(conv_model(), "krnl", after="lower"))  # doctest: +ELLIPSIS
        kernel k0_Conv(in x: float32[1, 8, 8, 8], ...) {
        ...
                  S: y[i0, i1, i2, i3] = max(bn[i0, i1, i2, i3], 0.0)
        }
    """
    if stage not in STAGES:
        raise PolyonnxError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    if after is not None and (stage != "krnl" or after not in AFTER):
        raise PolyonnxError(
            f"after={after!r} shows the kernels after a krnl pass: it needs "
            f"stage 'krnl' and one of {', '.join(AFTER)}"
        )
    options = options or Options()
    if stage == "onnx":
        return onnx.printer.to_text(load_model(model))
    graph = to_graph(model, input_shapes, options)
    if stage == "graph":
        return str(graph)
    if stage == "krnl":
        return str(lower(graph, target_tiling(options), after=after))
    # The isl stages print schedule trees, which cached loops and forked workers do not keep.
    compiled = compile_graph(graph, dataclasses.replace(options, cache=False), trees=True)
    trees = [s for s in compiled.scheduled if s is not None]  # every one, with trees=True
    if stage == "isl":
        return "\n\n".join(describe_isl(s) for s in trees)
    if stage == "ast":
        return "\n\n".join(
            f"// kernel {s.kernel.name}\n{build_ast(s.schedule).to_C_str()}" for s in trees
        )
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
    return "\n".join(
        [
            f"// kernel {s.kernel.name}",
            f"domain: {s.poly.domain}",
            f"reads: {s.poly.reads}",
            f"writes: {s.poly.writes}",
            f"dependences (RAW): {deps.raw}",
            f"dependences (WAR): {deps.war}",
            f"dependences (WAW): {deps.waw}",
            f"schedule: {s.schedule}",
        ]
    )
