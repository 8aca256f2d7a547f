"""The ONNX model zoo's classic models as their exporters wrote them, in their original opsets
(7-12) and node forms, rebuilt with ``onnx.helper`` at reduced sizes with random weights, and
compared with onnxruntime on one and two threads, once with bounds-checked code.

Each model keeps the published layer structure and the node forms the zoo file has (attribute
forms that later opsets moved to inputs, experimental ops, coerced-to-2-D Softmax, ...); what
is tested is that those forms import, fold and run exactly, not speed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.testing import assert_close, onnxruntime_outputs
from tests.models.builder import GraphBuilder, graph_input

F = TensorProto.FLOAT
I64 = TensorProto.INT64
RTOL, ATOL = 1e-4, 1e-5


class _Graph(GraphBuilder):
    """Nodes, initializers and Constant nodes of a model under construction."""

    def const(self, array: object, dtype: object = np.float32) -> str:
        """A Constant node (the zoo's older converters wrote small tensors this way)."""
        name = self._name("c")
        value = numpy_helper.from_array(np.asarray(array, dtype), name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name], value=value))
        return name

    def ints(self, *values: int) -> str:
        return self.init(list(values), np.int64)

    def weights(self, *shape: int) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return self.init(self.rng.standard_normal(shape) / math.sqrt(fan_in))

    def positive(self, *shape: int) -> str:
        return self.init(self.rng.uniform(0.5, 1.5, shape))

    def batch_norm(self, x: str, channels: int, **attrs: object) -> str:
        scale, bias = self.positive(channels), self.weights(channels)
        mean, var = self.weights(channels), self.positive(channels)
        return self.op("BatchNormalization", x, scale, bias, mean, var, **attrs)

    def model(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[str],
        opset: int,
        *,
        ir_version: int = 4,
    ) -> onnx.ModelProto:
        """The model with outputs declared by element type only, IR 4 as most zoo files
        (IR 3 lists every initializer among the graph's inputs too)."""
        if ir_version < 4:
            inputs = [
                *inputs,
                *(helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in self.inits),
            ]
        graph = helper.make_graph(
            self.nodes,
            "zoo",
            list(inputs),
            [helper.make_tensor_value_info(o, F, None) for o in outputs],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = ir_version
        return model


def _check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    reference: onnx.ModelProto | None = None,
) -> None:
    """polyonnx's outputs equal onnxruntime's on ``feeds`` with one thread, and with two
    threads and bounds checks (``reference``: the model onnxruntime runs, when it cannot run
    ``model`` itself)."""
    want = onnxruntime_outputs(reference or model, feeds)
    for options in (
        polyonnx.Options(num_threads=1),
        polyonnx.Options(num_threads=2, checked=True),
    ):
        got = polyonnx.InferenceSession(model, options=options).run(None, dict(feeds))
        assert_close(got, want, rtol=RTOL, atol=ATOL)


def _randn(*shape: int, seed: int = 1, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ------------------------------------------------------------------------ tiny-YOLOv2 (8)


@pytest.mark.slow
def test_tiny_yolov2() -> None:
    """tiny-yolov2-8: ImageScaler (scale 1/255, an experimental op), Conv without bias ->
    BatchNormalization-7 -> LeakyRelu(0.1) -> MaxPool 2x2/2, the last MaxPool 2x2 stride 1
    with asymmetric pads [0, 0, 1, 1], a SAME_UPPER conv, the 1x1 detection conv with
    bias."""
    g = _Graph()
    x = g.op("ImageScaler", "image", scale=1 / 255, bias=[-0.5, 0.0, 0.25])
    channels = 3
    for k, out in enumerate((4, 8, 8)):
        x = g.op("Conv", x, g.weights(out, channels, 3, 3), kernel_shape=[3, 3], pads=[1] * 4)
        x = g.op("LeakyRelu", g.batch_norm(x, out, epsilon=1e-5), alpha=0.1)
        stride = 2 if k < 2 else 1
        pads = [0, 0, 0, 0] if k < 2 else [0, 0, 1, 1]
        x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[stride] * 2, pads=pads)
        channels = out
    x = g.op("Conv", x, g.weights(8, 8, 3, 3), kernel_shape=[3, 3], auto_pad="SAME_UPPER")
    x = g.op("LeakyRelu", g.batch_norm(x, 8), alpha=0.1)
    y = g.op("Conv", x, g.weights(10, 8, 1, 1), g.weights(10), kernel_shape=[1, 1])
    model = g.model([graph_input("image", [1, 3, 16, 16])], [y], 8)
    image = np.random.default_rng(0).uniform(0, 255, (1, 3, 16, 16)).astype(np.float32)
    _check(model, {"image": image})


# ------------------------------------------------------------- fast-neural-style (candy, 9)


def _reflect_conv(g: _Graph, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """Pad-2 reflect (pads as an attribute) then a valid Conv with bias."""
    p = k // 2
    x = g.op("Pad", x, mode="reflect", pads=[0, 0, p, p, 0, 0, p, p])
    return g.op("Conv", x, g.weights(cout, cin, k, k), g.weights(cout), strides=[stride] * 2)


def _instance_norm(g: _Graph, x: str, channels: int) -> str:
    return g.op("InstanceNormalization", x, g.positive(channels), g.weights(channels), epsilon=1e-5)


@pytest.mark.slow
def test_fast_neural_style() -> None:
    """candy-9 / mosaic-9: reflect-padded convs, InstanceNormalization, a residual block,
    Upsample-9 (nearest, scales from an initializer) and Clip-6 with min/max attributes."""
    g = _Graph()
    x = g.op("Relu", _instance_norm(g, _reflect_conv(g, "input1", 3, 4, 5), 4))
    x = g.op("Relu", _instance_norm(g, _reflect_conv(g, x, 4, 8, 3, stride=2), 8))
    r = g.op("Relu", _instance_norm(g, _reflect_conv(g, x, 8, 8, 3), 8))
    r = _instance_norm(g, _reflect_conv(g, r, 8, 8, 3), 8)
    x = g.op("Add", x, r)
    x = g.op("Upsample", x, g.init([1.0, 1.0, 2.0, 2.0]), mode="nearest")
    x = g.op("Relu", _instance_norm(g, _reflect_conv(g, x, 8, 4, 3), 4))
    x = _reflect_conv(g, x, 4, 3, 5)
    y = g.op("Clip", x, min=0.0, max=255.0)
    model = g.model([graph_input("input1", [1, 3, 12, 12])], [y], 9)
    _check(model, {"input1": _randn(1, 3, 12, 12, scale=50.0)})


# ------------------------------------------------------------- super-resolution-10


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["reshape", "DCR", "CRD"])
def test_super_resolution(shuffle: str) -> None:
    """super-resolution-10: Conv+Relu stack, then the pixel shuffle as Reshape [N, 1, r, r,
    H, W] -> Transpose [0, 1, 4, 2, 5, 3] -> Reshape [N, 1, H*r, W*r] (the zoo file), or as
    DepthToSpace in either mode (opset 11 for CRD)."""
    g = _Graph()
    r, hw = 3, 5
    x = g.op("Relu", g.op("Conv", "input", g.weights(8, 1, 5, 5), g.weights(8), pads=[2] * 4))
    x = g.op("Relu", g.op("Conv", x, g.weights(4, 8, 3, 3), g.weights(4), pads=[1] * 4))
    x = g.op("Conv", x, g.weights(r * r, 4, 3, 3), g.weights(r * r), pads=[1] * 4)
    if shuffle == "reshape":
        x = g.op("Reshape", x, g.ints(1, 1, r, r, hw, hw))
        x = g.op("Transpose", x, perm=[0, 1, 4, 2, 5, 3])
        y = g.op("Reshape", x, g.ints(1, 1, hw * r, hw * r))
    else:
        mode = {"mode": shuffle} if shuffle == "CRD" else {}  # (DCR: the only mode before 11)
        y = g.op("DepthToSpace", x, blocksize=r, **mode)
    model = g.model([graph_input("input", [1, 1, hw, hw])], [y], 10 if shuffle != "CRD" else 11)
    _check(model, {"input": _randn(1, 1, hw, hw)})


# ------------------------------------------------------------ emotion-ferplus-8 / MNIST


@pytest.mark.slow
def test_emotion_ferplus() -> None:
    """emotion-ferplus-8: (x - mean) / std with Constant nodes, VGG-style conv blocks with
    MaxPool and Dropout, Reshape to [1, -1] from a Constant shape, Gemm-7 with a [1, N] C,
    and a second Gemm with alpha, beta and a scalar C."""
    g = _Graph()
    x = g.op("Div", g.op("Sub", "Input3", g.const([[[[127.5]]]])), g.const([[[[64.0]]]]))
    channels = 1
    for out in (4, 8):
        for _ in range(2):
            x = g.op("Conv", x, g.weights(out, channels, 3, 3), g.weights(out), pads=[1] * 4)
            x = g.op("Relu", x)
            channels = out
        x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
        x = g.op("Dropout", x, ratio=0.25)
    x = g.op("Reshape", x, g.const([1, -1], np.int64))
    x = g.op("Gemm", x, g.weights(32, 16), g.weights(1, 16))
    x = g.op("Relu", x)
    y = g.op("Gemm", x, g.weights(8, 16), g.init(0.5), alpha=0.5, beta=2.0, transA=0, transB=1)
    model = g.model([graph_input("Input3", [1, 1, 8, 8])], [y], 8)
    feeds = {"Input3": np.random.default_rng(2).uniform(0, 255, (1, 1, 8, 8)).astype(np.float32)}
    _check(model, feeds)


# --------------------------------------------------------------- Ultraface (RFB-320, 9)


@pytest.mark.slow
def test_ultraface_heads_and_box_decoding() -> None:
    """version-RFB-320 (opset 9): per-scale class and box heads transposed to NHWC and
    reshaped to [1, -1, 2] / [1, -1, 4], concatenated over scales, Softmax-1 on the 3-D scores
    (axis 2), and the SSD box decoding with Slice-1 (starts/ends/axes attributes), Exp, Mul
    by variances, Add of priors, Concat of centre and size converted to corners."""
    g = _Graph()
    x = g.op("Relu", g.op("Conv", "input", g.weights(4, 3, 3, 3), g.weights(4), pads=[1] * 4))
    f1 = x
    f2 = g.op(
        "Relu", g.op("Conv", x, g.weights(8, 4, 3, 3), g.weights(8), strides=[2, 2], pads=[1] * 4)
    )
    scores, boxes, anchors = [], [], 0
    for f, c, hw in ((f1, 4, 8), (f2, 8, 4)):
        s = g.op("Conv", f, g.weights(2 * 2, c, 3, 3), g.weights(4), pads=[1] * 4)
        s = g.op("Reshape", g.op("Transpose", s, perm=[0, 2, 3, 1]), g.ints(1, -1, 2))
        b = g.op("Conv", f, g.weights(2 * 4, c, 3, 3), g.weights(8), pads=[1] * 4)
        b = g.op("Reshape", g.op("Transpose", b, perm=[0, 2, 3, 1]), g.ints(1, -1, 4))
        scores.append(s)
        boxes.append(b)
        anchors += hw * hw * 2
    conf = g.op("Softmax", g.op("Concat", *scores, axis=1), axis=2)
    loc = g.op("Concat", *boxes, axis=1)
    priors = g.init(g.rng.uniform(0.1, 0.9, (1, anchors, 4)))
    loc_xy = g.op("Slice", loc, axes=[2], starts=[0], ends=[2])
    loc_wh = g.op("Slice", loc, axes=[2], starts=[2], ends=[4])
    pri_xy = g.op("Slice", priors, axes=[2], starts=[0], ends=[2])
    pri_wh = g.op("Slice", priors, axes=[2], starts=[2], ends=[4])
    xy = g.op("Add", g.op("Mul", g.op("Mul", loc_xy, g.init(0.1)), pri_wh), pri_xy)
    wh = g.op("Mul", g.op("Exp", g.op("Mul", loc_wh, g.init(0.2))), pri_wh)
    half = g.op("Div", wh, g.init(2.0))
    corners = g.op("Concat", g.op("Sub", xy, half), g.op("Add", xy, half), axis=2)
    model = g.model([graph_input("input", [1, 3, 8, 8])], [conf, corners], 9)
    _check(model, {"input": _randn(1, 3, 8, 8)})


# ------------------------------------------------------------------ ArcFace (ResNet100)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [7, 8])
def test_arcface_resnet_block(opset: int) -> None:
    """arcfaceresnet100-8: BatchNormalization with the ``spatial`` attribute (opset 7),
    PRelu with a per-channel [C, 1, 1] slope, an improved residual unit (BN-Conv-BN-PRelu-
    Conv-BN + shortcut), Dropout in test mode, Flatten, Gemm embedding, BN on the embedding
    (1-D, spatial)."""
    g = _Graph()
    spatial = {"spatial": 1} if opset == 7 else {}
    x = g.op("Conv", "data", g.weights(8, 3, 3, 3), pads=[1] * 4)
    x = g.op(
        "PRelu",
        g.batch_norm(x, 8, epsilon=2e-5, **spatial),
        g.init(g.rng.uniform(0, 0.3, (8, 1, 1))),
    )
    r = g.batch_norm(x, 8, epsilon=2e-5, **spatial)
    r = g.op("Conv", r, g.weights(8, 8, 3, 3), pads=[1] * 4)
    r = g.op("PRelu", g.batch_norm(r, 8, **spatial), g.init(g.rng.uniform(0, 0.3, (8, 1, 1))))
    r = g.op("Conv", r, g.weights(8, 8, 3, 3), strides=[2, 2], pads=[1] * 4)
    r = g.batch_norm(r, 8, **spatial)
    s = g.batch_norm(g.op("Conv", x, g.weights(8, 8, 1, 1), strides=[2, 2]), 8, **spatial)
    x = g.op("Add", r, s)
    x = g.op("Dropout", g.batch_norm(x, 8, **spatial), ratio=0.4)
    x = g.op("Flatten", x, axis=1)
    x = g.op("Gemm", x, g.weights(16, 128), g.weights(16), transB=1)
    y = g.batch_norm(x, 16, epsilon=2e-5, **spatial)
    model = g.model([graph_input("data", [1, 3, 8, 8])], [y], opset)
    _check(model, {"data": _randn(1, 3, 8, 8)})


# --------------------------------------------------------- GoogleNet / Inception-v1 (bvlc)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [7, 9])
def test_bvlc_googlenet_inception(opset: int) -> None:
    """bvlc_googlenet: stem conv, MaxPool 3x3/2 with asymmetric pads [0, 0, 1, 1] (Caffe's
    ceil rounding), LRN, an inception module (1x1, 3x3 reduce, 5x5 reduce, pool projection)
    concatenated, AveragePool with count_include_pad=0 and global 'valid' average pooling,
    Dropout, Reshape, Gemm, Softmax."""
    g = _Graph()
    x = g.op(
        "Relu",
        g.op("Conv", "data_0", g.weights(8, 3, 7, 7), g.weights(8), strides=[2, 2], pads=[3] * 4),
    )
    x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    x = g.op("LRN", x, size=5, alpha=1e-4, beta=0.75, bias=1.0)
    b1 = g.op("Relu", g.op("Conv", x, g.weights(4, 8, 1, 1), g.weights(4)))
    b2 = g.op("Relu", g.op("Conv", x, g.weights(4, 8, 1, 1), g.weights(4)))
    b2 = g.op("Relu", g.op("Conv", b2, g.weights(6, 4, 3, 3), g.weights(6), pads=[1] * 4))
    b3 = g.op("Relu", g.op("Conv", x, g.weights(2, 8, 1, 1), g.weights(2)))
    b3 = g.op("Relu", g.op("Conv", b3, g.weights(3, 2, 5, 5), g.weights(3), pads=[2] * 4))
    b4 = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4)
    b4 = g.op("Relu", g.op("Conv", b4, g.weights(3, 8, 1, 1), g.weights(3)))
    x = g.op("Concat", b1, b2, b3, b4, axis=1)
    x = g.op(
        "AveragePool", x, kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4, count_include_pad=0
    )
    x = g.op("AveragePool", x, kernel_shape=[4, 4], strides=[1, 1])
    x = g.op("Dropout", x, ratio=0.4)
    x = g.op("Reshape", x, g.ints(1, -1))
    y = g.op("Softmax", g.op("Gemm", x, g.weights(10, 16), g.weights(10), transB=1))
    model = g.model([graph_input("data_0", [1, 3, 15, 15])], [y], opset)
    _check(model, {"data_0": _randn(1, 3, 15, 15)})


# ----------------------------------------------------------------- GPT-2 block (opset 10)


def _gpt2_block(g: _Graph, x: str, hidden: int, heads: int, ctx: int) -> str:
    """One GPT-2 block as the zoo's gpt2-10 has it: LayerNorm by hand (ReduceMean-1 with an
    axes attribute, Sub, Pow, Sqrt, Div), c_attn then Split-2 (``split`` attribute), heads by
    Reshape to shapes built from Shape/Gather/Unsqueeze-1 (axes attribute)/Concat, 4-D
    batched MatMuls, the causal mask sliced from a [1, 1, ctx, ctx] buffer by Slice-10 with
    starts/ends computed from the sequence length, Softmax-1 on the last axis, GELU by tanh,
    residual Adds."""
    head = hidden // heads

    def layer_norm(t: str) -> str:
        mean = g.op("ReduceMean", t, axes=[-1])
        d = g.op("Sub", t, mean)
        var = g.op("ReduceMean", g.op("Pow", d, g.init(2.0)), axes=[-1])
        t = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.init(1e-5))))
        return g.op("Add", g.op("Mul", t, g.positive(hidden)), g.weights(hidden))

    def dim(t: str, k: int) -> str:
        return g.op(
            "Unsqueeze", g.op("Gather", g.op("Shape", t), g.const(k, np.int64), axis=0), axes=[0]
        )

    def split_heads(t: str, perm: list[int]) -> str:
        shape = g.op(
            "Concat",
            dim(t, 0),
            dim(t, 1),
            g.const([heads], np.int64),
            g.const([head], np.int64),
            axis=0,
        )
        return g.op("Transpose", g.op("Reshape", t, shape), perm=perm)

    h = layer_norm(x)
    qkv = g.op("Add", g.op("MatMul", h, g.weights(hidden, 3 * hidden)), g.weights(3 * hidden))
    q, k, v = g.op("Split", qkv, axis=2, split=[hidden] * 3, outputs=3)
    q, k, v = (
        split_heads(q, [0, 2, 1, 3]),
        split_heads(k, [0, 2, 3, 1]),
        split_heads(v, [0, 2, 1, 3]),
    )
    w = g.op("Div", g.op("MatMul", q, k), g.const(math.sqrt(head)))
    nd = g.op("Gather", g.op("Shape", w), g.const(2, np.int64), axis=0)
    ns = g.op("Gather", g.op("Shape", w), g.const(3, np.int64), axis=0)
    start = g.op("Unsqueeze", g.op("Sub", ns, nd), axes=[0])
    bias = np.tril(np.ones((ctx, ctx), np.float32)).reshape(1, 1, ctx, ctx)
    b = g.op("Slice", g.init(bias), start, g.op("Unsqueeze", ns, axes=[0]), g.ints(2))
    b = g.op("Slice", b, g.ints(0), g.op("Unsqueeze", ns, axes=[0]), g.ints(3))
    w = g.op("Sub", g.op("Mul", w, b), g.op("Mul", g.const(1e4), g.op("Sub", g.const(1.0), b)))
    a = g.op("MatMul", g.op("Softmax", w, axis=3), v)
    a = g.op("Transpose", a, perm=[0, 2, 1, 3])
    merged = g.op("Concat", dim(a, 0), dim(a, 1), g.const([hidden], np.int64), axis=0)
    a = g.op("Reshape", a, merged)
    x = g.op("Add", x, g.op("Add", g.op("MatMul", a, g.weights(hidden, hidden)), g.weights(hidden)))
    m = g.op(
        "Add", g.op("MatMul", layer_norm(x), g.weights(hidden, 4 * hidden)), g.weights(4 * hidden)
    )
    cube = g.op("Mul", g.op("Pow", m, g.const(3.0)), g.const(0.044715))
    inner = g.op("Mul", g.op("Add", m, cube), g.const(math.sqrt(2 / math.pi)))
    gelu = g.op("Mul", g.op("Mul", m, g.const(0.5)), g.op("Add", g.op("Tanh", inner), g.const(1.0)))
    return g.op(
        "Add",
        x,
        g.op("Add", g.op("MatMul", gelu, g.weights(4 * hidden, hidden)), g.weights(hidden)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("seq", [5, "seq"])
def test_gpt2_block(seq: int | str) -> None:
    """Token and position embeddings by Gather (positions by Range over the length from
    Shape, opset 11 for Range, or fed), one block, the logits by MatMul with the transposed
    token embedding."""
    g = _Graph()
    hidden, vocab, ctx = 8, 20, 16
    wte = g.weights(vocab, hidden)
    emb = g.op("Gather", wte, "input_ids", axis=0)
    length = g.op("Gather", g.op("Shape", "input_ids"), g.const(1, np.int64), axis=0)
    pos = g.op("Range", g.const(0, np.int64), length, g.const(1, np.int64))
    x = g.op("Add", emb, g.op("Gather", g.weights(ctx, hidden), pos, axis=0))
    x = _gpt2_block(g, x, hidden, 2, ctx)
    y = g.op("MatMul", x, g.op("Transpose", wte, perm=[1, 0]))
    model = g.model([graph_input("input_ids", [2, seq], I64)], [y], 11)
    ids = np.random.default_rng(3).integers(0, vocab, (2, 5)).astype(np.int64)
    _check(model, {"input_ids": ids})


def test_gpt2_attention_mask_where_and_constant_of_shape() -> None:
    """The padding mask as later GPT-2 exports build it: ConstantOfShape from the input's
    shape, Where(Equal(mask, 0), -1e4, 0) added to the scores."""
    g = _Graph()
    scores = g.op("MatMul", "q", g.op("Transpose", "q", perm=[0, 1, 3, 2]))
    zeros = g.op(
        "ConstantOfShape",
        g.op("Shape", "mask"),
        value=numpy_helper.from_array(np.zeros(1, np.int64)),
    )
    masked = g.op("Equal", "mask", zeros)
    add = g.op("Where", masked, g.const(-1e4), g.const(0.0))
    add = g.op("Unsqueeze", add, axes=[1, 2])
    y = g.op("Softmax", g.op("Add", scores, add), axis=3)
    model = g.model([graph_input("q", [2, 2, 4, 3]), graph_input("mask", [2, 4], I64)], [y], 10)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], np.int64)
    _check(model, {"q": _randn(2, 2, 4, 3), "mask": mask})


# ------------------------------------------------------------------- tf2onnx (NHWC, 10)


@pytest.mark.slow
def test_tf2onnx_nhwc_classifier_with_fused_batch_norm() -> None:
    """A tf.keras CNN through tf2onnx at opset 10: NHWC input transposed in, Conv with the
    explicit asymmetric pads of TF 'SAME' at stride 2, FusedBatchNorm as BatchNormalization,
    Relu6 as Clip-6 (attributes), Identity and Cast chains, Transpose back, global pooling
    by ReduceMean over H and W, Squeeze with an axes attribute."""
    g = _Graph()
    x = g.op("Transpose", "input_1:0", perm=[0, 3, 1, 2])
    x = g.op("Conv", x, g.weights(6, 3, 3, 3), g.weights(6), strides=[2, 2], pads=[0, 0, 1, 1])
    x = g.op("Clip", g.batch_norm(x, 6, epsilon=1e-3), min=0.0, max=6.0)
    x = g.op("Identity", g.op("Identity", x))
    x = g.op("Cast", g.op("Cast", x, to=TensorProto.DOUBLE), to=F)
    x = g.op("Conv", x, g.weights(6, 1, 3, 3), group=6, pads=[1, 1, 1, 1])
    x = g.op("Transpose", g.op("Relu", g.batch_norm(x, 6, epsilon=1e-3)), perm=[0, 2, 3, 1])
    x = g.op("ReduceMean", x, axes=[1, 2], keepdims=1)
    x = g.op("Squeeze", x, axes=[1, 2])
    y = g.op("Add", g.op("MatMul", x, g.weights(6, 4)), g.weights(4))
    model = g.model([graph_input("input_1:0", ["unk__5", 7, 7, 3])], [y], 10)
    _check(model, {"input_1:0": _randn(2, 7, 7, 3)})


def test_tf2onnx_lstm_cell_unrolled() -> None:
    """A TF LSTMCell unrolled over three steps as tf2onnx writes it without Loop: Concat of
    [x_t, h], MatMul with the fused kernel, Add bias, Split-2 into i, j, f, o, the forget
    bias added, Sigmoid/Tanh gates, ``c = f*c + i*j``, ``h = o * tanh(c)``; the steps sliced
    out of the [batch, time, features] input and squeezed (axes attributes)."""
    g = _Graph()
    units, feats = 4, 3
    kernel, bias = g.weights(feats + units, 4 * units), g.weights(4 * units)
    h = c = g.init(np.zeros((2, units)))
    for t in range(3):
        xt = g.op("Squeeze", g.op("Slice", "x", g.ints(t), g.ints(t + 1), g.ints(1)), axes=[1])
        z = g.op("Add", g.op("MatMul", g.op("Concat", xt, h, axis=1), kernel), bias)
        i, j, f, o = g.op("Split", z, axis=1, split=[units] * 4, outputs=4)
        f = g.op("Add", f, g.const(1.0))
        c = g.op(
            "Add",
            g.op("Mul", c, g.op("Sigmoid", f)),
            g.op("Mul", g.op("Sigmoid", i), g.op("Tanh", j)),
        )
        h = g.op("Mul", g.op("Tanh", c), g.op("Sigmoid", o))
    model = g.model([graph_input("x", [2, 3, feats])], [h, c], 10)
    _check(model, {"x": _randn(2, 3, feats)})


# ------------------------------------------------- the zoo's opset 3-6 files (Caffe2 era)


def _caffe2_era_classifier(opset: int) -> onnx.ModelProto:
    """bvlc_alexnet / resnet50 as converted from Caffe2 at opsets 3-6: Add with
    ``broadcast=1, axis=1`` of a [C] bias, BatchNormalization and Dropout with ``is_test=1``
    (``consumed_inputs`` at opset 3), Reshape-1 with its shape as an attribute, Gemm with
    ``broadcast=1``, Sum of three branches, Softmax; at opset 7 (onnxruntime runs nothing
    older) the same network in that opset's forms."""
    g = _Graph()
    old = opset < 7
    x = g.op("Conv", "data", g.weights(4, 3, 3, 3), kernel_shape=[3, 3], pads=[1] * 4)
    bias = g.weights(4)
    if old:
        x = g.op("Add", x, bias, broadcast=1, axis=1)
    else:
        x = g.op("Add", x, g.op("Unsqueeze", bias, axes=[1, 2]))
    legacy = {"is_test": 1} if old else {}
    if opset < 6:
        legacy["consumed_inputs"] = [0, 0, 0, 1, 1]
    x = g.op("Relu", g.batch_norm(x, 4, epsilon=1e-5, **legacy))
    x = g.op("Sum", x, g.op("Relu", x), g.op("Sigmoid", x))
    x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Dropout", x, ratio=0.5, **({"is_test": 1} if old else {}))
    # (Reshape-1 took the shape as an attribute.)
    x = g.op("Reshape", x, shape=[1, 64]) if opset < 5 else g.op("Reshape", x, g.ints(1, 64))
    x = g.op(
        "Gemm", x, g.weights(10, 64), g.weights(10), transB=1, **({"broadcast": 1} if old else {})
    )
    y = g.op("Softmax", x)
    return g.model([graph_input("data", [1, 3, 8, 8])], [y], opset, ir_version=3)


@pytest.mark.parametrize("opset", [3, 6])
def test_caffe2_era_classifier(opset: int) -> None:
    _check(
        _caffe2_era_classifier(opset),
        {"data": _randn(1, 3, 8, 8)},
        reference=_caffe2_era_classifier(7),
    )


def test_batch_norm_per_activation() -> None:
    """BatchNormalization-7 with ``spatial=0``: mean, variance, scale and bias per activation
    ([C, H, W]), as some converted Caffe models have after an InnerProduct."""
    g = _Graph()
    p = lambda: g.positive(2, 3, 3)  # noqa: E731
    y = g.op("BatchNormalization", "x", p(), g.weights(2, 3, 3), g.weights(2, 3, 3), p(), spatial=0)
    model = g.model([graph_input("x", [2, 2, 3, 3])], [y], 7)
    _check(model, {"x": _randn(2, 2, 3, 3)})


@pytest.mark.parametrize("opset", [7, 8])
def test_upsample_scales_attribute(opset: int) -> None:
    """Upsample-7 (scales as an attribute, nearest and bilinear 'linear'), Pad-2 edge."""
    g = _Graph()
    x = g.op("Pad", "x", mode="edge", pads=[0, 0, 1, 0, 0, 0, 0, 2])
    a = g.op("Upsample", x, scales=[1.0, 1.0, 2.0, 3.0], mode="nearest")
    b = g.op("Upsample", x, scales=[1.0, 1.0, 2.0, 2.0], mode="linear")
    model = g.model([graph_input("x", [1, 2, 3, 3])], [a, b], opset)
    _check(model, {"x": _randn(1, 2, 3, 3)})


# --------------------------------------------------- PaddlePaddle / MXNet / Keras quirks


def _quirky_model() -> onnx.ModelProto:
    """A small conv net with the converters' quirks: an unused initializer not listed as an
    input, an initializer also listed as a graph input (a default the caller may override),
    nodes without names and two nodes with one name, value_info whose dim_param names
    disagree with the input's, outputs declared with ``dim_value: 0`` or with no type, the
    default opset imported twice and an unused ``ai.onnx.ml`` import."""
    g = _Graph()
    w = g.weights(4, 3, 3, 3)
    g.init(np.ones((5, 5)))  # unused
    x = g.op("Conv", "x", w, g.weights(4), pads=[1] * 4)
    x = g.op("Relu", x)
    y1 = g.op("GlobalAveragePool", x)
    y2 = g.op("Mul", x, g.init(2.0))
    for n in g.nodes:
        n.name = ""
    g.nodes[1].name = g.nodes[2].name = "same"
    graph = helper.make_graph(
        g.nodes,
        "quirks",
        [graph_input("x", ["N", 3, 5, 5]), graph_input(w, [4, 3, 3, 3])],
        [
            helper.make_tensor_value_info(y1, F, [0, 0, 0, 0]),
            helper.make_empty_tensor_value_info(y2),
        ],
        g.inits,
        value_info=[helper.make_tensor_value_info(x, F, ["batch_size", 4, 5, 5])],
    )
    imports = [
        helper.make_opsetid("", 9),
        helper.make_opsetid("ai.onnx.ml", 1),
        helper.make_opsetid("", 9),
    ]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 4
    return model


def test_converter_quirks() -> None:
    model = _quirky_model()
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    reference.graph.node[2].name = "other"  # (onnxruntime refuses a repeated node name)
    _check(model, {"x": _randn(2, 3, 5, 5)}, reference=reference)
    # onnxruntime lets the caller override an initializer listed as an input; polyonnx
    # compiles it in as a constant and says so.
    w = model.graph.input[1].name
    feeds = {"x": _randn(2, 3, 5, 5), w: _randn(4, 3, 3, 3, seed=2)}
    with pytest.raises(polyonnx.InputError, match=rf"\['{w}'\] are initializers"):
        polyonnx.InferenceSession(model).run(None, feeds)


# ------------------------------------------------------------- MobileNetV2-7 / ShuffleNet-v2


@pytest.mark.slow
def test_mobilenetv2_opset7() -> None:
    """mobilenetv2-7: inverted residuals (1x1 expand, depthwise 3x3, 1x1 project) with
    ReLU6 as Clip-6 attributes, BatchNormalization after each conv, the residual Add, then
    GlobalAveragePool and the flatten as Shape -> Gather -> Unsqueeze-1 -> Concat -> Reshape,
    Gemm."""
    g = _Graph()

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> str:
        w = g.weights(cout, cin // group, k, k)
        x = g.op("Conv", x, w, strides=[stride] * 2, pads=[k // 2] * 4, group=group)
        return g.batch_norm(x, cout)

    x = g.op("Clip", conv_bn("input", 3, 8, 3, 2), min=0.0, max=6.0)
    for cin, cout, stride in ((8, 8, 1), (8, 12, 2)):
        t = g.op("Clip", conv_bn(x, cin, 4 * cin, 1), min=0.0, max=6.0)
        t = g.op("Clip", conv_bn(t, 4 * cin, 4 * cin, 3, stride, 4 * cin), min=0.0, max=6.0)
        t = conv_bn(t, 4 * cin, cout, 1)
        x = g.op("Add", x, t) if cin == cout and stride == 1 else t
    x = g.op("GlobalAveragePool", x)
    n = g.op("Unsqueeze", g.op("Gather", g.op("Shape", x), g.const(0, np.int64)), axes=[0])
    x = g.op("Reshape", x, g.op("Concat", n, g.const([-1], np.int64), axis=0))
    y = g.op("Gemm", x, g.weights(10, 12), g.weights(10), transB=1)
    model = g.model([graph_input("input", [2, 3, 12, 12])], [y], 7)
    _check(model, {"input": _randn(2, 3, 12, 12)})


@pytest.mark.slow
def test_shufflenet_v2_channel_shuffle() -> None:
    """shufflenet-v2-10: the unit's channel split by Split-2 (``split`` attribute) or by
    Slice-10 on axis 1, the branch's depthwise conv, Concat, and the channel shuffle as
    Reshape [N, 2, C/2, H, W] -> Transpose [0, 2, 1, 3, 4] -> Reshape [N, C, H, W]."""
    g = _Graph()
    c, hw = 8, 6
    x = "x"
    for k in range(2):
        if k == 0:
            a, b = g.op("Split", x, axis=1, split=[c // 2] * 2, outputs=2)
        else:
            a = g.op("Slice", x, g.ints(0), g.ints(c // 2), g.ints(1))
            b = g.op("Slice", x, g.ints(c // 2), g.ints(c), g.ints(1))
        b = g.op("Relu", g.batch_norm(g.op("Conv", b, g.weights(c // 2, c // 2, 1, 1)), c // 2))
        b = g.batch_norm(
            g.op("Conv", b, g.weights(c // 2, 1, 3, 3), group=c // 2, pads=[1] * 4), c // 2
        )
        b = g.op("Relu", g.batch_norm(g.op("Conv", b, g.weights(c // 2, c // 2, 1, 1)), c // 2))
        x = g.op("Concat", a, b, axis=1)
        x = g.op("Reshape", x, g.ints(2, 2, c // 2, hw, hw))
        x = g.op("Transpose", x, perm=[0, 2, 1, 3, 4])
        x = g.op("Reshape", x, g.ints(2, c, hw, hw))
    model = g.model([graph_input("x", [2, c, hw, hw])], [x], 10)
    _check(model, {"x": _randn(2, c, hw, hw)})


# ------------------------------------------------------------------ BERT-squad (opset 10)


@pytest.mark.slow
def test_bert_squad_encoder() -> None:
    """bertsquad-10: word, position and token-type embeddings by Gather, LayerNorm by hand,
    the attention mask as ``(1 - Cast(Unsqueeze(mask))) * -10000``, heads by Reshape with
    constant shapes, GELU by Erf, the start/end logits by a MatMul to 2 and Split-2 then
    Squeeze-1 (axes attribute)."""
    g = _Graph()
    hidden, heads, seq, vocab = 8, 2, 6, 30
    head = hidden // heads

    def layer_norm(t: str) -> str:
        mean = g.op("ReduceMean", t, axes=[-1])
        d = g.op("Sub", t, mean)
        var = g.op("ReduceMean", g.op("Mul", d, d), axes=[-1])
        t = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-12))))
        return g.op("Add", g.op("Mul", t, g.positive(hidden)), g.weights(hidden))

    def dense(t: str, n_in: int, n_out: int) -> str:
        return g.op("Add", g.op("MatMul", t, g.weights(n_in, n_out)), g.weights(n_out))

    x = g.op("Gather", g.weights(vocab, hidden), "input_ids", axis=0)
    x = g.op("Add", x, g.op("Gather", g.weights(2, hidden), "segment_ids", axis=0))
    x = g.op("Add", x, g.init(g.rng.standard_normal((seq, hidden)) * 0.1))
    x = layer_norm(x)
    mask = g.op("Cast", g.op("Unsqueeze", "input_mask", axes=[1, 2]), to=F)
    mask = g.op("Mul", g.op("Sub", g.const(1.0), mask), g.const(-10000.0))

    def heads_of(t: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", t, g.ints(0, 0, heads, head)), perm=perm)

    q = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    k = heads_of(dense(x, hidden, hidden), [0, 2, 3, 1])
    v = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    s = g.op("Add", g.op("Mul", g.op("MatMul", q, k), g.const(1 / math.sqrt(head))), mask)
    a = g.op("MatMul", g.op("Softmax", s, axis=-1), v)
    a = g.op("Reshape", g.op("Transpose", a, perm=[0, 2, 1, 3]), g.ints(0, 0, hidden))
    x = layer_norm(g.op("Add", x, dense(a, hidden, hidden)))
    m = dense(x, hidden, 4 * hidden)
    erf = g.op("Erf", g.op("Div", m, g.const(math.sqrt(2.0))))
    m = g.op("Mul", g.op("Mul", m, g.op("Add", erf, g.const(1.0))), g.const(0.5))
    x = layer_norm(g.op("Add", x, dense(m, 4 * hidden, hidden)))
    logits = dense(x, hidden, 2)
    start, end = g.op("Split", logits, axis=2, split=[1, 1], outputs=2)
    start, end = g.op("Squeeze", start, axes=[2]), g.op("Squeeze", end, axes=[2])
    inputs = [
        graph_input("input_ids", ["batch", seq], I64),
        graph_input("segment_ids", ["batch", seq], I64),
        graph_input("input_mask", ["batch", seq], I64),
    ]
    model = g.model(inputs, [start, end], 10)
    rng = np.random.default_rng(4)
    mask = np.ones((2, seq), np.int64)
    mask[1, 4:] = 0
    feeds = {
        "input_ids": rng.integers(0, vocab, (2, seq)).astype(np.int64),
        "segment_ids": (np.arange(seq) >= 3).astype(np.int64)[None].repeat(2, 0),
        "input_mask": mask,
    }
    _check(model, feeds)


# ------------------------------------------------------------------ BiDAF-style (opset 9)


@pytest.mark.slow
def test_bidaf_style_span_selection() -> None:
    """bidaf-9's numeric part: context-query similarity by MatMul, Softmax-1 over the query
    (axis 2 of 3-D), ReduceMax-1 (axes attribute), Hardmax-1 on the input coerced to 2-D,
    Compress by a constant mask, ArgMax of the start scores and the positions after it by
    Greater on a constant position vector."""
    g = _Graph()
    sim = g.op("MatMul", "context", g.op("Transpose", "query", perm=[0, 2, 1]))
    c2q = g.op("MatMul", g.op("Softmax", sim, axis=2), "query")
    q2c = g.op("Softmax", g.op("ReduceMax", sim, axes=[2], keepdims=0), axis=1)
    hard = g.op("Hardmax", sim, axis=1)
    kept = g.op("Compress", "context", g.init([True, False, True, True, False, True], bool), axis=1)
    fused = g.op("Concat", "context", c2q, axis=2)
    start = g.op("ReduceSum", g.op("MatMul", fused, g.weights(8, 1)), axes=[2], keepdims=0)
    best = g.op("Cast", g.op("ArgMax", start, axis=1, keepdims=1), to=F)
    after = g.op("Cast", g.op("Greater", g.init(np.arange(6.0)), best), to=F)
    model = g.model(
        [graph_input("context", [2, 6, 4]), graph_input("query", [2, 3, 4])],
        [c2q, q2c, hard, kept, after],
        9,
    )
    _check(model, {"context": _randn(2, 6, 4), "query": _randn(2, 3, 4, seed=2)})


# ------------------------------------------------------------- YOLOv3-10 / DUC / FCN


@pytest.mark.slow
def test_yolov3_route_upsample_and_nms() -> None:
    """yolov3-10: the route's Resize-10 (nearest, scales input) Concat-ed with an earlier
    feature map, box scores reshaped and transposed, NonMaxSuppression-10 with
    ``center_point_box`` on [1, A, 4] boxes and [1, 1, A] scores; its selected indices are an
    output of the model, as in the zoo file (a node reading them is refused: their count is
    known only at run time)."""
    g = _Graph()
    x = g.op("LeakyRelu", g.op("Conv", "input_1", g.weights(4, 3, 3, 3), pads=[1] * 4), alpha=0.1)
    deep = g.op("Conv", x, g.weights(4, 4, 3, 3), strides=[2, 2], pads=[1] * 4)
    up = g.op("Resize", deep, g.init([1.0, 1.0, 2.0, 2.0]), mode="nearest")
    x = g.op("Concat", up, x, axis=1)
    head = g.op("Conv", x, g.weights(5, 8, 1, 1), g.weights(5))  # [1, 5, 8, 8]: 4 box + score
    head = g.op("Transpose", g.op("Reshape", head, g.ints(1, 5, 64)), perm=[0, 2, 1])
    boxes = g.op("Slice", head, g.ints(0), g.ints(4), g.ints(2))
    scores = g.op(
        "Transpose",
        g.op("Sigmoid", g.op("Slice", head, g.ints(4), g.ints(5), g.ints(2))),
        perm=[0, 2, 1],
    )
    selected = g.op(
        "NonMaxSuppression",
        boxes,
        scores,
        g.ints(10),
        g.init([0.5]),
        g.init([0.3]),
        center_point_box=1,
    )
    model = g.model([graph_input("input_1", [1, 3, 8, 8])], [up, boxes, scores, selected], 10)
    model.graph.output[3].type.tensor_type.elem_type = I64
    _check(model, {"input_1": _randn(1, 3, 8, 8)})


@pytest.mark.slow
def test_duc_dilated_and_pixel_shuffle() -> None:
    """ResNet101-DUC-7: dilated 3x3 convs (dilation 2 and 4, pads equal), the dense
    upsampling convolution to r*r*classes channels, Reshape [N, classes, r*r, H*W] -> ...
    back to [N, classes, H*r, W*r] by Reshape/Transpose, then Softmax over classes (opset
    7: coerced to 2-D at axis 1)."""
    g = _Graph()
    r, hw, classes = 2, 6, 3
    x = g.op("Relu", g.op("Conv", "data", g.weights(4, 3, 3, 3), pads=[1] * 4))
    x = g.op("Relu", g.op("Conv", x, g.weights(4, 4, 3, 3), dilations=[2, 2], pads=[2] * 4))
    x = g.op("Relu", g.op("Conv", x, g.weights(4, 4, 3, 3), dilations=[4, 4], pads=[4] * 4))
    x = g.op(
        "Conv", x, g.weights(classes * r * r, 4, 3, 3), g.weights(classes * r * r), pads=[1] * 4
    )
    x = g.op("Reshape", x, g.ints(1, classes, r, r, hw, hw))
    x = g.op("Transpose", x, perm=[0, 1, 4, 2, 5, 3])
    x = g.op("Reshape", x, g.ints(1, classes, hw * r, hw * r))
    y = g.op("Softmax", x, axis=1)
    model = g.model([graph_input("data", [1, 3, hw, hw])], [y], 7)
    _check(model, {"data": _randn(1, 3, hw, hw)})


def test_fcn_resize_to_input_size() -> None:
    """fcn-resnet50-11: the classifier's output resized (linear, pytorch_half_pixel) to the
    input's H and W read by Shape -> Slice -> Concat with N and C as ``sizes``."""
    g = _Graph()
    x = g.op("Relu", g.op("Conv", "input", g.weights(4, 3, 3, 3), strides=[2, 2], pads=[1] * 4))
    x = g.op("Conv", x, g.weights(3, 4, 1, 1), g.weights(3))
    hw = g.op("Slice", g.op("Shape", "input"), g.ints(2), g.ints(4))
    nc = g.op("Slice", g.op("Shape", x), g.ints(0), g.ints(2))
    sizes = g.op("Concat", nc, hw, axis=0)
    y = g.op(
        "Resize",
        x,
        g.init(np.zeros(0)),
        g.init(np.zeros(0)),
        sizes,
        mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    model = g.model([graph_input("input", [1, 3, 9, 11])], [y], 11)
    _check(model, {"input": _randn(1, 3, 9, 11)})
