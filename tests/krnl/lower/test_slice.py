"""Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range,
ReverseSequence, Shape, Size vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.errors import UnsupportedOpError
from polyonnx.testing import onnx_reference_outputs
from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand, run_krnl

I = np.int64  # noqa: E741

SLICES = [
    ([0, 1], [2, 3], [0, 1], [1, 1]),
    ([-1], [-4], [1], [-1]),
    ([3, 0], [-100, 100], [2, 0], [-2, 2]),
    ([1], [1000], [-1], [2]),
    ([10], [-10], [0], [-1]),
    ([2], [1], [0], [1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES, ids=str)
def test_slice(starts: list[int], ends: list[int], axes: list[int], steps: list[int]) -> None:
    check_op(
        "Slice",
        [
            ("x", rand(3, 4, 5)),
            ("s", np.array(starts, I)),
            ("e", np.array(ends, I)),
            ("a", np.array(axes, I)),
            ("t", np.array(steps, I)),
        ],
        constants=("s", "e", "a", "t"),
    )


def test_slice_default_axes_steps() -> None:
    check_op(
        "Slice",
        [("x", rand(4, 5)), ("s", np.array([1, -3], I)), ("e", np.array([3, 5], I))],
        constants=("s", "e"),
    )


def test_slice_opset1() -> None:
    check_op("Slice", [("x", rand(4, 5))], {"starts": [1], "ends": [-1], "axes": [1]}, opset=9)


def test_slice_runtime_starts_unsupported() -> None:
    model = make_model(
        "Slice",
        [("x", rand(4)), ("s", np.array([1], I)), ("e", np.array([3], I))],
        constants={"e": np.array([3], I)},
    )
    graph = graph_from_model(model)
    with pytest.raises(UnsupportedOpError, match="starts"):
        node_kernel(graph, graph.nodes[0])


def _split(
    axis: int, split: list[int] | None, opset: int, n: int, attrs: dict | None = None
) -> None:
    from tests.krnl.harness import check

    inputs = [("x", rand(6, 4, 3))]
    consts = {}
    if split is not None and opset >= 13:
        inputs.append(("s", np.array(split, I)))
        consts["s"] = np.array(split, I)
    a = {"axis": axis} | (attrs or {})
    if split is not None and opset < 13:
        a["split"] = split
    model = make_model("Split", inputs, a, opset, consts, n_outputs=n)
    check(model, {"x": inputs[0][1]})


def test_split_variants() -> None:
    _split(0, [1, 2, 3], 13, 3)
    _split(1, [3, 1], 11, 2)
    _split(-1, None, 13, 3)
    _split(0, None, 18, 4, {"num_outputs": 4})
    _split(1, [0, 4], 13, 2)


@pytest.mark.parametrize("shape", [[3, 1, 4], [2, 1, 1, 1], [1], [4]], ids=str)
def test_expand(shape: list[int]) -> None:
    check_op("Expand", [("x", rand(3, 1)), ("s", np.array(shape, I))], constants=("s",))


def test_tile() -> None:
    check_op("Tile", [("x", rand(2, 3)), ("r", np.array([2, 3], I))], constants=("r",))
    check_op(
        "Tile",
        [("x", np.arange(6, dtype=np.int32).reshape(3, 2)), ("r", np.array([1, 2], I))],
        constants=("r",),
    )


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str) -> None:
    check_op("DepthToSpace", [("x", rand(2, 8, 2, 3))], {"blocksize": 2, "mode": mode})


def test_space_to_depth() -> None:
    check_op("SpaceToDepth", [("x", rand(2, 3, 4, 6))], {"blocksize": 2})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2, 10])
def test_trilu(upper: int, k: int | None) -> None:
    inputs = [("x", rand(2, 3, 4))] + ([] if k is None else [("k", np.array(k, I))])
    check_op("Trilu", inputs, {"upper": upper}, opset=14)


@pytest.mark.parametrize("k", [0, 1, -2, 7])
def test_eye_like(k: int) -> None:
    check_op("EyeLike", [("x", rand(3, 4))], {"k": k})
    check_op("EyeLike", [("x", np.zeros((3, 3), np.int32))], {"k": k, "dtype": 7})


def test_range_runtime_values() -> None:
    from tests.krnl.harness import check

    for dtype, (s, lim, d) in (("float32", (1.0, 3.0, 0.5)), ("int64", (10, 4, -3))):
        consts = {"lim": np.array(lim, dtype)}
        model = make_model(
            "Range",
            [("s", np.array(s, dtype)), ("lim", consts["lim"]), ("d", np.array(d, dtype))],
            opset=11,
            constants=consts,
        )
        # Shape inference cannot type the output from fed values: fix its length.
        n = len(np.arange(s, lim, d))
        model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = n
        check(model, {"s": np.array(s, dtype), "d": np.array(d, dtype)})


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis: int) -> None:
    x = rand(4, 4, 2)
    check_op(
        "ReverseSequence",
        [("x", x), ("l", np.array([4, 1, 3, 0], I))],
        {"time_axis": time_axis, "batch_axis": 1 - time_axis},
    )


def test_shape_size() -> None:
    check_op("Shape", [("x", rand(2, 3, 4))])
    check_op("Shape", [("x", rand(2, 3, 4))], {"start": 1, "end": -1}, opset=15)
    check_op("Size", [("x", rand(2, 3, 4))])


def test_space_to_depth_crd() -> None:
    # Opset 25 adds mode to SpaceToDepth; onnxruntime may not implement it, so compare with
    # the inverse: DepthToSpace(CRD) of SpaceToDepth(CRD) is the identity.
    x = rand(1, 2, 4, 6)
    model = make_model("SpaceToDepth", [("x", x)], {"blocksize": 2}, opset=17)
    graph = graph_from_model(model)
    node = graph.nodes[0]
    crd = type(node)(
        node.name, node.op_type, node.inputs, node.outputs, {"blocksize": 2, "mode": "CRD"}
    )
    y = run_krnl(
        type(graph)(
            graph.name,
            graph.inputs,
            graph.outputs,
            (crd,),
            graph.values,
            graph.constants,
            graph.opset,
        ),
        {"x": x},
    )["y"]
    want = x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 1, 3, 5, 2, 4).reshape(1, 8, 2, 3)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("shape,axes", [([2, 5, 2], None), ([3, 2], [-2, -1]), ([6], [1])], ids=str)
def test_center_crop_pad(shape: list[int], axes: list[int] | None) -> None:
    x = rand(3, 4, 5)
    model = make_model(
        "CenterCropPad",
        [("x", x), ("s", np.array(shape, I))],
        {} if axes is None else {"axes": axes},
        opset=18,
        constants={"s": np.array(shape, I)},
    )
    want = onnx_reference_outputs(model, {"x": x})[0]
    np.testing.assert_array_equal(run_krnl(graph_from_model(model), {"x": x})["y"], want)
