"""A fuzz case, where its random choices come from, and what became of it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Draw(Protocol):
    """Where a case's random choices come from."""

    def integer(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``."""
        ...

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``."""
        ...


@dataclass
class RandomDraw:
    """A :class:`Draw` from a seeded ``random.Random``."""

    seed: int
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


@dataclass
class Case:
    """One fuzz case: a model (possibly corrupt bytes) and the feeds to run it with."""

    kind: str
    model: bytes
    feeds: dict[str, Any]
    label: str


@dataclass(frozen=True)
class Outcome:
    """What became of a case: ``status`` is pass, fail, crash, hang, unsupported or invalid."""

    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("fail", "crash", "hang")
