"""Where the polynomials of :mod:`polyonnx.codegen.vecmath` come from: weighted minimax fits.

Each :class:`Fit` names the function a polynomial approximates, its interval, and the weight
that turns the polynomial's error into the relative error of vecmath's result. :func:`remez`
finds the minimax coefficients in float64 (the exchange algorithm on a dense grid);
:func:`fit_float32` rounds them to float32 one at a time, lowest degree first, refitting the
others after each, so rounding costs little. Print the tuples vecmath stores::

    python -m tests.codegen.vecmath_fit
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polyonnx.codegen import vecmath as vm

Curve = Callable[[np.ndarray], np.ndarray]

_erf = np.vectorize(math.erf, otypes=[float])
_erfc = np.vectorize(math.erfc, otypes=[float])


@dataclass(frozen=True)
class Fit:
    """``target ~ sum(c_k t**k)`` for ``k < degree + 1`` on ``lo <= t <= hi``, minimising
    ``max |weight * (target - poly)|``."""

    name: str
    stored: tuple[float, ...]
    target: Curve
    weight: Curve
    lo: float
    hi: float

    @property
    def degree(self) -> int:
        return len(self.stored) - 1

    def error(self, coefficients: Sequence[float], points: int = 40001) -> float:
        """The weighted error of ``coefficients`` rounded to float32 (as LLVM stores them),
        evaluated in float64: a multiple of 2**-24, about half a float32 ulp."""
        t = _grid(self.lo, self.hi, points)
        c = np.asarray(coefficients, dtype=np.float32).astype(np.float64)
        return float(np.max(np.abs(self.weight(t) * (self.target(t) - _horner(c, t)))))


def _grid(lo: float, hi: float, points: int) -> np.ndarray:
    """Even points plus Chebyshev points (dense near the ends, where the error peaks)."""
    cheb = (lo + hi) / 2 - (hi - lo) / 2 * np.cos(np.linspace(0, np.pi, points))
    return np.unique(np.concatenate([np.linspace(lo, hi, points), cheb]))


def _horner(c: np.ndarray, t: np.ndarray) -> np.ndarray:
    acc = np.full_like(t, c[-1])
    for k in c[-2::-1]:
        acc = acc * t + k
    return acc


def remez(fit: Fit, first: int, fixed: np.ndarray, points: int = 20001) -> np.ndarray:
    """The minimax coefficients of degrees ``first..fit.degree`` with those below ``first``
    fixed to ``fixed``: solve for equal alternating errors on a reference of ``n + 1``
    points, move the reference to the error's extrema, repeat until they stay."""
    t = _grid(fit.lo, fit.hi, points)
    n = fit.degree + 1 - first
    basis = np.stack([t**k for k in range(first, fit.degree + 1)], axis=1)
    goal = fit.target(t) - (_horner(fixed, t) if len(fixed) else 0.0)
    w = fit.weight(t)
    ref = np.searchsorted(
        t, (fit.lo + fit.hi) / 2 - (fit.hi - fit.lo) / 2 * np.cos(np.pi * np.arange(n + 1) / n)
    ).clip(0, len(t) - 1)
    best, best_err = None, math.inf
    for _ in range(100):
        system = np.concatenate([basis[ref], ((-1.0) ** np.arange(n + 1) / w[ref])[:, None]], 1)
        c = np.linalg.solve(system, goal[ref])[:n]
        err = w * (goal - basis @ c)
        peak = float(np.max(np.abs(err)))
        if peak < best_err:
            best, best_err = c, peak
        sign = np.where(err < 0, -1, 1)
        starts = np.concatenate([[0], np.flatnonzero(np.diff(sign)) + 1, [len(t)]])
        new = np.array([s + np.argmax(np.abs(err[s:e])) for s, e in itertools.pairwise(starts)])
        while len(new) > n + 1:  # drop the smaller end until n + 1 alternate
            new = new[1:] if abs(err[new[0]]) < abs(err[new[-1]]) else new[:-1]
        if len(new) < n + 1 or np.array_equal(new, ref):
            break
        ref = new
    assert best is not None
    return best


def fit_float32(fit: Fit) -> np.ndarray:
    """float32 coefficients: each rounded in turn (lowest degree first), the rest refit."""
    fixed = np.zeros(0)
    for k in range(fit.degree + 1):
        c = remez(fit, k, fixed)
        fixed = np.append(fixed, float(np.float32(c[0])))
    return fixed


def _exp_tail(r: np.ndarray) -> np.ndarray:
    """(e**r - 1 - r) / r**2 by its series (no cancellation near 0)."""
    return sum(r ** (k - 2) / math.factorial(k) for k in range(2, 24))


def _log_tail(f: np.ndarray) -> np.ndarray:
    """(log(1 + f) - f + f**2 / 2) / f**3."""
    series = sum((-1) ** (k + 1) * f ** (k - 3) / k for k in range(3, 70))
    safe = np.where(f == 0, 1.0, f)
    return np.where(np.abs(f) < 0.15, series, (np.log1p(f) - f + f * f / 2) / safe**3)


def _erf_tail(y: np.ndarray) -> np.ndarray:
    """erf(a) / a - 1 at a = sqrt(y)."""
    a = np.sqrt(y)
    taylor = 2 / math.sqrt(math.pi) * (1 - y / 3 + y * y / 10) - 1
    return np.where(a < 1e-3, taylor, _erf(a) / np.where(a == 0, 1.0, a) - 1)


def _relative(numerator: Curve, value: Curve) -> Curve:
    """The weight that makes the polynomial's error relative to ``value`` (what vecmath adds
    to its result is ``numerator * error``), in units of 2**-24."""

    def weight(t: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.nan_to_num(np.abs(numerator(t) / value(t))) * 2.0**24

    return weight


def _root(f: Curve) -> Curve:
    """``f`` of ``sqrt(y)``: the small-argument polynomials are in ``y = a**2``."""
    return lambda y: f(np.sqrt(y))


_SLACK = 1.002  # the reduced argument may overshoot its nominal interval by rounding
_R = vm.EXP_REDUCED * _SLACK
_TINY = 1e-8  # the odd functions' fits start here: their weights vanish at 0

FITS: tuple[Fit, ...] = (
    Fit("EXP_POLY", vm.EXP_POLY, _exp_tail, _relative(lambda r: r * r, np.exp), -_R, _R),
    Fit(
        "LOG_POLY",
        vm.LOG_POLY,
        _log_tail,
        _relative(lambda f: f**3, np.log1p),
        (math.sqrt(0.5) - 1) * _SLACK,
        (math.sqrt(2) - 1) * _SLACK,
    ),
    Fit(
        "ERF_POLY",
        vm.ERF_POLY,
        _erf_tail,
        _relative(np.sqrt, _root(_erf)),
        _TINY,
        vm.ERF_SMALL**2 * _SLACK,
    ),
    Fit(
        "ERFC_LOG_POLY",
        vm.ERFC_LOG_POLY,
        lambda a: np.log(_erfc(a)),
        _relative(_erfc, _erf),
        vm.ERF_SMALL / _SLACK,
        vm.ERF_ONE,
    ),
)
"""Every polynomial of vecmath, by the name vecmath stores it under."""


def main() -> None:
    for fit in FITS:
        c = fit_float32(fit)
        stored = fit.error(fit.stored)
        print(f"{fit.name} = ({', '.join(str(np.float32(v)) for v in c)})")
        print(f"    # max error {fit.error(c):.3f} x 2**-24 (stored: {stored:.3f})")


if __name__ == "__main__":
    main()
