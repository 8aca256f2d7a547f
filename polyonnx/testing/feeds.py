"""Random feeds for a model's inputs.

Example:
    >>> import polyonnx
    >>> feeds = random_feeds([polyonnx.NodeArg("x", ["batch", 3], "float32"),
    ...                       polyonnx.NodeArg("k", [2], "int64")], seed=1)
    >>> {name: (a.dtype.name, a.shape) for name, a in feeds.items()}
    {'x': ('float32', (1, 3)), 'k': ('int64', (2,))}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from polyonnx.errors import InputError


class InputLike(Protocol):
    """What describes an input: :class:`polyonnx.NodeArg` (from ``session.get_inputs()``)."""

    @property
    def name(self) -> str: ...

    @property
    def shape(self) -> Sequence[int | str]: ...

    @property
    def dtype(self) -> str: ...


def random_feeds(inputs: Sequence[InputLike], seed: int = 0) -> dict[str, np.ndarray]:
    """One array per input, drawn in order from ``numpy.random.default_rng(seed)``: floats
    ~ N(0, 1), integers in [0, 10), booleans fair coins; a symbolic dimension is taken as 1.

    Raises ``InputError`` for an input of another dtype (strings, say), naming it.
    """
    rng = np.random.default_rng(seed)
    return {arg.name: _random_array(arg, rng) for arg in inputs}


def _random_array(arg: InputLike, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(d if isinstance(d, int) else 1 for d in arg.shape)
    dtype = np.dtype(arg.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 10, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(f"input {arg.name!r}: cannot make random data of dtype {arg.dtype}")
