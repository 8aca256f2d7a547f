"""QLinearConv / QLinearMatMul as float ops on integer values: bit for bit the integer
lowering's answer where float32 sums exactly, fused like float convolutions, and the integer
lowering kept where the bound says float32 could round."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import polyonnx
from polyonnx import pipeline
from polyonnx.codegen.target import dot4_bits
from polyonnx.frontend import import_model
from polyonnx.graph.passes import fuse, optimize, qlinear
from polyonnx.testing import onnxruntime_int8_exact, onnxruntime_outputs
from tests.krnl.harness import run_krnl

RNG = np.random.default_rng(5)


def _ints(dtype: type, *shape: int, low: int | None = None, high: int | None = None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return RNG.integers(low, high + 1, shape).astype(dtype)


def _chain(weight_range: int = 127, channels: int = 16) -> onnx.ModelProto:
    """x (uint8) -> QLinearConv (per-channel int8 weights, bias) -> QLinearConv (3x3, strided,
    grouped) -> QLinearMatMul on the flattened result: a QOperator model's shape."""
    c = channels
    inits = {
        "s1": np.float32(0.02),
        "z1": np.uint8(110),
        "w1": _ints(np.int8, c, 3, 1, 1, low=-weight_range, high=weight_range),
        "ws1": RNG.uniform(0.002, 0.01, c).astype(np.float32),
        "wz1": np.zeros(c, np.int8),
        "b1": RNG.integers(-3000, 3000, c).astype(np.int32),
        "s2": np.float32(0.05),
        "z2": np.uint8(30),
        "w2": _ints(np.int8, c, c // 2, 3, 3, low=-weight_range, high=weight_range),
        "ws2": np.float32(0.004),
        "wz2": np.int8(0),
        "s3": np.float32(0.1),
        "z3": np.uint8(128),
        "shape": np.array([1, -1], np.int64),
        "w3": _ints(np.int8, c * 16, 10, low=-weight_range, high=weight_range),
        "ws3": RNG.uniform(0.001, 0.004, 10).astype(np.float32),
        "wz3": np.zeros(10, np.int8),
        "s4": np.float32(0.2),
        "z4": np.uint8(128),
    }
    nodes = [
        helper.make_node(
            "QLinearConv", ["x", "s1", "z1", "w1", "ws1", "wz1", "s2", "z2", "b1"], ["h"]
        ),
        helper.make_node(
            "QLinearConv",
            ["h", "s2", "z2", "w2", "ws2", "wz2", "s3", "z3"],
            ["h2"],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
            group=2,
        ),
        helper.make_node("Reshape", ["h2", "shape"], ["flat"]),
        helper.make_node(
            "QLinearMatMul", ["flat", "s3", "z3", "w3", "ws3", "wz3", "s4", "z4"], ["y"]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "qchain",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in optimize(import_model(model)).nodes]


def test_the_chain_becomes_float_kernels_with_fused_requantization() -> None:
    ops = _ops(_chain())
    assert not {"QLinearConv", "QLinearMatMul"} & set(ops)
    assert ops[-1] == "Cast" and ops.count("Cast") == 1  # (the output's quantizer, unfolded)
    groups = fuse(optimize(import_model(_chain())))
    anchors = [g.nodes[0].op_type for g in groups if len(g.nodes) > 1]
    assert anchors.count("Conv") == 2 and "MatMul" in anchors


def _sessions(model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch, threads: int) -> list:
    """(ops, session) of ``model`` summing in float32, in float64 (float32's bound lowered to
    0) and in int32 (both bounds 0: the integer lowering), never in bytes (a target's byte
    dot product: see :func:`test_byte_dot_products_agree_with_the_integer_lowering`)."""
    options = polyonnx.Options(num_threads=threads, cache=False)
    monkeypatch.setattr(qlinear, "_packed", lambda *args: None)
    out = []
    bounds = [(qlinear.EXACT, qlinear.EXACT_FLOAT64), (0, qlinear.EXACT_FLOAT64), (0, 0)]
    for float32, float64 in bounds:
        monkeypatch.setattr(qlinear, "EXACT", float32)
        monkeypatch.setattr(qlinear, "EXACT_FLOAT64", float64)
        out.append((_ops(model), polyonnx.InferenceSession(model, options=options)))
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_float64_and_int32_sums_agree_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    model = _chain()
    (f32_ops, f32), (f64_ops, f64), (int_ops, integer) = _sessions(model, monkeypatch, threads)
    # (one Cast quantizes the output; the float64 sums widen their input and narrow theirs)
    assert "QLinearConv" not in f32_ops and f32_ops.count("Cast") == 1
    assert "QLinearConv" not in f64_ops and f64_ops.count("Cast") > 1
    assert "QLinearConv" in int_ops
    for _ in range(3):
        feeds = {"x": _ints(np.uint8, 1, 3, 8, 8)}
        want = integer.run(None, feeds)[0]
        np.testing.assert_array_equal(f32.run(None, feeds)[0], want)
        np.testing.assert_array_equal(f64.run(None, feeds)[0], want)


def test_a_sum_float32_could_round_even_in_digits_is_summed_in_float64() -> None:
    inits = {
        "s": np.float32(0.1),
        "z": np.uint8(0),
        # 9216 * 128 * 255 > 2**24, and so is 9216 * 8 * 255 (the high base-16 digits')
        "w": np.full((2, 1024, 3, 3), -128, np.int8),
        "ws": np.float32(0.001),
        "wz": np.int8(0),
    }
    node = helper.make_node(
        "QLinearConv", ["x", "s", "z", "w", "ws", "wz", "s", "z"], ["y"], pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1024, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    g = optimize(import_model(model))
    assert [g.value(n.outputs[0]).dtype for n in g.nodes if n.op_type == "Conv"] == ["float64"]
    x = {"x": np.full((1, 1024, 4, 4), 255, np.uint8)}
    [y] = polyonnx.InferenceSession(model).run(None, x)
    assert y.dtype == np.uint8 and (y == 0).all()  # (negative sums saturate at 0)


def _dynamic(conv: bool, depth: int = 24) -> onnx.ModelProto:
    """Dynamic quantization as onnxruntime's tool writes it: DynamicQuantizeLinear (zero point
    known at run time) -> MatMulInteger / ConvInteger -> Cast -> Mul by both scales."""
    w = _ints(np.int8, 8, 6, 3, 3) if conv else _ints(np.int8, depth, 16)
    inits = {"w": w, "wz": np.int8(0), "ws": np.float32(0.01)}
    op = "ConvInteger" if conv else "MatMulInteger"
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
        helper.make_node(
            op, ["q", "w", "qz", "wz"], ["acc"], **({"pads": [1] * 4} if conv else {})
        ),
        helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["qs", "ws"], ["scale"]),
        helper.make_node("Mul", ["accf", "scale"], ["y"]),
    ]
    shape = [1, 6, 5, 5] if conv else [3, depth]
    graph = helper.make_graph(
        nodes,
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("conv", [False, True])
def test_dynamic_quantization_sums_in_float_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch, conv: bool
) -> None:
    model = _dynamic(conv)
    ops = _ops(model)
    assert "Cast" not in ops and ("Conv" if conv else "MatMul") in ops
    x = {"x": RNG.standard_normal([1, 6, 5, 5] if conv else [3, 24]).astype(np.float32)}
    sessions = _sessions(model, monkeypatch, threads=1)
    assert ("ConvInteger" if conv else "MatMulInteger") in sessions[2][0]
    results = [session.run(None, x)[0] for _, session in sessions]
    for got in results[:2]:
        np.testing.assert_array_equal(got, results[2])


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_a_3x3_integer_sum_never_takes_the_winograd_form(op: str) -> None:
    """A 3x3 stride-1 layer with many channels is one Winograd would take as a float Conv;
    its transforms round, so the integer sum stays a direct convolution: exact."""
    c, size = 64, 14
    w = _ints(np.int8, c, c, 3, 3, low=-40, high=40)  # (float32 sums it exactly: bound < 2^24)
    if op == "ConvInteger":
        inputs, inits = ["x", "w", "xz"], {"w": w, "xz": np.uint8(128)}
        out = TensorProto.INT32
    else:
        inputs = ["x", "s", "xz", "w", "ws", "wz", "ys", "yz"]
        inits = {"s": np.float32(0.02), "xz": np.uint8(128), "w": w, "ws": np.float32(0.01),
                 "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(128)}  # fmt: skip
        out = TensorProto.UINT8
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, size, size])],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ops = [n.op_type for n in pipeline.to_graph(model, None, polyonnx.Options()).nodes]
    assert "ConvBlocked" in ops and "WinogradConv" not in ops, ops
    x = {"x": _ints(np.uint8, 1, c, size, size)}
    [got] = polyonnx.InferenceSession(model).run(None, x)
    # (onnxruntime requantizes in float32, as polyonnx does; the ONNX reference in float64)
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, x)[0])


@pytest.mark.parametrize("op", ["QLinearConv", "QLinearMatMul"])
def test_a_sum_float32_could_round_is_summed_in_digits(
    monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    """Full-range int8 weights over 3x3x256 inputs (per-channel quantization's usual case):
    a sum could pass 2^24, but each base-16 digit's cannot, so two float32 sums (high and low
    digits) give ``16 * hi + lo`` rounded once: the integer lowering's answer bit for bit."""
    c = 256
    conv = op == "QLinearConv"
    w = _ints(np.int8, 8, c, 3, 3) if conv else _ints(np.int8, 9 * c, 8)
    inits = {"s": np.float32(0.02), "xz": np.uint8(128), "w": w,
             "ws": RNG.uniform(0.001, 0.003, 8).astype(np.float32), "wz": np.zeros(8, np.int8),
             "ys": np.float32(2.0), "yz": np.uint8(128),
             "b": RNG.integers(-(1 << 20), 1 << 20, 8).astype(np.int32)}  # fmt: skip
    inputs = ["x", "s", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if conv else [])
    shape = [1, c, 5, 5] if conv else [5, 9 * c]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **({"pads": [1] * 4} if conv else {}))],
        "digits",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items() if n in inputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (digit_ops, digits), _, (int_ops, integer) = _sessions(model, monkeypatch, threads=1)
    monkeypatch.setattr(qlinear, "EXACT", 1 << 24)
    g = optimize(import_model(model))
    sums = [n for n in g.nodes if n.op_type in ("Conv", "MatMul")]
    assert [g.value(n.outputs[0]).dtype for n in sums] == ["float32", "float32"]
    assert op in int_ops
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)}
        want = integer.run(None, x)[0]
        np.testing.assert_array_equal(digits.run(None, x)[0], want)
        if onnxruntime_int8_exact():  # (without VNNI its uint8 x int8 pairs saturate at int16)
            np.testing.assert_array_equal(want, onnxruntime_outputs(model, x)[0])


def test_dynamic_quantization_past_float32s_bound_sums_in_digits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 3072-deep MatMulInteger (BERT's second FFN layer) of full-range weights could sum
    past 2^24; only a Cast to float32 reads it, so two digit sums rounded once give what that
    Cast gives: the int32 lowering's answer bit for bit, without a float64 sum."""
    model = _dynamic(conv=False, depth=3072)
    g = optimize(import_model(model))
    sums = [n for n in g.nodes if n.op_type == "MatMul"]
    assert [g.value(n.outputs[0]).dtype for n in sums] == ["float32", "float32"]
    x = {"x": RNG.standard_normal([3, 3072]).astype(np.float32)}
    sessions = _sessions(model, monkeypatch, threads=1)
    assert "MatMulInteger" in sessions[2][0]
    want = sessions[2][1].run(None, x)[0]
    np.testing.assert_array_equal(sessions[0][1].run(None, x)[0], want)


@pytest.mark.parametrize("model", [_chain(), _dynamic(False, depth=64)], ids=["static", "dynamic"])
def test_byte_dot_products_agree_with_the_integer_lowering(
    monkeypatch: pytest.MonkeyPatch, model: onnx.ModelProto
) -> None:
    """On a target with a byte dot product (VNNI), the quantized MatMuls sum bytes
    (PackedMatMulInteger): the integer lowering's answer bit for bit."""
    options = polyonnx.Options(cache=False)
    if not dot4_bits(options):
        pytest.skip("this host has no byte dot product (x86 VNNI)")
    assert "PackedMatMulInteger" in [n.op_type for n in pipeline.to_graph(model).nodes]
    packed = polyonnx.InferenceSession(model, options=options)
    monkeypatch.setattr(qlinear, "_packed", lambda *args: None)
    monkeypatch.setattr(qlinear, "EXACT", 0)
    monkeypatch.setattr(qlinear, "EXACT_FLOAT64", 0)
    integer = polyonnx.InferenceSession(model, options=options)
    name = model.graph.input[0].name
    for _ in range(3):
        if name == "x" and model.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8:
            feeds = {"x": _ints(np.uint8, 1, 3, 8, 8)}
        else:
            feeds = {"x": RNG.standard_normal([3, 64]).astype(np.float32)}
        np.testing.assert_array_equal(packed.run(None, feeds)[0], integer.run(None, feeds)[0])


def _qdq_matmul(depth: int = 64, weight_axis: int = 1, per_column: bool = True) -> onnx.ModelProto:
    """A QDQ MatMul as onnxruntime's static quantizer writes it: x -> QuantizeLinear ->
    DequantizeLinear, times DequantizeLinear of int8 weights (per-column scales), + bias."""
    columns = 24
    scales = RNG.uniform(0.001, 0.01, columns if per_column else 1).astype(np.float32)
    inits = {
        "xs": np.float32(0.03),
        "xz": np.uint8(131),
        "w": _ints(np.int8, depth, columns),
        "ws": scales if per_column else scales.reshape(()),
        "wz": np.zeros(columns if per_column else (), np.int8),
        "b": RNG.standard_normal(columns).astype(np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["a"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=weight_axis),
        helper.make_node("MatMul", ["a", "wf"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, columns])],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_a_qdq_matmul_sums_bytes_and_scales_once() -> None:
    """With a byte dot product, a QDQ MatMul is the integers' exact sum times the product of
    the scales: the float definition's answer up to float32 rounding."""
    model = _qdq_matmul()
    graph = optimize(import_model(model), dot4=True)
    assert "PackedMatMulInteger" in [n.op_type for n in graph.nodes]
    x = RNG.standard_normal([2, 5, 64]).astype(np.float32)
    got = run_krnl(graph, {"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "model",
    [_qdq_matmul(depth=62), _qdq_matmul(weight_axis=0, per_column=False)],
    ids=["depth-not-4k", "per-tensor-on-axis-0"],
)
def test_qdq_matmuls_that_do_not_pack_stay_float(model: onnx.ModelProto) -> None:
    ops = [n.op_type for n in optimize(import_model(model), dot4=True).nodes]
    packed = "PackedMatMulInteger" in ops
    assert packed == (model.graph.input[0].type.tensor_type.shape.dim[2].dim_value % 4 == 0)


def test_a_qdq_matmul_on_this_host_matches_onnxruntime() -> None:
    model = _qdq_matmul(depth=128)
    x = {"x": RNG.standard_normal([2, 5, 128]).astype(np.float32)}
    got = polyonnx.InferenceSession(model).run(None, x)[0]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, x)[0], rtol=1e-4, atol=1e-4)


def _qdq_conv(pads: int = 1, x_zero: int = 0) -> onnx.ModelProto:
    """A QDQ Conv as onnxruntime's static quantizer writes it: x -> QuantizeLinear ->
    DequantizeLinear, per-channel int8 weights, the int32 bias dequantized with the product
    of the scales."""
    c = 8
    w_scale = RNG.uniform(0.001, 0.01, c).astype(np.float32)
    inits = {
        "xs": np.float32(0.03),
        "xz": np.uint8(x_zero),
        "w": _ints(np.int8, c, c, 3, 3),
        "ws": w_scale,
        "wz": np.zeros(c, np.int8),
        "b": RNG.integers(-5000, 5000, c).astype(np.int32),
        "bs": (np.float32(0.03) * w_scale).astype(np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "xs", "xz"], ["a"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"], axis=0),
        helper.make_node("Conv", ["a", "wf", "bf"], ["y"], pads=[pads] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_a_qdq_conv_sums_bytes_and_scales_once() -> None:
    """A QDQ Conv is the integers' exact sum times the product of the scales, plus the
    dequantized bias: the float definition's answer up to float32 rounding."""
    model = _qdq_conv()
    graph = optimize(import_model(model), dot4=True)
    assert "PackedConvInteger" in [n.op_type for n in graph.nodes]
    x = RNG.standard_normal([1, 8, 6, 6]).astype(np.float32)
    got = run_krnl(graph, {"x": x})["y"]
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_padded_qdq_conv_over_a_nonzero_zero_point_stays_float() -> None:
    ops = [n.op_type for n in optimize(import_model(_qdq_conv(x_zero=9)), dot4=True).nodes]
    assert "PackedConvInteger" not in ops and "Conv" in ops
    ops = [n.op_type for n in optimize(import_model(_qdq_conv(0, 9)), dot4=True).nodes]
    assert "PackedConvInteger" in ops


def test_a_qdq_sum_that_could_wrap_int32_stays_float() -> None:
    """A QDQ op's definition is a float sum: its byte form must not wrap around int32, so
    weights deep enough for 255 * sum |w| to reach 2^30 keep the float form."""
    ops = [n.op_type for n in optimize(import_model(_qdq_matmul(depth=70_000)), dot4=True).nodes]
    assert "PackedMatMulInteger" not in ops and "MatMul" in ops
