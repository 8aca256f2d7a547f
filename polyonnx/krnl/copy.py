"""Copy kernels: a value's elements into another buffer, for a graph output that must own its
memory and for a run-time loop's loop-carried values (:mod:`polyonnx.krnl.loops`).

Example:
    >>> from polyonnx.graph.ir import Value
    >>> print(copy_kernel("k_copy", Value("x", "float32", (2, 3)), Value("y", "float32", (3, 2))))
    kernel k_copy(in x__flat: float32[6], out y: float32[3, 2]) {
      for i0 in [0, 3):
        for i1 in [0, 2):
          S0: y[i0, i1] = x__flat[2*i0 + i1]
    }
"""

from __future__ import annotations

import numpy as np

from polyonnx.graph.ir import Value
from polyonnx.graph.strings import storage
from polyonnx.krnl import ir


def _stored(v: Value) -> Value:
    """``v`` as its buffer holds it (a string value gains its code-point axis)."""
    dtype, shape = storage(v.dtype, v.dims)
    return Value(v.name, dtype, shape)


def copy_kernel(name: str, src: Value, dst: Value) -> ir.Kernel:
    """``dst = src`` elementwise (same element count, both row-major), as kernel ``name`` (an
    identifier). The source is read through a flat buffer ``<src>__flat``: whoever calls the
    kernel maps that name to the source's memory. Strings are copied as their code points."""
    src, dst = _stored(src), _stored(dst)
    its = [f"i{d}" for d in range(len(dst.shape))]
    idx = tuple(ir.Aff.var(i) for i in its)
    # Source and destination may differ in shape (a view): index the source by the flat offset.
    src_buf = ir.Buffer(
        src.name + "__flat", src.dtype, (int(np.prod(dst.dims, dtype=np.int64)),), "input"
    )
    flat = ir.Aff()
    stride = 1
    for i, extent in reversed(list(zip(its, dst.shape, strict=True))):
        flat = flat + ir.Aff.var(i) * stride
        stride *= int(extent)
    nest: ir.Node = ir.Stmt(
        "S0", ir.Access(dst.name, idx), ir.Load(src_buf.name, (flat,), src.dtype)
    )
    for i, extent in reversed(list(zip(its, dst.shape, strict=True))):
        nest = ir.Loop(i, 0, int(extent), (nest,))
    return ir.Kernel(
        name,
        (src_buf, ir.Buffer(dst.name, dst.dtype, tuple(map(int, dst.shape)), "output")),
        (nest,),
        (),
    )
