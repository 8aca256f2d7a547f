"""One kernel as a Python callable on numpy arrays (for schedule exploration and tests).

Example:
    >>> from polyonnx.codegen.loopast import from_isl
    >>> from polyonnx.schedule.astgen import build_ast
    >>> from polyonnx.schedule.scheduled import own_loop_order
    >>> from polyonnx.testing.examples import matmul
    >>> kernel = matmul(2, 3, 4)
    >>> run = kernel_callable(kernel, from_isl(build_ast(own_loop_order(kernel).schedule)))
    >>> c = np.zeros((2, 3), np.float32)
    >>> run({"A": np.ones((2, 4), np.float32), "B": np.ones((4, 3), np.float32), "C": c})
    >>> c
    array([[4., 4., 4.],
           [4., 4., 4.]], dtype=float32)
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace

import numpy as np
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.jit import jit
from polyonnx.codegen.target import codegen_config
from polyonnx.errors import InputError
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options

_ids = itertools.count()


def kernel_callable(
    kernel: Kernel, ast: tuple[la.LNode, ...], options: Options | None = None
) -> Callable[[Mapping[str, np.ndarray]], None]:
    """JIT ``kernel`` with loops ``ast``; the result runs it in place on named arrays."""
    options = options or Options()
    module = ir.Module(name=kernel.name)
    name = f"polyonnx_kernel_{next(_ids)}_{kernel.name}"
    emit_kernel(module, replace(kernel, name=name), ast, codegen_config(options))
    address = jit(module, name, options)
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * len(kernel.buffers))
    fn = proto(address)

    def run(arrays: Mapping[str, np.ndarray]) -> None:
        ptrs = []
        for b in kernel.buffers:
            a = arrays.get(b.name)
            if a is None:
                raise InputError(f"kernel {kernel.name}: no array for buffer {b.name!r}")
            if (
                a.dtype != np.dtype(b.dtype)
                or tuple(a.shape) != b.shape
                or not a.flags.c_contiguous
                or not a.flags.writeable
            ):
                raise InputError(
                    f"kernel {kernel.name}: buffer {b.name!r} needs a writeable "
                    f"C-contiguous {b.dtype}{list(b.shape)}, got "
                    f"{a.dtype}{list(a.shape)}"
                )
            ptrs.append(a.ctypes.data)
        status = fn(*ptrs)
        if status:
            raise InputError(f"kernel {kernel.name}: run-time check failed (status {status})")

    return run
