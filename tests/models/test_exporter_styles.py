"""Small models in the idioms of the exporters polyonnx's users run it on, built here with
``onnx.helper`` (tf2onnx/keras2onnx, PyTorch's TorchScript and dynamo exporters, paddle2onnx,
HF/optimum transformer exports), compiled natively and compared with onnxruntime.

Each exporter writes the same network differently: NHWC transposes around convolutions,
shapes computed at run time by Shape/Gather/Concat chains, Constant nodes instead of
initializers, operands that moved from attributes to inputs across opsets, local functions,
graphs without value_info or output shapes. The models are tiny: what is tested is that the
idiom imports, folds and runs, not speed."""

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
    """Nodes, initializers and Constant nodes of a model under construction (tf2onnx, dynamo
    and paddle2onnx keep weights as initializers)."""

    def const(self, array: np.ndarray | Sequence[float] | float, dtype: object = np.float32) -> str:
        """A Constant node (TorchScript writes shapes and small tensors this way)."""
        name = self._name("c")
        value = numpy_helper.from_array(np.asarray(array, dtype), name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name], value=value))
        return name

    def weights(self, *shape: int, const: bool = False) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        array = self.rng.standard_normal(shape) / math.sqrt(fan_in)
        return self.const(array) if const else self.init(array)

    def model(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[str],
        opset: int,
        *,
        functions: Sequence[onnx.FunctionProto] = (),
        extra_opsets: Mapping[str, int] | None = None,
        infer: bool = False,
    ) -> onnx.ModelProto:
        """The model; outputs are declared with an element type only (as dynamo and many
        converters write them) unless ``infer`` runs onnx's shape inference over it."""
        graph = helper.make_graph(
            self.nodes,
            "exported",
            list(inputs),
            [helper.make_tensor_value_info(o, F, None) for o in outputs],
            self.inits,
        )
        opsets = [helper.make_opsetid("", opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
        model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
        model.ir_version = 8 if opset < 19 else 9
        return onnx.shape_inference.infer_shapes(model) if infer else model


def _check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """polyonnx's outputs equal onnxruntime's on ``feeds``."""
    want = onnxruntime_outputs(model, feeds)
    sess = polyonnx.InferenceSession(model, input_shapes=input_shapes)
    got = sess.run(None, dict(feeds))
    assert_close(got, want, rtol=RTOL, atol=ATOL)


def _randn(*shape: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ tf2onnx / keras2onnx


def _nhwc_conv_block(opset: int, batch: int | str) -> onnx.ModelProto:
    """Keras conv block as tf2onnx writes it: NHWC input, Transpose to NCHW around the Conv,
    an explicit Pad (pads as an input), BatchNorm unfolded as Mul+Add on [C] constants in
    NHWC, ReLU6 as Clip with min/max inputs, global average pooling as ReduceMean over axes
    [1, 2], Dense as MatMul+Add, Softmax on the last axis."""
    g = _Graph()
    x = g.op("Transpose", "x", perm=[0, 3, 1, 2])
    pads = g.init([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
    if opset >= 18:
        x = g.op("Pad", x, pads, g.init(0.0), mode="constant")
    else:
        x = g.op("Pad", x, pads, mode="constant")
    x = g.op("Conv", x, g.weights(8, 3, 3, 3), g.weights(8), strides=[1, 1])
    x = g.op("Transpose", x, perm=[0, 2, 3, 1])
    x = g.op("Mul", x, g.init(g.rng.uniform(0.5, 1.5, 8)))
    x = g.op("Add", x, g.init(g.rng.standard_normal(8)))
    x = g.op("Clip", x, g.init(0.0), g.init(6.0))
    if opset >= 18:
        x = g.op("ReduceMean", x, g.init([1, 2], np.int64), keepdims=0)
    else:
        x = g.op("ReduceMean", x, axes=[1, 2], keepdims=0)
    x = g.op("MatMul", x, g.weights(8, 5))
    x = g.op("Add", x, g.weights(5))
    y = g.op("Softmax", x, axis=-1)
    return g.model([graph_input("x", [batch, 6, 6, 3])], [y], opset)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_tf2onnx_nhwc_conv_block(opset: int) -> None:
    _check(_nhwc_conv_block(opset, 2), {"x": _randn(2, 6, 6, 3)})


@pytest.mark.parametrize("batch", ["unk__123", "N"])
def test_tf2onnx_symbolic_batch(batch: str) -> None:
    model = _nhwc_conv_block(13, batch)
    _check(model, {"x": _randn(3, 6, 6, 3)})


def test_tf2onnx_symbolic_batch_fixed_at_compile() -> None:
    model = _nhwc_conv_block(13, "unk__7")
    _check(model, {"x": _randn(2, 6, 6, 3)}, input_shapes={"x": (2, 6, 6, 3)})


def test_tf2onnx_pad_axes_opset18() -> None:
    """Pad with an ``axes`` input (opset 18): pads listed for the named axes only, one
    negative."""
    g = _Graph()
    x = g.op("Pad", "x", g.init([1, 2, 0, 1], np.int64), g.init(0.5), g.init([-1, 2], np.int64))
    x = g.op("Conv", x, g.weights(4, 2, 3, 3))
    y = g.op("Relu", x)
    _check(g.model([graph_input("x", [1, 2, 5, 5])], [y], 18), {"x": _randn(1, 2, 5, 5)})


def test_tf2onnx_reshape_from_shape_chain() -> None:
    """Flatten as tf2onnx writes it for a dynamic batch: Shape -> Gather(0) -> Unsqueeze ->
    Concat with [-1] -> Reshape; Squeeze/Unsqueeze with axes inputs (opset 13)."""
    g = _Graph()
    shape = g.op("Shape", "x")
    n = g.op("Gather", shape, g.init(0, np.int64), axis=0)
    n1 = g.op("Unsqueeze", n, g.init([0], np.int64))
    target = g.op("Concat", n1, g.init([-1], np.int64), axis=0)
    x = g.op("Reshape", "x", target)
    x = g.op("MatMul", x, g.weights(32, 6))
    x = g.op("Add", x, g.weights(6))
    x = g.op("Unsqueeze", x, g.init([1, 2], np.int64))
    x = g.op("Mul", x, g.op("Sigmoid", x))  # swish
    y = g.op("Squeeze", x, g.init([1, 2], np.int64))
    model = g.model([graph_input("x", ["unk__12", 4, 4, 2])], [y], 13)
    _check(model, {"x": _randn(3, 4, 4, 2)})


def test_tf2onnx_names_and_nhwc_depthwise() -> None:
    """tf2onnx keeps TensorFlow's names (``serving_default_input_1:0``, ``.../Conv2D:0``,
    slashes, spaces, semicolons) and writes Keras' DepthwiseConv2D as a grouped Conv between
    NHWC transposes; Conv1D the same with [0, 2, 1]."""
    g = _Graph()
    x_name = "serving_default_input_1:0"
    x = g.op("Transpose", x_name, perm=[0, 3, 1, 2])
    x = g.op("Conv", x, g.weights(4, 1, 3, 3), group=4, pads=[1, 1, 1, 1])
    g.nodes.append(
        helper.make_node(
            "Transpose",
            [x],
            ["StatefulPartitionedCall/model/depthwise conv2d/BiasAdd;Conv2D:0"],
            "StatefulPartitionedCall/model/depthwise_conv2d/BiasAdd__6",
            perm=[0, 2, 3, 1],
        )
    )
    model = g.model(
        [graph_input(x_name, ["unk__6", 5, 5, 4])],
        ["StatefulPartitionedCall/model/depthwise conv2d/BiasAdd;Conv2D:0"],
        13,
    )
    _check(model, {x_name: _randn(2, 5, 5, 4)})


def test_keras_lstm_last_state() -> None:
    """Keras LSTM(return_sequences=False): batch-major input transposed to time-major, the
    last hidden state squeezed out of LSTM's Y_h."""
    g = _Graph()
    x = g.op("Transpose", "x", perm=[1, 0, 2])
    w, r, b = g.weights(1, 16, 3), g.weights(1, 16, 4), g.weights(1, 32)
    _, h, _ = g.op("LSTM", x, w, r, b, hidden_size=4, outputs=3)
    y = g.op("Squeeze", h, g.init([0], np.int64))
    _check(g.model([graph_input("x", [2, 5, 3])], [y], 13), {"x": _randn(2, 5, 3)})


# --------------------------------------------------------------- PyTorch TorchScript exporter


def _torchscript_classifier(opset: int) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm(transB=1) with every weight a Constant
    node, an Identity, Dropout in inference, a Cast chain."""
    g = _Graph()
    x = g.op("Conv", "input.1", g.weights(4, 3, 3, 3, const=True), g.weights(4, const=True))
    x = g.op("Relu", x)
    x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Identity", x)
    x = g.op("Flatten", x, axis=1)
    # (the ratio became an input at opset 12)
    x = g.op("Dropout", x, g.const(0.1)) if opset >= 12 else g.op("Dropout", x, ratio=0.1)
    x = g.op("Gemm", x, g.weights(10, 36, const=True), g.weights(10, const=True), transB=1)
    x = g.op("Cast", x, to=TensorProto.DOUBLE)
    y = g.op("Cast", x, to=F)
    return g.model([graph_input("input.1", [2, 3, 8, 8])], [y], opset)


@pytest.mark.parametrize("opset", [9, 11, 13, 17])
def test_torchscript_classifier(opset: int) -> None:
    _check(_torchscript_classifier(opset), {"input.1": _randn(2, 3, 8, 8)})


def test_torchscript_expand_with_where_equal() -> None:
    """``x.expand(-1, 4, -1)`` as TorchScript exports it: the target shape from a Constant,
    ``Where(Equal(shape, -1), ConstantOfShape(...), shape)`` for the -1s, then Expand; and
    ``x.view(x.size(0), -1)`` from Shape/Gather/Unsqueeze/Concat."""
    g = _Graph()
    target = g.const([-1, 4, -1], np.int64)
    ones = g.op(
        "ConstantOfShape",
        g.const([3], np.int64),
        value=numpy_helper.from_array(np.array([1], np.int64)),
    )
    minus = g.op("Mul", ones, g.const(-1, np.int64))
    is_minus = g.op("Equal", target, minus)
    shape = g.op("Where", is_minus, ones, target)
    x = g.op("Expand", "x", shape)
    n = g.op("Gather", g.op("Shape", x), g.const(0, np.int64), axis=0)
    view = g.op(
        "Concat",
        g.op("Unsqueeze", n, axes=[0]),
        g.op("Unsqueeze", g.const(-1, np.int64), axes=[0]),
        axis=0,
    )
    x = g.op("Reshape", x, view)
    y = g.op("Add", x, g.weights(20, const=True))
    _check(g.model([graph_input("x", [2, 1, 5])], [y], 11), {"x": _randn(2, 1, 5)})


def test_torchscript_upsample_opset9() -> None:
    """nn.Upsample(scale_factor=2) at opset 9: Upsample with a scales input."""
    g = _Graph()
    x = g.op("Upsample", "x", g.const([1, 1, 2, 2]), mode="nearest")
    y = g.op("Conv", x, g.weights(2, 2, 1, 1, const=True))
    _check(g.model([graph_input("x", [1, 2, 3, 3])], [y], 9), {"x": _randn(1, 2, 3, 3)})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_torchscript_resize_scales(opset: int, mode: str) -> None:
    """F.interpolate(scale_factor=2) at opsets 11 and 13: Resize with an empty roi (a
    Constant at 11, the empty name at 13) and scales."""
    g = _Graph()
    roi = g.const(np.zeros(0, np.float32)) if opset == 11 else ""
    coord = "asymmetric" if mode == "nearest" else "pytorch_half_pixel"
    attrs = {"nearest_mode": "floor"} if mode == "nearest" else {}
    x = g.op(
        "Resize",
        "x",
        roi,
        g.const([1.0, 1.0, 2.0, 2.0]),
        mode=mode,
        coordinate_transformation_mode=coord,
        **attrs,
    )
    y = g.op("Relu", x)
    _check(g.model([graph_input("x", [1, 2, 3, 4])], [y], opset), {"x": _randn(1, 2, 3, 4)})


def test_torchscript_initializers_listed_as_inputs() -> None:
    """IR version 3 (``keep_initializers_as_inputs=True``): every weight is also a graph
    input; they are constants, not inputs the caller feeds."""
    g = _Graph()
    w, b = g.weights(4, 3), g.weights(4)
    y = g.op("Gemm", "x", w, b, transB=1)
    model = g.model([graph_input("x", [2, 3]), graph_input(w, [4, 3]), graph_input(b, [4])], [y], 9)
    model.ir_version = 3
    _check(model, {"x": _randn(2, 3)})


def test_torchscript_slicing_and_layernorm_by_hand() -> None:
    """``x[:, 1:]`` as Slice to INT64_MAX, ``x.flip(-1)`` as Slice with step -1 to -INT64_MAX,
    and LayerNorm decomposed (ReduceMean, Sub, Pow, Sqrt, Div) as opsets before 17 export
    it; Constant nodes with ``value_float(s)`` / ``value_int(s)``."""
    big = 2**63 - 1
    g = _Graph()
    x = g.op("Slice", "x", g.const([1], np.int64), g.const([big], np.int64), g.const([1], np.int64))
    x = g.op(
        "Slice",
        x,
        g.const([-1], np.int64),
        g.const([-big], np.int64),
        g.const([2], np.int64),
        g.const([-1], np.int64),
    )
    g.nodes.append(helper.make_node("Constant", [], ["two"], value_float=2.0))
    g.nodes.append(helper.make_node("Constant", [], ["eps"], value_floats=[1e-5]))
    g.nodes.append(helper.make_node("Constant", [], ["last"], value_ints=[-1]))
    mean = g.op("ReduceMean", x, axes=[-1])
    d = g.op("Sub", x, mean)
    var = g.op("ReduceMean", g.op("Pow", d, "two"), axes=[-1])
    x = g.op("Div", d, g.op("Sqrt", g.op("Add", var, "eps")))
    x = g.op("Add", g.op("Mul", x, g.weights(8, const=True)), g.weights(8, const=True))
    y = g.op("Reshape", x, g.op("Concat", g.const([2], np.int64), "last", axis=0))
    _check(g.model([graph_input("x", [2, 4, 8])], [y], 13), {"x": _randn(2, 4, 8)})


# ----------------------------------------------------------- PyTorch dynamo exporter (18+)


def _gelu_erf(g: _Graph, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2))), as torch decomposes F.gelu."""
    e = g.op("Erf", g.op("Div", x, g.init(math.sqrt(2.0))))
    return g.op("Mul", g.op("Mul", x, g.init(0.5)), g.op("Add", e, g.init(1.0)))


def test_dynamo_mlp_block() -> None:
    """LayerNormalization, Gelu as Erf, ReduceMean with an axes input, Split with
    ``num_outputs`` (opset 18); no value_info, outputs without shapes."""
    g = _Graph()
    x = g.op("LayerNormalization", "x", g.weights(16), g.weights(16), axis=-1, epsilon=1e-5)
    x = g.op("Add", g.op("MatMul", x, g.weights(16, 32)), g.weights(32))
    x = _gelu_erf(g, x)
    a, b = g.op("Split", x, axis=-1, num_outputs=2, outputs=2)
    x = g.op("Mul", a, g.op("Sigmoid", b))
    m = g.op("ReduceMean", x, g.init([-1], np.int64), keepdims=1)
    y = g.op("Sub", x, m)
    _check(g.model([graph_input("x", [2, 3, 16])], [y], 18), {"x": _randn(2, 3, 16)})


def _linear_function(domain: str) -> onnx.FunctionProto:
    """A local function as dynamo writes a submodule: inputs x, weight, bias."""
    nodes = [
        helper.make_node("Transpose", ["weight"], ["wt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "wt"], ["xw"]),
        helper.make_node("Add", ["xw", "bias"], ["out"]),
    ]
    return helper.make_function(
        domain,
        "torch_nn_modules_linear_Linear_fc1_1",
        ["x", "weight", "bias"],
        ["out"],
        nodes,
        [helper.make_opsetid("", 18)],
    )


def test_dynamo_local_functions() -> None:
    """Submodules as model-local functions in a ``pkg.torch...`` domain, called twice."""
    domain = "pkg.torch.2.5.0+cpu"
    fn = _linear_function(domain)
    g = _Graph()
    w1, b1, w2, b2 = g.weights(8, 6), g.weights(8), g.weights(4, 8), g.weights(4)
    x = g.op(fn.name, "x", w1, b1, domain=domain)
    x = g.op("Relu", x)
    y = g.op(fn.name, x, w2, b2, domain=domain)
    model = g.model([graph_input("x", [3, 6])], [y], 18, functions=[fn], extra_opsets={domain: 1})
    _check(model, {"x": _randn(3, 6)})


def test_dynamo_function_attribute_defaults_and_nesting() -> None:
    """A local function whose attribute has a default (``attribute_proto``), called with and
    without it, from inside another local function."""
    domain = "pkg.torch.2.5.0+cpu"
    leaky = helper.make_node("LeakyRelu", ["t"], ["y"])
    leaky.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    act = helper.make_function(
        domain, "act", ["t"], ["y"], [leaky], [helper.make_opsetid("", 18)], attributes=[]
    )
    act.attribute_proto.append(helper.make_attribute("alpha", 0.25))
    block = helper.make_function(
        domain,
        "block",
        ["x", "w"],
        ["y"],
        [
            helper.make_node("MatMul", ["x", "w"], ["t"]),
            helper.make_node("act", ["t"], ["y"], domain=domain),
        ],
        [helper.make_opsetid("", 18), helper.make_opsetid(domain, 1)],
    )
    g = _Graph()
    w = g.weights(3, 3)
    x = g.op("block", "x", w, domain=domain)
    y = g.op("act", x, domain=domain, alpha=0.5)
    model = g.model(
        [graph_input("x", [2, 3])], [y], 18, functions=[act, block], extra_opsets={domain: 1}
    )
    _check(model, {"x": _randn(2, 3)})


def test_dynamo_input_without_shape() -> None:
    """A graph input with an element type and no shape: its shape comes from the feed."""
    g = _Graph()
    y = g.op("Mul", "x", g.op("Sigmoid", "x"))
    model = g.model([helper.make_tensor_value_info("x", F, None)], [y], 18)
    _check(model, {"x": _randn(2, 3)})


# --------------------------------------------------------- transformer attention (HF/optimum)


def _attention(batch: int | str, seq: int, heads: int, head_dim: int) -> onnx.ModelProto:
    """Self-attention as HF models export: Q/K/V projections, heads split by Reshape to
    [B, S, H, D] + Transpose, MatMul(Q, Transpose(K)), Div by sqrt(D), Add of an additive
    mask built from a [B, S] int64 attention mask, Softmax, MatMul with V, heads merged."""
    g = _Graph()
    hidden = heads * head_dim
    split = g.init([0, 0, heads, head_dim], np.int64)  # Reshape's 0 copies B and S

    def heads_of(w: str, b: str, perm: list[int]) -> str:
        p = g.op("Add", g.op("MatMul", "hidden", w), b)
        return g.op("Transpose", g.op("Reshape", p, split), perm=perm)

    q = heads_of(g.weights(hidden, hidden), g.weights(hidden), [0, 2, 1, 3])
    k = heads_of(g.weights(hidden, hidden), g.weights(hidden), [0, 2, 3, 1])
    v = heads_of(g.weights(hidden, hidden), g.weights(hidden), [0, 2, 1, 3])
    scores = g.op("Div", g.op("MatMul", q, k), g.init(math.sqrt(head_dim)))
    mask = g.op("Unsqueeze", "attention_mask", g.init([1, 2], np.int64))
    mask = g.op("Cast", mask, to=F)
    mask = g.op("Mul", g.op("Sub", g.init(1.0), mask), g.init(-10000.0))
    probs = g.op("Softmax", g.op("Add", scores, mask), axis=-1)
    ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", ctx, g.init([0, 0, hidden], np.int64))
    y = g.op("Add", g.op("MatMul", ctx, g.weights(hidden, hidden)), g.weights(hidden))
    inputs = [
        graph_input("hidden", [batch, seq, hidden]),
        graph_input("attention_mask", [batch, seq], I64),
    ]
    return g.model(inputs, [y], 14)


@pytest.mark.parametrize("batch", [1, 2])
def test_hf_attention(batch: int) -> None:
    mask = np.ones((batch, 5), np.int64)
    mask[-1, 3:] = 0
    feeds = {"hidden": _randn(batch, 5, 8), "attention_mask": mask}
    _check(_attention(batch, 5, 2, 4), feeds)


def test_hf_attention_symbolic_batch() -> None:
    mask = np.ones((2, 5), np.int64)
    mask[0, 4:] = 0
    feeds = {"hidden": _randn(2, 5, 8), "attention_mask": mask}
    _check(_attention("batch_size", 5, 2, 4), feeds)


def test_hf_attention_symbolic_batch_and_sequence() -> None:
    mask = np.ones((2, 7), np.int64)
    mask[0, 5:] = 0
    feeds = {"hidden": _randn(2, 7, 8), "attention_mask": mask}
    _check(_attention("batch_size", "sequence_length", 2, 4), feeds)


def test_hf_embeddings_and_causal_mask() -> None:
    """Token embeddings by Gather on int64 ids, positions by Range over the sequence length
    read with Shape/Gather, a causal mask from Trilu + Where(-inf), a padding mask as
    ``(1 - mask) * finfo.min``, Softmax over rows that are partly or wholly masked."""
    g = _Graph()
    emb = g.op("Gather", g.weights(20, 4), "input_ids", axis=0)
    seq = g.op("Gather", g.op("Shape", "input_ids"), g.init(1, np.int64), axis=0)
    pos = g.op("Range", g.init(0, np.int64), seq, g.init(1, np.int64))
    x = g.op("Add", emb, g.op("Gather", g.weights(8, 4), pos, axis=0))
    scores = g.op("MatMul", x, g.op("Transpose", x, perm=[0, 2, 1]))
    square = g.op(
        "Concat",
        g.op("Unsqueeze", seq, g.init([0], np.int64)),
        g.op("Unsqueeze", seq, g.init([0], np.int64)),
        axis=0,
    )
    ones = g.op(
        "ConstantOfShape", square, value=numpy_helper.from_array(np.array([1.0], np.float32))
    )
    future = g.op("Equal", g.op("Trilu", ones, upper=0), g.init(0.0))
    scores = g.op("Where", future, g.init(-np.inf), scores)
    pad = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.init([1], np.int64)), to=F)
    pad = g.op("Mul", g.op("Sub", g.init(1.0), pad), g.init(np.finfo(np.float32).min))
    y = g.op("Softmax", g.op("Add", scores, pad), axis=-1)
    inputs = [
        graph_input("input_ids", ["batch", "seq"], I64),
        graph_input("attention_mask", ["batch", "seq"], I64),
    ]
    model = g.model(inputs, [y], 14)
    ids = np.array([[1, 5, 7, 2], [2, 0, 19, 3]], np.int64)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], np.int64)
    _check(model, {"input_ids": ids, "attention_mask": mask})


# ------------------------------------------------------------------------- paddle2onnx


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_paddle_conv_auto_pad(auto_pad: str) -> None:
    """Conv with explicit ``auto_pad`` (stride 2, so SAME_UPPER and SAME_LOWER differ), then
    HardSwish and HardSigmoid."""
    g = _Graph()
    x = g.op("Conv", "x", g.weights(4, 2, 3, 3), g.weights(4), strides=[2, 2], auto_pad=auto_pad)
    x = g.op("HardSwish", x)
    y = g.op("HardSigmoid", x, alpha=0.2, beta=0.5)
    _check(g.model([graph_input("x", [1, 2, 6, 6])], [y], 14), {"x": _randn(1, 2, 6, 6)})


def test_paddle_resize_sizes_and_concat() -> None:
    """Resize to ``sizes`` (roi and scales empty), Concat of many branches."""
    g = _Graph()
    up = g.op(
        "Resize",
        "x",
        "",
        "",
        g.init([1, 2, 8, 8], np.int64),
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    branches = [g.op("Conv", up, g.weights(2, 2, 1, 1)) for _ in range(5)]
    branches.append(g.op("Relu", up))
    y = g.op("Concat", *branches, axis=1)
    _check(g.model([graph_input("x", [1, 2, 4, 4])], [y], 13), {"x": _randn(1, 2, 4, 4)})


# ------------------------------------------------------------------- graphs' own quirks


def test_outputs_that_repeat_a_name_or_return_an_input() -> None:
    """Converters list one value twice among the outputs, or return an input as an output
    (a pass-through): each output is filled."""
    g = _Graph()
    y = g.op("Relu", g.op("MatMul", "x", g.weights(3, 3)))
    _check(g.model([graph_input("x", [2, 3])], [y, y, "x"], 13), {"x": _randn(2, 3)})


def test_opset11_softmax_and_hardmax_coerce_to_2d() -> None:
    """Before opset 13, Softmax and Hardmax work on the input flattened at ``axis``."""
    g = _Graph()
    a = g.op("Softmax", "x", axis=1)
    b = g.op("Hardmax", "x", axis=1)
    _check(g.model([graph_input("x", [2, 3, 4])], [a, b], 11), {"x": _randn(2, 3, 4)})


def test_default_domain_written_ai_onnx() -> None:
    g = _Graph()
    y = g.op("Relu", g.op("Add", "x", g.init(1.0), domain="ai.onnx"), domain="ai.onnx")
    graph = helper.make_graph(
        g.nodes,
        "g",
        [graph_input("x", [2, 3])],
        [helper.make_tensor_value_info(y, F, None)],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx", 13)])
    model.ir_version = 8
    _check(model, {"x": _randn(2, 3)})


def test_contrib_op_is_refused_by_name() -> None:
    """optimum's onnxruntime-optimised exports use com.microsoft ops (onnxruntime's own
    kernels, not ONNX): refused naming the op and node."""
    g = _Graph()
    y = g.op("FastGelu", "x", g.weights(8), domain="com.microsoft")
    model = g.model([graph_input("x", [2, 8])], [y], 14, extra_opsets={"com.microsoft": 1})
    with pytest.raises(
        polyonnx.UnsupportedOpError, match=r"com\.microsoft\.FastGelu \(node 'FastGelu"
    ):
        polyonnx.InferenceSession(model)
