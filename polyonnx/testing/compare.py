"""Comparing outputs with their references: assertions and error reports.

:func:`assert_close` checks element by element as the ONNX backend suite does (same count,
shapes and dtypes; ``|got - want| <= atol + rtol * |want|``, NaN where NaN is expected).
:func:`assert_relative_error` checks a whole output against its largest value, as the
whole-model tests do; :func:`max_errors` reports both errors without asserting.

Example:
    >>> import numpy as np
    >>> want = [np.array([1.0, 2.0, 4.0], np.float32)]
    >>> got = [np.array([1.0, 2.002, 4.0], np.float32)]
    >>> print(max_errors(got, want))
    max abs err 0.002, max rel err 0.0005
    >>> assert_relative_error(got, want, 1e-3)
    >>> assert_close(got, want, rtol=1e-4, names=["y"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: ...output y...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The ONNX backend suite's default tolerances (``onnx.backend.test.loader``): what polyonnx's
#: outputs must meet against onnxruntime.
RTOL = 1e-3
ATOL = 1e-7


@dataclass(frozen=True, slots=True)
class Errors:
    """The largest differences between outputs and their references, over all outputs."""

    #: max |got - want|
    absolute: float
    #: max |got - want| / max |want|, per output (0 when both are 0; inf for a shape mismatch)
    relative: float

    def __str__(self) -> str:
        return f"max abs err {self.absolute:.3g}, max rel err {self.relative:.3g}"


def max_errors(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> Errors:
    """The largest absolute and relative errors of ``got`` against ``want`` (same length)."""
    abs_err, rel_err = 0.0, 0.0
    for a, b in zip(got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return Errors(float("inf"), float("inf"))
        d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
        scale = float(np.max(np.abs(b.astype(np.float64)), initial=0.0))
        abs_err = max(abs_err, d)
        rel_err = max(rel_err, d / scale if scale else (0.0 if d == 0 else float("inf")))
    return Errors(abs_err, rel_err)


def assert_close(
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    names: Sequence[str] | None = None,
) -> None:
    """Every output equals its reference within ``rtol``/``atol``, element by element, with
    the reference's shape and dtype (the backend suite's check); names the first that does
    not (``names``: the outputs' names, else their positions)."""
    assert len(got) == len(want), f"{len(got)} outputs, the reference has {len(want)}"
    labels = list(names) if names is not None else [str(k) for k in range(len(want))]
    for label, a, b in zip(labels, got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {label}: shape {a.shape}, reference {b.shape}"
        assert a.dtype == b.dtype, f"output {label}: dtype {a.dtype}, reference {b.dtype}"
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {label}")


def assert_relative_error(
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    tol: float,
    names: Sequence[str] | None = None,
) -> None:
    """Every output's max |got - want| / max |want| is at most ``tol`` and its reference is
    finite; names the first output that is not."""
    assert len(got) == len(want), f"{len(got)} outputs, the reference has {len(want)}"
    labels = list(names) if names is not None else [str(k) for k in range(len(want))]
    for label, a, b in zip(labels, got, want, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {label}: shape {a.shape}, reference {b.shape}"
        assert np.all(np.isfinite(b)), f"output {label}: the reference itself is not finite"
        err = max_errors([a], [b]).relative
        assert err <= tol, f"output {label}: relative error {err:.3g} > {tol:g}"
