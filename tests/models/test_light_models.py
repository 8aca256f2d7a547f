"""The onnx package's nine "light" models, with random weights, against onnxruntime.

Each model is compared on its softmax output and on the pre-softmax logits (an extra output);
relative error = max |polyonnx - onnxruntime| / max |onnxruntime| must be <= 1e-4.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import polyonnx
from polyonnx.testing import assert_relative_error, onnxruntime_outputs, random_feeds
from polyonnx.testing.zoo import LIGHT_MODELS, light_expected_output_path, light_path


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_onnxruntime(name, light_model):
    model = light_model(name, seed=0, logits=True)
    sess = polyonnx.InferenceSession(model)
    feeds = random_feeds(sess.get_inputs())
    names = [o.name for o in model.graph.output]
    want = onnxruntime_outputs(model, feeds)
    got = sess.run(None, feeds)
    assert [o.name for o in sess.get_outputs()] == names
    assert_relative_error(got, want, 1e-4, names)


@pytest.mark.slow
def test_shipped_resnet50_matches_its_expected_output():
    """The ONNX backend suite's real-model case: placeholder weights, input arange(n) / n."""
    x = (np.arange(3 * 224 * 224).reshape(1, 3, 224, 224) / (3 * 224 * 224)).astype(np.float32)
    [got] = polyonnx.InferenceSession(light_path("resnet50")).run(None, {"gpu_0/data_0": x})
    want = numpy_helper.to_array(onnx.load_tensor(light_expected_output_path("resnet50")))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-7)
