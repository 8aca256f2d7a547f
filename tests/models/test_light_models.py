"""The onnx package's nine "light" models, with random weights, against onnxruntime.

Each model is compared on its softmax output and on the pre-softmax logits (an extra output);
relative error = max |polyonnx - onnxruntime| / max |onnxruntime| must be <= 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

import polyonnx

from .builders import LIGHT_MODELS
from .conftest import assert_close


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_matches_onnxruntime(name, light_model, onnxruntime_run):
    model = light_model(name, seed=0, logits=True)
    sess = polyonnx.InferenceSession(model)
    [inp] = sess.get_inputs()
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    names = [o.name for o in model.graph.output]
    want = onnxruntime_run(model, {inp.name: x})
    got = sess.run(None, {inp.name: x})
    assert [o.name for o in sess.get_outputs()] == names
    assert_close(got, want, names)
