"""Winograd convolutions: the transforms' algebra, the weights' transform, and whole convs
(ragged tiles, paddings, batches, epilogues, threads) natively vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.krnl.ir import loads
from polyonnx.krnl.lower.winograd import MATRICES, matrices, transform_weights
from polyonnx.testing import assert_relative_error, onnxruntime_outputs, random_feeds

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


@pytest.mark.parametrize("m", sorted(MATRICES))
def test_the_transforms_compute_a_2d_correlation(m):
    bt, g, at = matrices(m)
    d, w = RNG.standard_normal((m + 2, m + 2)), RNG.standard_normal((3, 3))
    got = at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T
    want = [[(d[i : i + 3, j : j + 3] * w).sum() for j in range(m)] for i in range(m)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", sorted(MATRICES))
def test_weights_transform_is_g_w_gt_per_channel_pair(m):
    w = RNG.standard_normal((2, 3, 3, 3, 4, 5)).astype(np.float32)
    _, g, _ = matrices(m)
    want = np.einsum("rk,sl,abklio->rsabio", g, g, w.astype(np.float64))
    got = transform_weights(w, m)
    assert got.dtype == np.float32 and got.shape == (m + 2, m + 2, 2, 3, 4, 5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _model(x_shape, out_channels, epilogue=None, bias=True, **attrs) -> onnx.ModelProto:
    c = x_shape[1]
    inits = {"w": (RNG.standard_normal((out_channels, c, 3, 3)) / np.sqrt(9 * c)).astype("f4")}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = RNG.standard_normal(out_channels).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], **attrs)]
    graph_inputs = [helper.make_tensor_value_info("x", F, list(x_shape))]
    if epilogue == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif epilogue == "residual":
        # (the epilogue tests pad by 1: the output is the input's size)
        shape = [x_shape[0], out_channels, *x_shape[2:]]
        graph_inputs.append(helper.make_tensor_value_info("r", F, shape))
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    else:
        nodes[0] = helper.make_node("Conv", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        nodes,
        "winograd",
        graph_inputs,
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _check(model: onnx.ModelProto, threads: int = 1) -> polyonnx.Compiled:
    """Native outputs vs onnxruntime: within 1e-5 of the output's largest value (F(4, 3)
    rounds about ten times as much as a direct sum: an output near zero may differ by a few
    1e-6 in absolute terms, more than the node suite's element-wise atol of 1e-7)."""
    options = polyonnx.Options(num_threads=threads, cache=False)
    compiled = polyonnx.compile(model, options)
    sess = polyonnx.InferenceSession(model, options=options)
    feeds = random_feeds(sess.get_inputs())
    assert_relative_error(sess.run(None, feeds), onnxruntime_outputs(model, feeds), 1e-5)
    return compiled


def _winograd_kernels(compiled: polyonnx.Compiled) -> list[str]:
    return [k.name for k in compiled.program.kernels if k.name.endswith("WinogradConv")]


@pytest.mark.parametrize(
    "x_shape, attrs",
    [
        ((1, 64, 16, 16), {"pads": [1, 1, 1, 1]}),  # F(2, 3)
        ((1, 64, 21, 19), {"pads": [1, 1, 1, 1]}),  # F(4, 3), ragged tiles both ways
        ((2, 64, 30, 30), {"pads": [0, 0, 0, 0]}),  # valid: 28x28, batch 2
        ((1, 64, 28, 28), {"pads": [1, 0, 2, 1]}),  # asymmetric
        ((1, 64, 27, 27), {"auto_pad": "SAME_UPPER"}),
    ],
)
def test_winograd_convs_match_onnxruntime(x_shape, attrs):
    compiled = _check(_model(x_shape, 64, **attrs))
    assert _winograd_kernels(compiled), [k.name for k in compiled.program.kernels]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", ["relu", "residual"])
def test_epilogues_run_in_the_output_transform(epilogue, threads):
    compiled = _check(_model((1, 64, 14, 14), 64, epilogue, bias=False, pads=[1] * 4), threads)
    [name] = _winograd_kernels(compiled)
    kernel = next(k for k in compiled.program.kernels if k.name == name)
    # No pass over the output after the transform: every statement writing it computes it.
    output = next(b.name for b in kernel.buffers if b.kind == "output")
    writers = [s for _, s in kernel.statements() if s.write.buffer == output]
    assert all(not any(ld.buffer == output for ld in loads(s.body)) for s in writers)


def test_a_chain_of_winograd_convs_reads_zero_borders_in_place():
    x = helper.make_tensor_value_info("x", F, [1, 64, 14, 14])
    w1 = (RNG.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    w2 = (RNG.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [x],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = _check(onnx.shape_inference.infer_shapes(model))
    assert len(_winograd_kernels(compiled)) == 2
    assert compiled.program.borders  # the first conv writes the second's input bordered


def test_few_channels_and_strided_convs_stay_direct():
    compiled = _check(_model((1, 3, 16, 16), 32, pads=[1] * 4))
    assert not _winograd_kernels(compiled)
    compiled = _check(_model((1, 64, 16, 16), 64, pads=[1] * 4, strides=[2, 2]))
    assert not _winograd_kernels(compiled)
