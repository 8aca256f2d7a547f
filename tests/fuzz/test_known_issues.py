"""Bugs the fuzzer found that belong to other parts of the compiler, pinned as strict xfails.

When one is fixed its test starts passing, fails as XPASS, and the marker is removed.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import polyonnx
from tests.reliability.models import model, tensor


@pytest.mark.xfail(strict=True, reason="krnl/program.py: a graph output that is a view of a "
                   "graph input is copied by a kernel appended after its consumers, which "
                   "read the output buffer before it is written (fuzz graph seed 194)")
def test_a_view_of_an_input_that_is_an_output_and_also_consumed():
    m = model([helper.make_node("Flatten", ["x"], ["y"], axis=1),
               helper.make_node("Neg", ["y"], ["z"])],
              [tensor("x", [2, 3])], [tensor("y", [2, 3]), tensor("z", [2, 3])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, z = polyonnx.InferenceSession(m).run(None, {"x": x})
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, -x)
