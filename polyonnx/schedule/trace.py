"""Traces: the verbs that made a schedule, as JSON, replayable on any kernel of the same
signature (:meth:`Schedule.replay <polyonnx.schedule.schedule.Schedule.replay>`).

Example:
    >>> t = Trace("k0_Conv", "0123456789abcdef", (Split("ow", 8),))
    >>> print(t.to_json())
    {"kernel": "k0_Conv", "signature": "0123456789abcdef", "steps": [{"verb": "split", "loop": "ow", "factor": 8}]}
    >>> Trace.from_json(t.to_json()) == t
    True
"""  # noqa: E501

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from polyonnx.errors import ScheduleError
from polyonnx.schedule.verbs import VERBS, Directive, Split  # noqa: F401 (doctest)


def _jsonable(v: Any) -> Any:
    return [_jsonable(x) for x in v] if isinstance(v, tuple) else v


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


def directive_to_dict(d: Directive) -> dict[str, Any]:
    out: dict[str, Any] = {"verb": d.verb}
    for f in fields(d):
        value = getattr(d, f.name)
        if not (f.metadata.get("optional") and value == f.default):
            out[f.name] = _jsonable(value)
    return out


def directive_from_dict(step: Mapping[str, Any]) -> Directive:
    verb = step.get("verb")
    if verb not in VERBS:
        raise ScheduleError(f"trace: unknown verb {verb!r}; known: {', '.join(VERBS)}")
    cls = VERBS[verb][0]
    names = {f.name for f in fields(cls)}
    extra = set(step) - names - {"verb"}
    if extra:
        raise ScheduleError(f"trace: {verb} has no argument {sorted(extra)[0]!r}")
    try:
        return cls(**{k: _tupled(v) for k, v in step.items() if k != "verb"})
    except TypeError as e:
        raise ScheduleError(f"trace: bad {verb} step {dict(step)}: {e}") from None


@dataclass(frozen=True)
class Trace:
    """The directives applied to a kernel, in order."""

    kernel: str
    """The name of the kernel the trace was recorded on (for messages only)."""
    signature: str
    """:func:`~polyonnx.schedule.signature.kernel_signature` of that kernel."""
    directives: tuple[Directive, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "kernel": self.kernel,
                "signature": self.signature,
                "steps": [directive_to_dict(d) for d in self.directives],
            }
        )

    @staticmethod
    def from_json(text: str | Mapping[str, Any]) -> Trace:
        """Parse a trace (JSON text or the decoded object)."""
        try:
            obj = json.loads(text) if isinstance(text, str) else text
            steps = obj["steps"]
            return Trace(
                str(obj.get("kernel", "")),
                str(obj["signature"]),
                tuple(directive_from_dict(s) for s in steps),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ScheduleError(f"trace: not a schedule trace ({e})") from None

    def __str__(self) -> str:
        return "\n".join(str(d) for d in self.directives)


TraceLike = Trace | str | Mapping[str, Any]
"""A :class:`Trace`, its JSON text or the decoded JSON object."""


def load_schedules(path: str) -> dict[str, Trace]:
    """Read a schedules file: a JSON object mapping kernel names or signatures to traces
    (what ``polyonnx compile --schedules FILE`` reads).

    Example file::

        {"k3_Conv": {"kernel": "k3_Conv", "signature": "9c1e...", "steps": [...]}}
    """
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        raise ScheduleError(f"schedules file {path}: {e}") from None
    if not isinstance(obj, dict):
        raise ScheduleError(f"schedules file {path}: expected a JSON object of traces")
    return {str(k): Trace.from_json(v) for k, v in obj.items()}
