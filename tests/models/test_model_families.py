"""Small models in the idioms of model families polyonnx's users run it on, other than those
of tests/models/test_exporter_styles.py: detection heads (YOLO decode, TopK post-processing,
SSD softmax, Resize in every mode), segmentation (U-Net, DeepLab/ASPP, GroupNorm in both the
op and the InstanceNormalization trick), audio and sequence models (1-D convs, wav2vec-like
feature extraction, LSTM/GRU/RNN as PyTorch exports them), video (3-D conv and pooling), and
the tensor idioms these exports are made of (Einsum, CumSum, Gather with negative indices,
GatherElements/ScatterElements, Where, integer Mod/Pow, ArgMax, casts, float16 end to end).

The models are built with ``onnx.helper`` with random weights, compiled natively and compared
with onnxruntime. What is tested is that each idiom imports, lowers and gives onnxruntime's
answer, not speed: shapes are tiny."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import assert_close, onnxruntime_outputs
from tests.models.builder import GraphBuilder, graph_input

F = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
I64 = TensorProto.INT64
I32 = TensorProto.INT32
RTOL, ATOL = 1e-4, 1e-5


class _Graph(GraphBuilder):
    """Nodes and initializers of a model under construction."""

    def ints(self, *values: int) -> str:
        """An int64 vector initializer (shapes, axes, pads, K...)."""
        return self.init(list(values), np.int64)

    def weights(self, *shape: int, dtype: object = np.float32) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return self.init(self.rng.standard_normal(shape) / math.sqrt(fan_in), dtype)

    def model(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[str],
        opset: int,
        elem: int | Sequence[int] = F,
    ) -> onnx.ModelProto:
        """The model; outputs declared with an element type only, as exporters often do."""
        elems = [elem] * len(outputs) if isinstance(elem, int) else list(elem)
        graph = helper.make_graph(
            self.nodes,
            "family",
            list(inputs),
            [
                helper.make_tensor_value_info(o, e, None)
                for o, e in zip(outputs, elems, strict=True)
            ],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8 if opset < 19 else 9
        return model


def _check(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> list[np.ndarray]:
    """polyonnx's outputs equal onnxruntime's on ``feeds``; returns them."""
    want = onnxruntime_outputs(model, feeds)
    got = polyonnx.InferenceSession(model).run(None, dict(feeds))
    assert_close(got, want, rtol=rtol, atol=atol)
    return got


def _randn(*shape: int, seed: int = 1, dtype: object = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ detection


def _yolo_scale(g: _Graph, x: str, hw: int, stride: int, split: str, opset: int) -> str:
    """One YOLOv5 detect layer: a 1x1 head conv, [1, A*(5+C), H, W] viewed as
    [1, A, H, W, 5+C], sigmoid, xy = (2s - 0.5 + grid) * stride, wh = (2s)^2 * anchor,
    concatenated back and flattened to [1, A*H*W, 5+C]."""
    a, no = 3, 8
    y = g.op("Conv", x, g.weights(a * no, 4, 1, 1), g.weights(a * no))
    y = g.op("Reshape", y, g.ints(1, a, no, hw, hw))
    y = g.op("Transpose", y, perm=[0, 1, 3, 4, 2])
    y = g.op("Sigmoid", y)
    if split == "slice":
        xy = g.op("Slice", y, g.ints(0), g.ints(2), g.ints(4))
        wh = g.op("Slice", y, g.ints(2), g.ints(4), g.ints(-1))
        conf = g.op("Slice", y, g.ints(4), g.ints(2**63 - 1), g.ints(-1))
    elif opset >= 18:
        xy, wh, conf = g.op("Split", y, g.ints(2, 2, 4), axis=4, outputs=3)
    else:
        xy, wh, conf = g.op("Split", y, g.ints(2, 2, 4), axis=-1, outputs=3)
    gy, gx = np.meshgrid(np.arange(hw), np.arange(hw), indexing="ij")
    grid = np.stack([gx, gy], -1).reshape(1, 1, hw, hw, 2) - 0.5
    anchors = g.rng.uniform(10, 60, (1, a, 1, 1, 2))
    xy = g.op("Mul", g.op("Add", g.op("Mul", xy, g.init(2.0)), g.init(grid)), g.init(stride))
    wh = g.op("Mul", g.op("Pow", g.op("Mul", wh, g.init(2.0)), g.init(2.0)), g.init(anchors))
    y = g.op("Concat", xy, wh, conf, axis=-1)
    return g.op("Reshape", y, g.ints(1, -1, no))


@pytest.mark.parametrize(
    ("split", "opset"),
    [
        pytest.param("slice", 13, marks=pytest.mark.slow),
        pytest.param("split", 13, marks=pytest.mark.slow),
        ("split", 18),
    ],
)
def test_yolo_decode_three_scales(split: str, opset: int) -> None:
    g = _Graph()
    scales = []
    x = "x"
    for hw, stride in ((8, 4), (4, 8), (2, 16)):
        if hw != 8:
            x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
        scales.append(_yolo_scale(g, x, hw, stride, split, opset))
    y = g.op("Concat", *scales, axis=1)
    model = g.model([graph_input("x", [1, 4, 8, 8])], [y], opset)
    (out,) = _check(model, {"x": _randn(1, 4, 8, 8)})
    assert out.shape == (1, 3 * (64 + 16 + 4), 8)


def test_topk_gather_postprocessing() -> None:
    """Scores -> best class -> TopK with a constant K -> the kept boxes and classes by
    Gather (indices of the second output) and GatherElements."""
    g = _Graph()
    scores = g.op("Sigmoid", "logits")
    best = g.op("ReduceMax", scores, axes=[-1], keepdims=0)
    cls = g.op("ArgMax", scores, axis=-1, keepdims=0)
    values, idx = g.op("TopK", best, g.ints(5), axis=1, outputs=2)
    flat = g.op("Squeeze", idx, g.ints(0))
    boxes = g.op("Gather", "boxes", flat, axis=1)
    kept_cls = g.op("GatherElements", cls, idx, axis=1)
    small, _ = g.op("TopK", best, g.ints(3), axis=-1, largest=0, sorted=1, outputs=2)
    model = g.model(
        [graph_input("logits", [1, 20, 4]), graph_input("boxes", [1, 20, 4])],
        [values, idx, boxes, kept_cls, small],
        13,
        [F, I64, F, I64, F],
    )
    _check(model, {"logits": _randn(1, 20, 4), "boxes": _randn(1, 20, 4, seed=2)})


@pytest.mark.parametrize("opset", [11, 13])
def test_ssd_softmax_and_box_decode(opset: int) -> None:
    """SSD head: class logits [1, A*C, H, W] -> [1, H*W*A, C] and Softmax over classes;
    box regression decoded against constant priors with Exp."""
    g = _Graph()
    a, c = 2, 5
    conf = g.op("Conv", "x", g.weights(a * c, 4, 3, 3), g.weights(a * c), pads=[1, 1, 1, 1])
    conf = g.op("Transpose", conf, perm=[0, 2, 3, 1])
    conf = g.op("Reshape", conf, g.ints(1, -1, c))
    prob = g.op("Softmax", conf, axis=-1 if opset >= 13 else 2)
    loc = g.op("Conv", "x", g.weights(a * 4, 4, 3, 3), pads=[1, 1, 1, 1])
    loc = g.op("Reshape", g.op("Transpose", loc, perm=[0, 2, 3, 1]), g.ints(1, -1, 4))
    priors = g.rng.uniform(0.1, 0.9, (1, 4 * 4 * a, 4)).astype(np.float32)
    if opset >= 13:
        xy_l, wh_l = g.op("Split", loc, g.ints(2, 2), axis=2, outputs=2)
    else:
        xy_l, wh_l = g.op("Split", loc, axis=2, split=[2, 2], outputs=2)
    xy_p, wh_p = np.split(priors, 2, axis=2)
    xy = g.op("Add", g.op("Mul", g.op("Mul", xy_l, g.init(0.1)), g.init(wh_p)), g.init(xy_p))
    wh = g.op("Mul", g.op("Exp", g.op("Mul", wh_l, g.init(0.2))), g.init(wh_p))
    box = g.op("Concat", g.op("Sub", xy, g.op("Div", wh, g.init(2.0))), wh, axis=2)
    model = g.model([graph_input("x", [1, 4, 4, 4])], [prob, box], opset)
    _check(model, {"x": _randn(1, 4, 4, 4)})


_RESIZE_CASES = [
    # (mode, coordinate_transformation_mode, nearest_mode, scales)
    ("nearest", "asymmetric", "floor", (2.0, 2.0)),
    ("nearest", "asymmetric", "round_prefer_floor", (3.0, 3.0)),
    ("nearest", "half_pixel", "round_prefer_ceil", (1.5, 2.5)),
    ("nearest", "align_corners", "round_prefer_floor", (2.0, 3.0)),
    ("nearest", "half_pixel", "ceil", (0.5, 0.5)),
    ("linear", "half_pixel", "round_prefer_floor", (2.0, 2.0)),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", (3.0, 1.5)),
    ("linear", "align_corners", "round_prefer_floor", (2.0, 2.0)),
    ("linear", "asymmetric", "round_prefer_floor", (5.0, 3.0)),
    ("linear", "half_pixel", "round_prefer_floor", (0.5, 0.75)),
    ("cubic", "half_pixel", "round_prefer_floor", (2.0, 2.0)),
    ("cubic", "align_corners", "round_prefer_floor", (3.0, 1.5)),
    ("cubic", "asymmetric", "round_prefer_floor", (2.5, 2.5)),
    # non-integer factors, where positions must be onnxruntime's (float32, integer lengths)
    ("nearest", "asymmetric", "floor", (2 / 3, 0.6)),
    ("nearest", "pytorch_half_pixel", "floor", (0.6, 0.7)),
    ("linear", "align_corners", "round_prefer_floor", (2.2, 0.6)),
    ("cubic", "align_corners", "round_prefer_floor", (0.7, 1.3)),
]


@pytest.mark.parametrize(("mode", "ctm", "nearest_mode", "scales"), _RESIZE_CASES)
def test_resize_scales(mode: str, ctm: str, nearest_mode: str, scales: tuple[float, ...]) -> None:
    g = _Graph()
    attrs: dict[str, object] = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = nearest_mode
    if mode == "cubic":
        attrs["cubic_coeff_a"] = -0.75
    y = g.op("Resize", "x", "", g.init([1.0, 1.0, *scales]), **attrs)
    model = g.model([graph_input("x", [1, 2, 6, 4])], [y], 13)
    _check(model, {"x": _randn(1, 2, 6, 4)})


@pytest.mark.parametrize("scales", [(2.0, 2.0), (1.5, 3.0), (0.5, 0.75)])
def test_resize_tf_half_pixel_for_nn(scales: tuple[float, ...]) -> None:
    """tf2onnx's nearest resize with half_pixel_centers, an opset-11-only mode."""
    g = _Graph()
    y = g.op(
        "Resize",
        "x",
        g.init([]),
        g.init([1.0, 1.0, *scales]),
        mode="nearest",
        coordinate_transformation_mode="tf_half_pixel_for_nn",
        nearest_mode="round_prefer_ceil",
    )
    model = g.model([graph_input("x", [1, 2, 6, 4])], [y], 11)
    _check(model, {"x": _randn(1, 2, 6, 4)})


@pytest.mark.parametrize("opset", [11, 18])
def test_resize_sizes_odd_and_cubic_exclude_outside(opset: int) -> None:
    g = _Graph()
    sizes = g.ints(1, 2, 7, 11)
    roi = "" if opset >= 13 else g.init([], np.float32)
    y = g.op(
        "Resize",
        "x",
        roi,
        "" if opset >= 13 else g.init([], np.float32),
        sizes,
        mode="cubic",
        cubic_coeff_a=-0.5,
        exclude_outside=1,
    )
    model = g.model([graph_input("x", [1, 2, 5, 4])], [y], opset)
    _check(model, {"x": _randn(1, 2, 5, 4)})


# ------------------------------------------------------------------ segmentation


@pytest.mark.parametrize("up", ["k2s2", "k3s2_output_padding", "k4s2p1"])
def test_unet_block(up: str) -> None:
    """Encoder conv + MaxPool, bottleneck, ConvTranspose stride 2 back to the encoder's size
    (three ways exporters write it), skip Concat, conv head."""
    g = _Graph()
    e = g.op("Relu", g.op("Conv", "x", g.weights(4, 2, 3, 3), g.weights(4), pads=[1, 1, 1, 1]))
    d = g.op("MaxPool", e, kernel_shape=[2, 2], strides=[2, 2])
    d = g.op("Relu", g.op("Conv", d, g.weights(8, 4, 3, 3), g.weights(8), pads=[1, 1, 1, 1]))
    if up == "k2s2":
        u = g.op("ConvTranspose", d, g.weights(8, 4, 2, 2), g.weights(4), strides=[2, 2])
    elif up == "k3s2_output_padding":
        u = g.op(
            "ConvTranspose",
            d,
            g.weights(8, 4, 3, 3),
            g.weights(4),
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            output_padding=[1, 1],
        )
    else:
        u = g.op("ConvTranspose", d, g.weights(8, 4, 4, 4), strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.op("Concat", u, e, axis=1)
    y = g.op("Conv", y, g.weights(3, 8, 1, 1), g.weights(3))
    model = g.model([graph_input("x", [1, 2, 8, 8])], [y], 13)
    _check(model, {"x": _randn(1, 2, 8, 8)})


def test_convtranspose_grouped_dilated_asymmetric() -> None:
    g = _Graph()
    a = g.op(
        "ConvTranspose",
        "x",
        g.weights(4, 2, 3, 3),
        g.weights(4),
        strides=[2, 3],
        pads=[0, 1, 1, 0],
        dilations=[2, 1],
        group=2,
        output_padding=[1, 2],
    )
    b = g.op("ConvTranspose", "x", g.weights(4, 3, 3, 3), strides=[2, 2], output_shape=[10, 9])
    model = g.model([graph_input("x", [1, 4, 5, 4])], [a, b], 13)
    _check(model, {"x": _randn(1, 4, 5, 4)})


@pytest.mark.slow
def test_deeplab_aspp() -> None:
    """Dilated backbone convs (dilation 2/4 with pads = dilation), ASPP branches 1x1,
    3x3 d=2/4/6, image pooling (GlobalAveragePool -> 1x1 -> Resize back), concat, projection,
    bilinear upsampling x4 as torchvision exports it."""
    g = _Graph()
    x = g.op("Relu", g.op("Conv", "x", g.weights(8, 3, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2]))
    for d in (2, 4):
        x = g.op("Relu", g.op("Conv", x, g.weights(8, 8, 3, 3), dilations=[d, d], pads=[d] * 4))
    branches = [g.op("Relu", g.op("Conv", x, g.weights(4, 8, 1, 1)))]
    for d in (2, 4, 6):
        conv = g.op("Conv", x, g.weights(4, 8, 3, 3), g.weights(4), dilations=[d, d], pads=[d] * 4)
        branches.append(g.op("Relu", conv))
    pool = g.op("Relu", g.op("Conv", g.op("GlobalAveragePool", x), g.weights(4, 8, 1, 1)))
    pool = g.op(
        "Resize",
        pool,
        "",
        "",
        g.ints(1, 4, 6, 6),
        mode="linear",
        coordinate_transformation_mode="align_corners",
    )
    y = g.op("Concat", *branches, pool, axis=1)
    y = g.op("Relu", g.op("Conv", y, g.weights(4, 20, 1, 1)))
    y = g.op("Conv", y, g.weights(3, 4, 1, 1), g.weights(3))
    y = g.op(
        "Resize",
        y,
        "",
        g.init([1, 1, 2, 2]),
        mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel",
    )
    model = g.model([graph_input("x", [1, 3, 12, 12])], [y], 13)
    _check(model, {"x": _randn(1, 3, 12, 12)})


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(opset: int) -> None:
    g = _Graph()
    n = 2 if opset == 18 else 6  # opset 18: scale and bias per group; 21: per channel
    y = g.op(
        "GroupNormalization",
        "x",
        g.init(g.rng.uniform(0.5, 1.5, n)),
        g.init(g.rng.standard_normal(n)),
        num_groups=2,
        epsilon=1e-5,
    )
    model = g.model([graph_input("x", [2, 6, 3, 5])], [y], opset)
    _check(model, {"x": _randn(2, 6, 3, 5) * 3 + 1})


def test_groupnorm_by_instance_normalization() -> None:
    """torch.onnx's GroupNorm before opset 18: Reshape [N, G, -1], InstanceNormalization with
    unit scale and zero bias per group, Reshape back to the input's shape, Mul/Add by the
    per-channel affine parameters."""
    g = _Graph()
    shape = g.op("Shape", "x")
    y = g.op("Reshape", "x", g.ints(0, 4, -1))
    y = g.op("InstanceNormalization", y, g.init(np.ones(4)), g.init(np.zeros(4)), epsilon=1e-5)
    y = g.op("Reshape", y, shape)
    y = g.op("Mul", y, g.init(g.rng.uniform(0.5, 1.5, (8, 1, 1))))
    y = g.op("Add", y, g.init(g.rng.standard_normal((8, 1, 1))))
    model = g.model([graph_input("x", [2, 8, 3, 3])], [y], 13)
    _check(model, {"x": _randn(2, 8, 3, 3)})


# ------------------------------------------------------------------ audio / sequence


def test_conv1d_variants() -> None:
    """1-D convs over [N, C, L]: strided, grouped, depthwise dilated with causal (left-only)
    padding, and an explicit causal Pad before a plain conv."""
    g = _Graph()
    a = g.op("Conv", "x", g.weights(6, 4, 5), g.weights(6), strides=[2], pads=[2, 2])
    b = g.op("Conv", "x", g.weights(8, 2, 3), group=2, pads=[1, 1])
    c = g.op("Conv", "x", g.weights(4, 1, 3), dilations=[2], pads=[4, 0], group=4)
    p = g.op("Pad", "x", g.ints(0, 0, 2, 0, 0, 0), mode="constant")
    d = g.op("Conv", p, g.weights(3, 4, 3))
    model = g.model([graph_input("x", [2, 4, 17])], [a, b, c, d], 13)
    _check(model, {"x": _randn(2, 4, 17)})


@pytest.mark.slow
def test_wav2vec_feature_extractor() -> None:
    """wav2vec2's conv feature encoder on a raw waveform: Unsqueeze to [N, 1, L], a wide
    strided conv, GroupNorm with one group per channel (InstanceNormalization after the
    exporter's rewrite), Erf GELU, narrower strided convs, Transpose to [N, T, C],
    LayerNormalization and the feature projection."""
    g = _Graph()
    x = g.op("Unsqueeze", "wave", g.ints(1))
    x = g.op("Conv", x, g.weights(8, 1, 10), strides=[5])
    x = g.op(
        "InstanceNormalization",
        x,
        g.init(g.rng.uniform(0.5, 1.5, 8)),
        g.init(g.rng.standard_normal(8)),
    )

    def gelu(v: str) -> str:
        erf = g.op("Erf", g.op("Div", v, g.init(math.sqrt(2.0))))
        return g.op("Mul", g.op("Mul", v, g.op("Add", erf, g.init(1.0))), g.init(0.5))

    x = gelu(x)
    for k in (3, 2):
        x = gelu(g.op("Conv", x, g.weights(8, 8, k), strides=[2]))
    x = g.op("Transpose", x, perm=[0, 2, 1])
    x = g.op("LayerNormalization", x, g.init(np.ones(8)), g.init(np.zeros(8)), axis=-1)
    x = g.op("Add", g.op("MatMul", x, g.weights(8, 6)), g.weights(6))
    model = g.model([graph_input("wave", [2, 200])], [x], 17)
    _check(model, {"wave": _randn(2, 200)})


def _recurrent(
    op: str,
    *,
    direction: str,
    initial: bool,
    seq_lens: bool,
    layout: int,
    extra: Mapping[str, object] | None = None,
    emulate_layout: bool = False,
) -> onnx.ModelProto:
    """One recurrent layer as torch.onnx writes it, followed by the exporter's Squeeze /
    Transpose of Y into [T, N, D*H] (or [N, T, D*H] with layout=1). onnxruntime refuses
    layout=1: ``emulate_layout`` writes the same function as a layout-0 op between
    Transposes, for onnxruntime to compute the reference."""
    g = _Graph()
    t, n, i, h = 5, 2, 3, 4
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    d = 2 if direction == "bidirectional" else 1
    w = g.weights(d, gates * h, i)
    r = g.weights(d, gates * h, h)
    b = g.weights(d, 2 * gates * h)
    emulated = bool(layout) and emulate_layout
    inputs = [g.op("Transpose", "x", perm=[1, 0, 2]) if emulated else "x", w, r, b]
    inputs.append(g.init(np.full(n, t, np.int32), np.int32) if seq_lens else "")
    hshape = (n, d, h) if layout else (d, n, h)
    if initial:
        for _ in range(2 if op == "LSTM" else 1):
            state = g.init(g.rng.standard_normal(hshape))
            inputs.append(g.op("Transpose", state, perm=[1, 0, 2]) if emulated else state)
    outs = 3 if op == "LSTM" else 2
    attrs: dict[str, object] = {"hidden_size": h, "direction": direction, **(extra or {})}
    if layout and not emulated:
        attrs["layout"] = layout
    res = g.op(op, *inputs, outputs=outs, **attrs)
    if emulated:
        res = [
            g.op("Transpose", res[0], perm=[2, 0, 1, 3]),
            *(g.op("Transpose", s, perm=[1, 0, 2]) for s in res[1:]),
        ]
    y, hn = res[0], res[1]
    if layout:  # Y [N, T, D, H]
        y = g.op("Reshape", y, g.ints(n, t, d * h))
    else:  # Y [T, D, N, H]
        y = g.op("Reshape", g.op("Transpose", y, perm=[0, 2, 1, 3]), g.ints(t, n, d * h))
    last = g.op("Squeeze", hn, g.ints(1 if layout else 0)) if d == 1 else hn
    xshape = [n, t, i] if layout else [t, n, i]
    opset = 14 if layout else 13
    return g.model([graph_input("x", xshape)], [y, last, *res[2:]], opset)


_RNN_CASES = [
    ("LSTM", "bidirectional", True, False, 0, None),
    ("LSTM", "forward", False, True, 0, None),
    ("LSTM", "reverse", True, True, 1, None),
    ("LSTM", "bidirectional", False, False, 1, {"clip": 0.5}),
    ("LSTM", "forward", True, False, 0, {"input_forget": 1}),
    ("GRU", "bidirectional", True, False, 0, {"linear_before_reset": 1}),
    ("GRU", "forward", False, True, 1, {"linear_before_reset": 1}),
    ("GRU", "reverse", False, False, 0, None),
    ("RNN", "bidirectional", False, False, 0, {"activations": ["Relu", "Tanh"]}),
    ("RNN", "forward", True, True, 1, {"clip": 1.0}),
    (
        "LSTM",
        "forward",
        False,
        False,
        0,
        {"activations": ["HardSigmoid", "LeakyRelu", "Tanh"], "activation_alpha": [0.3, 0.1]},
    ),
    ("GRU", "forward", True, False, 0, {"activations": ["Sigmoid", "Relu"]}),
]


@pytest.mark.parametrize(("op", "direction", "initial", "seq_lens", "layout", "extra"), _RNN_CASES)
def test_recurrent_exports(
    op: str,
    direction: str,
    initial: bool,
    seq_lens: bool,
    layout: int,
    extra: Mapping[str, object] | None,
) -> None:
    kw: dict[str, Any] = {
        "direction": direction,
        "initial": initial,
        "seq_lens": seq_lens,
        "layout": layout,
        "extra": extra,
    }
    model = _recurrent(op, **kw)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": _randn(*shape)}
    want = onnxruntime_outputs(_recurrent(op, **kw, emulate_layout=True), feeds)
    got = polyonnx.InferenceSession(model).run(None, feeds)
    assert_close(got, want, rtol=RTOL, atol=ATOL)


def test_lstm_variable_sequence_lengths_input() -> None:
    """Packed sequences: sequence_lens fed at run time, shorter rows padded with zeros in Y."""
    g = _Graph()
    w, r, b = g.weights(2, 16, 3), g.weights(2, 16, 4), g.weights(2, 32)
    y, hn, cn = g.op(
        "LSTM", "x", w, r, b, "lens", hidden_size=4, direction="bidirectional", outputs=3
    )
    model = g.model([graph_input("x", [5, 3, 3]), graph_input("lens", [3], I32)], [y, hn, cn], 13)
    _check(model, {"x": _randn(5, 3, 3), "lens": np.array([5, 2, 3], np.int32)})


# ------------------------------------------------------------------ video / 3-D


def test_conv3d_and_pool3d() -> None:
    g = _Graph()
    x = g.op(
        "Conv",
        "x",
        g.weights(4, 2, 3, 3, 3),
        g.weights(4),
        pads=[1, 1, 1, 1, 1, 1],
        strides=[1, 2, 2],
    )
    x = g.op("Relu", x)
    a = g.op("MaxPool", x, kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[0, 1, 1, 0, 1, 1])
    b = g.op("MaxPool", x, kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1)
    c = g.op("AveragePool", x, kernel_shape=[3, 3, 3], pads=[1] * 6, count_include_pad=1)
    d = g.op("AveragePool", x, kernel_shape=[3, 3, 3], pads=[1] * 6, count_include_pad=0)
    e = g.op("GlobalAveragePool", x)
    model = g.model([graph_input("x", [1, 2, 5, 7, 7])], [a, b, c, d, e], 13)
    _check(model, {"x": _randn(1, 2, 5, 7, 7)})


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("opset", [13, 19])
def test_average_pool_ceil_mode(count_include_pad: int, opset: int) -> None:
    """ceil_mode windows that start in the padding or run past it (the last window may be
    clipped), with and without counting the pads."""
    g = _Graph()
    a = g.op(
        "AveragePool",
        "x",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=count_include_pad,
    )
    b = g.op(
        "AveragePool",
        "x",
        kernel_shape=[2, 3],
        strides=[2, 2],
        pads=[0, 1, 0, 0],
        ceil_mode=1,
        count_include_pad=count_include_pad,
    )
    c = g.op("MaxPool", "x", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    model = g.model([graph_input("x", [1, 2, 8, 7])], [a, b, c], opset)
    _check(model, {"x": _randn(1, 2, 8, 7)})


# ------------------------------------------------------------------ misc tensor idioms


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
        ("bhqk,bhkd->bhqd", [(2, 2, 3, 5), (2, 2, 5, 4)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("i,j->ij", [(3,), (4,)]),
        ("bid,jd->bij", [(2, 3, 4), (5, 4)]),
        ("...ij->...ji", [(2, 3, 4)]),
        ("ii->i", [(4, 4)]),
        ("bij->b", [(2, 3, 4)]),
    ],
)
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    g = _Graph()
    names = [f"x{k}" for k in range(len(shapes))]
    y = g.op("Einsum", *names, equation=equation)
    model = g.model([graph_input(n, s) for n, s in zip(names, shapes, strict=True)], [y], 13)
    _check(
        model, {n: _randn(*s, seed=k) for k, (n, s) in enumerate(zip(names, shapes, strict=True))}
    )


def test_cumsum_variants() -> None:
    g = _Graph()
    outs = [
        g.op("CumSum", "x", g.init(1, np.int64)),
        g.op("CumSum", "x", g.init(-1, np.int32), exclusive=1),
        g.op("CumSum", "x", g.init(0, np.int64), reverse=1),
        g.op("CumSum", "x", g.init(2, np.int64), exclusive=1, reverse=1),
        g.op("CumSum", "m", g.init(1, np.int64)),
    ]
    model = g.model(
        [graph_input("x", [2, 3, 4]), graph_input("m", [2, 6], I64)], outs, 14, [F, F, F, F, I64]
    )
    mask = np.random.default_rng(3).integers(0, 2, (2, 6)).astype(np.int64)
    _check(model, {"x": _randn(2, 3, 4), "m": mask})


def test_gather_negative_indices() -> None:
    g = _Graph()
    a = g.op("Gather", "x", g.init([-1, 0, -3], np.int64), axis=1)
    b = g.op("Gather", "x", g.init(-1, np.int64), axis=-1)
    c = g.op("Gather", "x", "idx", axis=0)
    d = g.op("GatherElements", "x", g.init(np.full((2, 3, 4), -2), np.int64), axis=1)
    model = g.model(
        [graph_input("x", [3, 3, 4]), graph_input("idx", [2, 2], I64)], [a, b, c, d], 13
    )
    _check(model, {"x": _randn(3, 3, 4), "idx": np.array([[-1, 0], [2, -3]], np.int64)})


@pytest.mark.parametrize("opset", [13, 16, 18])
def test_gather_and_scatter_elements(opset: int) -> None:
    g = _Graph()
    idx = np.random.default_rng(4).integers(-3, 3, (2, 3, 4))
    ge = g.op("GatherElements", "x", g.init(idx, np.int64), axis=1)
    updates = g.init(g.rng.standard_normal((2, 2, 4)))
    # one index per column per batch: no duplicates for the plain scatter
    sidx = np.stack([np.stack([np.arange(4) % 3, (np.arange(4) + 1) % 3]) for _ in range(2)])
    se = g.op("ScatterElements", "x", g.init(sidx, np.int64), updates, axis=1)
    outs = [ge, se]
    if opset >= 16:
        dup = np.zeros((2, 2, 4), np.int64)
        outs.append(
            g.op("ScatterElements", "x", g.init(dup, np.int64), updates, axis=1, reduction="add")
        )
        if opset >= 18:
            outs.append(
                g.op(
                    "ScatterElements", "x", g.init(dup, np.int64), updates, axis=1, reduction="max"
                )
            )
    model = g.model([graph_input("x", [2, 3, 4])], outs, opset)
    _check(model, {"x": _randn(2, 3, 4)})


def test_where_broadcasting_and_masks() -> None:
    g = _Graph()
    cond = g.op("Greater", "x", g.init(0.0))
    a = g.op("Where", cond, "x", g.init(-1.0))
    b = g.op("Where", "mask", "x", "row")  # [2,1,4] ? [2,3,4] : [4]
    c = g.op("Where", g.op("Not", "mask"), g.init(float("-inf")), g.init(0.0))
    d = g.op("Softmax", g.op("Add", "x", c), axis=-1)
    model = g.model(
        [
            graph_input("x", [2, 3, 4]),
            graph_input("mask", [2, 1, 4], TensorProto.BOOL),
            graph_input("row", [4]),
        ],
        [a, b, d],
        13,
    )
    mask = np.array([[[True, False, True, True]], [[True, True, False, True]]])
    _check(model, {"x": _randn(2, 3, 4), "mask": mask, "row": _randn(4, seed=5)})


@pytest.mark.parametrize("elem", [I64, I32])
def test_integer_mod_and_pow(elem: int) -> None:
    g = _Graph()
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    a = g.op("Mod", "x", "y")
    b = g.op("Mod", "x", "y", fmod=1)
    c = g.op("Pow", "x", g.init(3, dtype))
    d = g.op("Pow", "x", g.init([0, 1, 2, 3], np.int64))
    e = g.op("Div", "x", "y")
    model = g.model(
        [graph_input("x", [3, 4], elem), graph_input("y", [3, 4], elem)], [a, b, c, d, e], 13, elem
    )
    rng = np.random.default_rng(6)
    x = rng.integers(-20, 20, (3, 4)).astype(dtype)
    y = rng.choice([-7, -3, -1, 1, 2, 5], (3, 4)).astype(dtype)
    _check(model, {"x": x, "y": y})


def test_float_mod_and_pow() -> None:
    g = _Graph()
    a = g.op("Mod", "x", "y", fmod=1)
    b = g.op("Pow", g.op("Abs", "x"), "y")
    c = g.op("Pow", "x", g.init(2.0))
    model = g.model([graph_input("x", [3, 4]), graph_input("y", [3, 4])], [a, b, c], 13)
    _check(model, {"x": _randn(3, 4) * 5, "y": _randn(3, 4, seed=2) + 0.1})


def test_argmax_argmin_ties() -> None:
    g = _Graph()
    outs = [
        g.op("ArgMax", "x", axis=1, keepdims=1),
        g.op("ArgMax", "x", axis=-1, keepdims=0, select_last_index=1),
        g.op("ArgMin", "x", axis=0, keepdims=0, select_last_index=1),
        g.op("ArgMin", "x", axis=2, keepdims=1, select_last_index=0),
    ]
    model = g.model([graph_input("x", [3, 4, 5])], outs, 13, I64)
    x = np.random.default_rng(7).integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    _check(model, {"x": x})


def test_expand_mul_broadcast_chain() -> None:
    g = _Graph()
    a = g.op("Expand", "x", g.ints(2, 1, 3, 4))
    b = g.op("Mul", a, "y")  # [2,1,3,4] * [5,1,1] -> [2,5,3,4]
    c = g.op("Expand", b, g.ints(1, 1, 1))  # shape of lower rank: a no-op broadcast
    d = g.op("Add", c, g.op("Unsqueeze", "y", g.ints(0)))
    e = g.op("Expand", g.op("Shape", d), g.ints(2, 4))  # int64 expanded
    model = g.model([graph_input("x", [3, 1]), graph_input("y", [5, 1, 1])], [d, e], 13, [F, I64])
    _check(model, {"x": _randn(3, 1), "y": _randn(5, 1, 1, seed=2)})


def test_casts() -> None:
    g = _Graph()
    b = g.op("Cast", "x", to=TensorProto.BOOL)
    i8 = g.op("Cast", g.op("Mul", "x", g.init(40.0)), to=TensorProto.INT8)
    u8 = g.op("Cast", g.op("Abs", g.op("Mul", "x", g.init(80.0))), to=TensorProto.UINT8)
    h = g.op("Cast", "x", to=F16)
    back = g.op(
        "Add",
        g.op("Cast", b, to=F),
        g.op("Add", g.op("Cast", i8, to=F), g.op("Cast", u8, to=F)),
    )
    h32 = g.op("Cast", h, to=F)  # (f16 arithmetic: test_float16_model_end_to_end)
    i64 = g.op("Cast", i8, to=I64)
    bi = g.op("Cast", b, to=TensorProto.INT32)
    model = g.model(
        [graph_input("x", [4, 5])],
        [b, i8, u8, h, back, h32, i64, bi],
        13,
        [TensorProto.BOOL, TensorProto.INT8, TensorProto.UINT8, F16, F, F, I64, I32],
    )
    x = _randn(4, 5)
    x[0, :2] = 0.0
    _check(model, {"x": x})


def test_float16_model_end_to_end() -> None:
    """A float16 export (model.half()): conv, BatchNorm, relu, pooling, LayerNorm, MatMul,
    Softmax, all in float16; compared at float16's tolerance."""
    g = _Graph()
    h = np.float16
    x = g.op("Conv", "x", g.weights(4, 2, 3, 3, dtype=h), g.weights(4, dtype=h), pads=[1] * 4)
    x = g.op(
        "BatchNormalization",
        x,
        g.init(g.rng.uniform(0.5, 1.5, 4), h),
        g.init(g.rng.standard_normal(4), h),
        g.init(g.rng.standard_normal(4) * 0.1, h),
        g.init(g.rng.uniform(0.5, 1.5, 4), h),
    )
    x = g.op("Relu", x)
    x = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Reshape", x, g.ints(1, 4, 16))
    x = g.op("LayerNormalization", x, g.init(np.ones(16), h), g.init(np.zeros(16), h))
    x = g.op("MatMul", x, g.weights(16, 8, dtype=h))
    x = g.op("Add", x, g.weights(8, dtype=h))
    y = g.op("Softmax", x, axis=-1)
    s = g.op("ReduceSum", x, g.ints(-1), keepdims=0)
    model = g.model([graph_input("x", [1, 2, 8, 8], F16)], [y, s], 17, F16)
    _check(model, {"x": _randn(1, 2, 8, 8, dtype=np.float16)}, rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------ second round: more idioms


def test_yolov8_dfl_decode() -> None:
    """YOLOv8's head: box distribution [1, 4*16, A] -> [1, 4, 16, A] -> Softmax over the 16
    bins -> a 1x1 conv with weights 0..15 (the expectation) -> dist2bbox against constant
    anchor points, times the strides; classes by Sigmoid; Concat [1, 4+C, A]."""
    g = _Graph()
    a, c = 20, 3
    box = g.op("Reshape", "box", g.ints(1, 4, 16, a))
    box = g.op("Softmax", g.op("Transpose", box, perm=[0, 2, 1, 3]), axis=1)
    dfl = g.init(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1))
    dist = g.op("Reshape", g.op("Conv", box, dfl), g.ints(1, 4, a))
    lt, rb = (
        g.op("Slice", dist, g.ints(0), g.ints(2), g.ints(1)),
        g.op("Slice", dist, g.ints(2), g.ints(4), g.ints(1)),
    )
    anchors = g.init(g.rng.uniform(0, 8, (1, 2, a)))
    x1y1 = g.op("Sub", anchors, lt)
    x2y2 = g.op("Add", anchors, rb)
    cxy = g.op("Div", g.op("Add", x1y1, x2y2), g.init(2.0))
    wh = g.op("Sub", x2y2, x1y1)
    strides = g.init(np.repeat([8.0, 16.0], a // 2).reshape(1, 1, a))
    dbox = g.op("Mul", g.op("Concat", cxy, wh, axis=1), strides)
    y = g.op("Concat", dbox, g.op("Sigmoid", "cls"), axis=1)
    model = g.model([graph_input("box", [1, 64, a]), graph_input("cls", [1, c, a])], [y], 17)
    _check(model, {"box": _randn(1, 64, a), "cls": _randn(1, c, a, seed=2)})


def test_topk_with_k_from_shape() -> None:
    """torchvision's ``min(k, num_anchors)`` exported: Shape -> Gather -> Unsqueeze -> Concat
    with the constant k -> ReduceMin -> TopK; the top scores gathered with GatherND."""
    g = _Graph()
    n = g.op("Gather", g.op("Shape", "scores"), g.init(1, np.int64), axis=0)
    k = g.op("ReduceMin", g.op("Concat", g.ints(6), g.op("Unsqueeze", n, g.ints(0)), axis=0))
    k = g.op("Reshape", k, g.ints(1))
    vals, idx = g.op("TopK", "scores", k, axis=1, outputs=2)
    nd = g.op("Unsqueeze", idx, g.ints(2))
    boxes = g.op("GatherND", "boxes", nd, batch_dims=1)
    model = g.model(
        [graph_input("scores", [2, 9]), graph_input("boxes", [2, 9, 4])],
        [vals, idx, boxes],
        13,
        [F, I64, F],
    )
    _check(model, {"scores": _randn(2, 9), "boxes": _randn(2, 9, 4, seed=2)})


def test_score_threshold_nonzero() -> None:
    """Post-processing that keeps the boxes above a score threshold: Greater -> NonZero, a
    data-dependent output. Feeding it to another node (Transpose -> GatherND) is refused by
    name: polyonnx supports data-dependent extents only on graph outputs."""
    g = _Graph()
    nz = g.op("NonZero", g.op("Greater", "scores", g.init(0.3)))
    model = g.model([graph_input("scores", [2, 7])], [nz], 13, I64)
    _check(model, {"scores": _randn(2, 7)})
    kept = g.op("GatherND", "scores", g.op("Transpose", nz, perm=[1, 0]))
    model = g.model([graph_input("scores", [2, 7])], [kept], 13)
    with pytest.raises(UnsupportedOpError, match=r"Transpose.*'nonzero_\d+' has a data-dep"):
        polyonnx.InferenceSession(model)


@pytest.mark.parametrize("opset", [13, 18])
def test_interpolate_to_a_tensors_size(opset: int) -> None:
    """F.interpolate(x, size=skip.shape[-2:], mode="bilinear") as torch.onnx writes it: the
    sizes from Shape -> Slice -> Concat with the input's N, C."""
    g = _Graph()
    low = g.op("Conv", "x", g.weights(3, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1])
    hw = g.op("Slice", g.op("Shape", "skip"), g.ints(2), g.ints(4))
    nc = g.op("Slice", g.op("Shape", low), g.ints(0), g.ints(2))
    sizes = g.op("Concat", nc, hw, axis=0)
    up = g.op(
        "Resize",
        low,
        "",
        "",
        sizes,
        mode="linear",
        coordinate_transformation_mode="half_pixel" if opset >= 18 else "pytorch_half_pixel",
    )
    y = g.op("Add", up, "skip")
    model = g.model([graph_input("x", [1, 3, 9, 7]), graph_input("skip", [1, 3, 9, 7])], [y], opset)
    _check(model, {"x": _randn(1, 3, 9, 7), "skip": _randn(1, 3, 9, 7, seed=2)})


def test_resize_opset18_axes_antialias_and_aspect_ratio() -> None:
    g = _Graph()
    a = g.op("Resize", "x", "", g.init([0.5, 0.6]), axes=[2, 3], mode="linear", antialias=1)
    b = g.op(
        "Resize",
        "x",
        "",
        "",
        g.ints(5, 5),
        axes=[2, 3],
        mode="nearest",
        keep_aspect_ratio_policy="not_larger",
    )
    c = g.op("Resize", "x", "", g.init([1.0, 1.0, 0.4, 0.5]), mode="cubic", antialias=1)
    model = g.model([graph_input("x", [1, 2, 10, 8])], [a, b, c], 18)
    _check(model, {"x": _randn(1, 2, 10, 8)})


def test_segnet_maxpool_indices() -> None:
    """SegNet/ENet's encoder: MaxPool's Indices output (flat over the whole tensor), also with
    padding and storage_order 1; the decoder's MaxUnpool of them, to the unpooled shape and to
    a constant output_shape (the pooled input's, which the padded pooling does not unpool to)."""
    g = _Graph()
    x = g.op("Relu", g.op("Conv", "x", g.weights(4, 2, 3, 3), pads=[1, 1, 1, 1]))
    pooled, idx = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2], outputs=2)
    _, idx2 = g.op(
        "MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, storage_order=1, outputs=2
    )
    model = g.model([graph_input("x", [2, 2, 6, 6])], [pooled, idx, idx2], 13, [F, I64, I64])
    _check(model, {"x": _randn(2, 2, 6, 6)})
    pooled2, idx2 = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, outputs=2)
    up = g.op("MaxUnpool", pooled, idx, kernel_shape=[2, 2], strides=[2, 2])
    up2 = g.op(
        "MaxUnpool",
        pooled2,
        idx2,
        g.ints(2, 4, 6, 6),
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1] * 4,
    )
    model = g.model([graph_input("x", [2, 2, 6, 6])], [g.op("Add", up, up2)], 13)
    _check(model, {"x": _randn(2, 2, 6, 6)})


def test_pixel_shuffle_and_space_to_depth() -> None:
    """Super-resolution heads: DepthToSpace in both modes, PixelShuffle written as
    Reshape/Transpose of rank 6, YOLOv2's reorg as SpaceToDepth; PRelu per channel."""
    g = _Graph()
    x = g.op("Conv", "x", g.weights(8, 2, 3, 3), pads=[1, 1, 1, 1])
    x = g.op("PRelu", x, g.init(g.rng.uniform(0.0, 0.5, (8, 1, 1))))
    a = g.op("DepthToSpace", x, blocksize=2, mode="CRD")
    b = g.op("DepthToSpace", x, blocksize=2, mode="DCR")
    c = g.op("Reshape", x, g.ints(1, 2, 2, 2, 4, 4))
    c = g.op("Reshape", g.op("Transpose", c, perm=[0, 1, 4, 2, 5, 3]), g.ints(1, 2, 8, 8))
    d = g.op("SpaceToDepth", "x", blocksize=2)
    model = g.model([graph_input("x", [1, 2, 4, 4])], [a, b, c, d], 13)
    _check(model, {"x": _randn(1, 2, 4, 4)})


def test_yolov4_activations_and_spp() -> None:
    """Mish (x * tanh(softplus(x))), SiLU (x * sigmoid(x)), HardSigmoid/HardSwish, LeakyRelu,
    and the SPP block's stride-1 MaxPools of 5/9/13 with same padding."""
    g = _Graph()
    x = g.op("Conv", "x", g.weights(4, 2, 3, 3), pads=[1, 1, 1, 1])
    mish = g.op("Mul", x, g.op("Tanh", g.op("Softplus", x)))
    silu = g.op("Mul", mish, g.op("Sigmoid", mish))
    hs = g.op("HardSwish", g.op("LeakyRelu", silu, alpha=0.1))
    pools = [
        g.op("MaxPool", hs, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[1, 1])
        for k in (5, 9, 13)
    ]
    y = g.op("Concat", hs, *pools, axis=1)
    y = g.op("HardSigmoid", g.op("Conv", y, g.weights(4, 16, 1, 1)), alpha=0.2, beta=0.5)
    model = g.model([graph_input("x", [1, 2, 7, 7])], [y], 14)
    _check(model, {"x": _randn(1, 2, 7, 7) * 3})


def test_fcn_depthwise_convtranspose_upsampling() -> None:
    """FCN's bilinear upsampling as a depthwise ConvTranspose (group = C), plus 1-D and
    3-D ConvTranspose (vocoders, video decoders) and auto_pad SAME_UPPER."""
    g = _Graph()
    a = g.op(
        "ConvTranspose", "x", g.weights(3, 1, 4, 4), strides=[2, 2], pads=[1, 1, 1, 1], group=3
    )
    b = g.op("ConvTranspose", "x", g.weights(3, 2, 3, 3), strides=[2, 2], auto_pad="SAME_UPPER")
    c = g.op(
        "ConvTranspose",
        "x1",
        g.weights(4, 2, 8),
        g.weights(2),
        strides=[4],
        pads=[2, 2],
        output_padding=[0],
    )
    d = g.op("ConvTranspose", "x3", g.weights(2, 2, 2, 3, 3), strides=[1, 2, 2], pads=[0, 1, 1] * 2)
    model = g.model(
        [
            graph_input("x", [1, 3, 5, 4]),
            graph_input("x1", [2, 4, 9]),
            graph_input("x3", [1, 2, 3, 4, 4]),
        ],
        [a, b, c, d],
        13,
    )
    _check(
        model,
        {
            "x": _randn(1, 3, 5, 4),
            "x1": _randn(2, 4, 9, seed=2),
            "x3": _randn(1, 2, 3, 4, 4, seed=3),
        },
    )


def test_audio_pools_and_norms() -> None:
    """1-D pooling (ceil_mode, count_include_pad, strided max), LpPool, GlobalMaxPool,
    InstanceNormalization over [N, C, L], and ConvNeXt's channels-first LayerNorm written as
    ReduceMean/Sub/Pow/Sqrt over axis 1."""
    g = _Graph()
    a = g.op("MaxPool", "x", kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)
    b = g.op("AveragePool", "x", kernel_shape=[4], strides=[3], ceil_mode=1)
    c = g.op("LpPool", "x", kernel_shape=[3], strides=[2], p=2)
    d = g.op("GlobalMaxPool", "x")
    e = g.op("InstanceNormalization", "x", g.init(np.ones(4)), g.init(np.zeros(4)))
    mean = g.op("ReduceMean", "x", axes=[1])
    cen = g.op("Sub", "x", mean)
    var = g.op("ReduceMean", g.op("Pow", cen, g.init(2.0)), axes=[1])
    f = g.op("Div", cen, g.op("Sqrt", g.op("Add", var, g.init(1e-6))))
    model = g.model([graph_input("x", [2, 4, 11])], [a, b, c, d, e, f], 13)
    _check(model, {"x": _randn(2, 4, 11)})


def test_whisper_log_mel_frontend() -> None:
    """A log-mel frontend as exported by audio models: STFT with a Hann window (onesided),
    power spectrum, mel projection by MatMul, Log of Max(..., 1e-10), normalisation."""
    g = _Graph()
    n_fft, hop = 16, 4
    window = g.op("HannWindow", g.init(n_fft, np.int64), periodic=1)
    spec = g.op("STFT", "wave", g.init(hop, np.int64), window, onesided=1)  # [N, T, F, 2]
    power = g.op("ReduceSum", g.op("Mul", spec, spec), g.ints(-1), keepdims=0)  # [N, T, F]
    mel = g.op("MatMul", power, g.init(g.rng.uniform(0, 1, (n_fft // 2 + 1, 6))))
    logm = g.op("Log", g.op("Max", mel, g.init(1e-10)))
    y = g.op("Mul", g.op("Add", logm, g.init(4.0)), g.init(0.25))
    model = g.model([graph_input("wave", [2, 64])], [y], 17)
    _check(model, {"wave": _randn(2, 64)}, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_stacked_lstm_with_peepholes_and_lengths() -> None:
    """Two stacked LSTM layers (the exporter's Squeeze/Transpose between them), the first
    with peepholes P and run-time sequence lengths, the second reading Y reshaped."""
    g = _Graph()
    t, n, i, h = 6, 3, 3, 4
    y1, _, _ = g.op(
        "LSTM",
        "x",
        g.weights(1, 16, i),
        g.weights(1, 16, h),
        g.weights(1, 32),
        "lens",
        "",
        "",
        g.weights(1, 12),
        hidden_size=h,
        outputs=3,
    )
    x2 = g.op("Squeeze", y1, g.ints(1))
    y2, h2 = g.op(
        "GRU",
        x2,
        g.weights(2, 12, h),
        g.weights(2, 12, h),
        g.weights(2, 24),
        "lens",
        hidden_size=h,
        direction="bidirectional",
        outputs=2,
    )
    y = g.op("Reshape", g.op("Transpose", y2, perm=[0, 2, 1, 3]), g.ints(t, n, 2 * h))
    model = g.model([graph_input("x", [t, n, i]), graph_input("lens", [n], I32)], [y, h2], 13)
    _check(model, {"x": _randn(t, n, i), "lens": np.array([6, 1, 4], np.int32)})


def test_position_ids_range_trilu_onehot() -> None:
    """Sequence-model plumbing: Range over the sequence length from Shape, a causal mask by
    Trilu, OneHot of token ids, Shape with start/end (opset 15), Size."""
    g = _Graph()
    seq = g.op("Shape", "x", start=1, end=2)
    pos = g.op("Range", g.init(0, np.int64), g.op("Squeeze", seq, g.ints(0)), g.init(1, np.int64))
    ones = g.op(
        "ConstantOfShape",
        g.op("Concat", seq, seq, axis=0),
        value=helper.make_tensor("one", F, [1], [1.0]),
    )
    mask = g.op("Trilu", ones, upper=0)
    hot = g.op("OneHot", "ids", g.init(5, np.int64), g.init([0.0, 1.0]), axis=-1)
    size = g.op("Size", "x")
    upper = g.op("Trilu", "x", g.init(1, np.int64), upper=1)
    model = g.model(
        [graph_input("x", [2, 4, 4]), graph_input("ids", [2, 4], I64)],
        [pos, mask, hot, size, upper],
        15,
        [I64, F, F, I64, F],
    )
    _check(model, {"x": _randn(2, 4, 4), "ids": np.array([[0, 4, 2, -1], [1, 3, -5, 2]])})


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("...qd,...kd->...qk", [(2, 1, 3, 4), (1, 2, 5, 4)]),
        ("BNi,Ni->BN", [(2, 3, 4), (3, 4)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("bi,bi->b", [(3, 4), (3, 4)]),
    ],
)
def test_einsum_broadcast_and_chains(equation: str, shapes: list[tuple[int, ...]]) -> None:
    test_einsum(equation, shapes)


def test_scatter_nd_and_gather_nd_batch_dims() -> None:
    """index_put / KV-cache updates (ScatterND, with reduction at opset 16+) and TF's
    GatherND with batch_dims."""
    g = _Graph()
    idx = g.init([[1], [3]], np.int64)
    upd = g.init(g.rng.standard_normal((2, 4)))
    a = g.op("ScatterND", "x", idx, upd)
    b = g.op("ScatterND", "x", g.init([[0], [0]], np.int64), upd, reduction="add")
    c = g.op("GatherND", "y", g.init([[[1, 0]], [[0, 2]]], np.int64), batch_dims=1)
    model = g.model([graph_input("x", [5, 4]), graph_input("y", [2, 2, 3, 2])], [a, b, c], 16)
    _check(model, {"x": _randn(5, 4), "y": _randn(2, 2, 3, 2, seed=2)})


def test_casts_edge_values() -> None:
    """NaN and negatives to bool, float16 to int8 and back, bool to float16, double, CastLike,
    and float to integer truncation toward zero."""
    g = _Graph()
    b = g.op("Cast", "x", to=TensorProto.BOOL)
    i32 = g.op("Cast", "x", to=I32)
    h = g.op("Cast", "x", to=F16)
    h_i8 = g.op("Cast", h, to=TensorProto.INT8)
    b_h = g.op("Cast", b, to=F16)
    d = g.op("Cast", "x", to=TensorProto.DOUBLE)
    like = g.op("CastLike", i32, "x")
    u8_f = g.op("Cast", g.op("Cast", g.op("Abs", "x"), to=TensorProto.UINT8), to=F)
    model = g.model(
        [graph_input("x", [2, 5])],
        [b, i32, h_i8, b_h, d, like, u8_f],
        15,
        [TensorProto.BOOL, I32, TensorProto.INT8, F16, TensorProto.DOUBLE, F, F],
    )
    x = np.array([[np.nan, -0.0, -2.7, 2.7, 100.5], [-100.5, 0.5, -0.5, 1e-30, 7.0]], np.float32)
    _check(model, {"x": x})


def test_float16_resize_pool_and_grouped_conv() -> None:
    g = _Graph()
    h = np.float16
    x = g.op("Conv", "x", g.weights(4, 2, 3, 3, dtype=h), pads=[1] * 4, group=2)
    x = g.op("Resize", x, "", g.init([1, 1, 2, 2]), mode="nearest")
    x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    x = g.op("Sigmoid", g.op("GlobalAveragePool", x))
    am = g.op("ArgMax", x, axis=1, keepdims=0)
    model = g.model([graph_input("x", [1, 4, 5, 5], F16)], [x, am], 17, [F16, I64])
    _check(model, {"x": _randn(1, 4, 5, 5, dtype=np.float16)}, rtol=1e-2, atol=1e-2)
