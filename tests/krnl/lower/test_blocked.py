"""Channel-blocked convolutions (layout pass + ConvBlocked/ToBlocked/FromBlocked lowerings) vs
onnxruntime, through the krnl interpreter; blocks of 2 keep the models tiny."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from polyonnx.graph.passes.layout import blocked_layout
from polyonnx.krnl.ir import Kernel
from polyonnx.krnl.program import build_program
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import graph_from_model, make_model, rand, run_krnl

BLOCK = 2

CASES = {
    "1x1": ({}, 1),
    "3x3_pads": ({"pads": [1, 1, 1, 1]}, 3),
    "asym_pads_strides": ({"pads": [0, 2, 1, 0], "strides": [2, 1]}, 3),
    "dilations": ({"dilations": [2, 1], "pads": [2, 0, 1, 1]}, 3),
    "same_upper": ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 3),
    "strided_1x1": ({"strides": [2, 2]}, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_blocked_matches_onnxruntime(case: str) -> None:
    attrs, k = CASES[case]
    _check_one_conv(rand(1, 4, 6, 5), rand(6, 4, k, k, seed=1), rand(6, seed=2), attrs)


def _check_one_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict) -> None:
    """A Conv on a graph input, blocked (in, conv, out), matches onnxruntime."""
    model = make_model("Conv", [("x", x), ("w", w), ("b", b)], attrs, constants={"w": w, "b": b})
    graph = blocked_layout(graph_from_model(model), BLOCK)
    assert [n.op_type for n in graph.nodes] == ["ToBlocked", "ConvBlocked", "FromBlocked"]
    got = run_krnl(graph, {"x": x})
    np.testing.assert_allclose(
        got["y"], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5
    )


def _conv_kernel(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict) -> Kernel:
    """The ConvBlocked kernel of a one-Conv model (constant weights and bias) in blocks."""
    model = make_model("Conv", [("x", x), ("w", w), ("b", b)], attrs, constants={"w": w, "b": b})
    graph = blocked_layout(graph_from_model(model), BLOCK)
    program = build_program(graph, [[n] for n in graph.nodes])
    (conv,) = [k for k in program.kernels if "ConvBlocked" in k.name]
    return conv


def _chain_model() -> onnx.ModelProto:
    """conv -> relu -> conv(3x3) -> add(residual from the first relu) -> relu, plus a MaxPool
    reading the first relu (outside the blocked domain) and the first conv as an output."""
    w1, w2 = rand(4, 2, 1, 1, seed=1), rand(4, 4, 3, 3, seed=2)
    b1 = rand(4, seed=3)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
        helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2]),
    ]
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", f, [1, 2, 5, 5])],
        [
            helper.make_tensor_value_info("y", f, [1, 4, 5, 5]),
            helper.make_tensor_value_info("p", f, [1, 4, 4, 4]),
            helper.make_tensor_value_info("c1", f, [1, 4, 5, 5]),
        ],
        [numpy_helper.from_array(a, n) for n, a in (("w1", w1), ("w2", w2), ("b1", b1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_layout_changes_once_per_value() -> None:
    model = _chain_model()
    graph = blocked_layout(graph_from_model(model), BLOCK)
    ops = [(n.op_type, n.inputs[0]) for n in graph.nodes]
    # x enters the blocked domain once; the three outputs leave it once each; the residual
    # Add, both Relus and the MaxPool stay blocked.
    assert [op for op, _ in ops].count("ToBlocked") == 1
    assert sorted(i for op, i in ops if op == "FromBlocked") == ["c1__blk", "p__blk", "y__blk"]
    assert "MaxPoolBlocked" in [op for op, _ in ops]
    assert {"Add", "Relu"} <= {n.op_type for n in graph.nodes if n.outputs[0].endswith("__blk")}
    feeds = {"x": rand(1, 2, 5, 5)}
    got = run_krnl(graph, feeds)
    for name, w in zip(("y", "p", "c1"), onnxruntime_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 2, 1, 0]])
def test_conv_on_unblocked_channels(pads: list[int]) -> None:
    # Three input channels (an image) are read as they are; the output is blocked.
    x, w, b = rand(1, 3, 7, 6), rand(4, 3, 3, 3, seed=1), rand(4, seed=2)
    model = make_model(
        "Conv",
        [("x", x), ("w", w), ("b", b)],
        {"pads": pads, "strides": [2, 1]},
        constants={"w": w, "b": b},
    )
    graph = blocked_layout(graph_from_model(model), BLOCK)
    assert [n.op_type for n in graph.nodes] == ["ConvBlocked", "FromBlocked"]
    np.testing.assert_allclose(
        run_krnl(graph, {"x": x})["y"],
        onnxruntime_outputs(model, {"x": x})[0],
        rtol=1e-4,
        atol=1e-5,
    )


POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 3], "ceil_mode": 1, "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "ceil_mode": 1, "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
]


def _pool_model(op: str, attrs: dict, channels: int, act: str | None = None) -> onnx.ModelProto:
    """x -> 1x1 conv to ``channels`` -> ``act`` -> the pool."""
    w = rand(channels, 2, 1, 1, seed=1)
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"])]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["a"]))
    nodes.append(helper.make_node(op, ["a" if act else "c"], ["y"], **attrs))
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", f, [1, 2, 7, 8])],
        [helper.make_tensor_value_info("y", f, None)],
        [numpy_helper.from_array(w, "w")],
    )
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    )


@pytest.mark.parametrize("channels", [4, 3])  # (3 in blocks of 2: the last one padded)
@pytest.mark.parametrize(("op", "attrs"), POOLS)
def test_pools_blocked(op: str, attrs: dict, channels: int) -> None:
    model = _pool_model(op, attrs, channels)
    feeds = {"x": rand(1, 2, 7, 8)}
    blocked = blocked_layout(graph_from_model(model), BLOCK)
    assert [n.op_type for n in blocked.nodes] == [
        "ToBlocked",
        "ConvBlocked",
        f"{op}Blocked",
        "FromBlocked",
    ]
    np.testing.assert_allclose(
        run_krnl(blocked, feeds)["y"], onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-6
    )


def test_an_average_counting_the_padding_of_a_non_zero_padding_stays_nchw() -> None:
    # Sigmoid leaves 0.5 in the padding of the last block; an average dividing by taps it does
    # not read would leave 0.5 * taps read / all taps there: not the number the layout knows.
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    model = _pool_model("AveragePool", attrs, 3, act="Sigmoid")
    blocked = blocked_layout(graph_from_model(model), BLOCK)
    assert [n.op_type for n in blocked.nodes][-2:] == ["FromBlocked", "AveragePool"]
    feeds = {"x": rand(1, 2, 7, 8)}
    np.testing.assert_allclose(
        run_krnl(blocked, feeds)["y"], onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-6
    )
    # Without counting the padding, or on whole blocks, the average follows the blocks.
    for other, channels in (({**attrs, "count_include_pad": 0}, 3), (attrs, 4)):
        model = _pool_model("AveragePool", other, channels, act="Sigmoid")
        ops = [n.op_type for n in blocked_layout(graph_from_model(model), BLOCK).nodes]
        assert "AveragePoolBlocked" in ops


GROUPED = {
    "3x3_pads": ({"pads": [1, 1, 1, 1]}, 3),
    "strides_asym_pads": ({"pads": [0, 2, 1, 0], "strides": [2, 1]}, 3),
    "dilations": ({"dilations": [2, 1], "pads": [2, 0, 1, 1]}, 3),
    "1x1": ({}, 1),
}


@pytest.mark.parametrize("group", [2, 3])
@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_conv_blocked(case: str, group: int) -> None:
    # Two input and four output blocks of 2 channels per group: block-diagonal weights.
    attrs, k = GROUPED[case]
    c, m = 4 * group, 8 * group
    w = rand(m, 4, k, k, seed=1)
    _check_one_conv(rand(1, c, 6, 5), w, rand(m, seed=2), {**attrs, "group": group})


@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_conv_of_one_block_per_group_is_one_nest(case: str) -> None:
    # Four groups of one output block (two input blocks each): the block is the group, one
    # nest over all four blocks, each reading its own group's input blocks.
    attrs, k = GROUPED[case]
    w = rand(4 * BLOCK, 2 * BLOCK, k, k, seed=1)
    x, b = rand(1, 8 * BLOCK, 6, 5), rand(4 * BLOCK, seed=2)
    attrs = {**attrs, "group": 4}
    _check_one_conv(x, w, b, attrs)
    conv = _conv_kernel(x, w, b, attrs)
    (out,) = [b.name for b in conv.buffers if b.kind == "output"]
    # an initial value and an update of the output: one nest, not one per group
    assert sum(s.write.buffer == out for _, s in conv.statements()) == 2


def test_a_dilated_conv_leaves_out_the_rows_of_taps_in_its_padding() -> None:
    # dilation 4, padding 4 on 9 rows: 30% of the (row, tap) pairs read padding; a 3x3 with
    # a one-pixel border on the same rows (7%) multiplies its zeros
    for attrs, guarded in (
        ({"dilations": [4, 4], "pads": [4, 4, 4, 4]}, True),
        ({"pads": [1] * 4}, False),
    ):
        x, w, b = rand(1, 4, 9, 9), rand(4, 4, 3, 3, seed=1), rand(4, seed=2)
        _check_one_conv(x, w, b, attrs)
        guards = [g for _, s in _conv_kernel(x, w, b, attrs).statements() for g in s.guards]
        # the rows' taps bounded on both sides (not the columns', the register tile's rows)
        assert len(guards) == (2 if guarded else 0)
        assert all("kw" not in str(g) for g in guards)


def test_a_dilated_conv_cuts_its_columns_into_runs_of_the_same_taps() -> None:
    # dilation 8, padding 8 on 24 columns: columns 0-7 read taps 1-2, 8-15 all three, 16-23
    # taps 0-1 (22% of the pairs in padding): three nests, each tap range without padding
    x, w, b = rand(1, 4, 5, 24), rand(4, 4, 3, 3, seed=1), rand(4, seed=2)
    attrs = {"dilations": [1, 8], "pads": [1, 8, 1, 8]}
    _check_one_conv(x, w, b, attrs)
    conv = _conv_kernel(x, w, b, attrs)
    (out,) = [b.name for b in conv.buffers if b.kind == "output"]
    taps = [
        next(lp.upper.const - lp.lower.const for lp in loops if lp.iterator == "kw")
        for loops, st in conv.statements()
        if st.write.buffer == out and any(lp.iterator == "kw" for lp in loops)
    ]
    assert taps == [2, 3, 2]


def _depthwise_model(
    rank: int, kernel: int, attrs: dict, act: str | None, bias: bool = True
) -> onnx.ModelProto:
    """x -> conv 1x1 (4 -> 6 channels) -> depthwise conv (``attrs``) -> ``act``: the
    depthwise conv reads a blocked value."""
    size = (7, 6, 5)[-rank:]
    w1, w2, b2 = rand(6, 4, *[1] * rank, seed=1), rand(6, 1, *[kernel] * rank, seed=2), rand(6)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["e"]),
        helper.make_node("Conv", ["e", "w2", "b2" if bias else ""], ["d"], group=6, **attrs),
    ]
    inits = [("w1", w1), ("w2", w2), ("b2", b2)]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["d", "lo", "hi"], ["y"]))
        inits += [("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]
    elif act == "SiLU":
        nodes.append(helper.make_node("Sigmoid", ["d"], ["s"]))
        nodes.append(helper.make_node("Mul", ["d", "s"], ["y"]))
    elif act is not None:
        nodes.append(helper.make_node(act, ["d"], ["y"]))
    f = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "dw",
        [helper.make_tensor_value_info("x", f, [1, 4, *size])],
        [helper.make_tensor_value_info("y" if act else "d", f, None)],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


DEPTHWISE = {
    "3x3_pads": (2, 3, {"pads": [1, 1, 1, 1]}, None),
    "strided_relu6": (2, 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "Clip"),
    "dilated_hardswish": (2, 3, {"pads": [2, 1, 2, 1], "dilations": [2, 1]}, "HardSwish"),
    "5x5_asym_pads_silu": (2, 5, {"pads": [2, 1, 2, 3]}, "SiLU"),
    "1d_same_upper": (1, 3, {"auto_pad": "SAME_UPPER", "strides": [2]}, "Relu"),
    "3d": (3, 3, {"pads": [1, 0, 1, 1, 0, 1]}, "Relu"),
    "valid_no_bias": (2, 3, {}, None),
}


@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_depthwise_conv_blocked(case: str) -> None:
    rank, k, attrs, act = DEPTHWISE[case]
    model = _depthwise_model(rank, k, attrs, act, bias=case != "valid_no_bias")
    graph = blocked_layout(graph_from_model(model), BLOCK)
    convs = [n for n in graph.nodes if n.op_type == "ConvBlocked"]
    assert len(convs) == 2 and dict(convs[1].attrs)["group"] == 6
    feeds = {"x": rand(1, 4, *(7, 6, 5)[-rank:])}
    out = model.graph.output[0].name
    np.testing.assert_allclose(
        run_krnl(graph, feeds)[out], onnxruntime_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("rank", [1, 3])
def test_conv_blocked_1d_3d(rank: int) -> None:
    shape = (1, 4, *(9, 5, 6)[-rank:])
    x, w, b = rand(*shape), rand(6, 4, *[3] * rank, seed=1), rand(6, seed=2)
    _check_one_conv(x, w, b, {"pads": [1] * 2 * rank, "strides": [2] * rank})


def test_block_halves_for_channels_it_divides() -> None:
    # Two input channels per group: blocks of 4 would leave the conv NCHW, blocks of 2 take it.
    x, w = rand(1, 4, 5, 5), rand(8, 2, 3, 3, seed=1)
    model = make_model("Conv", [("x", x), ("w", w)], {"group": 2}, constants={"w": w})
    graph = blocked_layout(graph_from_model(model), 4, smallest=2)
    (conv,) = [n for n in graph.nodes if n.op_type == "ConvBlocked"]
    assert dict(conv.attrs)["block"] == 2


@pytest.mark.parametrize(
    "why, attrs, channels, out_channels, weights_constant",
    [
        ("depthwise on a graph input", {"group": 4}, 4, 4, True),
        ("one input channel per group, two outputs", {"group": 4}, 4, 8, True),
        ("group's channels not a multiple of the block", {"group": 2}, 6, 4, True),
        ("one output channel: its block would be half padding", {}, 4, 1, True),
        ("weights fed at run time", {}, 4, 4, False),
    ],
)
def test_ineligible_convs_stay_nchw(
    why: str, attrs: dict, channels: int, out_channels: int, weights_constant: bool
) -> None:
    group = attrs.get("group", 1)
    x, w = rand(1, channels, 4, 4), rand(out_channels, channels // group, 3, 3, seed=1)
    model = make_model(
        "Conv", [("x", x), ("w", w)], attrs, constants={"w": w} if weights_constant else None
    )
    graph = graph_from_model(model)
    assert blocked_layout(graph, BLOCK) is graph, why
