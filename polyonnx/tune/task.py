"""A tuning task: the search of one distinct kernel of a model, as the tuner
(:mod:`polyonnx.tune.tuner`) runs it and the progress bar (:mod:`polyonnx.tune.progress`)
shows it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.trace import Trace
from polyonnx.tune.space import Candidate, SearchSpace


@dataclass
class Task:
    """The search of one distinct kernel (``count`` kernels of the model have it)."""

    signature: str
    kernel: Kernel
    count: int
    space: SearchSpace
    default: Trace
    incumbent: Trace
    incumbent_speedup: float = 1.0
    default_s: float | None = None
    reference: Mapping | None = None
    known: Mapping[str, np.ndarray] = field(default_factory=dict)
    """The model's values of the kernel's small constant inputs, used by its output checks."""
    measured: set[str] = field(default_factory=set)
    population: list[tuple[float, Candidate]] = field(default_factory=list)
    rounds: int = 0
    stale: int = 0
    expected_gain: float = 0.5
    done: bool = False
    failures: int = 0

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def latency(self) -> float:
        """This task's kernels' share of the model's time: count x best time so far."""
        return self.count * (self.default_s or 0.0) / self.incumbent_speedup
