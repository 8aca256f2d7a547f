"""String tensors as fixed-width arrays of Unicode code points.

An ONNX string has no fixed size; native code wants one. polyonnx holds a string value of
shape ``S`` as ``S x W`` uint32 code points (UTF-32), each string zero-padded to the width
``W`` fixed at compile time. numpy's ``<U{W}`` dtype has exactly that memory layout, so the
graph types such a value with that dtype's name and its ONNX shape (``Value("x", "U7", (4,))``),
the kernels see a ``uint32`` buffer of shape ``S + (W,)`` (:func:`storage`), and the runtime
passes numpy ``<U{W}`` arrays to native code as they are.

The importer types strings as numpy does (``object``, no width yet);
:func:`polyonnx.graph.passes.strings.type_strings` gives every string value its width. The
padding is the end of a string: a string holding the code point 0 is refused.

Example:
    >>> string_dtype(2), string_width("U2"), string_width("float32")
    ('U2', 2, None)
    >>> storage("U2", (2,))
    ('uint32', (2, 2))
    >>> fixed_width(np.array(["ab", "c"], dtype=object)).view(np.uint32).tolist()
    [97, 98, 99, 0]
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

#: The dtype the importer gives a string value (numpy's, for ONNX's STRING): not yet sized.
UNSIZED = "object"
#: The element type of a string value's storage: one Unicode code point.
CODE_POINT = "uint32"

_FIXED = re.compile(r"U([1-9][0-9]*)")


def string_dtype(width: int) -> str:
    """The graph dtype of strings of at most ``width`` code points."""
    return f"U{int(width)}"


def string_width(dtype: str) -> int | None:
    """The width of a sized string dtype (``"U7"``: 7), None for any other dtype."""
    m = _FIXED.fullmatch(dtype)
    return int(m.group(1)) if m else None


def is_string(dtype: str) -> bool:
    """Whether ``dtype`` is a string type, sized or not."""
    return dtype == UNSIZED or string_width(dtype) is not None


def element_type(dtype: str) -> str:
    """``dtype`` as ONNX types it: every string dtype is ``string``, whatever its width."""
    return "string" if is_string(dtype) else dtype


def storage(dtype: str, shape: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """The (dtype, shape) of the buffer holding a value: strings gain a code-point axis."""
    width = string_width(dtype)
    dims = tuple(int(d) for d in shape)
    return (dtype, dims) if width is None else (CODE_POINT, (*dims, width))


def fixed_width(strings: np.ndarray, width: int | None = None) -> np.ndarray:
    """``strings`` (str, or UTF-8 bytes) as a ``<U{width}`` array, C-contiguous; ``width``
    defaults to the longest string's length (at least 1). Raises TypeError naming the first
    element that is not a string, ValueError for a string longer than ``width`` or holding
    the code point 0 (it would read as the end of the string)."""
    flat = strings.reshape(-1)
    texts = []
    for s in flat.tolist():
        if isinstance(s, bytes):
            s = s.decode("utf-8")
        if not isinstance(s, str):
            raise TypeError(f"expected strings, found {type(s).__name__} {s!r}")
        if "\0" in s:
            raise ValueError(f"string {s!r} holds the code point 0, which pads strings")
        texts.append(s)
    longest = max((len(s) for s in texts), default=0)
    width = max(longest, 1) if width is None else width
    if longest > width:
        raise ValueError(f"a string of {longest} code points does not fit width {width}")
    return np.array(texts, dtype=string_dtype(width)).reshape(strings.shape)
