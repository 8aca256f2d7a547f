"""NonMaxSuppression, compiled, against onnxruntime and the ONNX reference: the greedy order
(ties by the lower index), thresholds as constants and as run-time inputs, absent optional
inputs, empty selections, several batches and classes, both box formats."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs
from tests.reliability.models import const, model, tensor

_NAMES = ("boxes", "scores", "max_boxes", "iou", "score_min")
_TYPES = (
    TensorProto.FLOAT,
    TensorProto.FLOAT,
    TensorProto.INT64,
    TensorProto.FLOAT,
    TensorProto.FLOAT,
)


def _model(
    arrays: dict[str, np.ndarray], constants: tuple[str, ...] = (), opset: int = 11, **attrs: int
) -> onnx.ModelProto:
    """One NonMaxSuppression over the inputs in ``arrays`` (others absent); names in
    ``constants`` become initializers."""
    used = [n if n in arrays else "" for n in _NAMES]
    while used and not used[-1]:
        used.pop()
    node = helper.make_node("NonMaxSuppression", used, ["y"], **attrs)
    inputs = [
        tensor(n, list(arrays[n].shape), t)
        for n, t in zip(_NAMES, _TYPES, strict=True)
        if n in arrays and n not in constants
    ]
    inits = [const(n, arrays[n]) for n in constants]
    return model([node], inputs, [tensor("y", [None, 3], TensorProto.INT64)], inits, opset=opset)


def _check(
    arrays: dict[str, np.ndarray], constants: tuple[str, ...] = (), **attrs: int
) -> np.ndarray:
    m = _model(arrays, constants, **attrs)
    feeds = {n: a for n, a in arrays.items() if n not in constants}
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    (ort,) = onnxruntime_outputs(m, feeds)
    if "iou" in arrays:  # (the reference fails on absent iou_threshold)
        (ref,) = onnx_reference_outputs(m, feeds)
        np.testing.assert_array_equal(got, ref.reshape(-1, 3))
    np.testing.assert_array_equal(got, ort)
    return got


def _scalars(max_boxes: int, iou: float, score_min: float | None) -> dict[str, np.ndarray]:
    out = {"max_boxes": np.array([max_boxes], np.int64), "iou": np.array([iou], np.float32)}
    if score_min is not None:
        out["score_min"] = np.array([score_min], np.float32)
    return out


def _random_boxes(batches: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 8, (batches, n, 2))
    size = rng.uniform(0.5, 4, (batches, n, 2))
    return np.concatenate([corner, corner + size], axis=2).astype(np.float32)


@pytest.mark.parametrize("constants", [(), ("max_boxes", "iou", "score_min")])
@pytest.mark.parametrize("center", [0, 1])
def test_batches_and_classes(constants: tuple[str, ...], center: int) -> None:
    boxes = _random_boxes(2, 9, seed=center)
    scores = np.random.default_rng(3).uniform(0, 1, (2, 3, 9)).astype(np.float32)
    arrays = {"boxes": boxes, "scores": scores, **_scalars(4, 0.3, 0.2)}
    got = _check(arrays, constants, center_point_box=center)
    assert len(got) > 6


def test_ties_take_the_lower_index() -> None:
    # Equal scores everywhere and identical boxes: the lowest index of each class survives;
    # disjoint boxes with equal scores come in index order.
    boxes = np.array(
        [[[0, 0, 1, 1], [0, 0, 1, 1], [5, 5, 6, 6], [0, 0, 1, 1], [9, 9, 10, 10]]], np.float32
    )
    scores = np.array([[[0.5, 0.5, 0.5, 0.5, 0.5], [0.1, 0.7, 0.1, 0.7, 0.7]]], np.float32)
    got = _check({"boxes": boxes, "scores": scores, **_scalars(10, 0.5, None)})
    assert got.tolist() == [[0, 0, 0], [0, 0, 2], [0, 0, 4], [0, 1, 1], [0, 1, 4], [0, 1, 2]]


@pytest.mark.parametrize("constants", [(), ("max_boxes", "iou", "score_min")])
def test_empty_selection(constants: tuple[str, ...]) -> None:
    boxes = _random_boxes(1, 4, seed=1)
    scores = np.full((1, 2, 4), 0.1, np.float32)
    arrays = {"boxes": boxes, "scores": scores, **_scalars(3, 0.5, 0.9)}
    assert _check(arrays, constants).shape == (0, 3)


def test_absent_optional_inputs_select_nothing() -> None:
    # Without max_output_boxes_per_class the limit is 0.
    boxes = _random_boxes(1, 3, seed=2)
    scores = np.ones((1, 1, 3), np.float32)
    assert _check({"boxes": boxes, "scores": scores}).shape == (0, 3)


@pytest.mark.parametrize("max_boxes", [0, -3, 1, 100])
def test_run_time_limit(max_boxes: int) -> None:
    boxes = _random_boxes(1, 6, seed=4)
    scores = np.random.default_rng(5).uniform(0, 1, (1, 2, 6)).astype(np.float32)
    got = _check({"boxes": boxes, "scores": scores, "max_boxes": np.array([max_boxes], np.int64)})
    # (The best box of each class is always kept; a negative limit is 0.)
    assert len(got) == (0 if max_boxes <= 0 else 2 if max_boxes == 1 else len(got))


def test_zero_area_boxes_never_suppress() -> None:
    boxes = np.array([[[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], np.float32)
    got = _check({"boxes": boxes, "scores": scores, **_scalars(4, 0.0, None)})
    assert got[:, 2].tolist() == [0, 1, 2]


def test_opset_10() -> None:
    boxes = _random_boxes(1, 5, seed=6)
    scores = np.random.default_rng(7).uniform(0, 1, (1, 1, 5)).astype(np.float32)
    m = _model({"boxes": boxes, "scores": scores, **_scalars(2, 0.1, 0.0)}, opset=10)
    feeds = {"boxes": boxes, "scores": scores, **_scalars(2, 0.1, 0.0)}
    (got,) = polyonnx.InferenceSession(m).run(None, feeds)
    np.testing.assert_array_equal(got, onnxruntime_outputs(m, feeds)[0])


def test_output_read_by_another_node_is_refused() -> None:
    boxes = _random_boxes(1, 3, seed=8)
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"]),
        helper.make_node("Identity", ["sel"], ["y"]),
    ]
    m = model(
        nodes,
        [tensor("boxes", [1, 3, 4]), tensor("scores", [1, 1, 3])],
        [tensor("y", [None, 3], TensorProto.INT64)],
    )
    del boxes
    with pytest.raises(polyonnx.UnsupportedOpError, match="data-dependent"):
        polyonnx.InferenceSession(m)
