"""Parallel outer loops: the outermost loop of each nest with enough work gets a ``parallel``
mark naming the loops of its band that carry no dependence.

A nest's work is counted per run of it: a nest inside a sequential loop (an RNN's time loop)
runs once per iteration of that loop, and each run wakes the thread pool.

:func:`plan_parallel` decides on a schedule the nest strategies made (their outer bands),
:func:`apply_parallel_plan` puts the marks.

Example:
    >>> from polyonnx.schedule.schedule import Schedule
    >>> from polyonnx.testing.examples import matmul
    >>> s = Schedule.from_kernel(matmul(256, 256, 64)).tile(("i", "j"), (8, 32))
    >>> plan = plan_parallel(s, [("i_o", "j_o")])
    >>> print(plan)
    parallel(i_o, named=(i_o, j_o))
    >>> print(apply_parallel_plan(s, plan).verify())  # doctest: +ELLIPSIS
    for i_o in [0, 32):  # = floor(i/8), parallel (i_o, j_o)
      for j_o in [0, 8):  # = floor(j/32)
    ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import islpy as isl
import numpy as np

from polyonnx.krnl.ir import loads
from polyonnx.schedule.legality import loops_that_may_carry
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.tree import (
    Band,
    band_paths,
    bands_on_path,
    get,
    instances,
    stmts,
    value_range,
)
from polyonnx.schedule.verbs import Parallel

MIN_PARALLEL_INSTANCES = 1 << 20
"""Statement instances below which a nest stays on one thread: waking the pool and joining
it costs about what a second core saves on less work."""
MIN_PARALLEL_BYTES = 256 * 1024
"""Bytes written above which a nest runs in parallel whatever its instance count: a copy is
bound by memory traffic, which a second core shares."""
MIN_PARALLEL_READ_BYTES = 1024 * 1024
"""Bytes read above which a nest runs in parallel whatever its instance count: an operand
that large comes from L3 or memory (a batch-1 fully connected layer's weights, read once per
run in under a million multiply-adds), and each core adds its own bandwidth to the stream."""
MIN_FOLLOWER_INSTANCES = MIN_PARALLEL_INSTANCES // 16
"""Statement instances from which a nest that reads what a parallel nest of its kernel wrote
runs in parallel too, below :data:`MIN_PARALLEL_INSTANCES`: each core then reads the share
its own cache holds. Run on one thread, it read half its input from the other core's cache:
a depthwise conv after its parallel pad copy (ShuffleNet's, 136 channels at 28x28 -> 14x14)
took 85 us at 2 threads and 61 at 1."""


@dataclass(frozen=True, slots=True)
class ParallelPlan:
    """The ``parallel`` marks to put, one per nest, outermost loop first."""

    marks: tuple[Parallel, ...]

    def __str__(self) -> str:
        return "\n".join(str(m) for m in self.marks) or "no parallel loops"


def plan_parallel(s: Schedule, bands: Sequence[Sequence[str]]) -> ParallelPlan:
    """``parallel(band[0], named=...)`` for each outer band (loop names) of ``s`` whose nest
    has enough work, naming the band's loops that may run in parallel.

    A nest with less work is parallel too when it reads a buffer an earlier parallel nest
    of the kernel wrote and has :data:`MIN_FOLLOWER_INSTANCES` per run: the pool's owned
    shares give each core the part of the data it wrote (see ``codegen/parallel.c``).

    The loop of band member ``m`` is parallel when every dependence that has distance 0 on
    the members before it has distance 0 on ``m`` too: under the mark, a loop that codegen
    meets first has all the members before it fixed (isl made no loop for them), so the
    dependences among its iterations are exactly those (:func:`loops_that_may_carry`). (The
    verb checks each named loop again; this finds them with one distance computation per
    nest.)
    """
    marks = []
    shared: set[str] = set()  # buffers a parallel nest wrote, in shares across the cores
    paths = band_paths(s.tree)
    for names in bands:
        if not names:
            continue
        nodes = [get(s.tree, paths[n]) for n in names]
        assert all(isinstance(b, Band) for b in nodes)
        below = instances(s.poly, stmts(nodes[0]))
        # (a nest inside a sequential loop runs once per iteration of the loops around it,
        # and runs its instances of one such iteration in parallel: dependences between
        # those iterations are the loops' around it)
        around = bands_on_path(s.tree, paths[names[0]], inclusive=False)
        work = _work(s.poly, below, _runs(around, s.poly))
        follows = work.reads & shared and work.count >= MIN_FOLLOWER_INSTANCES
        if (
            work.count < MIN_PARALLEL_INSTANCES
            and work.written < MIN_PARALLEL_BYTES
            and work.read < MIN_PARALLEL_READ_BYTES
            and not follows
        ):
            continue
        columns = [*(b.sched for b in around), *(cast(Band, b).sched for b in nodes)]
        may = loops_that_may_carry(s.dependences, below, columns, range(len(around), len(columns)))
        safe = [n for m, n in enumerate(names) if len(around) + m not in may]
        if safe:
            marks.append(Parallel(names[0], tuple(safe)))
            shared |= work.writes
    return ParallelPlan(tuple(marks))


def apply_parallel_plan(s: Schedule, plan: ParallelPlan) -> Schedule:
    """The plan's marks put on ``s`` (unverified)."""
    for mark in plan.marks:
        s = s.apply_unverified(mark)
    return s


def _runs(around: Sequence[Band], poly: PolyKernel) -> int:
    """How many times a nest runs: the iterations of the loops ``around`` it."""
    runs = 1
    for band in around:
        lo, hi = value_range(band, poly)
        runs *= max(hi - lo + 1, 1)
    return runs


@dataclass(frozen=True, slots=True)
class _Work:
    """What a nest does per run: statement instances, bytes written and read (each buffer's
    at most once per run), and the buffers it writes and reads."""

    count: int
    written: int
    read: int
    writes: frozenset[str]
    reads: frozenset[str]


def _work(poly: PolyKernel, domain: isl.UnionSet, runs: int) -> _Work:
    """Statement instances of ``domain`` per run of its nest (``runs``: how many times a loop
    around it runs it), the bytes they write and the bytes they read besides what they write
    (each buffer's at most once per run: a reduction writes its output, not one element per
    instance; a recurrent step reads all its weights each step), counted from the krnl loops
    (guards ignored)."""
    total = 0
    names = set()
    domain.foreach_set(lambda s: names.add(s.get_tuple_name()))
    buffers = {b.name: b for b in poly.kernel.buffers}
    written: dict[str, int] = {}
    read: dict[str, int] = {}
    for name in names:
        info = poly.stmts[name]
        count = 1
        for lp in info.loops:
            count *= max(lp.upper.const - lp.lower.const, 1)
        total += count
        out = info.stmt.write.buffer
        written[out] = written.get(out, 0) + count * np.dtype(buffers[out].dtype).itemsize
        for b in {ld.buffer for ld in loads(info.stmt.body)} - {out}:
            read[b] = read.get(b, 0) + count * np.dtype(buffers[b].dtype).itemsize

    def once(by_buffer: dict[str, int]) -> int:
        return sum(min(n // runs, buffers[b].nbytes) for b, n in by_buffer.items())

    return _Work(total // runs, once(written), once(read), frozenset(written), frozenset(read))
