"""What every schedule verb is made of: :class:`Directive`, the base of the directive
records, and the schedule-tree helpers the checks and applies share (a loop's band, a chain
of bands, factors, band splits)."""

from __future__ import annotations

from dataclasses import Field, field, fields, replace
from typing import Any, ClassVar

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.schedule.tree import (
    Band,
    Node,
    Path,
    band_paths,
    find,
    get,
)

OPTIONAL = {"optional": True}
"""Field metadata: left out of a trace step when it has its default value (so traces written
before the field existed read the same and stay the same)."""


def _flag() -> bool:
    return field(default=False, metadata=OPTIONAL)


class Directive:
    """Base of the directive records; ``verb`` is the name in traces and messages."""

    verb: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every directive is a dataclass

    def __str__(self) -> str:
        args = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("optional"):
                if v != f.default:
                    text = f"({', '.join(map(str, v))})" if isinstance(v, tuple) else str(v)
                    args.append(f"{f.name}={text}")
                continue
            args.append(
                ", ".join(map(str, v)) if isinstance(v, tuple) and f.name == "loops" else str(v)
            )
        return f"{self.verb}({', '.join(args)})"


def _band(tree: Node, loop: str, verb: str) -> tuple[Path, Band]:
    path = find(tree, loop, verb)
    node = get(tree, path)
    assert isinstance(node, Band)
    return path, node


def _unmarked(band: Band, verb: str) -> None:
    if band.mark or band.unroll or band.isolate or band.grouped:
        what = band.mark or ("unrolled" if band.unroll else "isolated")
        raise ScheduleError(
            f"{verb}: loop {band.name} is already {what}; restructure loops before marking them"
        )


def _chain(tree: Node, loops: tuple[str, ...], verb: str) -> tuple[Path, list[Band]]:
    """The bands from the outermost to the innermost of ``loops`` when they form one perfect
    nest (each band's body is the next band): (path of the outermost, bands)."""
    if len(set(loops)) != len(loops):
        raise ScheduleError(f"{verb}: a loop is named twice in {', '.join(loops)}")
    paths = {name: find(tree, name, verb) for name in loops}
    top = min(paths.values(), key=len)
    bottom = max(paths.values(), key=len)
    if bottom[: len(top)] != top:
        raise ScheduleError(f"{verb}: loops {', '.join(loops)} are not nested in one another")
    bands = [get(tree, bottom[:d]) for d in range(len(top), len(bottom) + 1)]
    for outer, inner in zip(bands, bands[1:], strict=False):
        if not isinstance(outer, Band) or not isinstance(inner, Band):
            raise ScheduleError(
                f"{verb}: loops {', '.join(loops)} are not perfectly nested "
                f"(statements sit between them); distribute first"
            )
    names = {b.name for b in bands if isinstance(b, Band)}
    if any(name not in names for name in loops):
        raise ScheduleError(f"{verb}: loops {', '.join(loops)} are not nested in one another")
    return top, [b for b in bands if isinstance(b, Band)]


def _rebuild(bands: list[Band], child: Node) -> Node:
    """Nest ``bands`` (outermost first) around ``child``."""
    for b in reversed(bands):
        child = replace(b, child=child)
    return child


def _check_factor(verb: str, factor: int) -> None:
    if not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"{verb}: factor must be a positive integer, got {factor!r}")


def _split_bands(band: Band, factor: int, outer: str, inner: str) -> tuple[Band, Band]:
    f = isl.Val(factor)
    return (
        Band(outer, band.sched.scale_down_val(f).floor(), band.child),
        Band(inner, band.sched.mod_val(f), band.child),
    )


def _taken(tree: Node) -> set[str]:
    return set(band_paths(tree))
