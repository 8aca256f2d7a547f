"""Schedule verbs: a frozen directive record, ``check_<verb>`` and ``apply_<verb>`` each.

``check_<verb>(tree, poly, d)`` validates the directive against the current tree (the loops exist,
are nested as the verb needs, factors are positive) and raises :class:`ScheduleError` otherwise.
``apply_<verb>(tree, poly, d)`` returns the rewritten tree. Neither decides legality:
:meth:`Schedule.apply <polyonnx.schedule.schedule.Schedule.apply>` checks the rewritten tree
against the kernel's exact dependences (:mod:`polyonnx.schedule.legality`) before accepting it.

The before/after loop nests of the verbs' docstrings are for ``C[i, j] += A[i, k] * B[k, j]``
with ``i, j, k`` in ``[0, 16)`` (init statement omitted); ``docs/schedule.md`` shows every verb
on real kernels.

The verbs by what they do: :mod:`~polyonnx.schedule.verbs.loops` (split, tile, reorder, skew,
reverse, isolate), :mod:`~polyonnx.schedule.verbs.placement` (fuse, distribute, compute_at,
reverse_compute_at), :mod:`~polyonnx.schedule.verbs.marks` (parallel, vectorize, unroll),
:mod:`~polyonnx.schedule.verbs.staging` (cache_read, cache_write, pack); their common base in
:mod:`~polyonnx.schedule.verbs.base` and the table by name, :data:`VERBS`, in
:mod:`~polyonnx.schedule.verbs.registry`. Everything public is importable from here.
"""

from polyonnx.schedule.verbs.base import (
    OPTIONAL,
    Directive,
)
from polyonnx.schedule.verbs.loops import (
    Isolate,
    Reorder,
    Reverse,
    Skew,
    Split,
    Tile,
    apply_isolate,
    apply_reorder,
    apply_reverse,
    apply_skew,
    apply_split,
    apply_tile,
    check_isolate,
    check_reorder,
    check_reverse,
    check_skew,
    check_split,
    check_tile,
)
from polyonnx.schedule.verbs.marks import (
    MAX_UNROLL,
    Parallel,
    Unroll,
    Vectorize,
    apply_parallel,
    apply_unroll,
    apply_vectorize,
    check_parallel,
    check_unroll,
    check_vectorize,
)
from polyonnx.schedule.verbs.placement import (
    ComputeAt,
    Distribute,
    Fuse,
    ReverseComputeAt,
    apply_compute_at,
    apply_distribute,
    apply_fuse,
    apply_reverse_compute_at,
    check_compute_at,
    check_distribute,
    check_fuse,
    check_reverse_compute_at,
)
from polyonnx.schedule.verbs.registry import (
    VERBS,
    Apply,
    Check,
)
from polyonnx.schedule.verbs.staging import (
    CacheRead,
    CacheWrite,
    Pack,
    apply_cache_read,
    apply_cache_write,
    apply_pack,
    check_cache_read,
    check_cache_write,
    check_pack,
)

__all__ = [
    "Apply",
    "CacheRead",
    "CacheWrite",
    "Check",
    "ComputeAt",
    "Directive",
    "Distribute",
    "Fuse",
    "Isolate",
    "MAX_UNROLL",
    "OPTIONAL",
    "Pack",
    "Parallel",
    "Reorder",
    "Reverse",
    "ReverseComputeAt",
    "Skew",
    "Split",
    "Tile",
    "Unroll",
    "VERBS",
    "Vectorize",
    "apply_cache_read",
    "apply_cache_write",
    "apply_compute_at",
    "apply_distribute",
    "apply_fuse",
    "apply_isolate",
    "apply_pack",
    "apply_parallel",
    "apply_reorder",
    "apply_reverse",
    "apply_reverse_compute_at",
    "apply_skew",
    "apply_split",
    "apply_tile",
    "apply_unroll",
    "apply_vectorize",
    "check_cache_read",
    "check_cache_write",
    "check_compute_at",
    "check_distribute",
    "check_fuse",
    "check_isolate",
    "check_pack",
    "check_parallel",
    "check_reorder",
    "check_reverse",
    "check_reverse_compute_at",
    "check_skew",
    "check_split",
    "check_tile",
    "check_unroll",
    "check_vectorize",
]
