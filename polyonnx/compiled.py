"""A compiled model: every pipeline stage's result, and the LLVM modules made from them.

:func:`polyonnx.compile` returns one; :class:`polyonnx.InferenceSession` JIT-compiles its
modules, :func:`polyonnx.codegen.aot.write_library` writes them as a shared library.

Example:
    >>> import polyonnx
    >>> from polyonnx.testing.examples import conv_model
    >>> c = polyonnx.compile(conv_model())
    >>> [k.name for k in c.program.kernels]
    ['k0_Conv']
    >>> print(c.module())  # doctest: +ELLIPSIS
    ; ModuleID = "polyonnx_..."
    ...
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.module import CodegenConfig, build_module, kernel_module, kernel_symbol
from polyonnx.codegen.target import codegen_config
from polyonnx.graph.ir import Graph
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.memory import MemoryPlan
from polyonnx.krnl.program import Program
from polyonnx.options import Options
from polyonnx.schedule.scheduled import ScheduledKernel


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
        return codegen_config(self.options)

    @functools.cached_property
    def symbols(self) -> tuple[str, ...]:
        """Each kernel's function name (:func:`polyonnx.codegen.module.kernel_symbol`)."""
        config = self.config
        return tuple(kernel_symbol(k, ast, config) for k, ast in self.asts)

    def module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The whole model in one LLVM module (what ``--emit llvm|asm|obj`` shows)."""
        return self._module(aot, triple, with_kernels=True)

    def entry_module(self, *, aot: bool = False, triple: str = "") -> ir.Module:
        """The entry point alone, calling kernels declared from :meth:`kernel_modules`."""
        return self._module(aot, triple, with_kernels=False)

    def _module(self, aot: bool, triple: str, *, with_kernels: bool) -> ir.Module:
        return build_module(
            self.program,
            self.plan,
            self.asts,
            prefix=self.prefix,
            config=self.config,
            aot=aot,
            metadata=self.metadata(),
            triple=triple,
            with_kernels=with_kernels,
            symbols=self.symbols,
        )

    def kernel_modules(self, triple: str = "") -> list[tuple[str, Callable[[], ir.Module]]]:
        """Each distinct kernel function: its symbol and how to make its module."""
        config = self.config
        out: dict[str, Callable[[], ir.Module]] = {}
        for (kernel, ast), symbol in zip(self.asts, self.symbols, strict=True):
            if symbol not in out:
                out[symbol] = functools.partial(
                    lambda k, a: kernel_module(k, a, config, triple)[1], kernel, ast
                )
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
                    # (A string's buffer has one more axis, its code points: not the value's.)
                    rank = len(v.shape)
                    d["max_shape"] = list(dyn.shape[:rank])
                    d["counts"] = [slot[c] if c else None for c in dyn.counts[:rank]]
                out.append(d)
            return out

        return json.dumps(
            {
                "name": self.graph.name,
                "inputs": describe(program.inputs),
                "outputs": describe(program.outputs),
                "count_outputs": len(program.counts),
                "workspace_bytes": self.plan.workspace_size,
                "weights_bytes": self.plan.weights_size,
            }
        )
