"""Small ONNX models shared by the reliability tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    inits: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    name: str = "g",
) -> onnx.ModelProto:
    """A model around one graph at ``opset``."""
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name: str, shape: Sequence[int | str | None], elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def const(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def relu(shape: Sequence[int | str] = (2, 3)) -> onnx.ModelProto:
    """y = Relu(x)."""
    return model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", shape)],
        [tensor("y", shape)],
        name="relu",
    )


def conv_net(channels: int = 3, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    """Conv(3x3, pad 1) + Relu + MaxPool(2) + Flatten + Gemm + Softmax on [1, C, S, S]."""
    rng = np.random.default_rng(seed)
    m, classes = 4, 5
    flat = m * (size // 2) ** 2
    inits = [
        const("w", rng.standard_normal((m, channels, 3, 3)).astype(np.float32) * 0.3),
        const("b", rng.standard_normal(m).astype(np.float32)),
        const("fw", rng.standard_normal((flat, classes)).astype(np.float32) * 0.1),
        const("fb", rng.standard_normal(classes).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name="fc"),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    return model(
        nodes,
        [tensor("x", [1, channels, size, size])],
        [tensor("y", [1, classes])],
        inits,
        name="conv_net",
    )
