"""Outputs whose extent is known only after running (NonZero, Compress, Unique) vs onnxruntime,
through InferenceSession (JIT) and a shared library written by ``polyonnx compile -o``."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.testing import onnxruntime_outputs

_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: list[tuple[str, int, int]],
    opset: int = 13,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "dyn",
        [
            helper.make_tensor_value_info(k, _TYPES[v.dtype], list(v.shape))
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info(name, elem, [None] * rank) for name, elem, rank in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.flags.c_contiguous
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        np.testing.assert_array_equal(g, w)


def _nonzero_model() -> onnx.ModelProto:
    x = np.zeros((3, 4), np.float32)
    return _model(
        [helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, [("y", TensorProto.INT64, 2)]
    )


def test_non_zero_sizes_its_output_per_run() -> None:
    model = _nonzero_model()
    sess = polyonnx.InferenceSession(model)
    assert sess.get_outputs()[0].shape == [2, "NonZero_0_count"]
    rng = np.random.default_rng(0)
    for density in (0.0, 0.3, 1.0):  # none, some, all non-zero: extents 0 .. 12
        x = (rng.random((3, 4)) < density).astype(np.float32) * rng.standard_normal((3, 4))
        x = x.astype(np.float32)
        _check(sess.run(None, {"x": x}), onnxruntime_outputs(model, {"x": x}))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress(axis: int | None) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    cond = np.array([True, False, True], np.bool_)
    attrs = {} if axis is None else {"axis": axis}
    model = _model(
        [helper.make_node("Compress", ["x", "cond"], ["y"], **attrs)],
        {"x": x, "cond": cond},
        [("y", TensorProto.FLOAT, 1 if axis is None else 2)],
    )
    sess = polyonnx.InferenceSession(model)
    for c in (cond, ~cond, np.ones(3, np.bool_)):
        feeds = {"x": x, "cond": c}
        _check(sess.run(None, feeds), onnxruntime_outputs(model, feeds))


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_unique(sorted_: int, axis: int | None) -> None:
    x = np.array([[2, 1, 2], [0, 5, 0], [2, 1, 2], [7, 7, 7]], np.int64)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    model = _model(
        [helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], **attrs)],
        {"x": x},
        [
            ("y", TensorProto.INT64, 1 if axis is None else 2),
            ("idx", TensorProto.INT64, 1),
            ("inv", TensorProto.INT64, 1),
            ("cnt", TensorProto.INT64, 1),
        ],
        opset=11,
    )
    sess = polyonnx.InferenceSession(model)
    for feed in (x, x[::-1].copy(), np.zeros_like(x)):
        _check(sess.run(None, {"x": feed}), onnxruntime_outputs(model, {"x": feed}))


def test_dynamic_and_static_outputs_together() -> None:
    x = np.array([3.0, 0.0, 1.0, 0.0], np.float32)
    model = _model(
        [helper.make_node("NonZero", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["r"])],
        {"x": x},
        [("y", TensorProto.INT64, 2), ("r", TensorProto.FLOAT, 1)],
    )
    got = polyonnx.InferenceSession(model).run(["r", "y"], {"x": x})
    want = onnxruntime_outputs(model, {"x": x})
    _check(got, [want[1], want[0]])


def test_a_node_reading_a_dynamic_value_is_refused() -> None:
    x = np.zeros(4, np.float32)
    model = _model(
        [
            helper.make_node("NonZero", ["x"], ["nz"]),
            helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT),
        ],
        {"x": x},
        [("y", TensorProto.FLOAT, 2)],
    )
    with pytest.raises(polyonnx.UnsupportedOpError, match="'nz'.*only as graph outputs"):
        polyonnx.InferenceSession(model)


def test_shared_library_reports_the_extent(tmp_path) -> None:
    model = _nonzero_model()
    compiled = polyonnx.compile(model)
    path = write_library(compiled, tmp_path / "nonzero.so")
    header = path.with_suffix(".h").read_text()
    assert "int64_t *)outputs[1]" in header  # where a C caller finds the extent
    meta = json.loads(compiled.metadata())
    assert meta["count_outputs"] == 1
    assert meta["outputs"][0]["max_shape"] == [2, 12] and meta["outputs"][0]["counts"] == [None, 0]
    sess = polyonnx.InferenceSession(path)
    x = np.array([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 0, 4]], np.float32)
    _check(sess.run(None, {"x": x}), onnxruntime_outputs(model, {"x": x}))


def test_top_k_with_k_fed_at_run_time() -> None:
    x = np.array([[3.0, 1.0, 4.0, 1.0, 5.0], [9.0, 2.0, 6.0, 5.0, 3.0]], np.float32)
    model = _model(
        [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
        {"x": x, "k": np.array([2], np.int64)},
        [("v", TensorProto.FLOAT, 2), ("i", TensorProto.INT64, 2)],
    )
    sess = polyonnx.InferenceSession(model)
    assert sess.get_outputs()[0].shape == [2, "TopK_0_count"]
    for k in (0, 2, 5):
        feeds = {"x": x, "k": np.array([k], np.int64)}
        _check(sess.run(None, feeds), onnxruntime_outputs(model, feeds))
    with pytest.raises(polyonnx.InputError, match="extent 6"):
        sess.run(None, {"x": x, "k": np.array([6], np.int64)})
