"""Concatenations in place: which are, the placements of a chain, and results vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.frontend import import_model
from polyonnx.graph.passes import optimize
from polyonnx.krnl.placement import concat_placements
from polyonnx.testing import assert_close, onnxruntime_outputs, random_feeds

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)


def _model(nodes, inits, x_shape, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "concat",
        [helper.make_tensor_value_info("x", F, list(x_shape))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _dense_block(layers: int = 3, channels: int = 32, growth: int = 32) -> onnx.ModelProto:
    """x -> relu; each layer: conv 3x3 of everything so far, concatenated (DenseNet)."""
    nodes, inits = [helper.make_node("Relu", ["x"], ["f0"])], {}
    width = channels
    for k in range(layers):
        w = (RNG.standard_normal((growth, width, 3, 3)) / np.sqrt(9 * width)).astype("f4")
        inits[f"w{k}"] = w
        nodes.append(helper.make_node("Conv", [f"f{k}", f"w{k}"], [f"n{k}"], pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"n{k}"], [f"r{k}"]))
        nodes.append(helper.make_node("Concat", [f"f{k}", f"r{k}"], [f"f{k + 1}"], axis=1))
        width += growth
    nodes.append(helper.make_node("Sigmoid", [f"f{layers}"], ["y"]))
    return _model(nodes, inits, (1, channels, 10, 10))


def _check(model: onnx.ModelProto, threads: int = 1) -> polyonnx.Compiled:
    options = polyonnx.Options(num_threads=threads, cache=False)
    sess = polyonnx.InferenceSession(model, options=options)
    feeds = random_feeds(sess.get_inputs())
    assert_close(sess.run(None, feeds), onnxruntime_outputs(model, feeds), rtol=1e-4, atol=1e-5)
    return polyonnx.compile(model, options)


def test_a_chain_of_concatenations_lives_in_the_last_one():
    graph = optimize(import_model(_dense_block()))
    computed = {o for n in graph.nodes for o in n.outputs}
    placements, done = concat_placements(graph, computed, set())
    assert len(done) == 3
    assert {p.root for p in placements.values()} == {"f3"}
    # f0 (32 channels) first, then each layer's 32 new ones after everything before them.
    assert placements["f0"].offset == (0, 0, 0, 0)
    assert [placements[f"r{k}"].offset[1] for k in range(3)] == [32, 64, 96]
    assert placements["f2"].offset == (0, 0, 0, 0) and placements["f2"].shape == (1, 128, 10, 10)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("blocked", [True, False])
def test_a_dense_block_runs_without_a_concat_kernel(blocked, threads):
    model = _dense_block()
    options = polyonnx.Options(num_threads=threads, cache=False, channel_blocks=blocked)
    sess = polyonnx.InferenceSession(model, options=options)
    feeds = random_feeds(sess.get_inputs())
    assert_close(sess.run(None, feeds), onnxruntime_outputs(model, feeds), rtol=1e-4, atol=1e-5)
    kernels = polyonnx.compile(model, options).program.kernels
    assert not [k.name for k in kernels if k.name.endswith("Concat")]


def test_along_a_spatial_axis_and_with_other_readers():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Sigmoid", ["x"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=2),
        helper.make_node("Neg", ["c"], ["y"]),
        helper.make_node("Tanh", ["a"], ["z"]),  # another reader of a slice
    ]
    compiled = _check(_model(nodes, {}, (2, 3, 4, 5), ("y", "z")))
    assert not [k.name for k in compiled.program.kernels if k.name.endswith("Concat")]


@pytest.mark.parametrize(
    "why",
    ["graph input", "graph output", "read by a reshape", "used twice", "two concats"],
)
def test_concatenations_that_stay_copies(why):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"])]
    inits, outputs = {}, ["y"]
    if why == "graph input":
        nodes.append(helper.make_node("Concat", ["x", "b"], ["y"], axis=1))
    elif why == "graph output":
        nodes.append(helper.make_node("Concat", ["a", "b"], ["y"], axis=1))
    elif why == "read by a reshape":
        inits["shape"] = np.array([-1], np.int64)
        nodes += [
            helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
            helper.make_node("Reshape", ["a", "shape"], ["flat"]),
            helper.make_node("Neg", ["c"], ["y"]),
        ]
        outputs.append("flat")
    elif why == "used twice":
        nodes += [
            helper.make_node("Concat", ["a", "a"], ["c"], axis=1),
            helper.make_node("Neg", ["c"], ["y"]),
        ]
    else:
        nodes += [
            helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
            helper.make_node("Concat", ["b", "a"], ["d"], axis=1),
            helper.make_node("Add", ["c", "d"], ["y"]),
        ]
    compiled = _check(_model(nodes, inits, (1, 3, 4, 4), outputs))
    assert [k.name for k in compiled.program.kernels if k.name.endswith("Concat")]
