"""BatchNormalization, LRN, Softmax and LogSoftmax vs onnxruntime; BatchNormalization's
training mode vs onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand


def _bn_inputs(c: int) -> list[tuple[str, np.ndarray]]:
    return [
        ("scale", rand(c, seed=1)),
        ("bias", rand(c, seed=2)),
        ("mean", rand(c, seed=3)),
        ("var", np.abs(rand(c, seed=4)) + 0.5),
    ]


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (2, 3), (1, 2, 5), (1, 2, 2, 3, 2)], ids=str)
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm(shape: tuple[int, ...], opset: int) -> None:
    check_op(
        "BatchNormalization",
        [("x", rand(*shape)), *_bn_inputs(shape[1])],
        {"epsilon": 1e-3},
        opset=opset,
        constants=("scale", "bias", "mean", "var"),
    )


def test_batch_norm_default_epsilon_runtime_stats() -> None:
    check_op("BatchNormalization", [("x", rand(1, 3, 2, 2)), *_bn_inputs(3)])


@pytest.mark.parametrize("size", [1, 3, 5])  # onnxruntime rejects even sizes
def test_lrn(size: int) -> None:
    check_op(
        "LRN", [("x", rand(1, 5, 3, 3))], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5}
    )


def test_lrn_defaults() -> None:
    check_op("LRN", [("x", rand(2, 4, 2, 2))], {"size": 3})


CASES = [
    ((3, 5), None),
    ((2, 3, 4), None),
    ((2, 3, 4), 0),
    ((2, 3, 4), 1),
    ((2, 3, 4), -2),
    ((2, 3, 4), 2),
    ((4,), 0),
]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_softmax(op: str, opset: int, shape: tuple[int, ...], axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    check_op(op, [("x", 3 * rand(*shape))], attrs, opset=opset)


def test_softmax_temps() -> None:
    model = make_model("Softmax", [("x", rand(2, 3, 4))], {"axis": 1}, opset=13)
    graph = graph_from_model(model)
    temps = {
        b.name: b.shape for b in node_kernel(graph, graph.nodes[0]).buffers if b.kind == "temp"
    }
    assert temps == {"softmax_0__max": (2, 4), "softmax_0__sum": (2, 4)}


def test_softmax_float64() -> None:
    check_op("Softmax", [("x", rand(2, 5, dtype="float64"))], opset=13)


def _bn_training_model(
    shape: tuple[int, ...],
    outputs: tuple[str, ...],
    opset: int,
    x_type: int = TensorProto.FLOAT,
    stats_type: int = TensorProto.FLOAT,
    **attrs: float,
) -> onnx.ModelProto:
    c = shape[1]
    node = helper.make_node(
        "BatchNormalization",
        ["x", "scale", "bias", "mean", "var"],
        list(outputs),
        training_mode=1,
        **attrs,
    )
    ins = [("x", x_type, shape), ("scale", x_type, (c,)), ("bias", x_type, (c,))]
    ins += [("mean", stats_type, (c,)), ("var", stats_type, (c,))]
    types = {"y": x_type}
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in ins],
        [helper.make_tensor_value_info(o, types.get(o, stats_type), None) for o in outputs if o],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bn_training_feeds(shape: tuple[int, ...], dtype: str, stats: str) -> dict[str, np.ndarray]:
    feeds = dict(_bn_inputs(shape[1]))
    feeds = {k: v.astype(stats if k in ("mean", "var") else dtype) for k, v in feeds.items()}
    # (Not centred at 0: the batch mean matters.)
    return {"x": (rand(*shape, seed=5) * 2 + 1).astype(dtype), **feeds}


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (1, 2, 7), (2, 2, 2, 3, 2)], ids=str)
@pytest.mark.parametrize("opset", [14, 15])
@pytest.mark.parametrize("attrs", [{}, {"epsilon": 1e-2, "momentum": 0.6}], ids=["default", "set"])
def test_batch_norm_training_mode(shape: tuple[int, ...], opset: int, attrs: dict) -> None:
    # Batch statistics (the population variance) normalise X; the running statistics blend
    # the given ones with them: as onnx.reference computes them.
    model = _bn_training_model(shape, ("y", "running_mean", "running_var"), opset, **attrs)
    feeds = _bn_training_feeds(shape, "float32", "float32")
    got = polyonnx.InferenceSession(model).run(None, feeds)
    want = onnx_reference_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    x = feeds["x"].astype(np.float64)
    axes = tuple(d for d in range(len(shape)) if d != 1)
    batch_var = x.var(axis=axes)  # (population: ddof=0)
    momentum = attrs.get("momentum", 0.9)
    np.testing.assert_allclose(
        got[2], feeds["var"] * momentum + batch_var * (1 - momentum), rtol=1e-5
    )


@pytest.mark.parametrize(
    "outputs", [("y",), ("y", "running_mean", ""), ("y", "", "running_var")], ids=str
)
def test_batch_norm_training_mode_output_subsets(outputs: tuple[str, ...]) -> None:
    shape = (2, 3, 3, 3)
    full = _bn_training_model(shape, ("y", "running_mean", "running_var"), 15, momentum=0.8)
    feeds = _bn_training_feeds(shape, "float32", "float32")
    names = ("y", "running_mean", "running_var")
    want = dict(zip(names, onnx_reference_outputs(full, feeds), strict=True))
    model = _bn_training_model(shape, outputs, 15, momentum=0.8)
    got = polyonnx.InferenceSession(model).run(None, feeds)
    for name, g in zip([o for o in outputs if o], got, strict=True):
        np.testing.assert_allclose(g, want[name], rtol=1e-5, atol=1e-5)


def test_batch_norm_training_mode_other_types() -> None:
    # float64 throughout; float16 X with float32 statistics (opset 15's T and T2), the
    # statistics computed in float32.
    shape = (2, 3, 4, 4)
    outputs = ("y", "running_mean", "running_var")
    double = _bn_training_model(shape, outputs, 15, TensorProto.DOUBLE, TensorProto.DOUBLE)
    feeds = _bn_training_feeds(shape, "float64", "float64")
    for g, w in zip(
        polyonnx.InferenceSession(double).run(None, feeds),
        onnx_reference_outputs(double, feeds),
        strict=True,
    ):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    half = _bn_training_model(shape, outputs, 15, TensorProto.FLOAT16, TensorProto.FLOAT)
    feeds = _bn_training_feeds(shape, "float16", "float32")
    got = polyonnx.InferenceSession(half).run(None, feeds)
    assert [g.dtype for g in got] == [np.float16, np.float32, np.float32]
    for g, w in zip(got, onnx_reference_outputs(half, feeds), strict=True):
        np.testing.assert_allclose(g, np.asarray(w, np.float32), rtol=2e-3, atol=2e-3)


def test_batch_norm_statistics_outputs_before_opset_14_stay_refused() -> None:
    outputs = ("y", "running_mean", "running_var", "saved_mean", "saved_var")
    model = _bn_training_model((2, 3, 2, 2), outputs, 9)
    model.graph.node[0].ClearField("attribute")
    with pytest.raises(UnsupportedOpError, match="training mode before opset 14"):
        polyonnx.InferenceSession(model)
