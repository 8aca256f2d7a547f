"""The search space of one kernel: the default strategies' knobs as data, plus schedule verbs.

A :class:`Candidate` is a target :class:`~polyonnx.schedule.strategies.tiling.Tiling`, the
:class:`~polyonnx.schedule.strategies.KernelPlan` the strategies make with it (register-tile
rows and lanes, which loop pairs, tile order, cache-chunk sizes and places, ragged-tile
isolation, transpose tile width, parallel marks), possibly edited field by field, and extra
verbs appended to the plan's schedule (``unroll`` marks on short loops). :meth:`SearchSpace.sample`
draws a tiling and plans with it; :meth:`SearchSpace.mutate` changes one knob: a tiling field
(planned again), one field of one nest plan (any int, bool or nested record field, found by
:func:`dataclasses.fields`, so a knob the strategies add is searched without changes here), or
an extra verb. Most candidates are legal; :meth:`SearchSpace.schedule` proves each one
(:meth:`~polyonnx.schedule.schedule.Schedule.verify`) and refuses the others with
:class:`~polyonnx.errors.ScheduleError`, as an invalid plan is.

Example::

    space = SearchSpace(kernel, Options(num_threads=1))
    c = space.mutate(space.default(), random.Random(0))
    print(c)
    space.schedule(c).trace
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel, Loop
from polyonnx.options import Options
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.signature import kernel_flops
from polyonnx.schedule.strategies import (
    KernelPlan,
    NestPlan,
    Tiling,
    apply_kernel_plan,
    plan_kernel,
)
from polyonnx.schedule.strategies.tiling import KNOBS
from polyonnx.schedule.trace import Trace
from polyonnx.schedule.verbs import Directive, Unroll
from polyonnx.schedule_driver import target_tiling

#: Iterations of a loop that an extra ``unroll`` mark may unroll (code size stays small).
MAX_EXTRA_UNROLL = 8

#: Exceptions an edited plan may raise while it is applied: it is then no candidate. (A plan
#: field set out of range can fail anywhere in the applier, not only with ScheduleError.)
INVALID = (
    ScheduleError,
    ValueError,
    IndexError,
    KeyError,
    AssertionError,
    TypeError,
    ArithmeticError,
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One point of the space: the plan made with ``tiling`` (or ``plan``, an edited one) and
    ``extra`` verbs after it."""

    tiling: Tiling
    plan: KernelPlan
    extra: tuple[Directive, ...] = ()

    def __str__(self) -> str:
        extra = "".join(f"\nthen {d}" for d in self.extra)
        return f"{self.tiling}\n{self.plan}{extra}"


class SearchSpace:
    """The candidates of one kernel for one target (``options``: threads, vector width,
    caches)."""

    def __init__(self, kernel: Kernel, options: Options) -> None:
        from polyonnx.codegen.parallel_runtime import thread_count
        from polyonnx.codegen.target import l1_data_bytes, l2_bytes, vector_bits

        self.kernel = kernel
        self.tiling = target_tiling(options)
        """The target's tiling: the default candidate's, and what :meth:`sample` varies."""
        self.threads = thread_count(options)
        self.vector_bits = vector_bits(options)
        self.l1 = l1_data_bytes(options)
        self.l2 = l2_bytes(options)
        self.start = Schedule.from_kernel(kernel)
        self.lanes = self.tiling.lanes
        self.short_loops = _short_loops(kernel)

    # ------------------------------------------------------------------ candidates

    def default(self) -> Candidate:
        """What the compiler does without tuning."""
        return self.planned(self.tiling)

    def planned(self, tiling: Tiling) -> Candidate:
        """The strategies' plan with ``tiling``; ScheduleError if they cannot plan with it."""
        try:
            return Candidate(tiling, plan_kernel(self.start, tiling, self.threads > 1))
        except INVALID as e:
            raise ScheduleError(f"no plan with {tiling}: {type(e).__name__}: {e}") from None

    def sample(self, rng: random.Random) -> Candidate:
        """The target's tiling with its sizes drawn from the ranges that fit the target (its
        lanes and registers kept), and its plan."""
        lanes = self.lanes
        tiling = dataclasses.replace(
            self.tiling,
            unroll=rng.choice([2, 3, 4, 5, 6, 7, 8]),
            vector=lanes * rng.choice([1, 2, 2, 3]),
            chunk_bytes=rng.choice([self.l1 // 4, self.l1 // 2, self.l1, self.l2 // 4]),
            paired_rows=rng.choice([0, 0, 4, 5, 6, 7]),
            parallel_tiles=rng.choice([1, 2, 4, 8]) if self.threads > 1 else 1,
        )
        return self.planned(tiling)

    def mutate(self, c: Candidate, rng: random.Random) -> Candidate:
        """``c`` with one knob changed (possibly an invalid plan: :meth:`schedule` says; a
        tiling the strategies cannot plan with is a ScheduleError here)."""
        roll = rng.random()
        if roll < 0.35:
            knob = rng.choice(sorted(KNOBS))
            value = max(_nudge(getattr(c.tiling, knob), rng), KNOBS[knob])
            return self.planned(dataclasses.replace(c.tiling, **{knob: value}))
        if roll < 0.85 and c.plan.nests:
            k = rng.randrange(len(c.plan.nests))
            edited = _edit_record(c.plan.nests[k], rng)
            if edited is not None:
                nests = (*c.plan.nests[:k], edited, *c.plan.nests[k + 1 :])
                plan = dataclasses.replace(c.plan, nests=cast(tuple[NestPlan, ...], nests))
                return dataclasses.replace(c, plan=plan)
        if roll < 0.9 and self.threads > 1:
            plan = dataclasses.replace(c.plan, parallel=not c.plan.parallel)
            return dataclasses.replace(c, plan=plan)
        if c.extra and rng.random() < 0.5:
            drop = rng.randrange(len(c.extra))
            return dataclasses.replace(c, extra=c.extra[:drop] + c.extra[drop + 1 :])
        if self.short_loops:
            verb = Unroll(rng.choice(self.short_loops), 0, mark=True)
            if verb not in c.extra:
                return dataclasses.replace(c, extra=(*c.extra, verb))
        return self.sample(rng)

    # ------------------------------------------------------------------ schedules

    def unverified(self, c: Candidate) -> Schedule:
        """The candidate's schedule, not yet proved legal; ScheduleError if the plan or a verb
        does not apply."""
        try:
            s = apply_kernel_plan(self.start, c.plan)
            for d in c.extra:
                s = s.apply_unverified(d)
        except INVALID as e:
            raise ScheduleError(f"candidate does not apply: {type(e).__name__}: {e}") from None
        return s

    def schedule(self, c: Candidate) -> Schedule:
        """The candidate's schedule, proved legal (ScheduleError otherwise)."""
        return self.unverified(c).verify("tuning candidate")

    def trace(self, c: Candidate) -> Trace:
        return self.unverified(c).trace

    # ------------------------------------------------------------------ features

    def kernel_features(self) -> list[float]:
        """What the kernel's polyhedral model says of its size (shared by its candidates)."""
        k = self.kernel
        statements = list(k.statements())
        depth = max((len(loops) for loops, _ in statements), default=0)
        return [
            math.log2(kernel_flops(k) + 1),
            math.log2(sum(b.nbytes for b in k.buffers) + 1),
            float(len(statements)),
            float(depth),
        ]

    def features(self, c: Candidate, s: Schedule) -> list[float]:
        """A fixed-length vector describing ``c`` (its tiling, plan and trace) and the
        kernel, for the cost model."""
        t = c.tiling
        tiling = [
            float(t.unroll),
            t.vector / self.lanes,
            math.log2(t.chunk_bytes + 1),
            float(t.paired_rows),
            float(t.parallel_tiles),
        ]
        plans = [_numbers(n) for n in c.plan.nests]
        width = max((len(p) for p in plans), default=0)
        summary = [0.0] * 8
        for p in plans:  # the largest nest plan's numbers (the reduction, if there is one)
            if len(p) == width:
                summary = (p + [0.0] * 8)[:8]
                break
        verbs: dict[str, int] = {}
        for d in s.directives:
            verbs[d.verb] = verbs.get(d.verb, 0) + 1
        trace = [
            float(verbs.get(v, 0))
            for v in ("split", "reorder", "unroll", "vectorize", "parallel", "isolate", "fuse")
        ]
        return [
            *self.kernel_features(),
            *tiling,
            *summary,
            *trace,
            float(len(s.loops)),
            float(len(c.extra)),
            float(c.plan.parallel),
        ]


def _short_loops(kernel: Kernel) -> list[str]:
    """Kernel loops with a constant trip count of 2..MAX_EXTRA_UNROLL (a conv's kh, kw)."""
    out: list[str] = []

    def visit(nodes: Sequence) -> None:
        for n in nodes:
            if isinstance(n, Loop):
                constant = n.lower.is_const and n.upper.is_const
                if constant and 2 <= n.upper.const - n.lower.const <= MAX_EXTRA_UNROLL:
                    out.append(n.iterator)
                visit(n.body)

    visit(kernel.body)
    return list(dict.fromkeys(out))


def _nudge(value: int, rng: random.Random) -> int:
    """An int knob moved by a step: doubled, halved, or one more or less."""
    return rng.choice([value * 2, value // 2, value + 1, value - 1])


def _edit_record(record: object, rng: random.Random) -> object | None:
    """``record`` (a frozen plan record) with one int, bool or nested record field changed;
    None when it has none."""
    if not dataclasses.is_dataclass(record):
        return None
    editable = [
        f
        for f in dataclasses.fields(record)
        if isinstance(getattr(record, f.name), bool | int)
        or dataclasses.is_dataclass(getattr(record, f.name))
    ]
    if not editable:
        return None
    f = rng.choice(editable)
    value = getattr(record, f.name)
    if isinstance(value, bool):
        new: object = not value
    elif isinstance(value, int):
        new = max(_nudge(value, rng), 0)
    else:
        new = _edit_record(value, rng)
        if new is None:
            return None
    try:
        return dataclasses.replace(record, **{f.name: new})  # type: ignore[type-var]
    except INVALID:
        return None


def _numbers(record: object) -> list[float]:
    """The int and bool fields of a plan record and of the records in it, in field order."""
    out: list[float] = []
    if dataclasses.is_dataclass(record):
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if isinstance(value, bool | int):
                out.append(float(value))
            elif value is None:
                out.append(-1.0)
            elif dataclasses.is_dataclass(value):
                out.extend(_numbers(value))
    return out
