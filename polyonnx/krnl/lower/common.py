"""Helpers shared by the op-family lowerings: loop nests, broadcasting, attributes, windows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.registry import LowerContext, op_name, op_opset

Aff = ir.Aff


def nest(iters: Sequence[tuple[str, int]], body: Sequence[ir.Node]) -> tuple[ir.Node, ...]:
    """Wrap ``body`` in loops ``for name in [0, extent)``, the first pair outermost."""
    nodes = tuple(body)
    for name, extent in reversed(iters):
        nodes = (ir.Loop(name, 0, extent, nodes),)
    return nodes


def pairs(names: Sequence[str], extents: Sequence[int]) -> list[tuple[str, int]]:
    """``[(name, extent), ...]`` for :func:`nest`."""
    return [(n, int(e)) for n, e in zip(names, extents, strict=True)]


def generic_iters(shape: Sequence[int]) -> list[tuple[str, int]]:
    """``[(i0, d0), (i1, d1), ...]`` — the iterators of an elementwise nest over ``shape``."""
    return [(f"i{k}", int(d)) for k, d in enumerate(shape)]


def var(name: str) -> Aff:
    return Aff.var(name)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def broadcast_index(
    in_shape: Sequence[int], out_shape: Sequence[int], iters: Sequence[str]
) -> tuple[Aff, ...]:
    """The index into an input of ``in_shape`` broadcast (ONNX multidirectional) to the output.

    Dimensions are right-aligned; a size-1 input dimension under a larger output dimension reads
    element 0.
    """
    offset = len(out_shape) - len(in_shape)
    if offset < 0:
        raise ShapeError(f"cannot broadcast {tuple(in_shape)} to {tuple(out_shape)}")
    index = []
    for d, size in enumerate(in_shape):
        out = out_shape[d + offset]
        if size == 1 and out != 1:
            index.append(Aff.lift(0))
        elif size == out:
            index.append(Aff.var(iters[d + offset]))
        else:
            raise ShapeError(f"cannot broadcast {tuple(in_shape)} to {tuple(out_shape)}")
    return tuple(index)


def load(ctx: LowerContext, name: str, index: Sequence[ir.AffLike]) -> ir.Load:
    """A load of the buffer of ONNX value ``name``."""
    return ir.Load(name, tuple(Aff.lift(i) for i in index), ctx.dtype(name))


def scalar_index(ctx: LowerContext, name: str) -> tuple[Aff, ...]:
    """The index of the single element of ``name`` (a scalar or a one-element tensor)."""
    return (Aff.lift(0),) * len(ctx.shape(name))


def lowest(dtype: str) -> ir.Const:
    """The identity of ``max``: -inf for floats, the smallest value for integers."""
    if dtype in ir.FLOAT_DTYPES:
        return ir.Const(float("-inf"), dtype)
    if dtype == "bool":
        return ir.Const(False, dtype)
    return ir.Const(int(np.iinfo(dtype).min), dtype)


def highest(dtype: str) -> ir.Const:
    """The identity of ``min``: +inf for floats, the largest value for integers."""
    if dtype in ir.FLOAT_DTYPES:
        return ir.Const(float("inf"), dtype)
    if dtype == "bool":
        return ir.Const(True, dtype)
    return ir.Const(int(np.iinfo(dtype).max), dtype)


def zero(dtype: str) -> ir.Const:
    return ir.Const(0.0 if dtype in ir.FLOAT_DTYPES else 0, dtype)


# --------------------------------------------------------------------------- attributes


def opset(ctx: LowerContext) -> int:
    return ctx.graph.opset


def unsupported(node: Node, ctx: LowerContext, detail: str) -> UnsupportedOpError:
    return UnsupportedOpError(op_name(node), op_opset(node, ctx), node.name, detail)


def bad_attr(node: Node, attr: str, detail: str) -> ModelError:
    return ModelError(f"node {node.name!r} ({node.op_type}): attribute {attr!r} {detail}")


def require_float(node: Node, ctx: LowerContext, name: str) -> str:
    """The dtype of ``name``, which must be a float type for this op."""
    dtype = ctx.dtype(name)
    if dtype not in ir.FLOAT_DTYPES:
        raise unsupported(node, ctx, f"input {name!r} has dtype {dtype}; only float types")
    return dtype


def str_attr(node: Node, name: str, default: str) -> str:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def ints_attr(node: Node, name: str, length: int, default: int | None) -> tuple[int, ...]:
    """An ints attribute of exactly ``length`` values (``default`` repeated when absent)."""
    value = node.attr(name)
    if value is None:
        if default is None:
            raise bad_attr(node, name, "is required")
        return (default,) * length
    value = tuple(int(v) for v in (value if isinstance(value, Sequence) else (value,)))
    if len(value) != length:
        raise bad_attr(node, name, f"must have {length} values, got {list(value)}")
    return value


def normalize_axis(node: Node, axis: int, rank: int, attr: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise bad_attr(node, attr, f"= {axis} is out of range for rank {rank}")
    return axis % rank


def scalar_attr_value(value: Any) -> float | int | bool:
    """The single element of a tensor-valued attribute (numpy array or Python scalar)."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"expected a one-element tensor, got shape {arr.shape}")
    return arr.reshape(()).item()


# --------------------------------------------------------------------------- sliding windows

SPATIAL_NAMES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


def spatial_names(rank: int) -> tuple[str, ...]:
    """Per-axis suffixes of spatial iterators: ``oh``/``kh`` for 2-D, ``s0``.. beyond 3-D."""
    return SPATIAL_NAMES.get(rank, tuple(f"s{k}" for k in range(rank)))


@dataclass(frozen=True)
class Window:
    """The sliding window of a Conv or pool over the spatial axes of its input."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]

    def span(self, k: int) -> int:
        """The extent of the dilated window along spatial axis ``k``."""
        return (self.kernel[k] - 1) * self.dilations[k] + 1

    def out_size(self, k: int, size: int, ceil_mode: bool) -> int:
        """Output length along axis ``k`` for input length ``size`` (ONNX / onnxruntime rule)."""
        padded = size + self.pads_begin[k] + self.pads_end[k] - self.span(k)
        if not ceil_mode:
            return padded // self.strides[k] + 1
        out = ceil_div(padded, self.strides[k]) + 1
        # A window that would start inside the end padding is dropped.
        if (out - 1) * self.strides[k] >= size + self.pads_begin[k]:
            out -= 1
        return out

    def position(self, k: int, o: str, t: str) -> Aff:
        """The input coordinate ``o*stride + t*dilation - pad`` of output ``o`` and tap ``t``."""
        return var(o) * self.strides[k] + var(t) * self.dilations[k] - self.pads_begin[k]

    def guards(self, k: int, o: str, t: str, out: int, lo: int, hi: int) -> tuple[ir.Cond, ...]:
        """``lo <= position < hi`` over ``o < out``, leaving out a side that always holds."""
        return bound_guards(
            self.position(k, o, t),
            -self.pads_begin[k],
            (out - 1) * self.strides[k]
            + (self.kernel[k] - 1) * self.dilations[k]
            - self.pads_begin[k],
            lo,
            hi,
        )


def bound_guards(pos: Aff, smallest: int, largest: int, lo: int, hi: int) -> tuple[ir.Cond, ...]:
    """``lo <= pos < hi`` for a ``pos`` ranging over ``[smallest, largest]``, minus what holds."""
    conds = []
    if smallest < lo:
        conds.append(ir.ge(pos, lo))
    if largest >= hi:
        conds.append(ir.lt(pos, hi))
    return tuple(conds)


def window(
    node: Node,
    ctx: LowerContext,
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    ceil_mode: bool = False,
    dilations_attr: bool = True,
) -> Window:
    """Read and check strides, dilations, pads and auto_pad of a Conv or pool node."""
    rank = len(in_spatial)
    strides = ints_attr(node, "strides", rank, 1)
    dilations = ints_attr(node, "dilations", rank, 1) if dilations_attr else (1,) * rank
    for attr, values in (
        ("strides", strides),
        ("dilations", dilations),
        ("kernel_shape", tuple(kernel)),
    ):
        if any(v < 1 for v in values):
            raise bad_attr(node, attr, f"must be positive, got {list(values)}")
    auto_pad = str_attr(node, "auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = ints_attr(node, "pads", 2 * rank, 0)
        if any(p < 0 for p in pads):
            raise bad_attr(node, "pads", f"must be non-negative, got {list(pads)}")
        begin, end = pads[:rank], pads[rank:]
    elif auto_pad == "VALID":
        begin = end = (0,) * rank
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin_l, end_l = [], []
        for k in range(rank):
            out = ceil_div(in_spatial[k], strides[k])
            total = max(
                (out - 1) * strides[k] + (kernel[k] - 1) * dilations[k] + 1 - in_spatial[k], 0
            )
            small, large = total // 2, total - total // 2
            # SAME_UPPER puts the odd pad at the end, SAME_LOWER at the beginning.
            b, e = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
            begin_l.append(b)
            end_l.append(e)
        begin, end = tuple(begin_l), tuple(end_l)
    else:
        raise bad_attr(node, "auto_pad", f"has unknown value {auto_pad!r}")
    return Window(tuple(int(k) for k in kernel), strides, dilations, begin, end)


def check_out_spatial(
    node: Node, win: Window, in_spatial: Sequence[int], out_spatial: Sequence[int], ceil_mode: bool
) -> None:
    """Refuse a typed output shape that disagrees with the window (it would give wrong results)."""
    expected = tuple(win.out_size(k, s, ceil_mode) for k, s in enumerate(in_spatial))
    if tuple(out_spatial) != expected:
        raise ShapeError(
            f"node {node.name!r} ({node.op_type}): output spatial shape "
            f"{tuple(out_spatial)} does not match the attributes "
            f"(expected {expected})"
        )
