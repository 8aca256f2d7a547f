"""The in-process JIT: entry points shared by content, module IR freed, code kept."""

from __future__ import annotations

import ctypes
import gc

import numpy as np

import polyonnx
from polyonnx.codegen import jit
from tests.reliability.models import conv_net, relu


def _entry_address(sess: polyonnx.InferenceSession) -> int:
    [exe] = sess._by_shapes.values()
    return ctypes.cast(exe._call, ctypes.c_void_p).value


def test_sessions_of_one_model_share_their_entry_point_and_keep_no_module():
    x = np.ones((1, 3, 8, 8), np.float32)
    first = polyonnx.InferenceSession(conv_net(), num_threads=2)
    want = first.run(None, {"x": x})[0]
    modules = len(jit._engine()._modules)
    again = [polyonnx.InferenceSession(conv_net(), num_threads=2) for _ in range(3)]
    assert {_entry_address(s) for s in again} == {_entry_address(first)}
    assert len(jit._engine()._modules) == modules  # (each used to stay in the engine)
    del first
    gc.collect()
    for s in again:  # the code outlives the session that compiled it
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], want)


def test_different_models_and_options_get_their_own_entry_point():
    sessions = [
        polyonnx.InferenceSession(relu((2, 3))),
        polyonnx.InferenceSession(relu((2, 4))),
        polyonnx.InferenceSession(relu((2, 3)), options=polyonnx.Options(opt_level=1)),
        polyonnx.InferenceSession(relu((2, 3)), options=polyonnx.Options(checked=True)),
    ]
    assert len({_entry_address(s) for s in sessions}) == len(sessions)
    for s in sessions:
        x = -np.arange(s.get_inputs()[0].shape[1] * 2, dtype=np.float32).reshape(2, -1)
        np.testing.assert_array_equal(s.run(None, {"x": x})[0], np.maximum(x, 0))
