"""Tiny models for the tuning tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def gemm_model(m: int = 16, k: int = 64, n: int = 48, seed: int = 0) -> onnx.ModelProto:
    """y = relu(x @ W + b): one GEMM kernel with a fused epilogue."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.uniform(-1, 1, (k, n)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.uniform(-1, 1, (n,)).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["p"], name="matmul"),
            helper.make_node("Add", ["p", "b"], ["q"], name="bias"),
            helper.make_node("Relu", ["q"], ["y"], name="relu"),
        ],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_model(channels: int = 16, size: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv 3x3 (pad 1) + ReLU, then a 1x1 conv: two kernels."""
    rng = np.random.default_rng(seed)
    w1 = rng.uniform(-0.2, 0.2, (channels, channels, 3, 3)).astype(np.float32)
    w2 = rng.uniform(-0.2, 0.2, (channels, channels, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W1"], ["c"], name="conv3", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Conv", ["r", "W2"], ["y"], name="conv1"),
        ],
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
