"""QuantizeLinear -> DequantizeLinear pairs as float ops: which pairs fold, the graphs they make
(one fused kernel with the Conv before them), and results equal to the reference's."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import polyonnx
from polyonnx.frontend import import_model
from polyonnx.graph.passes import fuse, optimize

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _model(
    nodes: list, inits: dict, shape: list[int], outputs: list[str], opset: int = 19
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", F, shape)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _pair(x: str, y: str, inits: dict, zero: np.ndarray, scale: float | np.ndarray, **attrs):
    """Q(x) -> DQ -> y with the same parameters, as a quantizer writes them."""
    inits[f"{y}_s"] = np.asarray(scale, np.float32)
    inits[f"{y}_z"] = zero
    return [
        helper.make_node("QuantizeLinear", [x, f"{y}_s", f"{y}_z"], [f"{y}_q"], **attrs),
        helper.make_node("DequantizeLinear", [f"{y}_q", f"{y}_s", f"{y}_z"], [y], **attrs),
    ]


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in optimize(import_model(model)).nodes]


def _check(model: onnx.ModelProto, x: np.ndarray, steps: float) -> None:
    """polyonnx on 1 and 2 threads equals the reference within ``steps`` (an output's
    quantization step: a sum computed in another order may round to the next integer)."""
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for threads in (1, 2):
        got = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads))
        for g, w in zip(got.run(None, {"x": x}), want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.abs(g.astype(np.float64) - w).max() <= steps


def test_a_pair_on_an_input_is_the_reference_exactly_ties_included() -> None:
    inits: dict = {}
    model = _model(_pair("x", "y", inits, np.uint8(128), 0.25), inits, [4, 64], ["y"])
    assert _ops(model) == ["Div", "Round", "Max", "Min", "Mul"]
    x = RNG.uniform(-40, 40, (4, 64)).astype(np.float32)
    x[0, :16] = (np.arange(16) - 8 + 0.5) * 0.25  # exact halves: rounded to even
    x[1, :2] = (-1e6, 1e6)  # saturated at both ends (the reference casts to int32 first)
    _check(model, x, steps=0.0)


def test_a_pair_after_a_conv_joins_its_epilogue() -> None:
    inits = {"w": RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    nodes += _pair("c", "y", inits, np.int8(-3), 0.05)
    model = _model(nodes, inits, [1, 8, 10, 10], ["y"])
    groups = fuse(optimize(import_model(model)))
    assert [[n.op_type for n in g.nodes] for g in groups] == [
        ["Conv", "Div", "Round", "Max", "Min", "Mul"]
    ]
    _check(model, RNG.standard_normal((1, 8, 10, 10)).astype(np.float32), steps=0.05)


def test_per_axis_parameters_broadcast_along_their_axis() -> None:
    inits: dict = {}
    scale = RNG.uniform(0.01, 0.1, 6).astype(np.float32)
    zero = RNG.integers(-20, 20, 6).astype(np.int8)
    model = _model(_pair("x", "y", inits, zero, scale, axis=1), inits, [2, 6, 5], ["y"])
    assert "QuantizeLinear" not in _ops(model)
    _check(model, RNG.uniform(-8, 8, (2, 6, 5)).astype(np.float32), steps=0.0)


def test_different_zero_points_add_their_difference() -> None:
    inits = {"s": np.float32(0.1), "z1": np.uint8(100), "z2": np.uint8(90)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z1"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z2"], ["y"]),
    ]
    model = _model(nodes, inits, [3, 7], ["y"])
    # (merge_affine may turn (r + d) * s into r * s + d * s: an ulp apart)
    assert sorted(_ops(model)) == ["Add", "Div", "Max", "Min", "Mul", "Round"]
    _check(model, RNG.uniform(-20, 20, (3, 7)).astype(np.float32), steps=1e-5)


def test_integers_read_elsewhere_keep_their_quantizer() -> None:
    inits: dict = {}
    model = _model(_pair("x", "y", inits, np.uint8(0), 0.5), inits, [8], ["y", "y_q"])
    ops = _ops(model)  # (the quantizer that stays is its element-wise form, ending in a Cast)
    assert ops.count("Cast") == 1 and not {"QuantizeLinear", "DequantizeLinear"} & set(ops)
    _check(model, RNG.uniform(-10, 140, 8).astype(np.float32), steps=0.0)


def test_int32_pairs_do_not_fold() -> None:
    inits: dict = {}
    model = _model(_pair("x", "y", inits, np.int32(0), 0.5), inits, [8], ["y"])
    assert _ops(model) == ["QuantizeLinear", "DequantizeLinear"]  # not exact in float32


def test_blocked_pairs_keep_their_lowering() -> None:
    inits: dict = {}
    zero, scale = np.zeros(4, np.uint8), np.full(4, 0.5, np.float32)
    nodes = _pair("x", "y", inits, zero, scale, axis=0, block_size=2)
    model = _model(nodes, inits, [8], ["y"], opset=21)
    assert _ops(model) == ["QuantizeLinear", "DequantizeLinear"]
    _check(model, RNG.uniform(-10, 10, 8).astype(np.float32), steps=0.0)


def test_views_between_the_pair_move_to_the_float_result() -> None:
    inits = {"s": np.float32(0.1), "z": np.uint8(128), "shape": np.array([2, -1], np.int64)}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("Transpose", ["q"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"]),
    ]
    model = _model(nodes, inits, [3, 2, 4], ["y"])
    assert _ops(model) == ["Div", "Round", "Max", "Min", "Mul", "Transpose", "Reshape"]
    _check(model, RNG.uniform(-20, 20, (3, 2, 4)).astype(np.float32), steps=0.0)
