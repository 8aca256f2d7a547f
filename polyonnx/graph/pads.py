"""A Pad's amounts per axis: ONNX gives them for a list of axes (all when absent), begins
first, then ends; passes and the lowering want one (begin, end) per axis of the tensor.

Example:
    >>> spread_pads([1, 2, 3, 4], [-1, 1], rank=3)
    ([0, 2, 1], [0, 4, 3])
    >>> spread_pads([1, 2, 3], None, rank=2) is None   # two values per axis are needed
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from polyonnx.graph.ir import Node


def spread_pads(
    pads: Sequence[int], axes: Sequence[int] | None, rank: int
) -> tuple[list[int], list[int]] | None:
    """The begins and ends of every axis of a rank-``rank`` tensor padded by ``pads`` on
    ``axes`` (every axis when None); None when ``pads`` does not hold two values per axis, or
    an axis is out of range or given twice."""
    axes = list(range(rank)) if axes is None else [int(a) for a in axes]
    if len(pads) != 2 * len(axes) or any(not -rank <= a < rank for a in axes):
        return None
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        return None
    begins, ends = [0] * rank, [0] * rank
    for k, axis in enumerate(axes):
        begins[axis], ends[axis] = int(pads[k]), int(pads[len(axes) + k])
    return begins, ends


def reads_no_padding(n: Node) -> bool:
    """Whether convolution (or pool) ``n``'s window never reads padding: ``pads`` all zero and
    ``auto_pad`` NOTSET or VALID (SAME_* pads as the kernel needs)."""
    no_pads = all(int(p) == 0 for p in n.attr("pads", ()) or ())
    return no_pads and n.attr("auto_pad", "NOTSET") in ("NOTSET", "VALID")
