"""Tuning a model: every distinct kernel searched within one time budget, the results in the
tuning database that ``compile`` reads.

:func:`tune` makes a :class:`Task` per distinct kernel (by signature; ResNet50 repeats most of
its convolutions) and measures its default schedule. Then, until the budget is spent or every
task has stopped:

* the **task scheduler** picks the task whose share of the model's latency (its kernels'
  count times its best time so far) times its expected gain (how much its last rounds
  improved it) is largest — Ansor's scheme in a line;
* an **evolutionary search** breeds candidates of that task
  (:class:`~polyonnx.tune.space.SearchSpace`: mutations of the best measured ones and fresh
  samples), the **cost model**
  (:mod:`polyonnx.tune.costmodel`, trained on every measurement so far) ranks them, and the
  best few (and one at random, to explore) are proved legal and measured against the
  incumbent (:mod:`polyonnx.tune.runner`);
* a candidate that beats the incumbent is measured once more against it (a noisy win is no
  win) and becomes the incumbent with the smaller of the two gains; every measured candidate
  is stored in the database;
* a task that has not improved for ``patience`` rounds stops (early stop).

Tuning resumes: a second run starts each task from its best record and skips the traces
measured before. A record's speed-up is over the default schedule, chained through the
incumbents (each ratio measured in one process, so load cancels out).

Example::

    report = tune("model.onnx", budget="2m", threads=1)
    print(report)
    sess = polyonnx.InferenceSession("model.onnx", num_threads=1)  # uses the records
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import onnx

from polyonnx.errors import ScheduleError, TuningError
from polyonnx.frontend.load import ModelSource
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options
from polyonnx.records.database import (
    Fingerprint,
    Record,
    TuningDatabase,
    database_path,
    default_path,
    target_fingerprint,
)
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.trace import Trace
from polyonnx.tune.costmodel import CostModel, cost_model
from polyonnx.tune.progress import Progress
from polyonnx.tune.runner import Job, LocalRunner, Result, Runner
from polyonnx.tune.space import Candidate, SearchSpace
from polyonnx.tune.task import Task

#: A candidate must beat the incumbent by this much (twice: measured and confirmed) to replace it
#: (the same schedule timed twice differs by a few per cent on a loaded machine).
MIN_GAIN = 0.03
#: Candidates bred per measured one: the cost model picks among them.
POOL_FACTOR = 6


@dataclass(frozen=True)
class KernelResult:
    name: str
    signature: str
    count: int
    default_s: float | None
    speedup: float
    measured: int


@dataclass(frozen=True)
class TuneReport:
    """What a tuning run found."""

    kernels: tuple[KernelResult, ...]
    database: Path
    target: Fingerprint
    elapsed_s: float
    measured: int
    failed: int
    stopped: str

    @property
    def model_speedup(self) -> float:
        """The kernels' time at their default schedules over their time at the best ones
        (weighted by how often each runs)."""
        before = sum(k.count * (k.default_s or 0.0) for k in self.kernels)
        after = sum(k.count * (k.default_s or 0.0) / k.speedup for k in self.kernels)
        return before / after if after > 0 else 1.0

    def __str__(self) -> str:
        lines = [
            f"tuned {len(self.kernels)} distinct kernel(s) in {self.elapsed_s:.0f} s "
            f"({self.stopped}): {self.measured} candidates measured, {self.failed} refused; "
            f"kernels {self.model_speedup:.2f}x faster than untuned",
            f"target {self.target}; records in {self.database}",
        ]
        for k in sorted(self.kernels, key=lambda k: -k.count * (k.default_s or 0)):
            time_ms = f"{k.default_s * 1e3:8.3f} ms" if k.default_s else "        -"
            lines.append(
                f"  {k.name:<24} x{k.count:<3} default {time_ms}  best {k.speedup:5.2f}x "
                f"({k.measured} measured)"
            )
        return "\n".join(lines)


def parse_budget(budget: float | str) -> float:
    """Seconds of a budget: a number of seconds, or ``90s``, ``20m``, ``1h``, ``1h30m``."""
    if isinstance(budget, int | float):
        seconds = float(budget)
    else:
        parts = re.fullmatch(
            r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*"
            r"(?:(\d+(?:\.\d+)?)s?)?\s*",
            budget,
        )
        if not budget.strip() or parts is None:
            raise TuningError(f"budget {budget!r}: expected seconds, or e.g. 90s, 20m, 1h30m")
        h, m, s = (float(p) if p else 0.0 for p in parts.groups())
        seconds = 3600 * h + 60 * m + s
    if not seconds > 0:
        raise TuningError(f"budget {budget!r}: must be more than 0 seconds")
    return seconds


def tune(
    model: ModelSource | onnx.ModelProto,
    *,
    budget: float | str = "20m",
    db: str | Path | None = None,
    threads: int | None = None,
    ray: str | None = None,
    options: Options | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    progress: bool | TextIO | None = None,
    seed: int = 0,
    batch: int = 4,
    patience: int = 4,
    timeout: float = 120.0,
    model_kind: str = "auto",
    runner: Runner | None = None,
) -> TuneReport:
    """Tune every distinct kernel of ``model`` for this machine and ``threads`` within
    ``budget`` (seconds, or ``"20m"``), storing the measured schedules in ``db`` (default: the
    database compile reads, :func:`~polyonnx.records.database.default_path`).

    ``ray``: measure on a Ray cluster (``"auto"`` starts a local one; an address joins one;
    needs ``pip install polyonnx[ray]``), else in local worker processes. ``progress``: a
    stream for the progress bar (True: stderr; None: stderr when it is a terminal).
    ``runner`` replaces the measuring machinery (tests). Interrupting (Ctrl-C) stops the run
    with what it found; running again continues.

    Example::

        print(tune("model.onnx", budget="5m", threads=1))
    """
    from polyonnx.pipeline import lower, to_graph
    from polyonnx.schedule_driver import target_tiling

    seconds = parse_budget(budget)
    start = time.monotonic()
    options = options or Options()
    if threads is not None:
        options = dataclasses.replace(options, num_threads=threads)
    path = Path(db) if db is not None else (database_path(options) or default_path())
    options = dataclasses.replace(options, tuning_db="")  # (tune the default schedules)
    target = target_fingerprint(options)
    program = lower(to_graph(model, input_shapes, options), target_tiling(options))
    rng = random.Random(seed)
    database = TuningDatabase(path)
    own_runner = runner is None
    if runner is None:
        runner = _make_runner(ray, timeout)
    bar = Progress(seconds, _stream(progress))
    tasks = _tasks(program.kernels, program.constants, options, database, target)
    rng.seed(seed + sum(len(t.measured) for t in tasks))  # (a resumed run explores anew)
    model_fit = cost_model(model_kind)
    samples: tuple[list[list[float]], list[float]] = ([], [])
    search = _Search(options, target, database, runner, bar, samples, model_fit, rng)
    stopped = "budget spent"
    try:
        for task in tasks:
            if time.monotonic() - start > seconds:
                break
            search.baseline(task)
            bar.show(time.monotonic() - start, task, tasks)
        while True:
            left = seconds - (time.monotonic() - start)
            live = [t for t in tasks if not t.done and t.default_s]
            if left <= 0:
                break
            if not live:
                stopped = "no kernel improving (early stop)"
                break
            task = max(live, key=lambda t: t.latency * t.expected_gain)
            search.round(task, batch, patience)
            bar.show(time.monotonic() - start, task, tasks)
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        if own_runner:
            runner.close()
        database.close()
        bar.finish()
    return TuneReport(
        tuple(
            KernelResult(
                t.name, t.signature, t.count, t.default_s, t.incumbent_speedup, len(t.measured)
            )
            for t in tasks
        ),
        path,
        target,
        time.monotonic() - start,
        search.measured,
        search.failed,
        stopped,
    )


def _make_runner(ray: str | None, timeout: float) -> Runner:
    if ray:
        from polyonnx.tune.ray_runner import RayRunner

        return RayRunner(ray, timeout=timeout)
    return LocalRunner(timeout=timeout)


def _stream(progress: bool | TextIO | None) -> TextIO | None:
    if progress is None:
        return sys.stderr if sys.stderr.isatty() else None
    if progress is True:
        return sys.stderr
    return progress or None


#: Constants of a kernel up to this many elements are its output checks' values (scalars,
#: biases, per-channel factors); larger ones (weights) are random, as they cost each job a copy.
KNOWN_MAX_ELEMENTS = 1 << 16


def _tasks(
    kernels: Sequence[Kernel],
    constants: Mapping[str, np.ndarray],
    options: Options,
    db: TuningDatabase,
    target: Fingerprint,
) -> list[Task]:
    """One task per distinct kernel, most arithmetic first; each starts from its default
    schedule (or its own loops, where the strategies' plan is not legal), knowing the
    traces measured before and its first kernel's small constants."""
    by_sig: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_sig.setdefault(kernel_signature(k), []).append(k)
    tasks = []
    for sig, ks in by_sig.items():
        space = SearchSpace(ks[0], options)
        default = space.default()
        try:
            trace = space.schedule(default).trace
            population = [(0.0, default)]
        except ScheduleError:
            trace, population = Trace(ks[0].name, sig, ()), []
        known = {
            b.name: constants[b.name]
            for b in ks[0].buffers
            if b.name in constants and constants[b.name].size <= KNOWN_MAX_ELEMENTS
        }
        task = Task(sig, ks[0], len(ks), space, trace, trace, known=known, population=population)
        task.measured = {trace.to_json(), *(r.trace.to_json() for r in db.records(sig, target))}
        tasks.append(task)
    return tasks


@dataclass
class _Search:
    """What every round shares: where to measure, where to store, the cost model."""

    options: Options
    target: Fingerprint
    db: TuningDatabase
    runner: Runner
    bar: Progress
    samples: tuple[list[list[float]], list[float]]
    model: CostModel
    rng: random.Random
    measured: int = 0
    failed: int = 0

    def job(self, task: Task, candidate: Trace, incumbent: Trace | None = None) -> Job:
        return Job(
            task.kernel,
            candidate,
            incumbent or task.incumbent,
            self.options,
            task.reference,
            self.target.key,
            known=task.known,
        )

    def baseline(self, task: Task) -> None:
        """Time the default schedule (and compute the reference outputs); a task resumed
        from a record measures that record against the default."""
        (r,) = self.runner.run([self.job(task, task.default, task.default)])
        if not r.ok:
            task.done = True
            self.bar.note(f"{task.name}: its default schedule did not run ({r.error})")
            return
        task.default_s, task.reference = r.incumbent_s, r.reference
        best = self.db.best(task.signature, self.target)
        if best is not None and best.speedup > 1.0:
            (again,) = self.runner.run([self.job(task, best.trace, task.default)])
            if again.ok and again.ratio > 1.0:
                task.incumbent, task.incumbent_speedup = best.trace, again.ratio

    def round(self, task: Task, batch: int, patience: int) -> None:
        """Breed, rank, prove and measure ``batch`` candidates of ``task``; confirm a win."""
        task.rounds += 1
        chosen = self.breed(task, batch)
        results = self.runner.run([self.job(task, trace) for trace, _, _ in chosen])
        before = task.incumbent_speedup
        challengers = []
        for (trace, cand, features), r in zip(chosen, results, strict=True):
            task.measured.add(trace.to_json())
            if not r.ok:
                self.failed += 1
                task.failures += 1
                continue
            self.measured += 1
            speedup = task.incumbent_speedup * r.ratio
            self.samples[0].append(features)
            self.samples[1].append(math.log(speedup))
            task.population.append((speedup, cand))
            if r.ratio > 1 + MIN_GAIN:
                challengers.append((r.ratio, trace, r))
            else:
                self.store(task, trace, r, task.incumbent_speedup * min(r.ratio, 1.0))
        challengers.sort(key=lambda c: -c[0])
        for k, (ratio, trace, first) in enumerate(challengers):
            if k == 0:
                (again,) = self.runner.run([self.job(task, trace)])
                if again.ok and again.ratio > 1 + MIN_GAIN:
                    gain = min(ratio, again.ratio)  # (the first is the luckier draw, likely)
                    task.incumbent, task.incumbent_speedup = trace, task.incumbent_speedup * gain
                    self.store(task, trace, again, task.incumbent_speedup)
                    continue
            self.store(task, trace, first, before)  # (not confirmed faster than the incumbent)
        self.model.fit(*self.samples)
        gain = task.incumbent_speedup / before - 1
        task.expected_gain = 0.5 * task.expected_gain + 0.5 * max(gain, 0.01)
        task.stale = 0 if gain > 0 else task.stale + 1
        if task.stale >= patience or not chosen:
            task.done = True

    def store(self, task: Task, trace: Trace, r: Result, speedup: float) -> None:
        assert r.time_s is not None
        self.db.add(Record(task.signature, task.name, self.target, trace, r.time_s, speedup))

    def breed(self, task: Task, batch: int) -> list[tuple[Trace, Candidate, list[float]]]:
        """Up to ``batch`` new candidates proved legal: the cost model's best of a pool of
        mutants of the best measured candidates and fresh samples, and one at random."""
        space, rng = task.space, self.rng
        parents = [c for _, c in sorted(task.population, key=lambda p: -p[0])[:4]]
        pool: dict[str, tuple[Trace, Candidate, list[float], Schedule]] = {}
        for _ in range(POOL_FACTOR * batch * 2):
            if len(pool) >= POOL_FACTOR * batch:
                break
            try:
                if parents and rng.random() < 0.75:
                    cand = space.mutate(rng.choice(parents), rng)
                    if rng.random() < 0.3:
                        cand = space.mutate(cand, rng)
                else:
                    cand = space.sample(rng)
                s = space.unverified(cand)
            except ScheduleError:
                continue
            key = s.trace.to_json()
            if key in task.measured or key in pool:
                continue
            pool[key] = (s.trace, cand, space.features(cand, s), s)
        entries = list(pool.values())
        scores = self.model.predict([e[2] for e in entries]) if entries else np.zeros(0)
        order = [entries[i] for i in sorted(range(len(entries)), key=lambda i: -scores[i])]
        if len(order) > batch:  # one explorer, drawn from the rest
            explorer = order[batch - 1 + rng.randrange(len(order) - batch + 1)]
            order = [*order[: batch - 1], explorer]
        out = []
        for trace, cand, features, s in order:
            try:
                s.verify("tuning candidate")
            except ScheduleError:
                task.measured.add(trace.to_json())
                self.failed += 1
                continue
            out.append((trace, cand, features))
        return out
