"""Random feeds: seeded, per dtype, symbolic dimensions as 1."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx import InputError, NodeArg
from polyonnx.testing import random_feeds

INPUTS = [
    NodeArg("x", ["batch", 3], "float32"),
    NodeArg("k", [4], "int64"),
    NodeArg("m", [2, 2], "bool"),
]


def test_each_dtype_gets_its_kind_of_data():
    feeds = random_feeds(INPUTS, seed=3)
    assert list(feeds) == ["x", "k", "m"]
    x, k, m = feeds.values()
    assert (x.dtype, x.shape) == (np.float32, (1, 3))
    assert k.dtype == np.int64 and k.min() >= 0 and k.max() < 10
    assert m.dtype == np.bool_ and m.shape == (2, 2)


def test_the_draws_are_those_of_the_seeded_generator_in_input_order():
    feeds = random_feeds(INPUTS[:1], seed=5)
    np.testing.assert_array_equal(
        feeds["x"], np.random.default_rng(5).standard_normal((1, 3)).astype(np.float32)
    )
    assert all(
        np.array_equal(a, b)
        for a, b in zip(random_feeds(INPUTS).values(), random_feeds(INPUTS).values(), strict=True)
    )


def test_an_input_without_random_data_is_named():
    with pytest.raises(InputError, match="input 's': cannot make random data of dtype str"):
        random_feeds([NodeArg("s", [1], "str")])
