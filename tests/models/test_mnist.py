"""MNIST (the mnist-8 model zoo architecture, random weights) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import polyonnx
from polyonnx.testing import assert_relative_error, onnxruntime_outputs
from polyonnx.testing.zoo import mnist_model as build_mnist_model


def test_mnist_matches_onnxruntime_on_several_inputs(mnist_model):
    sess = polyonnx.InferenceSession(mnist_model)
    assert [i.name for i in sess.get_inputs()] == ["Input3"]
    assert [(o.name, o.shape) for o in sess.get_outputs()] == [("Plus214_Output_0", [1, 10])]
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.standard_normal((1, 1, 28, 28)).astype(np.float32)
        got = sess.run(None, {"Input3": x})
        want = onnxruntime_outputs(mnist_model, {"Input3": x})
        assert_relative_error(got, want, 1e-4, ["Plus214_Output_0"])


@pytest.mark.parametrize("opset", [8, 13])
def test_mnist_opsets_and_seeds(opset):
    model = build_mnist_model(seed=opset, opset=opset)
    x = np.random.default_rng(opset).uniform(0, 1, (1, 1, 28, 28)).astype(np.float32)
    got = polyonnx.InferenceSession(model).run(["Plus214_Output_0"], {"Input3": x})
    want = onnxruntime_outputs(model, {"Input3": x})
    assert_relative_error(got, want, 1e-4, ["Plus214_Output_0"])


def test_mnist_compiles_to_the_expected_kernels(mnist_model):
    kernels = polyonnx.compile(mnist_model).program.kernels
    ops = [k.ops for k in kernels]
    # Conv + bias Add + Relu fuse into one kernel; the weight Reshape is folded away.
    assert ("Convolution28", "Plus30", "ReLU32") in ops
    assert ("Convolution110", "Plus112", "ReLU114") in ops
    assert not any("Times212_reshape1" in k for k in ops)
