"""Progress of a long benchmark run, one line per step on stderr: step k of n, a bar, the
elapsed time and what is being measured.

Example:
    >>> import io
    >>> p = Progress(total=2, stream=io.StringIO())
    >>> p.step("mnist, 1 thread: compiling (cold)")
    >>> p.stream.getvalue()[:16]
    '[1/2 #####----- '
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_BAR = 10


class Progress:
    """Counts steps of ``total``; ``started`` (a :func:`time.time`) and ``done`` let a child
    process continue its parent's count."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        started: float | None = None,
        done: int = 0,
    ) -> None:
        self.total, self.done = max(total, 1), done
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.time() if started is None else started

    def step(self, what: str) -> None:
        """Start the next step: ``what`` it measures."""
        self.done = min(self.done + 1, self.total)
        self.note(what)

    def note(self, what: str) -> None:
        """What the current step is measuring now."""
        filled = _BAR * self.done // self.total
        elapsed = int(time.time() - self.started)
        width = len(str(self.total))
        self.stream.write(
            f"[{self.done:{width}}/{self.total} {'#' * filled}{'-' * (_BAR - filled)} "
            f"{elapsed // 60:3d}m{elapsed % 60:02d}s] {what}\n"
        )
        self.stream.flush()
