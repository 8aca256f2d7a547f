"""The LLVM module of a whole model: one function per kernel plus the model's entry point.

``i32 @<prefix>_run(ptr inputs, ptr outputs, ptr weights, ptr workspace)`` calls the kernels in
order with pointers resolved from the memory plan; ``inputs``/``outputs`` are arrays of data
pointers in the model's input/output order. It returns 0, or ``(kernel_index + 1) << 8 | status``
of the first kernel that failed a run-time check. A kernel of an If's branch runs only when
its guard holds; the kernels of a run-time loop's body run in a loop
(:mod:`polyonnx.codegen.control_flow`).

For a shared library (``aot=True``) the module also exports the C API described in the header
that :mod:`polyonnx.codegen.aot` writes: ``polyonnx_run(inputs, outputs)`` (weights embedded,
workspace allocated per call), ``polyonnx_run_in(inputs, outputs, workspace)`` with a workspace
the caller keeps (``polyonnx_workspace_size()`` bytes, zeroed before its first use) and
``polyonnx_metadata()`` (a JSON description).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.control_flow import ControlFlow
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.llvm_types import I1, I8, I32, I64, PTR
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import ALIGN, MemoryPlan
from polyonnx.krnl.program import Program
from polyonnx.krnl.window import Windowed, windowed
from polyonnx.schedule.signature import canonical_digest

WEIGHTS_SYMBOL = "polyonnx_weights"


def kernel_symbol(kernel: Kernel, ast: tuple[la.LNode, ...], config: CodegenConfig) -> str:
    """The kernel's function name, derived from what decides its code: equal kernels (up to
    buffer names, as ResNet50 repeats most of its convolutions) with equal loops share one
    function, across models too, and its object code can be cached by name."""
    window = _window(kernel, config).kernel
    text = "\n".join([canonical_digest(window), *map(str, ast), config.key()])
    return "polyonnx_k_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def kernel_module(
    kernel: Kernel, ast: tuple[la.LNode, ...], config: CodegenConfig, triple: str = ""
) -> tuple[str, ir.Module]:
    """One kernel alone in a module (compiled, cached and loaded on its own)."""
    symbol = kernel_symbol(kernel, ast, config)
    module = ir.Module(name=symbol)
    if triple:
        module.triple = triple
    emit_kernel(module, replace(_window(kernel, config).kernel, name=symbol), ast, config)
    return symbol, module


def _window(kernel: Kernel, config: CodegenConfig) -> Windowed:
    """The kernel codegen emits: its window (:mod:`polyonnx.krnl.window`), so that kernels
    that differ only in their place in a buffer share one function, called with pointers
    moved by the window's offsets. Checked code keeps the kernel's own accesses (its bounds
    checks are against the whole buffer)."""
    if config.checked:
        return Windowed(kernel, tuple(0 for _ in kernel.buffers))
    return windowed(kernel)


def build_module(
    program: Program,
    plan: MemoryPlan,
    kernels: Sequence[tuple[Kernel, tuple[la.LNode, ...]]],
    *,
    prefix: str,
    config: CodegenConfig,
    aot: bool = False,
    metadata: str = "",
    triple: str = "",
    with_kernels: bool = True,
    symbols: Sequence[str] | None = None,
) -> ir.Module:
    """The entry point (and, with ``with_kernels``, every kernel function) in one module;
    without ``with_kernels`` the kernels are only declared, to be linked from their own
    modules (:func:`kernel_module`). ``symbols``: the kernels' :func:`kernel_symbol`, when
    the caller has them."""
    module = ir.Module(name=prefix)
    if triple:
        module.triple = triple
    order = _kernel_functions(module, kernels, config, with_kernels, symbols)

    run = ir.Function(module, ir.FunctionType(I32, [PTR] * 4), name=f"{prefix}_run")
    inputs, outputs, weights, workspace = run.args
    for arg, name in zip(run.args, ("inputs", "outputs", "weights", "workspace"), strict=True):
        arg.name = name
    b = ir.IRBuilder(run.append_basic_block("entry"))

    def address(name: str) -> ir.Value:
        slot = plan.slot(program, name)
        if slot.region in ("input", "output"):
            table = inputs if slot.region == "input" else outputs
            p = b.gep(table, [ir.Constant(I64, slot.where)], source_etype=PTR)
            return b.load(p, typ=PTR)
        base = weights if slot.region == "weights" else workspace
        return b.gep(base, [ir.Constant(I64, slot.where)], inbounds=True, source_etype=I8)

    def call(ki: int, kernel: Kernel, fn: ir.Function) -> None:
        args = [address(buf.name) for buf in kernel.buffers]
        for k, offset in enumerate(_window(kernel, config).offsets):
            if offset:  # the kernel's window starts there (see _window)
                size = np.dtype(kernel.buffers[k].dtype).itemsize
                args[k] = b.gep(args[k], [ir.Constant(I64, offset * size)], source_etype=I8)
        rc = b.call(fn, args)
        failed = b.icmp_unsigned("!=", rc, ir.Constant(I32, 0))
        with b.if_then(failed, likely=False):
            b.ret(b.or_(rc, ir.Constant(I32, (ki + 1) << 8)))

    # Kernels of a run-time loop's body run in its loop; a kernel of an If's branch runs
    # when its conditions hold.
    flow = ControlFlow(b, run, program.loops, address)
    for ki, ((kernel, _), fn) in enumerate(zip(kernels, order, strict=True)):
        conditions = flow.move_to(program.guards.get(kernel.name, ()))
        if not conditions:
            call(ki, kernel, fn)
            continue
        with b.if_then(flow.holds(conditions)):
            call(ki, kernel, fn)
    flow.move_to(())
    b.ret(ir.Constant(I32, 0))

    if aot:
        _c_api(module, run, plan, metadata)
    return module


def _kernel_functions(
    module: ir.Module,
    kernels: Sequence[tuple[Kernel, tuple[la.LNode, ...]]],
    config: CodegenConfig,
    with_kernels: bool,
    symbols: Sequence[str] | None,
) -> list[ir.Function]:
    """The function of each kernel, in order: emitted into ``module`` (or declared, without
    ``with_kernels``) once per symbol."""
    functions: dict[str, ir.Function] = {}
    order = []
    if symbols is None:
        symbols = [kernel_symbol(k, ast, config) for k, ast in kernels]
    for (k, ast), symbol in zip(kernels, symbols, strict=True):
        if symbol not in functions:
            if with_kernels:
                emitted = replace(_window(k, config).kernel, name=symbol)
                functions[symbol] = emit_kernel(module, emitted, ast, config)
            else:
                fnty = ir.FunctionType(I32, [PTR] * len(k.buffers))
                functions[symbol] = ir.Function(module, fnty, name=symbol)
        order.append(functions[symbol])
    return order


def _c_api(module: ir.Module, run: ir.Function, plan: MemoryPlan, metadata: str) -> None:
    weights = ir.GlobalVariable(module, ir.ArrayType(I8, 0), name=WEIGHTS_SYMBOL)
    weights.align = ALIGN
    aligned_alloc = ir.Function(module, ir.FunctionType(PTR, [I64, I64]), name="aligned_alloc")
    free = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), name="free")

    # polyonnx_run_in(inputs, outputs, workspace): the caller keeps a zeroed workspace.
    run_in = ir.Function(module, ir.FunctionType(I32, [PTR, PTR, PTR]), name="polyonnx_run_in")
    b = ir.IRBuilder(run_in.append_basic_block("entry"))
    b.ret(b.call(run, [run_in.args[0], run_in.args[1], weights, run_in.args[2]]))
    size = max(plan.workspace_size, ALIGN)
    fn = ir.Function(module, ir.FunctionType(I64, []), name="polyonnx_workspace_size")
    ir.IRBuilder(fn.append_basic_block("entry")).ret(ir.Constant(I64, size))

    # polyonnx_run(inputs, outputs): a workspace of its own per call.
    fn = ir.Function(module, ir.FunctionType(I32, [PTR, PTR]), name="polyonnx_run")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ws = b.call(aligned_alloc, [ir.Constant(I64, ALIGN), ir.Constant(I64, size)])
    with b.if_then(b.icmp_unsigned("==", ws, ir.Constant(PTR, None)), likely=False):
        b.ret(ir.Constant(I32, -1))
    if plan.zeroed_size:  # the zero-bordered buffers' bytes (see MemoryPlan.zeroed_size)
        memset = ir.Function(
            module, ir.FunctionType(ir.VoidType(), [PTR, I8, I64, I1]), name="llvm.memset.p0.i64"
        )
        b.call(
            memset, [ws, ir.Constant(I8, 0), ir.Constant(I64, plan.zeroed_size), ir.Constant(I1, 0)]
        )
    rc = b.call(run, [fn.args[0], fn.args[1], weights, ws])
    b.call(free, [ws])
    b.ret(rc)

    data = bytearray(metadata.encode() + b"\0")
    text = ir.GlobalVariable(module, ir.ArrayType(I8, len(data)), name="polyonnx_metadata_text")
    text.global_constant = True
    text.initializer = ir.Constant(ir.ArrayType(I8, len(data)), data)
    meta = ir.Function(module, ir.FunctionType(PTR, []), name="polyonnx_metadata")
    ir.IRBuilder(meta.append_basic_block("entry")).ret(text)
