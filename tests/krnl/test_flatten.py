"""Element-wise kernels over contiguous values see them as [rows, columns] views."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.krnl.flatten import flat_shape
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs


@pytest.mark.parametrize(
    ("shape", "flat"),
    [
        ((1, 272, 14, 14), (14, 3808)),
        ((1, 960, 7, 7), (12, 3920)),
        ((2, 3, 5), None),  # 30 elements: no whole vector divides them
        ((4, 128), None),  # rows of whole vectors already
        ((7, 16, 3), (1, 336)),
    ],
)
def test_flat_shape(shape: tuple[int, ...], flat: tuple[int, int] | None) -> None:
    assert flat_shape(shape) == flat


def _model(shape: tuple[int, ...], *, output_is_the_group: bool) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["m"]),
        helper.make_node("Clip", ["m", "lo", ""], ["r"]),
    ]
    if not output_is_the_group:
        nodes.append(helper.make_node("ReduceMax", ["r"], ["y"], axes=[1], keepdims=1))
    out = "r" if output_is_the_group else "y"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        [helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("output_is_the_group", [False, True])
def test_viewed_flat_unless_a_graph_output(output_is_the_group: bool) -> None:
    shape = (2, 96, 7, 7)
    model = _model(shape, output_is_the_group=output_is_the_group)
    compiled = polyonnx.compile(model, Options(num_threads=1))
    kernel = next(k for k, _ in compiled.asts if "Sigmoid" in k.name)
    shapes = {b.name: b.shape for b in kernel.buffers}
    assert shapes["x"] == (shape if output_is_the_group else (3, 3136))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    want = onnxruntime_outputs(model, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
