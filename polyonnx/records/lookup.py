"""Tuned schedules for a compile: the best record of each kernel in the tuning database.

The scheduling driver (:func:`polyonnx.schedule_driver.schedule_program`) asks
:func:`tuned_schedules` for the kernels the user gave no trace for. A record's trace is replayed
on the kernel and proved legal as a whole (:meth:`~polyonnx.schedule.schedule.Schedule.apply_all`:
the default strategies' intermediate schedules need not be legal); a record that no longer
replays (the compiler changed), or whose replay exceeds the isl budget
(``Options.isl_max_operations``), is skipped with a :class:`TuningWarning` and the next best one
is tried. Records measured on another target (CPU, caches, threads) are ignored, with a warning
that says so when they are all a kernel has.

Example::

    tuned = tuned_schedules({sig: kernel}, Options(tuning_db="tuning.sqlite"))
    tuned[sig].trace
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options
from polyonnx.records.database import TuningDatabase, database_path, target_fingerprint
from polyonnx.schedule.budget import isl_budget
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.trace import Trace


class TuningWarning(UserWarning):
    """A tuning record that was not used: its trace no longer replays, or it is another
    target's."""


def replay_trace(kernel: Kernel, trace: Trace) -> Schedule:
    """``trace`` applied to ``kernel``'s own loops and proved legal once, at the end; refused
    with :class:`~polyonnx.errors.ScheduleError` if it does not fit or is not legal."""
    s = Schedule.from_kernel(kernel)
    if s.signature != trace.signature:
        raise ScheduleError(
            f"trace of signature {trace.signature} does not fit kernel {kernel.name} "
            f"(signature {s.signature})"
        )
    return s.apply_all(trace.directives)


def tuned_schedules(kernels: Mapping[str, Kernel], options: Options) -> dict[str, Schedule]:
    """For each kernel (by signature) with a record faster than its default schedule in the
    database of ``options`` (``Options.tuning_db``) for this target, the record's schedule."""
    path = database_path(options)
    if path is None or not path.exists() or not kernels:
        return {}
    target = target_fingerprint(options)
    out: dict[str, Schedule] = {}
    with TuningDatabase(path) as db:
        for sig, kernel in kernels.items():
            for record in db.records(sig, target):
                if record.speedup <= 1.0:
                    break  # (best first: the default schedule is as good)
                try:
                    with isl_budget(options.isl_max_operations, f"kernel {kernel.name}"):
                        out[sig] = replay_trace(kernel, record.trace)
                    break
                except ScheduleError as e:
                    warnings.warn(
                        f"tuning database {path}: a record of kernel {kernel.name} "
                        f"(polyonnx {record.version}) skipped: its trace no longer replays: {e}",
                        TuningWarning,
                        stacklevel=2,
                    )
        untuned = [sig for sig in kernels if sig not in out and not db.best(sig, target)]
        others = db.other_targets(untuned, target) if untuned else []
    if others:
        warnings.warn(
            f"tuning database {path}: {len(untuned)} kernel(s) tuned only for other "
            f"targets ({'; '.join(sorted({str(t) for t in others}))}), not for this one "
            f"({target}): their records are ignored",
            TuningWarning,
            stacklevel=2,
        )
    return out
