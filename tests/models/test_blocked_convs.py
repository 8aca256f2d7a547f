"""Channel-blocked convolutions compiled natively (this host's block, its register tiles, with
and without threads) against onnxruntime: odd sizes that make the tiles ragged, paired and not,
strides, dilations, asymmetric pads, a residual block and MaxPool."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.testing import assert_relative_error, onnxruntime_outputs

F = TensorProto.FLOAT


def _block_model(c: int, oc: int, size: int, conv_attrs: dict, seed: int) -> onnx.ModelProto:
    """x -> conv(k, attrs) -> relu -> conv 1x1 -> add(residual from the first relu) -> relu
    -> maxpool 3x3/2 pad 1, and the first conv's output as a second graph output."""
    rng = np.random.default_rng(seed)
    k = conv_attrs.pop("k")
    w1 = (rng.standard_normal((oc, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    w2 = (rng.standard_normal((oc, oc, 1, 1)) / np.sqrt(oc)).astype(np.float32)
    b1, b2 = rng.standard_normal(oc).astype(np.float32), rng.standard_normal(oc).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **conv_attrs),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node(
            "MaxPool", ["r2"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "blocked",
        [helper.make_tensor_value_info("x", F, [1, c, size, size])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("c1", F, None)],
        [
            numpy_helper.from_array(a, n)
            for n, a in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


CASES = {
    "3x3_pad_rows_divide_by_7": (64, 64, 14, {"k": 3, "pads": [1, 1, 1, 1]}),
    "3x3_ragged_rows": (64, 128, 11, {"k": 3, "pads": [1, 1, 1, 1]}),
    "strided_asym_pads": (32, 64, 13, {"k": 3, "pads": [0, 1, 2, 1], "strides": [2, 2]}),
    "dilated": (32, 96, 12, {"k": 3, "pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "1x1_long_reduction": (1024, 64, 7, {"k": 1}),
    "rgb_stem": (3, 64, 23, {"k": 7, "pads": [3, 3, 3, 3], "strides": [2, 2]}),
}


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_blocked_block_matches_onnxruntime(case, threads):
    c, oc, size, attrs = CASES[case]
    model = _block_model(c, oc, size, dict(attrs), seed=len(case))
    sess = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads))
    x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)
    got = sess.run(None, {"x": x})
    want = onnxruntime_outputs(model, {"x": x})
    assert_relative_error(got, want, 1e-4, ["y", "c1"])
    ops = {n.op_type for n in polyonnx.pipeline.to_graph(model).nodes}
    assert "ConvBlocked" in ops and "MaxPoolBlocked" in ops
