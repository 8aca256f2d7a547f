"""Bad, odd and special feeds to ``InferenceSession.run``.

Refused with InputError: missing or unknown names, wrong dtype, rank or shape, non-arrays.
Copied (never refused): non-contiguous, negatively strided, broadcast (zero-stride) and
misaligned arrays. Zero-sized dimensions run. NaN and Inf propagate as in onnxruntime, except
that a max-pooling window holding a NaN always gives NaN (onnxruntime's result there depends on
the NaN's position in the window).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import polyonnx
from polyonnx.errors import InputError
from polyonnx.testing import onnxruntime_outputs
from tests.reliability.models import const, conv_net, model, relu, tensor


@pytest.fixture(scope="module")
def net():
    m = conv_net()
    return m, polyonnx.InferenceSession(m)


def _x(seed: int = 0, shape=(1, 3, 8, 8)) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "feed, message",
    [
        ({}, r"missing input\(s\) \['x'\]"),
        ({"x": _x(), "extra": _x()}, r"unknown input name\(s\) \['extra'\]"),
        ({"X": _x()}, "unknown input name"),
        ({"x": _x().astype(np.float64)}, "'x': expected dtype float32"),
        ({"x": _x().astype(np.float16)}, "'x': expected dtype float32"),
        ({"x": _x().astype(np.int32)}, "'x': expected dtype float32"),
        ({"x": _x().astype(bool)}, "'x': expected dtype float32"),
        ({"x": _x(shape=(3, 8, 8))}, r"'x': expected shape \[1, 3, 8, 8\], got \[3, 8, 8\]"),
        ({"x": _x(shape=(1, 1, 3, 8, 8))}, "'x': expected shape"),
        ({"x": _x(shape=(1, 3, 8, 9))}, "'x': expected shape"),
        ({"x": _x(shape=(2, 3, 8, 8))}, "'x': expected shape"),
        ({"x": None}, "'x': expected a numpy array, got NoneType"),
        ({"x": object()}, "'x': expected a numpy array"),
        ({"x": np.array(["a"] * 192, dtype=object).reshape(1, 3, 8, 8)}, "'x': expected dtype"),
        ({"x": [[1.0, 2.0]]}, "'x'"),
    ],
)
def test_bad_feed_is_an_input_error_naming_the_input(net, feed, message):
    _, sess = net
    with pytest.raises(InputError, match=message) as info:
        sess.run(None, feed)
    assert "\n" not in str(info.value)


def test_feed_must_be_a_mapping_and_output_names_must_exist(net):
    _, sess = net
    with pytest.raises(InputError, match="dict"):
        sess.run(None, [_x()])
    with pytest.raises(InputError, match=r"unknown output name\(s\) \['nope'\]"):
        sess.run(["nope"], {"x": _x()})


def _misaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data pointer is one byte off its element alignment."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    out = raw[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % a.dtype.itemsize != 0
    return out


@pytest.mark.parametrize(
    "layout", ["fortran", "strided", "reversed", "broadcast", "misaligned", "readonly"]
)
def test_odd_layouts_are_copied_and_give_the_same_result(net, layout):
    m, sess = net
    x = _x(1)
    want = sess.run(None, {"x": x})[0]
    if layout == "fortran":
        feed = np.asfortranarray(x)
    elif layout == "strided":
        feed = np.zeros((1, 3, 8, 16), np.float32)[..., ::2]
        feed[...] = x
    elif layout == "reversed":
        feed = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    elif layout == "broadcast":
        x = np.broadcast_to(x[:, :, :1, :], x.shape)
        want = sess.run(None, {"x": np.ascontiguousarray(x)})[0]
        feed = x
    elif layout == "misaligned":
        feed = _misaligned(x)
    else:
        feed = x.copy()
        feed.flags.writeable = False
    assert not (feed.flags.c_contiguous and feed.flags.aligned and feed.flags.writeable)
    before = np.array(feed, copy=True)
    got = sess.run(None, {"x": feed})[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(feed, before)  # native code never writes a feed
    np.testing.assert_allclose(
        got, onnxruntime_outputs(m, {"x": np.ascontiguousarray(feed)})[0], rtol=1e-4, atol=1e-6
    )


def test_outputs_are_fresh_arrays(net):
    _, sess = net
    x = _x()
    a, b = sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0]
    assert not np.shares_memory(a, b)
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.owndata


@pytest.mark.parametrize(
    "name, m, feeds",
    [
        ("relu batch 0", relu(("n", 3)), {"x": np.ones((0, 3), np.float32)}),
        (
            "softmax rows 0",
            model(
                [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                [tensor("x", ["n", 4])],
                [tensor("y", ["n", 4])],
            ),
            {"x": np.ones((0, 4), np.float32)},
        ),
        (
            "softmax axis 0 long",
            model(
                [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                [tensor("x", [2, "n"])],
                [tensor("y", [2, "n"])],
            ),
            {"x": np.ones((2, 0), np.float32)},
        ),
        (
            "matmul k=0",
            model(
                [helper.make_node("MatMul", ["a", "b"], ["y"])],
                [tensor("a", [2, "k"]), tensor("b", ["k", 3])],
                [tensor("y", [2, 3])],
            ),
            {"a": np.ones((2, 0), np.float32), "b": np.ones((0, 3), np.float32)},
        ),
        (
            "add broadcast 0",
            model(
                [helper.make_node("Add", ["a", "b"], ["y"])],
                [tensor("a", ["n", 3]), tensor("b", [3])],
                [tensor("y", ["n", 3])],
            ),
            {"a": np.ones((0, 3), np.float32), "b": np.ones(3, np.float32)},
        ),
    ],
)
def test_zero_sized_dimensions_run_like_onnxruntime(name, m, feeds):
    got = polyonnx.InferenceSession(m).run(None, feeds)
    want = onnxruntime_outputs(m, feeds)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


_SPECIAL = np.array(
    [
        [np.nan, 1, -np.inf, np.inf],
        [2, np.nan, 3, -1],
        [0, 0, np.inf, -np.inf],
        [-np.inf, np.nan, -2, np.inf],
    ],
    np.float32,
).reshape(1, 1, 4, 4)


def _unary(op: str, inputs=("x",), inits=(), **attrs):
    return model(
        [helper.make_node(op, list(inputs), ["y"], **attrs)],
        [tensor("x", [1, 1, 4, 4])],
        [tensor("y", [None] * 4)],
        list(inits),
    )


_HALF = const("c", np.full((1, 1, 1, 4), 0.5, np.float32))
NAN_CASES = {
    "Relu": _unary("Relu"),
    "Sigmoid": _unary("Sigmoid"),
    "Exp": _unary("Exp"),
    "Tanh": _unary("Tanh"),
    "Abs": _unary("Abs"),
    "Sqrt": _unary("Sqrt"),
    "Log": _unary("Log"),
    "Reciprocal": _unary("Reciprocal"),
    "LeakyRelu": _unary("LeakyRelu"),
    "AveragePool": _unary("AveragePool", kernel_shape=[2, 2]),
    "GlobalAveragePool": _unary("GlobalAveragePool"),
    "Softmax": _unary("Softmax", axis=-1),
    "LogSoftmax": _unary("LogSoftmax", axis=-1),
    "Max": _unary("Max", ("x", "c"), [_HALF]),
    "Min": _unary("Min", ("x", "c"), [_HALF]),
    "Clip": _unary(
        "Clip",
        ("x", "lo", "hi"),
        [const("lo", np.array(-1, np.float32)), const("hi", np.array(1, np.float32))],
    ),
    "Conv": _unary("Conv", ("x", "w"), [const("w", np.ones((1, 1, 2, 2), np.float32))]),
    "Add": _unary("Add", ("x", "x")),
    "Mul": _unary("Mul", ("x", "x")),
    "Div": _unary("Div", ("x", "x")),
    "Pow": _unary("Pow", ("x", "p"), [const("p", np.array(2, np.float32))]),
}


@pytest.mark.parametrize("op", sorted(NAN_CASES))
def test_nan_and_inf_propagate_like_onnxruntime(op):
    m = NAN_CASES[op]
    got = polyonnx.InferenceSession(m).run(None, {"x": _SPECIAL})[0]
    want = onnxruntime_outputs(m, {"x": _SPECIAL})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("op", ["MaxPool", "GlobalMaxPool"])
def test_a_max_window_holding_nan_gives_nan_and_others_match_onnxruntime(op):
    # onnxruntime's max pooling returns NaN or ignores it depending on where it sits in the
    # window (and the ONNX reference differs between MaxPool and GlobalMaxPool); polyonnx's max
    # is IEEE 754-2019 maximum, which always propagates NaN.
    m = _unary(op, kernel_shape=[2, 2]) if op == "MaxPool" else _unary(op)
    got = polyonnx.InferenceSession(m).run(None, {"x": _SPECIAL})[0]
    windows = (
        np.lib.stride_tricks.sliding_window_view(_SPECIAL, (2, 2), axis=(2, 3))
        if op == "MaxPool"
        else _SPECIAL[..., None, None, :, :]
    )
    has_nan = np.isnan(windows).any(axis=(-2, -1))
    assert np.isnan(got[has_nan]).all()
    want = onnxruntime_outputs(m, {"x": _SPECIAL})[0]
    np.testing.assert_array_equal(got[~has_nan], want[~has_nan])
