"""Ops with no lowering but an ONNX function body compile as that body."""

from __future__ import annotations

import numpy as np
from onnx import helper as oh

import polyonnx
from polyonnx.frontend import import_model
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import model, tensor


def _swiglu():
    return model(
        [oh.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5)],
        [tensor("a", [3, 4]), tensor("b", [3, 4])],
        [tensor("y", [3, 4])],
        opset=28,
    )


def test_a_function_op_is_replaced_by_its_body():
    g = import_model(_swiglu(), expand=lambda op, opset: op == "SwiGLU")
    assert "SwiGLU" not in {n.op_type for n in g.nodes}
    assert "SwiGLU" in {n.op_type for n in import_model(_swiglu()).nodes}


def test_a_function_op_runs_as_the_reference_computes_it():
    m = _swiglu()
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal((3, 4)).astype(np.float32) for k in "ab"}
    got = polyonnx.InferenceSession(m).run(None, feeds)[0]
    np.testing.assert_allclose(got, onnx_reference_outputs(m, feeds)[0], rtol=1e-5)
