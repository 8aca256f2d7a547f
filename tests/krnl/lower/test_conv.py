"""Conv lowering vs onnxruntime: pads, auto_pad, strides, dilations, groups, bias, 1-D/3-D."""

from __future__ import annotations

import pytest

from polyonnx.errors import ModelError
from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand

CASES = {
    "plain": ({}, 3, 4, 1),
    "pads": ({"pads": [1, 1, 1, 1]}, 3, 4, 1),
    "asym_pads": ({"pads": [0, 2, 1, 0]}, 3, 2, 1),
    "strides": ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, 3, 4, 1),
    "dilations": ({"dilations": [2, 1], "pads": [2, 0, 1, 1]}, 2, 3, 1),
    "same_upper": ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 2, 3, 1),
    "same_lower": ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, 2, 3, 1),
    "valid": ({"auto_pad": "VALID", "strides": [1, 2]}, 2, 3, 1),
    "group2": ({"group": 2, "pads": [1, 1, 1, 1]}, 4, 6, 2),
    "depthwise": ({"group": 3, "pads": [1, 1, 1, 1]}, 3, 3, 3),
    "depthwise_mult": ({"group": 2, "strides": [2, 2]}, 2, 4, 2),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv2d(case: str, bias: bool) -> None:
    attrs, c, m, group = CASES[case]
    x, w, b = rand(1, c, 5, 5), rand(m, c // group, 3, 3, seed=1), rand(m, seed=2)
    check_op(
        "Conv", [("x", x), ("w", w), ("b", b) if bias else ("", None)], attrs, constants=("w", "b")
    )


def test_conv_batch_1x1_kernel() -> None:
    check_op("Conv", [("x", rand(2, 3, 3, 4)), ("w", rand(2, 3, 1, 1, seed=1))], constants=("w",))


def test_conv1d() -> None:
    check_op(
        "Conv",
        [("x", rand(1, 2, 7)), ("w", rand(3, 2, 3, seed=1)), ("b", rand(3, seed=2))],
        {"pads": [1, 2], "strides": [2]},
        constants=("w", "b"),
    )


def test_conv3d() -> None:
    check_op(
        "Conv",
        [("x", rand(1, 2, 3, 4, 4)), ("w", rand(2, 2, 2, 3, 3, seed=1))],
        {"pads": [0, 1, 1, 1, 0, 1]},
        constants=("w",),
    )


def test_conv_weights_as_input() -> None:
    # Weights fed at run time: the lowering reads them from their buffer either way.
    check_op(
        "Conv", [("x", rand(1, 2, 4, 4)), ("w", rand(2, 2, 3, 3, seed=1))], {"pads": [1, 1, 1, 1]}
    )


def test_conv_loop_structure() -> None:
    # Constant weights: pad the input once, accumulate channels-last against weights repacked
    # to [ic, kh, kw, oc] at compile time, then write NCHW.
    model = make_model(
        "Conv",
        [("x", rand(1, 3, 5, 5)), ("w", rand(4, 3, 3, 3)), ("b", rand(4))],
        {"pads": [1, 1, 1, 1]},
        constants={"w": rand(4, 3, 3, 3), "b": rand(4)},
    )
    graph = graph_from_model(model)
    kernel = node_kernel(graph, graph.nodes[0])
    assert kernel.buffer("w__packed_ic_k_oc").shape == (3, 3, 3, 4)
    assert str(kernel).splitlines()[1:] == [
        # the zero border, slab by slab, each element written once
        "  for n in [0, 1):",
        "    for c in [0, 3):",
        "      for p0 in [0, 1):",
        "        for p1 in [0, 7):",
        "          S0: conv_0__pad[n, c, p0, p1] = 0.0",
        "  for n in [0, 1):",
        "    for c in [0, 3):",
        "      for p0 in [6, 7):",
        "        for p1 in [0, 7):",
        "          S1: conv_0__pad[n, c, p0, p1] = 0.0",
        "  for n in [0, 1):",
        "    for c in [0, 3):",
        "      for p0 in [1, 6):",
        "        for p1 in [0, 1):",
        "          S2: conv_0__pad[n, c, p0, p1] = 0.0",
        "  for n in [0, 1):",
        "    for c in [0, 3):",
        "      for p0 in [1, 6):",
        "        for p1 in [6, 7):",
        "          S3: conv_0__pad[n, c, p0, p1] = 0.0",
        "  for n in [0, 1):",
        "    for c in [0, 3):",
        "      for p0 in [1, 6):",
        "        for p1 in [1, 6):",
        "          S4: conv_0__pad[n, c, p0, p1] = x[n, c, p0 - 1, p1 - 1]",
        "  for n in [0, 1):",
        "    for oh in [0, 5):",
        "      for ow in [0, 5):",
        "        for oc in [0, 4):",
        "          S5: conv_0__acc[n, oh, ow, oc] = b[oc]",
        "          for ic in [0, 3):",
        "            for kh in [0, 3):",
        "              for kw in [0, 3):",
        "                S6: conv_0__acc[n, oh, ow, oc] = (conv_0__acc[n, oh, ow, oc] + "
        "(conv_0__pad[n, ic, kh + oh, kw + ow] * w__packed_ic_k_oc[ic, kh, kw, oc]))",
        "  for n in [0, 1):",
        "    for oc in [0, 4):",
        "      for oh in [0, 5):",
        "        for ow in [0, 5):",
        "          S7: y[n, oc, oh, ow] = conv_0__acc[n, oh, ow, oc]",
        "}",
    ]


def test_conv_loop_structure_runtime_weights() -> None:
    # Weights fed at run time stay NCHW: init, then the multiply-accumulate over the padded input.
    model = make_model(
        "Conv", [("x", rand(1, 3, 5, 5)), ("w", rand(4, 3, 3, 3))], {"pads": [1, 1, 0, 0]}
    )
    graph = graph_from_model(model)
    text = str(node_kernel(graph, graph.nodes[0]))
    assert text.splitlines()[-10:] == [
        "  for n in [0, 1):",
        "    for oc in [0, 4):",
        "      for oh in [0, 4):",
        "        for ow in [0, 4):",
        "          S3: y[n, oc, oh, ow] = 0.0",
        "          for ic in [0, 3):",
        "            for kh in [0, 3):",
        "              for kw in [0, 3):",
        "                S4: y[n, oc, oh, ow] = (y[n, oc, oh, ow] + (conv_0__pad[n, ic, kh + oh, "
        "kw + ow] * w[oc, ic, kh, kw]))",
        "}",
    ]


@pytest.mark.parametrize("attrs", [{"strides": [0, 1]}, {"pads": [1, 1]}, {"auto_pad": "BOGUS"}])
def test_conv_bad_attributes(attrs: dict) -> None:
    model = make_model(
        "Conv",
        [("x", rand(1, 1, 4, 4)), ("w", rand(1, 1, 3, 3))],
        constants={"w": rand(1, 1, 3, 3)},
    )
    graph = graph_from_model(model)
    node = graph.nodes[0]
    bad = type(node)(node.name, node.op_type, node.inputs, node.outputs, attrs)
    with pytest.raises(ModelError, match="conv_0"):
        node_kernel(graph, bad)


@pytest.mark.parametrize("out_channels", [3, 16])
def test_few_output_channels_run_along_the_row(out_channels: int) -> None:
    """Fewer output channels than a register tile is wide (a style-transfer net's last conv to
    3 colours) would leave most vector lanes empty channels-last: the direct nest's vector
    loop runs along the output row instead. A full tile's worth accumulates channels-last."""
    import numpy as np

    import polyonnx
    from polyonnx.krnl.lower.registry import LowerContext, lower_node
    from polyonnx.testing import onnxruntime_outputs

    w, b = rand(out_channels, 8, 5, 5, seed=1), rand(out_channels, seed=2)
    model = make_model(
        "Conv", [("x", rand(1, 8, 20, 20)), ("w", w), ("b", b)], {"pads": [2, 2, 2, 2]},
        constants={"w": w, "b": b},
    )  # fmt: skip
    graph = graph_from_model(model)
    lowered = lower_node(graph.nodes[0], LowerContext(graph, tile_bytes=64))  # (16 float32)
    packed = [name for name, _ in lowered.constants if name.endswith("__packed_ic_k_oc")]
    assert bool(packed) == (out_channels >= 16)
    x = {"x": rand(1, 8, 20, 20, seed=3)}
    options = polyonnx.Options(channel_blocks=False)
    [got] = polyonnx.InferenceSession(model, options=options).run(None, x)
    np.testing.assert_allclose(got, onnxruntime_outputs(model, x)[0], rtol=1e-4, atol=1e-5)
