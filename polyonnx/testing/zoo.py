"""Whole-model builders shared by ``tests/models``, ``benchmarks/`` and ``polyonnx bench``.

``mnist_model()`` is the ONNX model zoo's mnist-8 architecture with random weights;
``light_model(name)`` is one of the "light" models shipped in the onnx package (real
architectures whose weights are ``ConstantOfShape`` placeholders) with random weights in place
of the placeholders, so the outputs are informative rather than constant.

Example:
    >>> m = mnist_model()
    >>> [o.name for o in m.graph.output]
    ['Plus214_Output_0']
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

#: Short names of the nine light models (``light_<file>.onnx`` for the file names below).
LIGHT_MODELS = (
    "alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)

_LIGHT_FILES = {"alexnet": "bvlc_alexnet"}


def light_path(name: str) -> str:
    """Path of the shipped ``light_<name>.onnx`` (``name`` from :data:`LIGHT_MODELS`)."""
    return os.path.join(LIGHT_DIR, f"light_{_LIGHT_FILES.get(name, name)}.onnx")


def light_expected_output_path(name: str) -> str:
    """Path of the shipped expected output (for the placeholder weights) of a light model."""
    return os.path.join(LIGHT_DIR, f"light_{_LIGHT_FILES.get(name, name)}_output_0.pb")


def _init(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float
) -> onnx.TensorProto:
    data = (rng.standard_normal(shape) * scale).astype(np.float32)
    return numpy_helper.from_array(data, name)


def mnist_model(seed: int = 0, opset: int = 8) -> onnx.ModelProto:
    """The mnist-8 model zoo architecture (names included) with random He-scaled weights.

    Input3 [1,1,28,28] -> Conv(8, 5x5, SAME_UPPER) + bias -> Relu -> MaxPool 2x2/2
    -> Conv(16, 5x5, SAME_UPPER) + bias -> Relu -> MaxPool 3x3/3 -> Reshape [1,256]
    -> MatMul [256,10] (its weight reshaped from [16,4,4,10], as in the zoo) -> + bias
    -> Plus214_Output_0 [1,10].
    """
    rng = np.random.default_rng(seed)
    inits = [
        _init(rng, "Parameter5", (8, 1, 5, 5), np.sqrt(2 / 25)),
        _init(rng, "Parameter6", (8, 1, 1), 0.1),
        _init(rng, "Parameter87", (16, 8, 5, 5), np.sqrt(2 / 200)),
        _init(rng, "Parameter88", (16, 1, 1), 0.1),
        _init(rng, "Parameter193", (16, 4, 4, 10), np.sqrt(2 / 256)),
        _init(rng, "Parameter194", (1, 10), 0.1),
        numpy_helper.from_array(np.array([1, 256], np.int64), "Pooling160_Output_0_reshape0_shape"),
        numpy_helper.from_array(np.array([256, 10], np.int64), "Parameter193_reshape1_shape"),
    ]
    conv: dict[str, Any] = {"kernel_shape": [5, 5], "strides": [1, 1], "auto_pad": "SAME_UPPER"}
    nodes = [
        helper.make_node(
            "Reshape",
            ["Parameter193", "Parameter193_reshape1_shape"],
            ["Parameter193_reshape1"],
            name="Times212_reshape1",
        ),
        helper.make_node(
            "Conv",
            ["Input3", "Parameter5"],
            ["Convolution28_Output_0"],
            name="Convolution28",
            group=1,
            **conv,
        ),
        helper.make_node(
            "Add", ["Convolution28_Output_0", "Parameter6"], ["Plus30_Output_0"], name="Plus30"
        ),
        helper.make_node("Relu", ["Plus30_Output_0"], ["ReLU32_Output_0"], name="ReLU32"),
        helper.make_node(
            "MaxPool",
            ["ReLU32_Output_0"],
            ["Pooling66_Output_0"],
            name="Pooling66",
            kernel_shape=[2, 2],
            strides=[2, 2],
            pads=[0, 0, 0, 0],
        ),
        helper.make_node(
            "Conv",
            ["Pooling66_Output_0", "Parameter87"],
            ["Convolution110_Output_0"],
            name="Convolution110",
            group=1,
            **conv,
        ),
        helper.make_node(
            "Add", ["Convolution110_Output_0", "Parameter88"], ["Plus112_Output_0"], name="Plus112"
        ),
        helper.make_node("Relu", ["Plus112_Output_0"], ["ReLU114_Output_0"], name="ReLU114"),
        helper.make_node(
            "MaxPool",
            ["ReLU114_Output_0"],
            ["Pooling160_Output_0"],
            name="Pooling160",
            kernel_shape=[3, 3],
            strides=[3, 3],
            pads=[0, 0, 0, 0],
        ),
        helper.make_node(
            "Reshape",
            ["Pooling160_Output_0", "Pooling160_Output_0_reshape0_shape"],
            ["Pooling160_Output_0_reshape0"],
            name="Times212_reshape0",
        ),
        helper.make_node(
            "MatMul",
            ["Pooling160_Output_0_reshape0", "Parameter193_reshape1"],
            ["Times212_Output_0"],
            name="Times212",
        ),
        helper.make_node(
            "Add", ["Times212_Output_0", "Parameter194"], ["Plus214_Output_0"], name="Plus214"
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "CNTKGraph",
        [helper.make_tensor_value_info("Input3", TensorProto.FLOAT, [1, 1, 28, 28])],
        [helper.make_tensor_value_info("Plus214_Output_0", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    # IR 4 lets initializers be constants rather than graph inputs.
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=max(4, onnx.helper.find_min_ir_version_for([helper.make_opsetid("", opset)])),
    )
    onnx.checker.check_model(model)
    return model


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """A small CNN with ResNet50's and MobileNet's layer kinds, quick to compile and to run
    under emulation.

    input [1,3,32,32] -> Conv 3x3 (32) + BN + Relu -> MaxPool 2x2/2 -> a ResNet50 bottleneck
    (1x1 to 16, 3x3, 1x1 to 64, each with BN; a projecting 1x1 + BN shortcut; Add; Relu)
    -> depthwise Conv 3x3/2 + bias -> Clip(0, 6) -> GlobalAveragePool -> Flatten
    -> Gemm [64 -> 10] -> Softmax -> probabilities [1,10].
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> str:
        inits.append(_init(rng, name, shape, np.sqrt(2 / fan_in)))
        return name

    def conv_bn(x: str, name: str, c_in: int, c_out: int, k: int, relu: bool) -> str:
        w = weight(f"{name}.w", (c_out, c_in, k, k), c_in * k * k)
        p = k // 2
        nodes.append(
            helper.make_node("Conv", [x, w], [f"{name}.c"], kernel_shape=[k, k], pads=[p] * 4)
        )
        stats = [
            rng.uniform(0.5, 1.5, c_out),
            rng.standard_normal(c_out) * 0.1,
            rng.standard_normal(c_out) * 0.1,
            rng.uniform(0.5, 1.5, c_out),
        ]
        names = [f"{name}.{s}" for s in ("scale", "bias", "mean", "var")]
        inits.extend(
            numpy_helper.from_array(v.astype(np.float32), n)
            for v, n in zip(stats, names, strict=True)
        )
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.c", *names], [f"{name}.bn"]))
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"]))
        return f"{name}.relu"

    x = conv_bn("input", "stem", 3, 32, 3, True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[2, 2], strides=[2, 2]))
    y = conv_bn("pool", "reduce", 32, 16, 1, True)
    y = conv_bn(y, "conv3x3", 16, 16, 3, True)
    y = conv_bn(y, "expand", 16, 64, 1, False)
    shortcut = conv_bn("pool", "shortcut", 32, 64, 1, False)
    nodes.append(helper.make_node("Add", [y, shortcut], ["sum"]))
    nodes.append(helper.make_node("Relu", ["sum"], ["block"]))
    dw = weight("dw.w", (64, 1, 3, 3), 9)
    inits.append(_init(rng, "dw.b", (64,), 0.1))
    nodes.append(
        helper.make_node(
            "Conv",
            ["block", dw, "dw.b"],
            ["dw"],
            kernel_shape=[3, 3],
            pads=[1] * 4,
            strides=[2, 2],
            group=64,
        )
    )
    inits += [
        numpy_helper.from_array(np.array(0, np.float32), "zero"),
        numpy_helper.from_array(np.array(6, np.float32), "six"),
    ]
    nodes.append(helper.make_node("Clip", ["dw", "zero", "six"], ["clip"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["clip"], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    fc = weight("fc.w", (10, 64), 64)
    inits.append(_init(rng, "fc.b", (10,), 0.1))
    nodes.append(helper.make_node("Gemm", ["flat", fc, "fc.b"], ["logits"], transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
    return uses


def _through_reshapes(
    name: str, uses: dict[str, list[tuple[onnx.NodeProto, int]]]
) -> Iterable[tuple[onnx.NodeProto, int]]:
    """The uses of ``name``, looking through Unsqueeze/Reshape/Squeeze of it."""
    for node, i in uses.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape", "Squeeze") and i == 0:
            yield from _through_reshapes(node.output[0], uses)
        else:
            yield node, i


def _random_weight(
    rng: np.random.Generator, shape: tuple[int, ...], uses: list[tuple[onnx.NodeProto, int]]
) -> np.ndarray:
    """Random data for a weight of ``shape`` that keeps activations O(1) in its consumers.

    Multiplicative per-channel factors (BatchNormalization scale and variance, Mul operands)
    are drawn from U(0.5, 1.5) so that variances stay positive; Conv / Gemm / MatMul weights
    are He-scaled normals (sqrt(2 / fan_in)); everything else (biases, means) is N(0, 0.1²).
    """
    for node, i in uses:
        if (node.op_type == "BatchNormalization" and i in (1, 4)) or node.op_type == "Mul":
            return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    fan_in = 0
    for node, i in uses:
        if node.op_type == "Conv" and i == 1:
            fan_in = int(np.prod(shape[1:]))
        elif node.op_type == "Gemm" and i == 1:
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            fan_in = shape[1] if trans_b else shape[0]
        elif node.op_type == "MatMul" and i == 1:
            fan_in = shape[0]
    scale = np.sqrt(2.0 / fan_in) if fan_in else 0.1
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def light_model(name: str, seed: int = 0, logits: bool = False) -> onnx.ModelProto:
    """A shipped light model with random weights in place of its ConstantOfShape placeholders.

    Initializers are made constants (IR version >= 4, no longer graph inputs). With
    ``logits=True`` the input of the final Softmax, if there is one, is an extra graph output
    (after the model's own outputs), so pre-softmax values can be compared too.
    """
    model = onnx.load(light_path(name))
    graph = model.graph
    rng = np.random.default_rng(seed)
    inits = {t.name: t for t in graph.initializer}
    uses = _consumers(graph)
    keep: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            data = _random_weight(rng, shape, list(_through_reshapes(node.output[0], uses)))
            graph.initializer.append(numpy_helper.from_array(data, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    used = {name for node in keep for name in node.input}
    live = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(live)
    constant = {t.name for t in live}
    real_inputs = [vi for vi in graph.input if vi.name not in constant and vi.name in used]
    del graph.input[:]
    graph.input.extend(real_inputs)
    model.ir_version = max(model.ir_version, 4)
    if logits:
        softmax = [n for n in keep if n.op_type == "Softmax"]
        if softmax:
            inferred = onnx.shape_inference.infer_shapes(model)
            infos = {vi.name: vi for vi in inferred.graph.value_info}
            graph.output.append(infos[softmax[-1].input[0]])
    onnx.checker.check_model(model)
    return model
