"""ConvTranspose vs onnxruntime (and the spec's padding rules for output_shape / SAME)."""

from __future__ import annotations

import pytest

from tests.krnl.harness import check_op, rand

CASES = [
    {},
    {"strides": [2, 2]},
    {"strides": [3, 2], "pads": [1, 0, 2, 1]},
    {"strides": [2, 2], "output_padding": [1, 1]},
    {"dilations": [2, 2]},
    {"strides": [2, 1], "dilations": [1, 2], "pads": [0, 1, 1, 0], "output_padding": [1, 0]},
    {"strides": [3, 2], "output_shape": [10, 8]},
    {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"auto_pad": "VALID", "strides": [2, 2]},
]


@pytest.mark.parametrize("attrs", CASES, ids=str)
def test_conv_transpose_2d(attrs: dict) -> None:
    check_op(
        "ConvTranspose",
        [("x", rand(1, 2, 3, 3)), ("w", rand(2, 3, 3, 3, seed=1)), ("b", rand(3, seed=2))],
        attrs,
        constants=("w", "b"),
    )


def test_conv_transpose_group_no_bias() -> None:
    check_op(
        "ConvTranspose",
        [("x", rand(2, 4, 3, 2)), ("w", rand(4, 2, 2, 2, seed=1))],
        {"group": 2, "strides": [2, 1]},
        constants=("w",),
    )


def test_conv_transpose_1d_3d() -> None:
    check_op(
        "ConvTranspose", [("x", rand(1, 1, 5)), ("w", rand(1, 2, 3, seed=1))], {"strides": [2]}
    )
    check_op(
        "ConvTranspose",
        [("x", rand(1, 2, 2, 2, 2)), ("w", rand(2, 1, 2, 2, 2, seed=1))],
        {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 0]},
    )
