"""Verbs that stage data in buffers of their own: ``cache_read``, ``cache_write``, ``pack``
(the kernel rewrite itself is :mod:`polyonnx.schedule.staging`'s).

The before/after loop nests are for ``C[i, j] += A[i, k] * B[k, j]`` with ``i, j, k`` in
``[0, 16)`` (init statement omitted), as in :mod:`polyonnx.schedule.verbs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.staging import Layout, stage
from polyonnx.schedule.tree import (
    Node,
    find,
)
from polyonnx.schedule.verbs.base import Directive


@dataclass(frozen=True)
class CacheRead(Directive):
    """Stage the part of ``buffer`` the statements under ``loop`` read in a new temp buffer: a
    copy statement fills it at the start of each iteration of ``loop``, and the reads under
    ``loop`` read the temp (indices relative to the tile). Changes the kernel (see
    :mod:`polyonnx.schedule.staging`); refused if ``buffer`` is written under ``loop``.

    Before / after ``cache_read(B, k_o)`` (after ``tile((k, j), (4, 16))``)::

        for i in [0, 16):              for i in [0, 16):
          for k_o in [0, 4):             for k_o in [0, 4):
            for j_o in [0, 1):             S2: B_cache[t0, t1] = B[4*k_o + t0, t1]
              for k_i in [0, 4):           for j_o in [0, 1):
                for j_i in [0, 16):          for k_i in [0, 4):
                  S1: ... B[k, j]              for j_i in [0, 16):
                                                 S1: ... B_cache[k - 4*k_o, j]
    """

    verb: ClassVar[str] = "cache_read"
    buffer: str
    loop: str


@dataclass(frozen=True)
class CacheWrite(Directive):
    """The statements under ``loop`` write (and read back) a temp tile instead of ``buffer``;
    a copy statement after the loop's body writes the tile back. Refused if a read under
    ``loop`` needs a value of ``buffer`` the same iteration did not write.

    Before / after ``cache_write(C, j_o)`` (after ``split(j, 4)``)::

        for i in [0, 16):              for i in [0, 16):
          for j_o in [0, 4):             for j_o in [0, 4):
            for j_i in [0, 4):             for j_i in [0, 4):
              S0: C[i, j] = 0.0              S0: C_cache[0, j - 4*j_o] = 0.0
              for k in [0, 16):              for k in [0, 16):
                S1: C[i, j] += ...             S1: C_cache[0, j - 4*j_o] += ...
                                           S2: C[i + t0, 4*j_o + t1] = C_cache[t0, t1]
    """

    verb: ClassVar[str] = "cache_write"
    buffer: str
    loop: str


@dataclass(frozen=True)
class Pack(Directive):
    """``cache_read`` with a chosen layout of the temp: ``factors[d] > 1`` splits tile
    dimension ``d`` into (outer, inner of ``factors[d]``), then ``order`` permutes the
    dimensions. The BLIS B panel of a ``kc x nc`` tile of ``B[k, j]`` is
    ``pack(B, k_o, order=(1, 0, 2), factors=(0, nr))``: ``B_pack[j / nr, k, j % nr]``.

    Before / after ``pack(B, k_o, (1, 0, 2), (0, 8))``::

        for k_o in [0, 4):             for k_o in [0, 4):
          ...                            S2: B_pack[t0, t1, t2] = B[4*k_o + t1, 8*t0 + t2]
            S1: ... B[k, j]              ...
                                           S1: ... B_pack[u1, k - 4*k_o, j - 8*u1]
    """

    verb: ClassVar[str] = "pack"
    buffer: str
    loop: str
    order: tuple[int, ...] = ()
    factors: tuple[int, ...] = ()


def _check_stage(tree: Node, d: CacheRead | CacheWrite | Pack) -> None:
    if not isinstance(d.buffer, str) or not isinstance(d.loop, str):
        raise ScheduleError(f"{d}: give a buffer name and a loop name")
    find(tree, d.loop, str(d))


def check_cache_read(tree: Node, poly: PolyKernel, d: CacheRead) -> None:
    _check_stage(tree, d)


def apply_cache_read(tree: Node, poly: PolyKernel, d: CacheRead) -> tuple[Kernel, Node]:
    return stage(tree, poly, d.buffer, d.loop, str(d), write=False)


def check_cache_write(tree: Node, poly: PolyKernel, d: CacheWrite) -> None:
    _check_stage(tree, d)


def apply_cache_write(tree: Node, poly: PolyKernel, d: CacheWrite) -> tuple[Kernel, Node]:
    return stage(tree, poly, d.buffer, d.loop, str(d), write=True)


def check_pack(tree: Node, poly: PolyKernel, d: Pack) -> None:
    _check_stage(tree, d)
    if not all(isinstance(x, int) for x in d.order + d.factors):
        raise ScheduleError(f"{d}: order and factors are integers")


def apply_pack(tree: Node, poly: PolyKernel, d: Pack) -> tuple[Kernel, Node]:
    return stage(
        tree, poly, d.buffer, d.loop, str(d), write=False, layout=Layout(d.factors, d.order)
    )
