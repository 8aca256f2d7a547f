"""Data-movement ops end to end through ``polyonnx.InferenceSession`` vs onnxruntime: view ops
with axes/shape inputs, outputs that fold to constants, zero-size outputs, gathers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import polyonnx
from polyonnx.testing import onnxruntime_outputs


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    outputs: Sequence[str],
    consts: dict[str, np.ndarray] | None = None,
    opset: int = 18,
) -> onnx.ModelProto:
    g = helper.make_graph(
        list(nodes),
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
        ],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (consts or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    types = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    del m.graph.output[:]
    m.graph.output.extend(types[o] for o in outputs)
    return m


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    want = onnxruntime_outputs(model, feeds)
    got = polyonnx.InferenceSession(model).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return got


I64 = np.int64


def test_view_ops_with_axes_inputs() -> None:
    x = np.random.default_rng(0).standard_normal((2, 1, 3, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Squeeze", ["x", "sq"], ["a"]),  # (2, 3)
        helper.make_node("Unsqueeze", ["a", "uq"], ["b"]),  # (2, 3, 1, 1)
        helper.make_node("Reshape", ["b", "shape"], ["c"]),  # (3, 2)
        helper.make_node("Flatten", ["x"], ["d"], axis=-1),  # (6, 1)
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Neg", ["d"], ["z"]),
    ]
    consts = {
        "sq": np.array([-1, 1], I64),
        "uq": np.array([-1, 2], I64),
        "shape": np.array([3, -1], I64),
    }
    got = _check(_model(nodes, {"x": x}, ["y", "z"], consts), {"x": x})
    assert got[0].shape == (3, 2) and got[1].shape == (6, 1)


def test_reshape_zero_and_allowzero() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Abs", ["r"], ["y"])]
    got = _check(_model(nodes, {"x": x}, ["y"], {"s": np.array([0, 1, -1], I64)}), {"x": x})
    assert got[0].shape == (2, 1, 3)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)]
    got = _check(_model(nodes, {"x": x}, ["y"], {"s": np.array([3, 2], I64)}), {"x": x})
    assert got[0].shape == (3, 2)


def test_shape_and_size_outputs_fold() -> None:
    x = np.zeros((2, 3, 4), np.float32)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1),
        helper.make_node("Size", ["x"], ["n"]),
    ]
    got = _check(_model(nodes, {"x": x}, ["s", "n"]), {"x": x})
    assert got[0].tolist() == [3, 4] and int(got[1]) == 24


def test_identity_of_constant_output() -> None:
    x = np.zeros(2, np.float32)
    nodes = [helper.make_node("Identity", ["c"], ["y"]), helper.make_node("Neg", ["x"], ["z"])]
    _check(_model(nodes, {"x": x}, ["y", "z"], {"c": np.array([1.5, 2.5], np.float32)}), {"x": x})


def test_zero_size_output() -> None:
    x = np.ones((3, 4), np.float32)
    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"])]
    got = _check(
        _model(nodes, {"x": x}, ["y"], {"s": np.array([2], I64), "e": np.array([1], I64)}), {"x": x}
    )
    assert got[0].shape == (0, 4)


@pytest.mark.parametrize("bad", [3, -4])
def test_gather_out_of_range_index_is_an_input_error(bad: int) -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    model = _model(
        [helper.make_node("Gather", ["x", "i"], ["y"])], {"x": x, "i": np.array([0, 1], I64)}, ["y"]
    )
    sess = polyonnx.InferenceSession(model)
    ok = sess.run(None, {"x": x, "i": np.array([-1, 2], I64)})[0]
    np.testing.assert_array_equal(ok, x[[-1, 2]])
    with pytest.raises(polyonnx.InputError, match="out of range"):
        sess.run(None, {"x": x, "i": np.array([0, bad], I64)})


def test_scatter_and_slice_pipeline() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    u = rng.standard_normal((2, 5)).astype(np.float32)
    nodes = [
        helper.make_node("ScatterND", ["x", "i", "u"], ["s"], reduction="add"),
        helper.make_node("Slice", ["s", "st", "en", "ax", "sp"], ["y"]),
    ]
    consts = {
        "i": np.array([[3], [3]], I64),
        "st": np.array([-1], I64),
        "en": np.array([-100], I64),
        "ax": np.array([0], I64),
        "sp": np.array([-2], I64),
    }
    _check(_model(nodes, {"x": x, "u": u}, ["y"], consts), {"x": x, "u": u})
