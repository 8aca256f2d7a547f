"""Reference outputs: onnxruntime's session options, onnx.reference, and a clear message when
onnxruntime is missing."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from polyonnx.testing import (
    import_onnxruntime,
    onnx_reference_outputs,
    onnxruntime_outputs,
    onnxruntime_session,
)


def _model() -> onnx.ModelProto:
    """y = (x + x) * x on [2, 3]: onnxruntime's optimizer leaves it as written."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    return helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )


FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
WANT = 2 * FEEDS["x"] * FEEDS["x"]


@pytest.mark.parametrize("form", ["proto", "bytes", "path"])
def test_every_model_form_gives_the_same_outputs(tmp_path, form):
    model = _model()
    if form == "bytes":
        model = model.SerializeToString()
    elif form == "path":
        onnx.save(model, tmp_path / "m.onnx")
        model = tmp_path / "m.onnx"
    [got] = onnxruntime_outputs(model, FEEDS)
    np.testing.assert_array_equal(got, WANT)
    [ref] = onnx_reference_outputs(model, FEEDS)
    np.testing.assert_array_equal(ref, WANT)


def test_the_session_takes_threads_and_optimization_level():
    ort = import_onnxruntime()
    session = onnxruntime_session(_model(), threads=2, optimize=False)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert onnxruntime_session(_model()).get_session_options().intra_op_num_threads == 1


def test_a_missing_onnxruntime_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what `import` sees when absent
    with pytest.raises(ImportError, match=r"pip install polyonnx\[test\]"):
        onnxruntime_outputs(_model(), FEEDS)
