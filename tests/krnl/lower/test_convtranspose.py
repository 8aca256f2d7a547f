"""ConvTranspose vs onnxruntime (and the spec's padding rules for output_shape / SAME)."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ShapeError
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


@pytest.mark.parametrize(
    "attrs",
    [
        # SAME pads the full output down to in * stride; a shorter full output (1 x 2 + 1)
        # is kept, as onnxruntime and ONNX shape inference agree
        {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
        {"strides": [3, 1], "dilations": [2, 1], "auto_pad": "SAME_UPPER"},
    ],
    ids=str,
)
def test_conv_transpose_same_kernel_1(attrs: dict) -> None:
    check_op(
        "ConvTranspose",
        [("x", rand(1, 2, 2, 3)), ("w", rand(2, 3, 1, 1, seed=1))],
        attrs,
        constants=("w",),
    )


def test_conv_transpose_same_with_output_padding_is_refused() -> None:
    # ONNX shape inference types SAME_UPPER with output_padding as in * stride + 1 where
    # onnxruntime (and the reference) give in * stride: a silent output of the wrong shape,
    # its padding derived from the wider one. Now a ShapeError naming the node.
    w = numpy_helper.from_array(rand(2, 3, 3, 3, seed=1), "w")
    node = helper.make_node(
        "ConvTranspose",
        ["x", "w"],
        ["y"],
        "up",
        strides=[2, 2],
        output_padding=[1, 1],
        auto_pad="SAME_UPPER",
    )
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match=r"'up' \(ConvTranspose\).*expected \(6, 6\)"):
        polyonnx.InferenceSession(model)
