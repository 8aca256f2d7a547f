"""The tuning progress bar: elapsed and remaining budget, the kernel being tuned, the best
speed-up of each kernel and of the model so far.

On a terminal the line is redrawn in place; on a file or pipe a line is written per round.

Example::

    [####------]  4:02 / 10:00 (5:58 left)  k3_Conv 1.31x (5/12)  model 1.12x  [k0 1.05 k3 1.31 ...]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from polyonnx.tune.task import Task

WIDTH = 20


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """Writes progress lines to ``stream`` (nothing when None)."""

    def __init__(self, budget_s: float, stream: TextIO | None) -> None:
        self.budget_s = budget_s
        self.stream = stream
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._drawn = False

    def line(self, elapsed: float, task: Task, tasks: Sequence[Task]) -> str:
        done = min(1.0, elapsed / self.budget_s)
        bar = "#" * round(done * WIDTH) + "-" * (WIDTH - round(done * WIDTH))
        before = sum(t.count * (t.default_s or 0.0) for t in tasks)
        after = sum(t.latency for t in tasks)
        model = before / after if after > 0 else 1.0
        index = next(i for i, t in enumerate(tasks) if t is task) + 1
        kernels = " ".join(
            f"{t.name.split('_')[0]} {t.incumbent_speedup:.2f}" for t in tasks if t.default_s
        )
        return (
            f"[{bar}] {clock(elapsed)} / {clock(self.budget_s)} "
            f"({clock(self.budget_s - elapsed)} left)  {task.name} "
            f"{task.incumbent_speedup:.2f}x ({index}/{len(tasks)})  model {model:.2f}x  "
            f"[{kernels}]"
        )

    def show(self, elapsed: float, task: Task, tasks: Sequence[Task]) -> None:
        if self.stream is None:
            return
        text = self.line(elapsed, task, tasks)
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, message: str) -> None:
        """A message on a line of its own (above the bar on a terminal)."""
        if self.stream is None:
            return
        self.finish()
        self.stream.write(f"polyonnx tune: {message}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.stream is not None and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
