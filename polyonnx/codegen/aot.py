"""Ahead-of-time output: optimized LLVM IR, assembly, object code and shared libraries.

A shared library is the model's object code plus its weights (assembled from a binary blob with
``.incbin``, so no weight ever goes through LLVM's text IR), linked with the target's C compiler
(the host's, or a cross compiler: :mod:`polyonnx.codegen.toolchain`).
It exports the C API in the header written beside it::

    int polyonnx_run(void *const *inputs, void *const *outputs);   /* 0 on success */
    int polyonnx_run_in(void *const *inputs, void *const *outputs, void *workspace);
    size_t polyonnx_workspace_size(void);
    const char *polyonnx_metadata(void);                             /* JSON: inputs, outputs */

``polyonnx_run`` allocates a workspace per call; ``polyonnx_run_in`` runs in one the caller
keeps: ``polyonnx_workspace_size()`` bytes, 64-byte aligned, zeroed before its first run and
then left to the model (one run at a time in it).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import llvmlite.binding as llvm
from llvmlite import ir

from polyonnx.codegen.builtins import BUILTINS, builtins_module
from polyonnx.codegen.elf import undefined_symbols
from polyonnx.codegen.jit import parse_and_optimize
from polyonnx.codegen.module import WEIGHTS_SYMBOL
from polyonnx.codegen.objects import compile_objects
from polyonnx.codegen.parallel_runtime import CFLAGS, ENTRY, SOURCE
from polyonnx.codegen.target import LLVM_LOCK, target_machine
from polyonnx.codegen.toolchain import c_compiler
from polyonnx.errors import CodegenError
from polyonnx.graph.ir import Graph
from polyonnx.graph.strings import string_width
from polyonnx.krnl.memory import MemoryPlan
from polyonnx.krnl.program import Program
from polyonnx.options import Options


class CompiledModel(Protocol):
    """What ahead-of-time output reads of a compiled model: :class:`polyonnx.compiled.Compiled`
    (a layer above codegen, which it builds its modules with)."""

    @property
    def graph(self) -> Graph: ...

    @property
    def program(self) -> Program: ...

    @property
    def plan(self) -> MemoryPlan: ...

    @property
    def options(self) -> Options: ...

    def module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The whole model in one LLVM module."""
        ...

    def entry_module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The entry point alone, calling the kernels of :meth:`kernel_modules`."""
        ...

    def kernel_modules(self, triple: str = "") -> Sequence[tuple[str, Callable[[], ir.Module]]]:
        """Each distinct kernel function: its symbol and how to make its module."""
        ...


def _machine_and_module(compiled: CompiledModel) -> tuple[llvm.TargetMachine, llvm.ModuleRef]:
    tm = target_machine(compiled.options)
    return tm, parse_and_optimize(
        compiled.module(aot=True, triple=tm.triple), tm, compiled.options.opt_level
    )


def optimized_ir(compiled: CompiledModel) -> str:
    with LLVM_LOCK:
        return str(_machine_and_module(compiled)[1])


def assembly(compiled: CompiledModel) -> str:
    with LLVM_LOCK:
        tm, mod = _machine_and_module(compiled)
        return tm.emit_assembly(mod)


def object_code(compiled: CompiledModel) -> bytes:
    with LLVM_LOCK:
        tm, mod = _machine_and_module(compiled)
        return tm.emit_object(mod)


def _builtins_object(compiled: CompiledModel) -> bytes:
    """:mod:`polyonnx.codegen.builtins` as object code for the library, hidden."""
    with LLVM_LOCK:
        tm = target_machine(compiled.options)
        ref = parse_and_optimize(builtins_module(tm.triple), tm, 3)
        for name in BUILTINS:  # (llvmlite's IR builder does not print a visibility)
            ref.get_function(name).visibility = "hidden"
        return tm.emit_object(ref)


def header(compiled: CompiledModel) -> str:
    """A C header describing the library's entry point and tensors."""
    lines = [
        f"/* polyonnx: compiled model {compiled.graph.name!r}. */",
        "#pragma once",
        "#include <stddef.h>",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "/* Run the model. inputs[i] / outputs[j] point to dense row-major tensors:",
    ]
    program = compiled.program
    for kind, values in (("input", program.inputs), ("output", program.outputs)):
        for i, v in enumerate(values):
            lines.append(f" *   {kind} {i}: {v.name!r} {v.dtype}[{', '.join(map(str, v.shape))}]")
            dyn = program.dynamic.get(v.name)
            if dyn is not None:  # data-dependent extent: a maximal buffer plus its count
                first = len(values)
                where = ", ".join(
                    f"dim {d} = *(int64_t *)outputs[{first + program.counts.index(c)}]"
                    for d, c in enumerate(dyn.counts)
                    if c
                )
                shape = ", ".join(map(str, dyn.shape))
                lines.append(
                    f" *     pass a buffer of [{shape}]; after the run {where}; the "
                    "valid part is the leading corner of the buffer"
                )
    for k, c in enumerate(program.counts):
        lines.append(
            f" *   output {len(program.outputs) + k}: {c!r} int64[1] (an extent, "
            "written by the run)"
        )
    lines += [
        " * Returns 0 on success, non-zero when a run-time check failed or memory ran out. */",
        "int polyonnx_run(void *const *inputs, void *const *outputs);",
        "/* The same in a workspace the caller keeps: polyonnx_workspace_size() bytes, 64-byte",
        " * aligned, zeroed before its first run and then left to the model (one run at a",
        " * time in it). Saves allocating one per call. */",
        "int polyonnx_run_in(void *const *inputs, void *const *outputs, void *workspace);",
        "size_t polyonnx_workspace_size(void);",
        "/* JSON describing the inputs and outputs (name, dtype, shape). */",
        "const char *polyonnx_metadata(void);",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
    ]
    return "\n".join(lines)


def write_library(compiled: CompiledModel, path: str | os.PathLike) -> Path:
    """Write ``path`` (a shared library) and ``path`` with suffix ``.h`` (its C header),
    linked by the target's C compiler (:func:`polyonnx.codegen.toolchain.c_compiler`: the
    host's, or a cross compiler for ``options.target``)."""
    strings = [
        v.name
        for v in (*compiled.program.inputs, *compiled.program.outputs)
        if string_width(v.dtype) is not None
    ]
    if strings:
        raise CodegenError(
            f"{path}: shared libraries take and return numeric tensors; {strings} are string "
            "tensors (run string models with InferenceSession)"
        )
    out = Path(path)
    triple = target_machine(compiled.options).triple
    cc = c_compiler(triple)
    kernels = compile_objects(compiled.kernel_modules(triple), compiled.options, jit=False)
    entry = compile_objects(
        [("entry", lambda: compiled.entry_module(aot=True, triple=triple))],
        replace(compiled.options, cache=False),
        jit=False,
    )["entry"]
    with tempfile.TemporaryDirectory(prefix="polyonnx-") as tmp:
        t = Path(tmp)
        objects = [t / "model.o"]
        objects[0].write_bytes(entry)
        for k, code in enumerate(kernels.values()):
            objects.append(t / f"kernel{k}.o")
            objects[-1].write_bytes(code)
        if any(BUILTINS.keys() & (undefined_symbols(code) or ()) for code in kernels.values()):
            # The runtime functions LLVM called, from polyonnx (the C compiler's own runtime
            # may predate them: GCC 12's cross libgcc has none of them), not exported.
            objects.append(t / "builtins.o")
            objects[-1].write_bytes(_builtins_object(compiled))
        (t / "weights.bin").write_bytes(compiled.plan.weights_blob(compiled.program).tobytes())
        (t / "weights.s").write_text(
            f"\t.section .rodata\n\t.globl {WEIGHTS_SYMBOL}\n\t.balign 64\n{WEIGHTS_SYMBOL}:\n"
            f'\t.incbin "{t / "weights.bin"}"\n\t.section .note.GNU-stack,"",%progbits\n'
        )
        # (-z defs: a function nothing defines fails the link, not a call at run time)
        cmd = [
            cc,
            "-shared",
            "-Wl,-z,defs",
            "-o",
            str(out),
            *map(str, objects),
            str(t / "weights.s"),
            "-lm",
        ]
        if any(ENTRY.encode() in code for code in kernels.values()):
            cmd += [*CFLAGS, "-fPIC", str(SOURCE)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CodegenError(f"linking {out} failed: {proc.stderr.strip()}")
    out.with_suffix(".h").write_text(header(compiled))
    return out
