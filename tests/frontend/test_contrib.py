"""onnxruntime's quantized contrib ops (QLinearAdd ... QGemm) as standard ops: models
onnxruntime's quantizer writes in its QOperator format run and give onnxruntime's answer
within a few quantization steps; what cannot be expressed is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantFormat, quantize_static

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.frontend.contrib import expand_contrib
from polyonnx.testing import onnxruntime_outputs
from tests.models.builder import GraphBuilder
from tests.models.test_quantized_models import CalibrationReader, model_feeds

SHAPE = (1, 3, 16, 16)


def _float_model() -> onnx.ModelProto:
    """A small CNN whose every op onnxruntime's quantizer writes as a contrib op (or a
    standard one on integers: MaxPool, Flatten, QLinearConv)."""
    b = GraphBuilder(3)

    def w(*shape: int) -> str:
        return b.init(b.rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))

    h = b.op("Relu", b.op("Conv", "x", w(8, 3, 3, 3), pads=[1, 1, 1, 1]))
    s = b.op("Add", b.op("Conv", h, w(8, 8, 3, 3), pads=[1, 1, 1, 1]), h)
    m = b.op("Mul", s, b.op("Sigmoid", s))
    m = b.op("LeakyRelu", m, alpha=0.1)
    pooled = b.op("AveragePool", m, kernel_shape=[2, 2], strides=[2, 2])
    c = b.op("Concat", pooled, b.op("MaxPool", m, kernel_shape=[2, 2], strides=[2, 2]), axis=1)
    f = b.op("Flatten", b.op("GlobalAveragePool", c))
    y = b.op("Gemm", f, w(10, 16), b.init(0.1 * b.rng.standard_normal(10)), transB=1)
    z = b.op("Softmax", y, axis=-1)
    graph = helper.make_graph(
        b.nodes,
        "contrib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info(z, TensorProto.FLOAT, None)],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


CONTRIB = {
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearAveragePool",
    "QLinearConcat",
    "QLinearGlobalAveragePool",
    "QGemm",
    "QLinearSoftmax",
}


def _quantized(tmp_path: Path, **options: Any) -> onnx.ModelProto:
    """:func:`_float_model` quantized by onnxruntime's tool with ``options``."""
    src, dst = tmp_path / "float.onnx", tmp_path / "quant.onnx"
    float_model = _float_model()
    onnx.save(float_model, src)
    quantize_static(src, dst, CalibrationReader(float_model), **options)
    return onnx.load(dst)


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_qoperator_model_matches_onnxruntime(tmp_path: Path, per_channel: bool) -> None:
    model = _quantized(tmp_path, quant_format=QuantFormat.QOperator, per_channel=per_channel)
    assert {n.op_type for n in model.graph.node if n.domain == "com.microsoft"} >= CONTRIB
    assert all(n.domain != "com.microsoft" for n in expand_contrib(model).graph.node)
    feeds = model_feeds(model, 7)
    [want] = onnxruntime_outputs(model, feeds)
    for threads in (1, 2):
        options = polyonnx.Options(num_threads=threads)
        [got] = polyonnx.InferenceSession(model, options=options).run(None, feeds)
        assert got.shape == want.shape and got.dtype == want.dtype
        # (a probability, after a softmax quantized in 1/256 steps: a few steps apart)
        np.testing.assert_allclose(got, want, rtol=0, atol=4 / 256)


def _contrib_model(node: onnx.NodeProto, inits: dict, inputs: dict) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_qlinear_where_matches_onnxruntime() -> None:
    inits = {
        "sx": np.float32(0.05),
        "zx": np.uint8(120),
        "sy": np.float32(0.02),
        "zy": np.uint8(100),
        "sz": np.float32(0.04),
        "zz": np.uint8(128),
    }
    node = helper.make_node(
        "QLinearWhere",
        ["c", "x", "sx", "zx", "y", "sy", "zy", "sz", "zz"],
        ["z"],
        domain="com.microsoft",
    )
    u8 = TensorProto.UINT8
    inputs = {"c": (TensorProto.BOOL, [4, 6]), "x": (u8, [4, 6]), "y": (u8, [6])}
    model = _contrib_model(node, inits, inputs)
    rng = np.random.default_rng(1)
    feeds = {
        "c": rng.random((4, 6)) < 0.5,
        "x": rng.integers(0, 256, (4, 6)).astype(np.uint8),
        "y": rng.integers(0, 256, 6).astype(np.uint8),
    }
    [want] = onnxruntime_outputs(model, feeds)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - want).max() <= 1


def test_channels_last_is_refused_by_name() -> None:
    inits = {"s": np.float32(0.1), "z": np.uint8(0)}
    node = helper.make_node(
        "QLinearGlobalAveragePool",
        ["x", "s", "z", "s", "z"],
        ["y"],
        domain="com.microsoft",
        channels_last=1,
    )
    model = _contrib_model(node, inits, {"x": (TensorProto.UINT8, [1, 4, 4, 3])})
    with pytest.raises(UnsupportedOpError, match="QLinearGlobalAveragePool.*channels_last"):
        polyonnx.InferenceSession(model)


@pytest.mark.parametrize("alpha, quantized_output", [(1.0, True), (0.5, True), (0.5, False)])
def test_qgemm_scales_its_bias_by_alpha_as_onnxruntime(
    alpha: float, quantized_output: bool
) -> None:
    rng = np.random.default_rng(2)
    # 7-bit weights: onnxruntime's uint8 x int8 kernel without VNNI (AVX2: vpmaddubsw)
    # saturates a pair of products at int16, so with full-range weights its answer depends
    # on the CPU. |a*b + a*b| <= 255 * 64 * 2 < 2^15 is exact everywhere.
    inits = {
        "sa": np.float32(0.02),
        "za": np.uint8(128),
        "b": rng.integers(-64, 65, (8, 5)).astype(np.int8),
        "sb": np.float32(0.01),
        "zb": np.int8(0),
        "c": rng.integers(-2000, 2000, 5).astype(np.int32),
        "sy": np.float32(0.05),
        "zy": np.uint8(100),
    }
    inputs = ["a", "sa", "za", "b", "sb", "zb", "c"] + (["sy", "zy"] if quantized_output else [])
    node = helper.make_node("QGemm", inputs, ["y"], domain="com.microsoft", alpha=alpha)
    model = _contrib_model(node, inits, {"a": (TensorProto.UINT8, [3, 8])})
    if not quantized_output:
        model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    feeds = {"a": rng.integers(0, 256, (3, 8)).astype(np.uint8)}
    [want] = onnxruntime_outputs(model, feeds)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    assert got.dtype == want.dtype
    atol = 1 if quantized_output else 1e-5  # (one step of a uint8)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("activations", ["QUInt8", "QUInt16"])
def test_a_qdq_model_in_onnxruntime_domain_matches_onnxruntime(
    tmp_path: Path, activations: str
) -> None:
    """onnxruntime's QDQ format with its own QuantizeLinear / DequantizeLinear (asked for, or
    needed for 16-bit integers under opset 17) runs as the standard ops."""
    from onnxruntime.quantization import QuantType

    model = _quantized(
        tmp_path,
        quant_format=QuantFormat.QDQ,
        activation_type=getattr(QuantType, activations),
        weight_type=QuantType.QInt8,
        extra_options={"UseQDQContribOps": True},
    )
    contrib = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert contrib == {"QuantizeLinear", "DequantizeLinear"}
    feeds = model_feeds(model, 7)
    [want] = onnxruntime_outputs(model, feeds)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 / 256)
