"""The flat-pixels pass: NCHW 1x1 convolutions and their element-wise followers on one row of
pixels, with Reshape views in and out; results vs onnxruntime through the krnl interpreter."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from polyonnx.graph.passes.pixels import flat_pixels, flat_rows
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import graph_from_model, rand, run_krnl

F = TensorProto.FLOAT


def _model(nodes: list, inits: dict, outputs: list[str], shape=(1, 6, 3, 4)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "pixels",
        [helper.make_tensor_value_info("x", F, list(shape))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _check(model: onnx.ModelProto) -> list[str]:
    """The pass's graph matches onnxruntime; returns its op types."""
    graph = flat_pixels(graph_from_model(model))
    feeds = {"x": rand(*(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim))}
    got = run_krnl(graph, feeds)
    names = [o.name for o in model.graph.output]
    for name, want in zip(names, onnxruntime_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
    return [n.op_type for n in graph.nodes]


def test_grouped_conv_relu_residual_relu_run_flat() -> None:
    # ShuffleNet's unit tail: grouped 1x1 conv, the residual Add (a value of the same shape,
    # reshaped too) and the Relu, with a per-channel Mul on the way; one Reshape back.
    inits = {"w": rand(6, 3, 1, 1, seed=1), "b": rand(6, seed=2), "s": rand(6, 1, 1, seed=3)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=2),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "x"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    ops = _check(_model(nodes, inits, ["y"]))
    assert ops == ["Reshape", "Conv", "Mul", "Add", "Relu", "Reshape"]


def test_silu_dag_and_outside_readers() -> None:
    # x * sigmoid(x) after the conv stays flat; the conv's value, read by a MaxPool and a
    # graph output too, is reshaped back once.
    inits = {"w": rand(6, 6, 1, 1, seed=1)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2]),
    ]
    ops = _check(_model(nodes, inits, ["y", "p", "c"]))
    assert ops.count("Reshape") == 3 and ops.index("MaxPool") > ops.index("Reshape", 1)


def test_spatial_broadcast_stops_the_chain() -> None:
    # A constant varying along the width does not broadcast over one row of pixels.
    inits = {"w": rand(6, 6, 1, 1, seed=1), "row": rand(4, seed=2)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Add", ["c", "row"], ["y"]),
    ]
    ops = _check(_model(nodes, inits, ["y"]))
    assert ops == ["Reshape", "Conv", "Reshape", "Add"]


@pytest.mark.parametrize(
    "why, attrs, k, shape",
    [
        ("strided", {"strides": [2, 2]}, 1, (1, 6, 4, 4)),
        ("padded", {"pads": [1, 1, 1, 1]}, 1, (1, 6, 3, 4)),
        (
            "stride 2 and pads with the same output size",
            {"strides": [2, 2], "pads": [1] * 4},
            1,
            (1, 6, 3, 3),
        ),
        ("3x3", {"pads": [1, 1, 1, 1]}, 3, (1, 6, 3, 4)),
        ("one row already", {}, 1, (1, 6, 1, 12)),
    ],
)
def test_ineligible_convs_keep_their_shape(why: str, attrs: dict, k: int, shape: tuple) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)]
    graph = graph_from_model(_model(nodes, {"w": rand(6, 6, k, k, seed=1)}, ["y"], shape))
    assert flat_pixels(graph) is graph, why


def test_3d_conv_keeps_its_rank() -> None:
    inits = {"w": rand(5, 6, 1, 1, 1, seed=1), "b": rand(5, seed=2)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    ops = _check(_model(nodes, inits, ["y"], shape=(1, 6, 3, 4, 2)))
    assert ops == ["Reshape", "Conv", "Relu", "Reshape"]


@pytest.mark.parametrize("shape", [(5, 2, 8), (2, 3, 2, 8)])
def test_matmul_of_batched_rows_by_a_matrix_runs_on_all_rows(shape: tuple) -> None:
    # An exporter's [sequence, batch, features] attention projection: A [5, 2, 8] by a 2-D B,
    # its bias (broadcast along the last axis) and a residual (reshaped too) on the flat rows
    # [1, 10, 6]; a broadcast along the batch axis stops the chain.
    inits = {"w": rand(8, 6, seed=1), "b": rand(6, seed=2), "r": rand(*shape[:-1], 6, seed=3),
             "g": rand(*shape[:-2], 1, 6, seed=4)}  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Add", ["a", "r"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("Mul", ["y", "g"], ["z"]),
    ]
    model = _model(nodes, inits, ["z"], shape)
    graph = flat_rows(graph_from_model(model))
    matmul = next(n for n in graph.nodes if n.op_type == "MatMul")
    flat = (*(1,) * (len(shape) - 2), int(np.prod(shape[:-1])), 6)
    assert graph.value(matmul.outputs[0]).dims == flat
    ops = [n.op_type for n in graph.nodes]
    assert ops == ["Reshape", "MatMul", "Add", "Reshape", "Add", "Relu", "Reshape", "Mul"], ops
    feeds = {"x": rand(*shape)}
    [want] = onnxruntime_outputs(model, feeds)
    np.testing.assert_allclose(run_krnl(graph, feeds)["z"], want, rtol=1e-4, atol=1e-5)
