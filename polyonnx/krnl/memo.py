"""Memos of pure functions of one immutable IR object, keyed by the object's identity.

Compiling a model asks for the same facts of one kernel several times (its window, its
signature: the schedule driver, the codegen symbols and the entry point each need them), and
each is a walk over the whole kernel. Hashing a kernel is such a walk too, so a memo keyed by
equality would cost what it saves: these memos key by ``id`` and keep the object alive with
its result (an ``id`` is unique while its object lives), for the last :data:`SIZE` objects.

Example:
    >>> calls = []
    >>> @identity_memo
    ... def size(t: tuple) -> int:
    ...     calls.append(t)
    ...     return len(t)
    >>> t = (1, 2, 3)
    >>> size(t), size(t), size((1, 2, 3)), len(calls)  # an equal but other object: computed
    (3, 3, 3, 2)
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")

SIZE = 1024
"""Objects each memo remembers (the distinct kernels of the largest models, with room)."""


def identity_memo(fn: Callable[[A], R]) -> Callable[[A], R]:
    """``fn`` (a pure function of one immutable argument) remembering its last results by
    the identity of the argument."""
    memo: OrderedDict[int, tuple[A, R]] = OrderedDict()
    lock = threading.Lock()  # (sessions may compile on several threads)

    @functools.wraps(fn)
    def wrapper(arg: A) -> R:
        with lock:
            hit = memo.get(id(arg))
            if hit is not None and hit[0] is arg:
                memo.move_to_end(id(arg))
                return hit[1]
        out = fn(arg)
        with lock:
            memo[id(arg)] = (arg, out)
            if len(memo) > SIZE:
                memo.popitem(last=False)
        return out

    return wrapper
