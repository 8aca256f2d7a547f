"""Published architectures built with ``onnx.helper``: the models of the benchmark set.

Each builder returns an ``onnx.ModelProto`` (opset 17, IR version 8) laid out as PyTorch's
exporter writes the published network: layer counts, channels, strides, expansion ratios,
kernel sizes and activations as in the paper's table (and the reference implementation
named in the docstring), with seeded random weights:

- Conv, Gemm and MatMul weights are normals scaled by their fan-in (He: ``sqrt(2 / fan_in)``
  for layers feeding a rectifier-like activation, ``sqrt(1 / fan_in)`` otherwise), biases
  N(0, 0.1²); recurrent weights are U(-1/sqrt(H), 1/sqrt(H)), PyTorch's initialisation.
- BatchNormalization is a node with scale U(0.5, 1.5), bias N(0, 0.1²) and, as running
  statistics, the batch statistics of its input on a random calibration input (one
  onnxruntime run of the model with every BatchNormalization normalising by its batch): what
  a trained network's statistics are to its data. Activations stay O(1) at every depth and the
  logits depend on the input, which random statistics would not give in a 50-layer network.

Example:
    >>> model = ARCHITECTURES["gru_classifier"]()
    >>> [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input]
    [('features', [1, 50, 64])]
    >>> parameters(model), multiply_adds(model)
    (76044, 3687936)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from polyonnx.testing.reference import onnxruntime_outputs

OPSET = 17
IR_VERSION = 8
"""The IR version of opset 17 (onnx 1.12); onnxruntime 1.32 reads up to IR 11."""


class _Builder:
    """Nodes and initializers of one graph, named by a scope path as exporters name them
    (``/features.3/conv.1/Conv``), and the BatchNormalization nodes to calibrate."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.batch_norms: list[onnx.NodeProto] = []
        self._scope: list[str] = []
        self._taken: Counter[str] = Counter()
        self._scalars: dict[tuple[str, float], str] = {}

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _fresh(self, hint: str) -> str:
        name = "/".join(["", *self._scope, hint])
        self._taken[name] += 1
        return name if self._taken[name] == 1 else f"{name}_{self._taken[name] - 1}"

    # ---- initializers
    def constant(self, hint: str, array: np.ndarray) -> str:
        name = self._fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def scalar(self, value: float) -> str:
        """A float32 scalar constant, shared by every node that uses the value."""
        key = ("float32", float(value))
        if key not in self._scalars:
            self._scalars[key] = self.constant(
                f"const_{len(self._scalars)}", np.array(value, np.float32)
            )
        return self._scalars[key]

    def shape(self, hint: str, dims: Sequence[int]) -> str:
        return self.constant(hint, np.array(dims, np.int64))

    def normal(self, hint: str, shape: Sequence[int], std: float) -> str:
        return self.constant(hint, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def uniform(self, hint: str, shape: Sequence[int], low: float, high: float) -> str:
        return self.constant(hint, self.rng.uniform(low, high, shape).astype(np.float32))

    # ---- nodes
    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> str:
        """Append a node; returns its output's name (see :meth:`ops` for several)."""
        return self.ops(op_type, *inputs, outputs=outputs, **attrs)[0]

    def ops(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> list[str]:
        name = self._fresh(op_type)
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        node = helper.make_node(op_type, list(inputs), outs, name=name, **attrs)
        self.nodes.append(node)
        if op_type == "BatchNormalization":
            self.batch_norms.append(node)
        return outs

    # ---- layers
    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        bias: bool = False,
        gain: float = 2.0,
    ) -> str:
        """A square ``kernel`` convolution with PyTorch's ``padding=kernel // 2``."""
        with self.scope("conv"):
            fan_in = c_in // group * kernel * kernel
            w = self.normal(
                "weight", (c_out, c_in // group, kernel, kernel), math.sqrt(gain / fan_in)
            )
            b = [self.normal("bias", (c_out,), 0.1)] if bias else []
        p = kernel // 2
        return self.op(
            "Conv",
            x,
            w,
            *b,
            group=group,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[p, p, p, p],
            dilations=[1, 1],
        )

    def batch_norm(self, x: str, channels: int, eps: float) -> str:
        with self.scope("bn"):
            scale = self.uniform("weight", (channels,), 0.5, 1.5)
            bias = self.normal("bias", (channels,), 0.1)
            mean = self.constant("running_mean", np.zeros(channels, np.float32))
            var = self.constant("running_var", np.ones(channels, np.float32))
        return self.op("BatchNormalization", x, scale, bias, mean, var, epsilon=eps, momentum=0.9)

    def act(self, x: str, kind: str | None) -> str:
        """``kind``'s activation as PyTorch exports it (None: the identity)."""
        if kind is None:
            return x
        if kind == "relu":
            return self.op("Relu", x)
        if kind == "relu6":
            return self.op("Clip", x, self.scalar(0.0), self.scalar(6.0))
        if kind == "hardswish":
            return self.op("HardSwish", x)
        if kind == "hardsigmoid":
            return self.op("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5)
        if kind == "sigmoid":
            return self.op("Sigmoid", x)
        if kind == "silu":
            return self.op("Mul", x, self.op("Sigmoid", x))
        raise ValueError(f"unknown activation {kind!r}")

    def conv_bn_act(
        self,
        x: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        group: int = 1,
        act: str | None = None,
        eps: float = 1e-5,
    ) -> str:
        return self.act(
            self.batch_norm(self.conv(x, c_in, c_out, kernel, stride, group), c_out, eps), act
        )

    def squeeze_excitation(self, x: str, channels: int, squeeze: int, act: str, gate: str) -> str:
        """torchvision's ``SqueezeExcitation``: GlobalAveragePool -> 1x1 conv -> ``act`` ->
        1x1 conv -> ``gate`` -> ``gate * x``."""
        with self.scope("se"):
            s = self.op("GlobalAveragePool", x)
            with self.scope("fc1"):
                s = self.act(self.conv(s, channels, squeeze, 1, bias=True), act)
            with self.scope("fc2"):
                s = self.act(self.conv(s, squeeze, channels, 1, bias=True, gain=1.0), gate)
            return self.op("Mul", s, x)

    def inverted_residual(
        self,
        x: str,
        c_in: int,
        hidden: int,
        c_out: int,
        kernel: int,
        stride: int,
        act: str,
        eps: float,
        se: tuple[int, str, str] | None = None,
    ) -> str:
        """MobileNetV2's inverted residual (MBConv): 1x1 expansion to ``hidden`` channels
        (left out when ``hidden == c_in``), depthwise ``kernel`` conv with ``stride``, the
        optional squeeze-excitation ``(squeeze, act, gate)``, linear 1x1 projection; the
        input added when the shapes allow."""
        y = x
        if hidden != c_in:
            with self.scope("expand"):
                y = self.conv_bn_act(y, c_in, hidden, 1, act=act, eps=eps)
        with self.scope("depthwise"):
            y = self.conv_bn_act(y, hidden, hidden, kernel, stride, group=hidden, act=act, eps=eps)
        if se is not None:
            y = self.squeeze_excitation(y, hidden, *se)
        with self.scope("project"):
            y = self.conv_bn_act(y, hidden, c_out, 1, eps=eps)
        return self.op("Add", x, y) if stride == 1 and c_in == c_out else y

    def linear(self, x: str, n_in: int, n_out: int, gain: float = 1.0) -> str:
        """``torch.nn.Linear`` on a 2-D input: Gemm with a [out, in] weight, transB=1."""
        with self.scope("linear"):
            w = self.normal("weight", (n_out, n_in), math.sqrt(gain / n_in))
            b = self.normal("bias", (n_out,), 0.1)
        return self.op("Gemm", x, w, b, alpha=1.0, beta=1.0, transB=1)

    def dense(self, name: str, x: str, n_in: int, n_out: int, gain: float = 1.0) -> str:
        """``torch.nn.Linear`` on the last axis as transformers export it: MatMul by an
        [in, out] weight, then Add of the bias."""
        with self.scope(name):
            w = self.normal("weight", (n_in, n_out), math.sqrt(gain / n_in))
            return self.op("Add", self.op("MatMul", x, w), self.normal("bias", (n_out,), 0.1))

    def layer_norm(self, name: str, x: str, width: int, eps: float) -> str:
        """LayerNormalization over the last axis of ``width`` (opset 17's op)."""
        with self.scope(name):
            gamma = self.uniform("weight", (width,), 0.5, 1.5)
            beta = self.normal("bias", (width,), 0.1)
            return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=eps)

    def classifier_head(self, x: str) -> str:
        """GlobalAveragePool then Flatten(axis=1), as torchvision's CNNs end."""
        return self.op("Flatten", self.op("GlobalAveragePool", x), axis=1)

    # ---- the model
    def model(
        self,
        name: str,
        doc: str,
        inputs: Sequence[tuple[str, Sequence[int]]],
        outputs: Sequence[tuple[str, str, Sequence[int]]],
        seed: int,
    ) -> onnx.ModelProto:
        """The graph as a checked model; ``outputs`` are (graph name, tensor, shape): each
        output tensor is renamed to its graph name."""
        renames = {tensor: out for out, tensor, _ in outputs}
        for node in self.nodes:
            node.input[:] = [renames.get(i, i) for i in node.input]
            node.output[:] = [renames.get(o, o) for o in node.output]
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, _, s in outputs],
            initializer=self.initializers,
            doc_string=doc,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="polyonnx.testing",
            doc_string=doc,
        )
        if self.batch_norms:
            _calibrate(model, seed)
        onnx.checker.check_model(model, full_check=True)
        return model


def _calibrate(model: onnx.ModelProto, seed: int) -> None:
    """Set every BatchNormalization's running mean and variance (in place) to the batch
    statistics of its input, on one random input of the model, when every earlier
    BatchNormalization normalises with its own batch statistics (so with the statistics set
    here: one run covers every depth)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    graph = probe.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    stats: list[tuple[str, str]] = []
    for node in graph.node:
        if node.op_type != "BatchNormalization":
            nodes.append(node)
            continue
        x, scale, bias, mean, var = node.input
        eps = next(a.f for a in node.attribute if a.name == "epsilon")
        p = node.name
        shape = (len(inits[scale]), 1, 1)
        for n, v in (
            (f"{p}/scale3", inits[scale].reshape(shape)),
            (f"{p}/bias3", inits[bias].reshape(shape)),
            (f"{p}/eps", np.array(eps, np.float32)),
        ):
            graph.initializer.append(numpy_helper.from_array(v, n))
        axes = [0, 2, 3]
        nodes += [
            helper.make_node("ReduceMean", [x], [f"{p}/mean"], axes=axes, keepdims=1),
            helper.make_node("Sub", [x, f"{p}/mean"], [f"{p}/centred"]),
            helper.make_node("Mul", [f"{p}/centred", f"{p}/centred"], [f"{p}/square"]),
            helper.make_node("ReduceMean", [f"{p}/square"], [f"{p}/var"], axes=axes, keepdims=1),
            helper.make_node("Add", [f"{p}/var", f"{p}/eps"], [f"{p}/var_eps"]),
            helper.make_node("Sqrt", [f"{p}/var_eps"], [f"{p}/std"]),
            helper.make_node("Div", [f"{p}/centred", f"{p}/std"], [f"{p}/normed"]),
            helper.make_node("Mul", [f"{p}/normed", f"{p}/scale3"], [f"{p}/scaled"]),
            helper.make_node("Add", [f"{p}/scaled", f"{p}/bias3"], [node.output[0]]),
        ]
        stats.append((mean, var))
        graph.output.extend(
            [
                helper.make_tensor_value_info(f"{p}/{s}", TensorProto.FLOAT, None)
                for s in ("mean", "var")
            ]
        )
    del graph.node[:]
    graph.node.extend(nodes)
    rng = np.random.default_rng(seed + 1)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in graph.input
    }
    n_own = len(model.graph.output)
    values = onnxruntime_outputs(probe, feeds)[n_own:]
    by_name = {t.name: t for t in model.graph.initializer}
    for (mean, var), m, v in zip(stats, values[0::2], values[1::2], strict=True):
        by_name[mean].CopyFrom(numpy_helper.from_array(m.reshape(-1).astype(np.float32), mean))
        by_name[var].CopyFrom(numpy_helper.from_array(v.reshape(-1).astype(np.float32), var))


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: round to a multiple of ``divisor``, not below 90%."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


# ---- MobileNetV2

#: Sandler et al. 2018, Table 2: (expansion t, channels c, repeats n, first stride s).
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(seed: int = 0, num_classes: int = 1000, resolution: int = 224) -> onnx.ModelProto:
    """MobileNetV2, width 1.0 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear
    Bottlenecks", CVPR 2018, Table 2; torchvision ``mobilenet_v2``): 3x3/2 conv to 32, the
    seventeen inverted residuals of :data:`MOBILENET_V2_BLOCKS` (ReLU6 as ``Clip(0, 6)``,
    linear projections), 1x1 conv to 1280, global average pool, FC. BN eps 1e-5.
    3.5 M parameters, 0.30 G multiply-adds at 224x224.
    """
    b = _Builder(seed)
    with b.scope("features.0"):
        x = b.conv_bn_act("input", 3, 32, 3, 2, act="relu6")
    c_in, index = 32, 1
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        for r in range(n):
            with b.scope(f"features.{index}"):
                x = b.inverted_residual(x, c_in, c_in * t, c, 3, s if r == 0 else 1, "relu6", 1e-5)
            c_in, index = c, index + 1
    with b.scope(f"features.{index}"):
        x = b.conv_bn_act(x, c_in, 1280, 1, act="relu6")
    with b.scope("classifier"):
        logits = b.linear(b.classifier_head(x), 1280, num_classes)
    return b.model(
        "mobilenet_v2",
        mobilenet_v2.__doc__ or "",
        [("input", (1, 3, resolution, resolution))],
        [("logits", logits, (1, num_classes))],
        seed,
    )


# ---- MobileNetV3-Small

#: Howard et al. 2019, Table 2 (MobileNetV3-Small): (kernel, expansion size, channels,
#: squeeze-excitation, activation, stride) of each bneck.
MOBILENET_V3_SMALL_BLOCKS = (
    (3, 16, 16, True, "relu", 2),
    (3, 72, 24, False, "relu", 2),
    (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hardswish", 2),
    (5, 240, 40, True, "hardswish", 1),
    (5, 240, 40, True, "hardswish", 1),
    (5, 120, 48, True, "hardswish", 1),
    (5, 144, 48, True, "hardswish", 1),
    (5, 288, 96, True, "hardswish", 2),
    (5, 576, 96, True, "hardswish", 1),
    (5, 576, 96, True, "hardswish", 1),
)


def mobilenet_v3_small(
    seed: int = 0, num_classes: int = 1000, resolution: int = 224
) -> onnx.ModelProto:
    """MobileNetV3-Small (Howard et al., "Searching for MobileNetV3", ICCV 2019, Table 2;
    torchvision ``mobilenet_v3_small``): 3x3/2 conv to 16 with HardSwish, the eleven bnecks of
    :data:`MOBILENET_V3_SMALL_BLOCKS` (squeeze-excitation to ``_make_divisible(exp / 4)``
    channels: GlobalAveragePool -> 1x1 conv -> ReLU -> 1x1 conv -> HardSigmoid -> Mul), 1x1
    conv to 576 with HardSwish, global average pool, FC 1024 with HardSwish, FC. BN eps 1e-3.
    2.5 M parameters, 0.06 G multiply-adds at 224x224.
    """
    b = _Builder(seed)
    eps = 1e-3
    with b.scope("features.0"):
        x = b.conv_bn_act("input", 3, 16, 3, 2, act="hardswish", eps=eps)
    c_in = 16
    for index, (k, exp, c, se, act, s) in enumerate(MOBILENET_V3_SMALL_BLOCKS, start=1):
        with b.scope(f"features.{index}"):
            squeeze = (_make_divisible(exp / 4), "relu", "hardsigmoid") if se else None
            x = b.inverted_residual(x, c_in, exp, c, k, s, act, eps, squeeze)
        c_in = c
    with b.scope(f"features.{len(MOBILENET_V3_SMALL_BLOCKS) + 1}"):
        x = b.conv_bn_act(x, c_in, 576, 1, act="hardswish", eps=eps)
    x = b.classifier_head(x)
    with b.scope("classifier.0"):
        x = b.act(b.linear(x, 576, 1024, gain=3.0), "hardswish")
    with b.scope("classifier.3"):
        logits = b.linear(x, 1024, num_classes)
    return b.model(
        "mobilenet_v3_small",
        mobilenet_v3_small.__doc__ or "",
        [("input", (1, 3, resolution, resolution))],
        [("logits", logits, (1, num_classes))],
        seed,
    )


# ---- EfficientNet-B0

#: Tan & Le 2019, Table 1 (stages 2-8): (expansion, kernel, stride, channels in, channels
#: out, layers) of each MBConv stage.
EFFICIENTNET_B0_STAGES = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


def efficientnet_b0(
    seed: int = 0, num_classes: int = 1000, resolution: int = 224
) -> onnx.ModelProto:
    """EfficientNet-B0 (Tan & Le, "EfficientNet: Rethinking Model Scaling for Convolutional
    Neural Networks", ICML 2019, Table 1; torchvision ``efficientnet_b0``): 3x3/2 conv to 32,
    the sixteen MBConv blocks of :data:`EFFICIENTNET_B0_STAGES` with squeeze-excitation to a
    quarter of the block's input channels (SiLU inside, Sigmoid gate), 1x1 conv to 1280,
    global average pool, FC. Swish/SiLU as PyTorch exports it: ``Mul(x, Sigmoid(x))``. BN eps
    1e-5. 5.3 M parameters, 0.39 G multiply-adds at 224x224.
    """
    b = _Builder(seed)
    with b.scope("features.0"):
        x = b.conv_bn_act("input", 3, 32, 3, 2, act="silu")
    for stage, (e, k, s, c_in, c_out, layers) in enumerate(EFFICIENTNET_B0_STAGES, start=1):
        for r in range(layers):
            block_in = c_in if r == 0 else c_out
            with b.scope(f"features.{stage}.{r}"):
                x = b.inverted_residual(
                    x,
                    block_in,
                    _make_divisible(block_in * e),
                    c_out,
                    k,
                    s if r == 0 else 1,
                    "silu",
                    1e-5,
                    (max(1, block_in // 4), "silu", "sigmoid"),
                )
    with b.scope(f"features.{len(EFFICIENTNET_B0_STAGES) + 1}"):
        x = b.conv_bn_act(x, 320, 1280, 1, act="silu")
    with b.scope("classifier.1"):
        logits = b.linear(b.classifier_head(x), 1280, num_classes)
    return b.model(
        "efficientnet_b0",
        efficientnet_b0.__doc__ or "",
        [("input", (1, 3, resolution, resolution))],
        [("logits", logits, (1, num_classes))],
        seed,
    )


# ---- YOLOv8n


def _yolo_conv(b: _Builder, x: str, c_in: int, c_out: int, kernel: int = 1, stride: int = 1) -> str:
    """ultralytics ``Conv``: conv without bias, BN (eps 1e-3), SiLU."""
    return b.conv_bn_act(x, c_in, c_out, kernel, stride, act="silu", eps=1e-3)


def _c2f(b: _Builder, x: str, c_in: int, c_out: int, n: int, shortcut: bool) -> str:
    """ultralytics ``C2f``: 1x1 conv to 2c, Split in two, ``n`` bottlenecks (two 3x3 convs,
    residual with ``shortcut``) on the last part, each output kept, Concat, 1x1 conv."""
    c = c_out // 2
    with b.scope("cv1"):
        y = _yolo_conv(b, x, c_in, 2 * c)
    parts = b.ops("Split", y, b.shape("split", (c, c)), outputs=2, axis=1)
    for i in range(n):
        with b.scope(f"m.{i}"):
            with b.scope("cv1"):
                z = _yolo_conv(b, parts[-1], c, c, 3)
            with b.scope("cv2"):
                z = _yolo_conv(b, z, c, c, 3)
            parts.append(b.op("Add", parts[-1], z) if shortcut else z)
    with b.scope("cv2"):
        return _yolo_conv(b, b.op("Concat", *parts, axis=1), (2 + n) * c, c_out)


def _sppf(b: _Builder, x: str, c_in: int, c_out: int) -> str:
    """ultralytics ``SPPF``: 1x1 conv to half, three chained 5x5/1 MaxPools, Concat of the
    four, 1x1 conv."""
    with b.scope("cv1"):
        y = [_yolo_conv(b, x, c_in, c_in // 2)]
    for _ in range(3):
        y.append(
            b.op(
                "MaxPool",
                y[-1],
                kernel_shape=[5, 5],
                strides=[1, 1],
                pads=[2, 2, 2, 2],
                dilations=[1, 1],
                ceil_mode=0,
            )
        )
    with b.scope("cv2"):
        return _yolo_conv(b, b.op("Concat", *y, axis=1), c_in * 2, c_out)


def _detect(
    b: _Builder, features: Sequence[tuple[str, int, int]], classes: int, resolution: int
) -> str:
    """ultralytics ``Detect`` as exported: per level (tensor, channels, stride) a box branch
    (two 3x3 Convs, 1x1 conv to 4 x 16 DFL bins) and a class branch (two 3x3 Convs, 1x1 conv to
    ``classes``), concatenated and flattened over the three levels; DFL (Softmax over bins,
    expectation as a 1x1 conv), boxes decoded against the anchor grid (xywh, times the
    stride), Sigmoid on the class scores, Concat."""
    reg_max = 16
    c2 = max(16, features[0][1] // 4, reg_max * 4)
    c3 = max(features[0][1], min(classes, 100))
    outputs, anchors, strides = [], [], []
    for i, (x, ch, stride) in enumerate(features):
        branches = []
        for branch, width, out in (("cv2", c2, 4 * reg_max), ("cv3", c3, classes)):
            with b.scope(f"{branch}.{i}"):
                with b.scope("0"):
                    y = _yolo_conv(b, x, ch, width, 3)
                with b.scope("1"):
                    y = _yolo_conv(b, y, width, width, 3)
                with b.scope("2"):
                    branches.append(b.conv(y, width, out, 1, bias=True, gain=1.0))
        level = b.op("Concat", *branches, axis=1)
        outputs.append(b.op("Reshape", level, b.shape("shape", (1, 4 * reg_max + classes, -1))))
        side = resolution // stride
        ys, xs = np.meshgrid(np.arange(side) + 0.5, np.arange(side) + 0.5, indexing="ij")
        anchors.append(np.stack([xs.ravel(), ys.ravel()]))
        strides.append(np.full(side * side, float(stride)))
    x_cat = b.op("Concat", *outputs, axis=2)
    box, cls = b.ops("Split", x_cat, b.shape("split", (4 * reg_max, classes)), outputs=2, axis=1)
    with b.scope("dfl"):
        a = sum(s.size for s in strides)
        d = b.op("Reshape", box, b.shape("shape", (1, 4, reg_max, a)))
        d = b.op("Softmax", b.op("Transpose", d, perm=[0, 2, 1, 3]), axis=1)
        bins = b.constant(
            "conv.weight", np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1)
        )
        d = b.op(
            "Conv",
            d,
            bins,
            kernel_shape=[1, 1],
            strides=[1, 1],
            pads=[0, 0, 0, 0],
            dilations=[1, 1],
            group=1,
        )
        dist = b.op("Reshape", d, b.shape("shape", (1, 4, a)))
    lt, rb = b.ops("Split", dist, b.shape("split", (2, 2)), outputs=2, axis=1)
    anchor = b.constant("anchors", np.concatenate(anchors, axis=1)[None].astype(np.float32))
    x1y1, x2y2 = b.op("Sub", anchor, lt), b.op("Add", anchor, rb)
    centre = b.op("Div", b.op("Add", x1y1, x2y2), b.scalar(2.0))
    wh = b.op("Sub", x2y2, x1y1)
    boxes = b.op(
        "Mul",
        b.op("Concat", centre, wh, axis=1),
        b.constant("strides", np.concatenate(strides)[None].astype(np.float32)),
    )
    return b.op("Concat", boxes, b.op("Sigmoid", cls), axis=1)


def yolov8n(seed: int = 0, num_classes: int = 80, resolution: int = 320) -> onnx.ModelProto:
    """A YOLOv8n detector (ultralytics ``yolov8.yaml``, scale n: depth 0.33, width 0.25, max
    channels 1024; modules ``Conv``, ``C2f``, ``SPPF``, ``Detect``, ``DFL`` of ultralytics 8,
    Jocher et al. 2023) at ``resolution`` (320): backbone 3x3/2 Convs to 16, 32, 64, 128, 256
    with C2f (1, 2, 2, 1 bottlenecks, residual) after each from 32 on and SPPF; the PAN neck
    (nearest 2x Resize, Concat, C2f without residual, 3x3/2 Convs down); the three-scale
    Detect head at strides 8, 16, 32, exported output ``[1, 4 + classes, anchors]`` (xywh
    boxes in pixels, class probabilities). Conv = conv + BN (eps 1e-3) + SiLU (Sigmoid + Mul).
    3.2 M parameters, 8.7 GFLOPs at 640 (so 2.2 at 320).
    """
    b = _Builder(seed)
    w = [16, 32, 64, 128, 256]  # 64, 128, 256, 512, 1024 x 0.25
    scales = b.constant("resize_scales", np.array([1, 1, 2, 2], np.float32))

    def layer(i: int, fn: Callable[..., str], *args: object) -> str:
        with b.scope(f"model.{i}"):
            return fn(b, *args)

    def upsample(i: int, x: str) -> str:
        with b.scope(f"model.{i}"):
            return b.op(
                "Resize",
                x,
                "",
                scales,
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )

    x = layer(0, _yolo_conv, "images", 3, w[0], 3, 2)
    x = layer(1, _yolo_conv, x, w[0], w[1], 3, 2)
    x = layer(2, _c2f, x, w[1], w[1], 1, True)
    x = layer(3, _yolo_conv, x, w[1], w[2], 3, 2)
    p3 = layer(4, _c2f, x, w[2], w[2], 2, True)
    x = layer(5, _yolo_conv, p3, w[2], w[3], 3, 2)
    p4 = layer(6, _c2f, x, w[3], w[3], 2, True)
    x = layer(7, _yolo_conv, p4, w[3], w[4], 3, 2)
    x = layer(8, _c2f, x, w[4], w[4], 1, True)
    p5 = layer(9, _sppf, x, w[4], w[4])
    x = b.op("Concat", upsample(10, p5), p4, axis=1)
    h4 = layer(12, _c2f, x, w[4] + w[3], w[3], 1, False)
    x = b.op("Concat", upsample(13, h4), p3, axis=1)
    out3 = layer(15, _c2f, x, w[3] + w[2], w[2], 1, False)
    x = b.op("Concat", layer(16, _yolo_conv, out3, w[2], w[2], 3, 2), h4, axis=1)
    out4 = layer(18, _c2f, x, w[2] + w[3], w[3], 1, False)
    x = b.op("Concat", layer(19, _yolo_conv, out4, w[3], w[3], 3, 2), p5, axis=1)
    out5 = layer(21, _c2f, x, w[3] + w[4], w[4], 1, False)
    with b.scope("model.22"):
        y = _detect(
            b, [(out3, w[2], 8), (out4, w[3], 16), (out5, w[4], 32)], num_classes, resolution
        )
    anchors = sum((resolution // s) ** 2 for s in (8, 16, 32))
    return b.model(
        "yolov8n",
        yolov8n.__doc__ or "",
        [("images", (1, 3, resolution, resolution))],
        [("output0", y, (1, 4 + num_classes, anchors))],
        seed,
    )


# ---- BERT-base encoder layer


def bert_base_layer(
    seed: int = 0, sequence: int = 128, hidden: int = 768, heads: int = 12, intermediate: int = 3072
) -> onnx.ModelProto:
    """One BERT-base encoder layer (Devlin et al., "BERT: Pre-training of Deep Bidirectional
    Transformers for Language Understanding", NAACL 2019: H=768, A=12, FFN 3072; laid out as
    Hugging Face ``BertLayer`` exports): Q/K/V MatMul + bias, Reshape/Transpose to heads (K
    transposed to [b, h, d, s]), MatMul, Div by sqrt(d), + the additive attention mask,
    Softmax, MatMul with V, back to [b, s, H], output projection, residual Add,
    LayerNormalization (eps 1e-12), FFN with GELU in the Erf form ``x * 0.5 * (1 +
    Erf(x / sqrt 2))``, residual Add, LayerNormalization. Inputs ``hidden_states``
    [1, sequence, H] and ``attention_mask`` [1, 1, 1, sequence] (0 to attend, -10000 not).
    7.1 M parameters, 0.93 G multiply-adds at sequence 128.
    """
    b = _Builder(seed)
    d = hidden // heads
    x = "hidden_states"

    with b.scope("attention.self"):
        heads_shape = b.shape("heads_shape", (1, sequence, heads, d))
        q, k, v = (
            b.op("Reshape", b.dense(n, x, hidden, hidden), heads_shape)
            for n in ("query", "key", "value")
        )
        q = b.op("Transpose", q, perm=[0, 2, 1, 3])
        k = b.op("Transpose", k, perm=[0, 2, 3, 1])
        v = b.op("Transpose", v, perm=[0, 2, 1, 3])
        scores = b.op("Div", b.op("MatMul", q, k), b.scalar(math.sqrt(d)))
        probs = b.op("Softmax", b.op("Add", scores, "attention_mask"), axis=-1)
        context = b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        context = b.op("Reshape", context, b.shape("context_shape", (1, sequence, hidden)))
    with b.scope("attention.output"):
        projected = b.dense("dense", context, hidden, hidden)
        attended = b.layer_norm("LayerNorm", b.op("Add", projected, x), hidden, 1e-12)
    with b.scope("intermediate"):
        y = b.dense("dense", attended, hidden, intermediate)
        erf = b.op("Erf", b.op("Div", y, b.scalar(math.sqrt(2.0))))
        y = b.op("Mul", b.op("Mul", y, b.scalar(0.5)), b.op("Add", erf, b.scalar(1.0)))
    with b.scope("output"):
        y = b.dense("dense", y, intermediate, hidden, 2.0)
        out = b.layer_norm("LayerNorm", b.op("Add", y, attended), hidden, 1e-12)
    return b.model(
        "bert_base_layer",
        bert_base_layer.__doc__ or "",
        [("hidden_states", (1, sequence, hidden)), ("attention_mask", (1, 1, 1, sequence))],
        [("last_hidden_state", out, (1, sequence, hidden))],
        seed,
    )


# ---- recurrent models


def _recurrent(
    b: _Builder,
    op: str,
    x: str,
    n_in: int,
    hidden: int,
    gates: int,
    directions: int,
    **attrs: object,
) -> list[str]:
    """An LSTM or GRU node with PyTorch's U(-1/sqrt(H), 1/sqrt(H)) weights; returns its
    outputs (Y, Y_h[, Y_c])."""
    k = 1.0 / math.sqrt(hidden)
    w = b.uniform("W", (directions, gates * hidden, n_in), -k, k)
    r = b.uniform("R", (directions, gates * hidden, hidden), -k, k)
    bias = b.uniform("B", (directions, 2 * gates * hidden), -k, k)
    direction = "bidirectional" if directions == 2 else "forward"
    return b.ops(
        op,
        x,
        w,
        r,
        bias,
        outputs=3 if op == "LSTM" else 2,
        hidden_size=hidden,
        direction=direction,
        **attrs,
    )


def lstm_speech(
    seed: int = 0,
    frames: int = 100,
    features: int = 80,
    hidden: int = 256,
    layers: int = 2,
    classes: int = 40,
) -> onnx.ModelProto:
    """A bidirectional LSTM acoustic model (Graves, Mohamed & Hinton, "Speech Recognition with
    Deep Recurrent Neural Networks", ICASSP 2013, as ``torch.nn.LSTM(80, 256, num_layers=2,
    bidirectional=True, batch_first=True)`` exports it): 80-dim filterbank ``frames``
    [1, 100, 80] -> Transpose to time-major -> per layer an ONNX LSTM with
    direction="bidirectional", its Y [T, 2, 1, H] Transposed and Reshaped to [T, 1, 2H] ->
    Transpose back -> MatMul + bias to 40 classes per frame (39 TIMIT phones + a CTC blank).
    2.3 M parameters, 0.23 G multiply-adds.
    """
    b = _Builder(seed)
    x = b.op("Transpose", "features", perm=[1, 0, 2])
    n_in = features
    for i in range(layers):
        with b.scope(f"lstm.{i}"):
            y = _recurrent(b, "LSTM", x, n_in, hidden, 4, 2)[0]
            y = b.op("Transpose", y, perm=[0, 2, 1, 3])
            x = b.op("Reshape", y, b.shape("shape", (0, 0, -1)))
        n_in = 2 * hidden
    x = b.op("Transpose", x, perm=[1, 0, 2])
    with b.scope("fc"):
        w = b.normal("weight", (n_in, classes), math.sqrt(1.0 / n_in))
        logits = b.op("Add", b.op("MatMul", x, w), b.normal("bias", (classes,), 0.1))
    return b.model(
        "lstm_speech",
        lstm_speech.__doc__ or "",
        [("features", (1, frames, features))],
        [("logits", logits, (1, frames, classes))],
        seed,
    )


def gru_classifier(
    seed: int = 0, frames: int = 50, features: int = 64, hidden: int = 128, classes: int = 12
) -> onnx.ModelProto:
    """A GRU sequence classifier (Cho et al., "Learning Phrase Representations using RNN
    Encoder-Decoder", EMNLP 2014; as ``torch.nn.GRU(64, 128, batch_first=True)`` exports it,
    with linear_before_reset=1) for keyword spotting: ``features`` [1, 50, 64] -> Transpose to
    time-major -> GRU -> last hidden state Y_h [1, 1, 128] -> Squeeze -> Gemm to 12 classes
    (the Speech Commands task's ten words, silence, unknown).
    0.08 M parameters, 3.7 M multiply-adds.
    """
    b = _Builder(seed)
    x = b.op("Transpose", "features", perm=[1, 0, 2])
    with b.scope("gru"):
        h = _recurrent(b, "GRU", x, features, hidden, 3, 1, linear_before_reset=1)[1]
    h = b.op("Squeeze", h, b.shape("axes", (0,)))
    with b.scope("fc"):
        logits = b.linear(h, hidden, classes)
    return b.model(
        "gru_classifier",
        gru_classifier.__doc__ or "",
        [("features", (1, frames, features))],
        [("logits", logits, (1, classes))],
        seed,
    )


# ---- outside the benchmark set: patterns it lacks (each was once slow in polyonnx)


def gpt2_blocks(
    seed: int = 0, tokens: int = 128, hidden: int = 768, heads: int = 12, layers: int = 4
) -> onnx.ModelProto:
    """``layers`` GPT-2-small decoder blocks (Radford et al., "Language Models are
    Unsupervised Multitask Learners", 2019: H=768, 12 heads, FFN 4H; laid out as Hugging Face
    ``GPT2Block`` exports at opset 17): LayerNormalization (eps 1e-5), one fused QKV MatMul +
    bias Split in three, heads by Reshape/Transpose, scores Div by sqrt(d) plus the causal
    mask (-10000 above the diagonal), Softmax, MatMul with V, output projection, residual;
    LayerNormalization, FFN with GELU in the tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x +
    0.044715 Pow(x, 3))))``, residual; a final LayerNormalization. Input ``hidden_states``
    [1, tokens, H]. 28.4 M parameters (the 128x128 causal mask included), 3.72 G
    multiply-adds at 128 tokens and 4 layers.
    """
    b = _Builder(seed)
    d = hidden // heads
    x = "hidden_states"
    mask = np.triu(np.full((tokens, tokens), -10000.0, np.float32), 1)[None, None]

    causal = b.constant("causal_mask", mask)
    for i in range(layers):
        with b.scope(f"h.{i}"):
            with b.scope("attn"):
                qkv = b.dense("c_attn", b.layer_norm("ln_1", x, hidden, 1e-5), hidden, 3 * hidden)
                split = b.shape("split", (hidden, hidden, hidden))
                heads_shape = b.shape("heads_shape", (1, tokens, heads, d))
                q, k, v = (
                    b.op("Transpose", b.op("Reshape", t, heads_shape), perm=[0, 2, 1, 3])
                    for t in b.ops("Split", qkv, split, outputs=3, axis=-1)
                )
                scores = b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2]))
                scores = b.op("Add", b.op("Div", scores, b.scalar(math.sqrt(d))), causal)
                context = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
                context = b.op("Transpose", context, perm=[0, 2, 1, 3])
                context = b.op("Reshape", context, b.shape("merged", (1, tokens, hidden)))
                x = b.op("Add", x, b.dense("c_proj", context, hidden, hidden))
            with b.scope("mlp"):
                y = b.dense("c_fc", b.layer_norm("ln_2", x, hidden, 1e-5), hidden, 4 * hidden)
                inner = b.op(
                    "Add", y, b.op("Mul", b.scalar(0.044715), b.op("Pow", y, b.scalar(3.0)))
                )
                t = b.op("Tanh", b.op("Mul", b.scalar(math.sqrt(2.0 / math.pi)), inner))
                y = b.op("Mul", b.op("Mul", b.scalar(0.5), y), b.op("Add", b.scalar(1.0), t))
                x = b.op("Add", x, b.dense("c_proj", y, 4 * hidden, hidden, 2.0))
    out = b.layer_norm("ln_f", x, hidden, 1e-5)
    return b.model(
        "gpt2_blocks",
        gpt2_blocks.__doc__ or "",
        [("hidden_states", (1, tokens, hidden))],
        [("last_hidden_state", out, (1, tokens, hidden))],
        seed,
    )


def regnetx_400mf(seed: int = 0, num_classes: int = 1000, resolution: int = 224) -> onnx.ModelProto:
    """RegNetX-400MF (Radosavovic et al., "Designing Network Design Spaces", CVPR 2020;
    torchvision's ``regnet_x_400mf``): a 3x3 stride-2 stem of 32 channels, four stages of
    widths 32, 64, 160, 400 and depths 1, 2, 7, 12 of X blocks (1x1 conv, 3x3 grouped conv
    of group width 16 with the stage's stride, 1x1 conv, each with BatchNormalization, ReLU
    but after the last, whose sum with the shortcut is ReLU'd; a 1x1 stride-s projection
    shortcut where the shape changes), GlobalAveragePool, a 1000-way Linear.
    5.5 M parameters, 0.41 G multiply-adds.
    """
    b = _Builder(seed)
    with b.scope("stem"):
        x = b.conv_bn_act("images", 3, 32, 3, 2, act="relu")
    c_in = 32
    for i, (width, depth) in enumerate(zip((32, 64, 160, 400), (1, 2, 7, 12), strict=True)):
        for j in range(depth):
            stride = 2 if j == 0 else 1
            with b.scope(f"trunk_output.block{i + 1}.block{i + 1}-{j}"):
                with b.scope("f.a"):
                    y = b.conv_bn_act(x, c_in, width, 1, act="relu")
                with b.scope("f.b"):
                    y = b.conv_bn_act(y, width, width, 3, stride, group=width // 16, act="relu")
                with b.scope("f.c"):
                    y = b.conv_bn_act(y, width, width, 1)
                if stride != 1 or c_in != width:
                    with b.scope("proj"):
                        x = b.conv_bn_act(x, c_in, width, 1, stride)
                x = b.op("Relu", b.op("Add", x, y))
            c_in = width
    with b.scope("fc"):
        logits = b.linear(b.classifier_head(x), c_in, num_classes)
    return b.model(
        "regnetx_400mf",
        regnetx_400mf.__doc__ or "",
        [("images", (1, 3, resolution, resolution))],
        [("logits", logits, (1, num_classes))],
        seed,
    )


def deeplabv3_aspp(
    seed: int = 0, channels: int = 512, size: int = 33, rates: Sequence[int] = (6, 12, 18)
) -> onnx.ModelProto:
    """DeepLabV3's atrous spatial pyramid pooling head (Chen et al., "Rethinking Atrous
    Convolution for Semantic Image Segmentation", 2017; torchvision's ``ASPP``) at output
    stride 16 (rates 6, 12, 18) on a 33x33 feature map (a 513x513 image) of ``channels``
    (512 here, ResNet's layer3 width, for a head that compiles in a second): a 1x1 branch,
    three 3x3 branches dilated by the rates (padding = rate), an image-pooling branch
    (GlobalAveragePool, 1x1 conv, upsampled back by Resize), each to 256 channels with
    BatchNormalization and ReLU, concatenated and projected to 256 (1x1, BN, ReLU), then a
    3x3 conv-BN-ReLU and a 1x1 classifier to 21 classes.
    4.7 M parameters, 5.0 G multiply-adds.
    """
    b = _Builder(seed)
    x = "features"
    branches = []
    with b.scope("aspp.convs.0"):
        branches.append(b.conv_bn_act(x, channels, 256, 1, act="relu"))
    for k, rate in enumerate(rates):
        with b.scope(f"aspp.convs.{k + 1}"):
            with b.scope("conv"):
                w = b.normal("weight", (256, channels, 3, 3), math.sqrt(2.0 / (9 * channels)))
            y = b.op("Conv", x, w, kernel_shape=[3, 3], pads=[rate] * 4, dilations=[rate] * 2)
            branches.append(b.act(b.batch_norm(y, 256, 1e-5), "relu"))
    with b.scope("aspp.pooling"):
        pooled = b.conv_bn_act(b.op("GlobalAveragePool", x), channels, 256, 1, act="relu")
        scales = b.constant("scales", np.array([1, 1, size, size], np.float32))
        branches.append(b.op("Resize", pooled, "", scales, mode="linear"))
    with b.scope("aspp.project"):
        y = b.conv_bn_act(
            b.op("Concat", *branches, axis=1), 256 * (len(rates) + 2), 256, 1, act="relu"
        )
    with b.scope("head"):
        y = b.conv_bn_act(y, 256, 256, 3, act="relu")
        logits = b.conv(y, 256, 21, 1, bias=True, gain=1.0)
    return b.model(
        "deeplabv3_aspp",
        deeplabv3_aspp.__doc__ or "",
        [("features", (1, channels, size, size))],
        [("logits", logits, (1, 21, size, size))],
        seed,
    )


ARCHITECTURES: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "yolov8n": yolov8n,
    "bert_base_layer": bert_base_layer,
    "lstm_speech": lstm_speech,
    "gru_classifier": gru_classifier,
}
"""Every builder by name; each takes ``seed`` (default 0) and returns a checked model."""

EXTRA_ARCHITECTURES: dict[str, Callable[..., onnx.ModelProto]] = {
    "gpt2_blocks": gpt2_blocks,
    "regnetx_400mf": regnetx_400mf,
    "deeplabv3_aspp": deeplabv3_aspp,
}
"""Published architectures outside the benchmark set (``benchmarks/models.py --models`` runs
them; reports leave them out): patterns the set lacks, each of which was once slow."""


# ---- what a model computes


def parameters(model: onnx.ModelProto) -> int:
    """Parameters as papers count them: the elements of float initializers other than
    BatchNormalization's running statistics and scalars (integer shapes and axes are not
    counted either). Float constants count too: YOLOv8n's exported anchor grid and strides
    are 6,300 of its 3,163,504 (ultralytics reports 3,157,200 with the DFL's 16)."""
    stats = {
        name
        for node in model.graph.node
        if node.op_type == "BatchNormalization"
        for name in node.input[3:5]
    }
    return sum(
        int(np.prod(t.dims))
        for t in model.graph.initializer
        if t.name not in stats and t.data_type == TensorProto.FLOAT and len(t.dims)
    )


def multiply_adds(model: onnx.ModelProto) -> int:
    """Multiply-adds of the Conv, Gemm, MatMul, LSTM and GRU nodes (the figure papers quote as
    "FLOPs" or "MACs"; element-wise work not counted), from the shapes onnx infers."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*g.input, *g.output, *g.value_info)
    }
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    total = 0
    for node in g.node:
        ins = [shapes.get(n, []) for n in node.input]
        out = shapes.get(node.output[0], [])
        if node.op_type == "Conv":
            total += int(np.prod(out)) * int(np.prod(ins[1][1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            total += int(np.prod(out)) * (
                ins[0][-1]
                if node.op_type == "MatMul"
                or not any(a.name == "transA" and a.i for a in node.attribute)
                else ins[0][0]
            )
        elif node.op_type in ("LSTM", "GRU"):
            directions, gates_h, n_in = ins[1]
            steps, batch = ins[0][0], ins[0][1]
            total += directions * steps * batch * gates_h * (n_in + ins[2][2])
    return total
