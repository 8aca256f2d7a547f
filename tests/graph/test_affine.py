"""BatchNormalization as a per-channel multiply-add, and chains of multiplications and
additions by constants merged: the graphs they make, and native results vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.frontend import import_model
from polyonnx.graph.passes import optimize
from polyonnx.testing import assert_close, onnxruntime_outputs, random_feeds

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _const(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def _model(nodes: list, inits: dict, inputs: dict, output: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "affine",
        [helper.make_tensor_value_info(n, F, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output, F, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _bn(name: str, x: str, y: str, channels: int, inits: dict) -> onnx.NodeProto:
    inits[f"{name}_s"] = _const(channels, low=0.5, high=1.5)
    inits[f"{name}_b"] = _const(channels)
    inits[f"{name}_m"] = _const(channels)
    inits[f"{name}_v"] = _const(channels, low=0.1, high=2.0)
    return helper.make_node(
        "BatchNormalization",
        [x, f"{name}_s", f"{name}_b", f"{name}_m", f"{name}_v"],
        [y],
        epsilon=1e-3,
    )


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in optimize(import_model(model)).nodes]


def _check_native(model: onnx.ModelProto, threads: int = 1) -> None:
    sess = polyonnx.InferenceSession(
        model, options=polyonnx.Options(num_threads=threads, cache=False)
    )
    feeds = random_feeds(sess.get_inputs())
    assert_close(sess.run(None, feeds), onnxruntime_outputs(model, feeds))


def _pre_activation(shape: tuple[int, ...]) -> onnx.ModelProto:
    """Concat -> BN -> Mul/Add by per-channel constants -> Relu -> Conv (DenseNet's layer)."""
    c = shape[1]
    inits: dict = {"k": _const(2 * c, 1, 1), "d": _const(2 * c, 1, 1)}
    inits["w"] = _const(32, 2 * c, 3, 3)
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        _bn("bn", "cat", "n", 2 * c, inits),
        helper.make_node("Mul", ["n", "k"], ["m"]),
        helper.make_node("Add", ["m", "d"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1]),
    ]
    return _model(nodes, inits, {"a": shape, "b": shape}, "y")


def test_a_batchnorm_and_its_scale_layer_become_one_multiply_add():
    ops = _ops(_pre_activation((1, 32, 6, 6)))
    assert ops == ["Concat", "Mul", "Add", "Relu", "Conv"]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(1, 32, 6, 6), (2, 8, 5, 7)])
def test_pre_activation_layer_matches_onnxruntime(shape, threads):
    _check_native(_pre_activation(shape), threads)


def test_a_batchnorm_on_a_graph_input_of_rank_3_matches():
    inits: dict = {}
    model = _model([_bn("bn", "x", "y", 5, inits)], inits, {"x": (2, 5, 9)}, "y")
    assert _ops(model) == ["Mul", "Add"]
    _check_native(model)


def test_sub_either_way_and_constants_on_the_left_merge():
    inits = {"a": _const(4, 1), "b": _const(4, 1), "c": _const(1), "d": _const(4, 3)}
    nodes = [
        helper.make_node("Mul", ["a", "x"], ["t1"]),
        helper.make_node("Sub", ["t1", "b"], ["t2"]),
        helper.make_node("Sub", ["c", "t2"], ["t3"]),
        helper.make_node("Add", ["d", "t3"], ["y"]),
    ]
    model = _model(nodes, inits, {"x": (2, 4, 3)}, "y")
    assert _ops(model) == ["Mul", "Add"]
    _check_native(model)


def test_a_link_read_twice_or_a_widening_constant_is_not_merged():
    inits = {"a": _const(3), "b": _const(5, 3), "c": _const(3)}
    nodes = [
        helper.make_node("Mul", ["x", "a"], ["t1"]),  # read by two nodes: kept
        helper.make_node("Add", ["t1", "c"], ["t2"]),
        helper.make_node("Add", ["t2", "t1"], ["t3"]),
        helper.make_node("Mul", ["t3", "b"], ["y"]),  # widens [3] to [5, 3]: kept
    ]
    model = _model(nodes, inits, {"x": (3,)}, "y")
    assert _ops(model) == ["Mul", "Add", "Add", "Mul"]
    _check_native(model)


def test_a_batchnorm_with_statistics_computed_at_run_time_keeps_its_lowering():
    inits: dict = {}
    bn = _bn("bn", "x", "y", 4, inits)
    del inits["bn_v"]
    model = _model([bn], inits, {"x": (1, 4, 3), "bn_v": (4,)}, "y")
    assert _ops(model) == ["BatchNormalization"]


def _per_activation_bn(conv: bool, run_time_variance: bool) -> onnx.ModelProto:
    """BatchNormalization-7 with ``spatial=0``: statistics shaped [C, H, W], after a Conv or
    not, the variance a constant or a graph input."""
    inits = {k: _const(3, 4, 5, low=0.5, high=1.5) for k in ("s", "b", "m", "v")}
    inits["w"] = _const(3, 2, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1])] if conv else []
    bn_x = "t" if conv else "x"
    nodes.append(
        helper.make_node("BatchNormalization", [bn_x, "s", "b", "m", "v"], ["y"], spatial=0)
    )
    inputs = {"x": (2, 2 if conv else 3, 4, 5)}
    if run_time_variance:
        inputs["v"] = tuple(inits.pop("v").shape)
    model = _model(nodes, inits, inputs, "y")
    model.opset_import[0].version = 7
    model.ir_version = 4
    return model


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("run_time_variance", [False, True])
def test_a_batchnorm_per_activation_matches(conv: bool, run_time_variance: bool) -> None:
    # (Per-activation statistics are neither per-channel constants nor foldable into the
    # Conv's weights; read per channel they were refused, or wrong.)
    model = _per_activation_bn(conv, run_time_variance)
    tail = ["BatchNormalization"] if run_time_variance else ["Mul", "Add"]
    assert _ops(model)[-len(tail) :] == tail
    _check_native(model)
