"""Grouped and depthwise convolutions compiled natively (this host's blocks and tiles, 1 and 2
threads) against onnxruntime: blocked (whole channel blocks per group; depthwise on a blocked
value) and NCHW (channels per group that no block divides, multipliers, a depthwise conv on a
graph input), strided, dilated, padded, 1-D/2-D/3-D, with fused epilogues."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.pipeline import to_graph
from polyonnx.testing import assert_relative_error, onnxruntime_outputs

F = TensorProto.FLOAT


@dataclass(frozen=True)
class ConvSpec:
    """One conv of a chain: output channels, kernel, group and attributes, then ``act``."""

    out_channels: int
    kernel: int
    group: int = 1
    attrs: dict = field(default_factory=dict)
    act: str | None = None


def _chain_model(channels: int, spatial: tuple[int, ...], convs: list[ConvSpec], seed: int):
    """x -> each conv (+ bias, + its activation) in turn; every conv's result is an output."""
    rng = np.random.default_rng(seed)
    rank = len(spatial)
    nodes, inits, outputs = [], [], []
    x, c = "x", channels
    for k, spec in enumerate(convs):
        shape = (spec.out_channels, c // spec.group, *[spec.kernel] * rank)
        fan_in = c // spec.group * spec.kernel**rank
        w = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        b = rng.standard_normal(spec.out_channels).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        y = f"conv{k}"
        attrs = {"group": spec.group, **spec.attrs}
        nodes.append(helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [y], **attrs))
        if spec.act == "Clip":
            lo, hi = f"lo{k}", f"hi{k}"
            inits += [
                numpy_helper.from_array(np.array(0.0, np.float32), lo),
                numpy_helper.from_array(np.array(6.0, np.float32), hi),
            ]
            nodes.append(helper.make_node("Clip", [y, lo, hi], [f"act{k}"]))
        elif spec.act == "SiLU":
            nodes.append(helper.make_node("Sigmoid", [y], [f"sig{k}"]))
            nodes.append(helper.make_node("Mul", [y, f"sig{k}"], [f"act{k}"]))
        elif spec.act is not None:
            nodes.append(helper.make_node(spec.act, [y], [f"act{k}"]))
        x, c = (f"act{k}" if spec.act else y), spec.out_channels
        outputs.append(x)
    graph = helper.make_graph(
        nodes,
        "grouped",
        [helper.make_tensor_value_info("x", F, [1, channels, *spatial])],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


def _pads(rank: int, p: int) -> dict:
    return {"pads": [p] * 2 * rank}


# (channels, spatial, convs, blocked: the grouped/depthwise conv runs as ConvBlocked)
CASES = {
    "grouped_3x3": (64, (13, 13), [ConvSpec(64, 3, 2, _pads(2, 1), "Relu")], True),
    # 48 channels per group: blocks of 16 (one AVX-512 vector, AVX2's two).
    "grouped_5x5_48_per_group": (96, (11, 11), [ConvSpec(128, 5, 2, _pads(2, 2), "Relu")], True),
    "grouped_strided_dilated": (
        128,
        (15, 15),
        [ConvSpec(128, 3, 4, {"strides": [2, 2], "dilations": [2, 2], **_pads(2, 2)})],
        True,
    ),
    "grouped_1d": (64, (37,), [ConvSpec(64, 3, 2, _pads(1, 1), "Relu")], True),
    "depthwise_relu6": (
        32,
        (14, 14),
        [ConvSpec(64, 1, act="Clip"), ConvSpec(64, 3, 64, _pads(2, 1), "Clip")],
        True,
    ),
    "depthwise_5x5_strided_hardswish": (
        32,
        (17, 17),
        [ConvSpec(64, 1, act="HardSwish"), ConvSpec(64, 5, 64, {"strides": [2, 2], **_pads(2, 2)})],
        True,
    ),
    "depthwise_dilated_silu": (
        32,
        (12, 12),
        [ConvSpec(32, 1), ConvSpec(32, 3, 32, {"dilations": [2, 2], **_pads(2, 2)}, "SiLU")],
        True,
    ),
    "depthwise_asym_pads": (
        32,
        (9, 10),
        [ConvSpec(32, 1), ConvSpec(32, 3, 32, {"pads": [0, 1, 2, 1]}, "Relu")],
        True,
    ),
    "depthwise_1d": (32, (50,), [ConvSpec(64, 1), ConvSpec(64, 5, 64, _pads(1, 2), "Relu")], True),
    "depthwise_3d": (32, (6, 7, 8), [ConvSpec(32, 1), ConvSpec(32, 3, 32, _pads(3, 1))], True),
    # Channels that are not whole blocks: the last block zero-padded (72 in 80 or 96).
    "depthwise_odd_channels": (
        32,
        (14, 14),
        [ConvSpec(72, 1, act="Relu"), ConvSpec(72, 3, 72, _pads(2, 1), "Clip")],
        True,
    ),
    # NCHW: a batch of GEMMs over the pixels (ShuffleNet's grouped 1x1 convs).
    "grouped_1x1": (136, (7, 7), [ConvSpec(136, 1, 4, act="Relu")], False),
    "grouped_1x1_strided": (60, (14, 14), [ConvSpec(120, 1, 3, {"strides": [2, 2]})], False),
    "grouped_3x3_4_per_group": (32, (12, 12), [ConvSpec(32, 3, 8, _pads(2, 1), "Relu")], False),
    "depthwise_on_input": (40, (14, 14), [ConvSpec(40, 3, 40, _pads(2, 1), "Relu")], False),
    "depthwise_multiplier_2": (12, (15, 15), [ConvSpec(24, 3, 12, {"strides": [2, 2]})], False),
    "grouped_3_odd_strided_dilated": (
        15,
        (13, 11),
        [ConvSpec(21, 3, 3, {"strides": [2, 1], "dilations": [1, 2], **_pads(2, 2)}, "Relu")],
        False,
    ),
    "grouped_3_1d_strided": (21, (40,), [ConvSpec(9, 4, 3, {"strides": [3]}, "Relu")], False),
    "grouped_3d": (12, (5, 6, 7), [ConvSpec(18, 3, 3, _pads(3, 1))], False),
}


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_conv_matches_onnxruntime(case: str, threads: int) -> None:
    channels, spatial, convs, blocked = CASES[case]
    model = _chain_model(channels, spatial, convs, seed=len(case))
    graph = to_graph(model)
    grouped = [n for n in graph.nodes if dict(n.attrs).get("group", 1) > 1]
    assert grouped and all((n.op_type == "ConvBlocked") == blocked for n in grouped), [
        n.op_type for n in grouped
    ]
    sess = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads))
    x = np.random.default_rng(1).standard_normal((1, channels, *spatial)).astype(np.float32)
    names = [o.name for o in model.graph.output]
    assert_relative_error(
        sess.run(None, {"x": x}), onnxruntime_outputs(model, {"x": x}), 1e-4, names
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_grouped_conv_matches_onnxruntime(seed: int) -> None:
    # Random rank, group count, channels per group (odd ones too), kernel, stride, dilation
    # and pads, after a 1x1 conv so that whole-block shapes run on a blocked input.
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    group = int(rng.choice([2, 3, 4, 5]))
    per_group = int(rng.choice([1, 3, 7, 16, 32]))
    out_per_group = per_group if per_group == 1 else int(rng.choice([per_group, 5, 16]))
    kernel = int(rng.integers(1, 4))
    attrs = {
        "strides": [int(rng.integers(1, 3)) for _ in range(rank)],
        "dilations": [int(rng.integers(1, 3)) for _ in range(rank)],
        "pads": [int(rng.integers(0, kernel)) for _ in range(2 * rank)],
    }
    spatial = tuple(int(rng.integers(6, 14 if rank < 3 else 8)) for _ in range(rank))
    channels = group * per_group
    convs = [
        ConvSpec(channels, 1, act="Relu"),
        ConvSpec(group * out_per_group, kernel, group, attrs, "Relu"),
    ]
    model = _chain_model(channels, spatial, convs, seed)
    x = rng.standard_normal((1, channels, *spatial)).astype(np.float32)
    names = [o.name for o in model.graph.output]
    assert_relative_error(
        polyonnx.InferenceSession(model).run(None, {"x": x}),
        onnxruntime_outputs(model, {"x": x}),
        1e-4,
        names,
    )
