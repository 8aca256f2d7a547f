"""Old opsets' node forms: ImageScaler, ``broadcast``/``axis`` attributes, Upsample and
Resize-10 coordinates, and conversions that need shape inference between opsets."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import PolyonnxError
from polyonnx.testing import assert_close, onnxruntime_outputs

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    opset: int,
    inits: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "legacy",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 4
    return model


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_image_scaler_is_a_multiply_add():
    node = helper.make_node("ImageScaler", ["x"], ["y"], scale=0.25, bias=[1.0, -2.0, 0.5])
    model = _model([node], {"x": [2, 3, 4, 4]}, 8)
    x = _rand(2, 3, 4, 4)
    [y] = polyonnx.InferenceSession(model).run(None, {"x": x})
    assert_close([y], onnxruntime_outputs(model, {"x": x}))
    assert_close([y], [x * 0.25 + np.array([1.0, -2.0, 0.5], np.float32).reshape(3, 1, 1)])


@pytest.mark.parametrize(
    ("a", "b", "axis"),
    [((2, 3, 4, 5), (3,), 1), ((2, 3, 4, 5), (2, 3), 0), ((2, 3, 4, 5), (4, 5), None)],
)
def test_broadcast_from_an_axis_before_opset_7(a, b, axis):
    # (ONNX's converter appended B's missing axes whatever the axis: [3] at axis 1 of a 4-D A
    # became [3, 1, 1, 1], and the sum [3, 3, 4, 5].)
    attrs = {"broadcast": 1} | ({"axis": axis} if axis is not None else {})
    model = _model(
        [helper.make_node("Sub", ["x", "b"], ["y"], **attrs)], {"x": list(a)}, 6, {"b": _rand(*b)}
    )
    x = _rand(*a)
    b_value = numpy_helper.to_array(model.graph.initializer[0])
    start = 0 if axis is None else len(a) - len(b) - axis
    want = x - b_value.reshape(b + (1,) * start)
    assert_close(polyonnx.InferenceSession(model).run(None, {"x": x}), [want])


def test_opset_3_batch_norm_then_broadcast_converts_in_steps():
    # BatchNormalization-1 (consumed_inputs) leaves its output untyped until opset 6, and the
    # converter's 6 -> 7 broadcasting adapter needs the Mul's input shapes.
    params = {k: RNG.uniform(0.5, 1.5, 3).astype(np.float32) for k in "sbmv"}
    params["k"] = _rand(3)
    nodes = [
        helper.make_node(
            "BatchNormalization",
            ["x", "s", "b", "m", "v"],
            ["t"],
            is_test=1,
            consumed_inputs=[0, 0, 0, 1, 1],
        ),
        helper.make_node("Mul", ["t", "k"], ["y"], broadcast=1, axis=1),
    ]
    inputs = {"x": [1, 3, 2, 2]} | {k: list(a.shape) for k, a in params.items()}
    model = _model(nodes, inputs, 3, params)
    model.ir_version = 3
    x = _rand(1, 3, 2, 2)
    c = {k: a.reshape(3, 1, 1) for k, a in params.items()}
    want = ((x - c["m"]) / np.sqrt(c["v"] + 1e-5) * c["s"] + c["b"]) * c["k"]
    assert_close(polyonnx.InferenceSession(model).run(None, {"x": x}), [want], rtol=1e-5)


@pytest.mark.parametrize(
    ("op", "opset", "mode", "scales"),
    [
        ("Upsample", 9, "linear", (1.0, 1.0, 2.0, 3.0)),
        ("Upsample", 9, "nearest", (1.0, 1.0, 1.5, 2.5)),
        ("Resize", 10, "linear", (1.0, 1.0, 0.6, 1.5)),
        ("Resize", 10, "nearest", (1.0, 1.0, 0.6, 0.35)),
        ("Resize", 10, "nearest", (1.0, 1.0, 1.5, 2.0)),
    ],
)
def test_resize_before_opset_11_maps_coordinates_asymmetrically(op, opset, mode, scales):
    # (ONNX's converter made Resize-11s of these without coordinate_transformation_mode,
    # whose half_pixel default moved every linear tap.)
    node = helper.make_node(op, ["x", "s"], ["y"], mode=mode)
    model = _model([node], {"x": [1, 2, 5, 7]}, opset, {"s": np.array(scales, np.float32)})
    x = _rand(1, 2, 5, 7)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})
    assert_close(got, onnxruntime_outputs(model, {"x": x}))


def test_resize_10_nearest_that_shrinks_and_enlarges_is_refused():
    node = helper.make_node("Resize", ["x", "s"], ["y"], name="mixed", mode="nearest")
    model = _model([node], {"x": [1, 2, 5, 7]}, 10, {"s": np.array([1, 1, 0.6, 1.5], np.float32)})
    with pytest.raises(polyonnx.UnsupportedOpError, match=r"'mixed'.*shrinks some axes"):
        polyonnx.InferenceSession(model)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("Scale", {"scale": 2.5}),
        ("Affine", {"alpha": 2.0, "beta": -1.0}),
        ("ScaledTanh", {"alpha": 2.0, "beta": 0.5}),
        ("ParametricSoftplus", {"alpha": 2.0, "beta": 0.5}),
        ("Crop", {"border": [1, 2, 0, 1]}),
        ("Crop", {"border": [1, 0, 3, 1], "scale": [2, 3]}),
    ],
)
def test_experimental_ops_run_as_onnxruntime_runs_them(op, attrs):
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": [2, 3, 5, 6]}, 8)
    x = _rand(2, 3, 5, 6)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})
    assert_close(got, onnxruntime_outputs(model, {"x": x}))


@pytest.mark.parametrize("opset", [10, 13, 19, 22])
@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
        ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1]}),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        (
            "AveragePool",
            {
                "kernel_shape": [2, 2],
                "strides": [2, 2],
                "pads": [0, 0, 1, 1],
                "count_include_pad": 1,
            },
        ),
    ],
)
def test_ceil_mode_window_starting_in_the_end_padding_is_dropped(op, attrs, opset):
    # (ONNX's shape inference before opset 22 counted that window; onnxruntime and polyonnx's
    # loops drop it, so the model was refused for the disagreement.)
    node = helper.make_node(op, ["x"], ["t"], ceil_mode=1, **attrs)
    flat = helper.make_node("Flatten", ["t"], ["y"])
    model = _model([node, flat], {"x": [1, 2, 4, 5]}, opset)
    model.ir_version = 8 if opset < 22 else 10
    x = _rand(1, 2, 4, 5)
    got = polyonnx.InferenceSession(model).run(None, {"x": x})
    assert_close(got, onnxruntime_outputs(model, {"x": x}))


@pytest.mark.parametrize(
    "attrs, wrong",
    [
        ({"strides": [0, 1]}, "strides"),
        ({"dilations": [1, -1]}, "dilations"),
        ({"strides": [1, 1, 1]}, "strides"),
    ],
)
def test_a_ceil_mode_pool_with_invalid_windows_is_refused_by_name(attrs, wrong):
    # (The padding trim reads the window before the graph is validated: it must leave an
    # invalid one to the validator, not divide by a zero stride.)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1, **attrs)
    model = _model([node], {"x": [1, 2, 4, 5]}, 17)
    with pytest.raises(PolyonnxError, match=wrong):
        polyonnx.InferenceSession(model)
