"""The verbs by name: each directive record with its check and apply (what traces replay and
:class:`~polyonnx.schedule.schedule.Schedule` dispatches on).
"""

from __future__ import annotations

from collections.abc import Callable

from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.tree import Node
from polyonnx.schedule.verbs import loops, marks, placement, staging
from polyonnx.schedule.verbs.base import Directive

Check = Callable[[Node, PolyKernel, Directive], None]
Apply = Callable[[Node, PolyKernel, Directive], Node | tuple[Kernel, Node]]
"""An apply returns the new tree, or (for the staging verbs) the new kernel and tree."""

VERBS: dict[str, tuple[type[Directive], Check, Apply]] = {
    # Each check/apply takes its own directive class: the table pairs them, mypy cannot.
    cls.verb: (cls, check, apply)  # type: ignore[misc]
    for cls, check, apply in (
        (loops.Split, loops.check_split, loops.apply_split),
        (loops.Tile, loops.check_tile, loops.apply_tile),
        (loops.Reorder, loops.check_reorder, loops.apply_reorder),
        (placement.Fuse, placement.check_fuse, placement.apply_fuse),
        (placement.Distribute, placement.check_distribute, placement.apply_distribute),
        (placement.ComputeAt, placement.check_compute_at, placement.apply_compute_at),
        (
            placement.ReverseComputeAt,
            placement.check_reverse_compute_at,
            placement.apply_reverse_compute_at,
        ),
        (marks.Parallel, marks.check_parallel, marks.apply_parallel),
        (marks.Vectorize, marks.check_vectorize, marks.apply_vectorize),
        (marks.Unroll, marks.check_unroll, marks.apply_unroll),
        (loops.Skew, loops.check_skew, loops.apply_skew),
        (loops.Reverse, loops.check_reverse, loops.apply_reverse),
        (loops.Isolate, loops.check_isolate, loops.apply_isolate),
        (staging.CacheRead, staging.check_cache_read, staging.apply_cache_read),
        (staging.CacheWrite, staging.check_cache_write, staging.apply_cache_write),
        (staging.Pack, staging.check_pack, staging.apply_pack),
    )
}
"""verb name -> (directive record, check_<verb>, apply_<verb>)."""
