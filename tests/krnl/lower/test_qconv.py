"""ConvInteger and QLinearConv vs onnxruntime (interpreted here; compiled in
tests/models/test_quantized_models.py). Integer results must match exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

import polyonnx
from polyonnx.codegen.target import dot4_bits
from polyonnx.errors import ShapeError
from polyonnx.frontend import import_model
from polyonnx.graph.passes import optimize, qlinear
from polyonnx.pipeline import to_graph
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import check_op, graph_from_model, run_krnl
from tests.reliability.models import const, model, tensor

EXACT = {"rtol": 0.0, "atol": 0.0}


def _ints(dtype: Any, *shape: int, seed: int = 0) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("constant_w", [False, True])
def test_conv_integer_padded_strided_grouped(constant_w: bool) -> None:
    """The padding reads x_zero_point (0 once centred), not 0: a padded window with a large
    zero point would be far off otherwise."""
    check_op(
        "ConvInteger",
        [
            ("x", _ints(np.uint8, 1, 4, 7, 6)),
            ("w", _ints(np.uint8, 6, 2, 3, 3, seed=1)),
            ("xz", np.array(200, np.uint8)),
            ("wz", np.array(131, np.uint8)),
        ],
        {"pads": [1, 2, 1, 0], "strides": [2, 1], "group": 2},
        constants=("w", "xz", "wz") if constant_w else (),
        **EXACT,
    )


@pytest.mark.parametrize(
    "attrs",
    [{"auto_pad": "SAME_LOWER", "strides": [1, 2]}, {"pads": [2, 1, 0, 1], "dilations": [2, 1]}],
)
def test_conv_integer_no_zero_points(attrs: dict[str, Any]) -> None:
    check_op(
        "ConvInteger",
        [("x", _ints(np.int8, 2, 3, 8, 8)), ("w", _ints(np.int8, 4, 3, 2, 3, seed=2))],
        attrs,
        constants=("w",),
        **EXACT,
    )


@pytest.mark.parametrize("constant_w", [False, True])
def test_qlinear_conv_uint8_bias(constant_w: bool) -> None:
    check_op(
        "QLinearConv",
        [
            ("x", _ints(np.uint8, 1, 3, 6, 6)),
            ("xs", np.array(0.02, np.float32)),
            ("xz", np.array(120, np.uint8)),
            ("w", _ints(np.uint8, 5, 3, 3, 3, seed=3)),
            ("ws", np.array(0.01, np.float32)),
            ("wz", np.array(128, np.uint8)),
            ("ys", np.array(0.9, np.float32)),
            ("yz", np.array(100, np.uint8)),
            ("b", np.random.default_rng(4).integers(-5000, 5000, 5).astype(np.int32)),
        ],
        {"pads": [1, 1, 1, 1]},
        constants=("w", "ws", "wz", "b") if constant_w else (),
        **EXACT,
    )


def test_qlinear_conv_int8_per_channel_depthwise_saturating() -> None:
    """Per-output-channel scales and zero points; a small y_scale sends values past int8's
    range (saturation)."""
    check_op(
        "QLinearConv",
        [
            ("x", _ints(np.int8, 1, 4, 5, 5)),
            ("xs", np.array(0.05, np.float32)),
            ("xz", np.array(-3, np.int8)),
            ("w", _ints(np.int8, 4, 1, 3, 3, seed=5)),
            ("ws", np.array([0.01, 0.02, 0.005, 0.03], np.float32)),
            ("wz", np.zeros(4, np.int8)),
            ("ys", np.array(0.3, np.float32)),
            ("yz", np.array(7, np.int8)),
        ],
        {"pads": [1, 1, 1, 1], "group": 4},
        constants=("w", "ws", "wz"),
        **EXACT,
    )


def test_qlinear_conv_halfway_rounds_to_even() -> None:
    """Accumulators landing exactly on .5 after the rescale: round half to even, as ONNX
    specifies (2.5 -> 2, 3.5 -> 4, -2.5 -> -2)."""
    x = np.array([5, 7, -5, 9, -7, 1], np.int8).reshape(1, 1, 1, 6)
    m = model(
        [oh.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        [tensor("x", [1, 1, 1, 6], T.INT8)],
        [tensor("y", [1, 1, 1, 6], T.INT8)],
        [
            const("xs", np.array(1.0, np.float32)),
            const("xz", np.array(0, np.int8)),
            const("w", np.ones((1, 1, 1, 1), np.int8)),
            const("ws", np.array(0.5, np.float32)),
            const("wz", np.array(0, np.int8)),
            const("ys", np.array(1.0, np.float32)),
            const("yz", np.array(0, np.int8)),
        ],
    )
    [got] = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(got.ravel(), [2, 4, -2, 4, -4, 0])
    np.testing.assert_array_equal(got, onnxruntime_outputs(m, {"x": x})[0])


def _qconv_model(x_zp: np.ndarray) -> Any:
    return model(
        [oh.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
        [tensor("x", [1, 2, 4, 4], T.UINT8)],
        [tensor("y", [1, 3, 4, 4], T.UINT8)],
        [
            const("xs", np.array(0.1, np.float32)),
            const("xz", x_zp),
            const("w", np.ones((3, 2, 1, 1), np.uint8)),
            const("ws", np.array(0.1, np.float32)),
            const("wz", np.array(0, np.uint8)),
            const("ys", np.array(0.1, np.float32)),
            const("yz", np.array(0, np.uint8)),
        ],
    )


def test_qlinear_conv_per_channel_x_zero_point_refused() -> None:
    """ONNX quantizes X per tensor: a zero point per input channel is a ShapeError naming it."""
    with pytest.raises(ShapeError, match="'xz'.*single value"):
        polyonnx.InferenceSession(_qconv_model(np.array([1, 2], np.uint8)))


def _qlinear_conv_chain(
    x_dtype: type, x_zero: int, pads: int, c: int = 8, size: int = 5
) -> tuple[Any, np.ndarray]:
    """A 3x3 QLinearConv (per-channel weights, bias; ``pads`` on every side) into a 1x1 one,
    on ``c`` channels of ``size`` x ``size``, and an input for it."""
    rng = np.random.default_rng(4)
    info = np.iinfo(x_dtype)
    inits = {
        "xs": np.float32(0.05),
        "xz": np.array(x_zero, x_dtype),
        "w1": rng.integers(-100, 101, (c, c, 3, 3)).astype(np.int8),
        "ws1": rng.uniform(0.001, 0.01, c).astype(np.float32),
        "wz1": np.zeros(c, np.int8),
        "ys": np.float32(0.2),
        "yz": np.array(0, x_dtype),
        "b1": rng.integers(-2000, 2000, c).astype(np.int32),
        "w2": rng.integers(-100, 101, (c, c, 1, 1)).astype(np.int8),
        "ws2": np.float32(0.003),
        "wz2": np.int8(0),
        "y2s": np.float32(0.3),
        "y2z": np.array(3, x_dtype),
    }
    nodes = [
        oh.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w1", "ws1", "wz1", "ys", "yz", "b1"],
            ["h"],
            pads=[pads] * 4,
        ),
        oh.make_node("QLinearConv", ["h", "ys", "yz", "w2", "ws2", "wz2", "y2s", "y2z"], ["y"]),
    ]
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(x_dtype))
    graph = oh.make_graph(
        nodes,
        "chain",
        [oh.make_tensor_value_info("x", elem, [1, c, size, size])],
        [oh.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.integers(info.min, info.max + 1, (1, c, size, size)).astype(x_dtype)
    return onnx.shape_inference.infer_shapes(model), x


@pytest.mark.parametrize(
    ("x_dtype", "x_zero", "pads"),
    [(np.uint8, 0, 1), (np.uint8, 7, 0), (np.int8, -5, 0)],
    ids=["uint8-padded", "uint8-zero-point", "int8"],
)
def test_packed_conv_integer_is_the_integer_convolution(
    x_dtype: type, x_zero: int, pads: int
) -> None:
    """QLinearConvs summed four input channels at a time (``PackedConvInteger``, its NCHW
    lowering, run by the krnl interpreter) give the integer lowering's answer exactly."""
    model, x = _qlinear_conv_chain(x_dtype, x_zero, pads)
    graph = optimize(import_model(model), dot4=True)
    assert [n.op_type for n in graph.nodes].count("PackedConvInteger") == 2
    got = run_krnl(graph, {"x": x})["y"]
    want = run_krnl(graph_from_model(model), {"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_a_padded_window_over_a_nonzero_zero_point_keeps_the_float_form() -> None:
    """Padding reads bytes of 0, which is x's zero point only when that is 0."""
    model, _ = _qlinear_conv_chain(np.uint8, 7, 1)
    ops = [n.op_type for n in optimize(import_model(model), dot4=True).nodes]
    assert ops.count("PackedConvInteger") == 1 and "Conv" in ops  # (the 1x1 conv reads none)


def test_blocked_byte_convolutions_match_the_integer_lowering() -> None:
    """On this host (VNNI or not), blocked or NCHW: the integer lowering's answer."""
    model, x = _qlinear_conv_chain(np.uint8, 0, 1, c=32, size=9)
    with pytest.MonkeyPatch.context() as patch:  # the integer lowering: no rewrite applies
        patch.setattr(qlinear, "_packed_conv", lambda *args: None)
        patch.setattr(qlinear, "EXACT", 0)
        patch.setattr(qlinear, "EXACT_FLOAT64", 0)
        want = polyonnx.InferenceSession(model, options=polyonnx.Options(cache=False)).run(
            None, {"x": x}
        )[0]
    for blocks in (True, False):
        options = polyonnx.Options(channel_blocks=blocks, cache=False)
        got = polyonnx.InferenceSession(model, options=options).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)
    if dot4_bits(polyonnx.Options()):
        ops = [n.op_type for n in to_graph(model).nodes]
        assert ops.count("ConvBlockedBytes") == 2
