"""The benchmark set's published architectures: each is a valid model onnxruntime runs, counts
the parameters and multiply-adds its paper quotes, and compiles with polyonnx to the same
logits (relative error = max |polyonnx - onnxruntime| / max |onnxruntime| <= 1e-4)."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

import polyonnx
from polyonnx.testing.architectures import (
    ARCHITECTURES,
    EXTRA_ARCHITECTURES,
    multiply_adds,
    parameters,
)
from polyonnx.testing.reference import onnxruntime_outputs

#: Parameters and multiply-adds as published (torchvision's model table, the papers,
#: ultralytics' model summary at 640 / 4, BERT-base per layer), and the relative tolerance of
#: our counts (thop and fvcore differ from a plain count by about 1%).
PUBLISHED = {
    "mobilenet_v2": (3_504_872, 300e6, 0.01),
    "mobilenet_v3_small": (2_542_856, 56e6, 0.02),
    "efficientnet_b0": (5_288_548, 390e6, 0.02),
    # 3,157,200 parameters + the exported Detect head's 6,300 anchor/stride constants and
    # Resize's 4 scales; 8.7 GFLOPs at 640 = 4.35 G multiply-adds, a quarter at 320.
    "yolov8n": (3_157_200 + 6_304, 4.35e9 / 4, 0.01),
    "bert_base_layer": (
        4 * (768 * 768 + 768) + 2 * 768 * 3072 + 3072 + 768 + 4 * 768,
        128 * (4 * 768 * 768 + 2 * 128 * 768 + 2 * 768 * 3072),
        0.0,
    ),
    "lstm_speech": (
        2 * (4 * 256 * (80 + 256 + 2)) + 2 * (4 * 256 * (512 + 256 + 2)) + 512 * 40 + 40,
        2 * 100 * 4 * 256 * (80 + 256 + 512 + 256) + 100 * 512 * 40,
        0.0,
    ),
    "gru_classifier": (
        3 * 128 * (64 + 128 + 2) + 128 * 12 + 12,
        50 * 3 * 128 * (64 + 128) + 128 * 12,
        0.0,
    ),
    # outside the benchmark set: torchvision's regnet_x_400mf table; GPT-2 small's four
    # blocks and DeepLabV3's head by their layer shapes
    "regnetx_400mf": (5_495_976, 0.41e9, 0.01),
    "gpt2_blocks": (
        4 * (12 * 768 * 768 + 9 * 768 + 4 * 768) + 2 * 768 + 128 * 128,
        4 * 128 * (12 * 768 * 768 + 2 * 128 * 768),
        0.0,
    ),
    "deeplabv3_aspp": (
        2 * 512 * 256
        + 3 * 9 * 512 * 256
        + 5 * 256 * 256
        + 9 * 256 * 256
        + 256 * 21
        + 21
        + 7 * 2 * 256  # (each BatchNormalization's scale and bias; its statistics are buffers)
        + 4,
        33 * 33 * (512 * 256 + 3 * 9 * 512 * 256 + 5 * 256 * 256 + 9 * 256 * 256 + 256 * 21)
        + 512 * 256,
        0.0,
    ),
}

#: Compiling these takes more than a few seconds (polyonnx, cold cache).
SLOW = {"mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "yolov8n", "regnetx_400mf"}

ALL = {**ARCHITECTURES, **EXTRA_ARCHITECTURES}


@functools.cache
def _model(name: str) -> onnx.ModelProto:
    return ALL[name]()


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    if "attention_mask" in feeds:  # BERT's additive mask: the last 16 positions masked
        mask = np.zeros_like(feeds["attention_mask"])
        mask[..., -16:] = -10000.0
        feeds["attention_mask"] = mask
    return feeds


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.max(np.abs(want)))


def _parts(name: str, out: np.ndarray) -> dict[str, np.ndarray]:
    """The logits compared: YOLOv8n's boxes (pixels) and class probabilities apart, so the
    boxes' scale does not hide the classes' errors."""
    if name == "yolov8n":
        return {"boxes": out[:, :4], "classes": out[:, 4:]}
    return {"logits": out}


def test_registry_names_every_builder():
    assert set(ALL) == set(PUBLISHED) and not set(ARCHITECTURES) & set(EXTRA_ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(ALL))
def test_architecture_is_valid_and_runs_in_onnxruntime(name):
    model = _model(name)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17 and model.ir_version == 8
    [a] = onnxruntime_outputs(model, _feeds(model, 1))
    [b] = onnxruntime_outputs(model, _feeds(model, 2))
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    # Meaningful logits: O(1), and another input gives other ones.
    assert 1e-2 < float(np.std(a)) < 1e3
    assert _rel_err(a, b) > 0.05


@pytest.mark.parametrize("name", sorted(ALL))
def test_architecture_counts_what_its_paper_quotes(name):
    model = _model(name)
    params, macs, tol = PUBLISHED[name]
    assert parameters(model) == pytest.approx(params, rel=tol)
    assert multiply_adds(model) == pytest.approx(macs, rel=max(tol, 0.03) if tol else 0)


def test_builders_are_seeded():
    assert ARCHITECTURES["gru_classifier"](seed=3) == ARCHITECTURES["gru_classifier"](seed=3)
    assert ARCHITECTURES["gru_classifier"](seed=3) != ARCHITECTURES["gru_classifier"](seed=4)


def test_batch_norm_statistics_are_those_of_the_calibration_input():
    """Every BatchNormalization's input has (per channel) the mean and variance stored: the
    calibration feeds are the model's seed + 1."""
    model = onnx.ModelProto()
    model.CopyFrom(_model("mobilenet_v3_small"))
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    picked = bns[:: max(1, len(bns) // 6)]
    model.graph.output.extend(
        [
            onnx.helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None)
            for n in picked
        ]
    )
    values = onnxruntime_outputs(model, _feeds(model, 1))[1:]
    for node, x in zip(picked, values, strict=True):
        np.testing.assert_allclose(
            x.mean(axis=(0, 2, 3)), inits[node.input[3]], atol=1e-3, rtol=1e-3
        )
        np.testing.assert_allclose(x.var(axis=(0, 2, 3)), inits[node.input[4]], rtol=1e-3)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(ALL)],
)
def test_polyonnx_matches_onnxruntime(name):
    model = _model(name)
    feeds = _feeds(model, 1)
    [want] = onnxruntime_outputs(model, feeds)
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    for part, w in _parts(name, want).items():
        err = _rel_err(_parts(name, got)[part], w)
        assert err <= 1e-4, f"{name} {part}: relative error {err:.3g} > 1e-4"
