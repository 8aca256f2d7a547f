"""Spreads of measured figures and interleaved timing."""

from __future__ import annotations

import pytest

from polyonnx.bench.timing import Spread, interleaved, interleaved_times


def test_spread_of_values():
    assert Spread.of([4.0, 1.0, 2.0, 3.0]) == Spread(2.5, 1.0, 4.0, 4)
    assert Spread.once(2.0) == Spread(2.0, 2.0, 2.0, 1)


def test_rate_swaps_min_and_max():
    rate = Spread(2.0, 1.0, 4.0, 3).rate(8.0)
    assert rate == Spread(4.0, 2.0, 8.0, 3)
    assert Spread(2.0, 1.0, 4.0, 3).scaled(10.0) == Spread(20.0, 10.0, 40.0, 3)


@pytest.mark.parametrize("args", [(1.0, 2.0, 3.0, 0), (5.0, 1.0, 3.0, 2)])
def test_spread_checks_itself(args):
    with pytest.raises(ValueError, match="not a spread"):
        Spread(*args)


def test_interleaved_times_alternate_contenders():
    calls: list[str] = []
    a, b = interleaved_times([lambda: calls.append("a"), lambda: calls.append("b")], 4, 10.0)
    assert a.rounds == b.rounds == 4
    assert calls == ["a", "b"] * 5  # one warm-up round, then 4 timed
    medians, n = interleaved([lambda: None], 4, 10.0)
    assert n == 4 and medians[0] >= 0
