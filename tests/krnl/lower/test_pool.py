"""MaxPool / AveragePool / global pools vs onnxruntime; MaxUnpool vs onnx.reference and
onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ShapeError, UnsupportedOpError
from polyonnx.krnl.passes import KernelContext, run_passes
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs
from tests.krnl.harness import check, check_op, graph_from_model, make_model, node_kernel, rand

WINDOWS = {
    "plain": {"kernel_shape": [2, 2]},
    "strides": {"kernel_shape": [3, 3], "strides": [2, 2]},
    "pads": {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    "asym_pads": {"kernel_shape": [3, 2], "pads": [1, 0, 0, 1], "strides": [2, 1]},
    "ceil": {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    "ceil_pads": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "same_upper": {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    "same_lower": {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER"},
    "valid": {"kernel_shape": [3, 3], "auto_pad": "VALID"},
}


@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_max_pool(case: str) -> None:
    check_op("MaxPool", [("x", rand(1, 2, 5, 5))], WINDOWS[case])


def test_max_pool_dilations() -> None:
    check_op(
        "MaxPool",
        [("x", rand(1, 2, 6, 6))],
        {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 0]},
    )


def test_max_pool_1d_and_3d() -> None:
    check_op("MaxPool", [("x", rand(1, 2, 7))], {"kernel_shape": [3], "strides": [2]})
    check_op(
        "MaxPool",
        [("x", rand(1, 1, 3, 4, 4))],
        {"kernel_shape": [2, 2, 2], "pads": [0, 1, 1, 1, 0, 0]},
    )


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", sorted(WINDOWS))
def test_average_pool(case: str, include_pad: int) -> None:
    check_op(
        "AveragePool",
        [("x", rand(1, 2, 5, 5))],
        {**WINDOWS[case], "count_include_pad": include_pad},
    )


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_dilations(include_pad: int) -> None:
    check_op(
        "AveragePool",
        [("x", rand(1, 1, 6, 6))],
        {
            "kernel_shape": [2, 2],
            "dilations": [2, 2],
            "pads": [1, 1, 1, 1],
            "count_include_pad": include_pad,
        },
        opset=19,
    )


def test_average_pool_count_temp() -> None:
    # Windows cut by padding get their tap count from a temp buffer; full windows use a constant.
    model = make_model(
        "AveragePool", [("x", rand(1, 1, 4, 4))], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    )
    graph = graph_from_model(model)
    kernel = node_kernel(graph, graph.nodes[0])
    # (The sums go to a temp the krnl passes then put in the output: see below.)
    temps = ["averagepool_0__count", "averagepool_0__sum"]
    assert sorted(b.name for b in kernel.buffers if b.kind == "temp") == temps
    passed = run_passes(kernel, KernelContext()).kernel
    assert [b.name for b in passed.buffers if b.kind == "temp"] == ["averagepool_0__count"]
    model = make_model("AveragePool", [("x", rand(1, 1, 4, 4))], {"kernel_shape": [2, 2]})
    graph = graph_from_model(model)
    kernel = run_passes(node_kernel(graph, graph.nodes[0]), KernelContext()).kernel
    assert all(b.kind != "temp" for b in kernel.buffers)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (2, 2, 3), (1, 2, 2, 3, 2)])
def test_global_pool(op: str, shape: tuple[int, ...]) -> None:
    check_op(op, [("x", rand(*shape))])


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
        {"kernel_shape": [2, 2], "storage_order": 1},
        {"kernel_shape": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
    ],
    ids=str,
)
def test_max_pool_indices(attrs: dict) -> None:
    x = rand(2, 2, 5, 5)
    x[0, 0, 1, :] = 3.0  # ties: the first maximum wins
    model = make_model("MaxPool", [("x", x)], attrs, n_outputs=2, opset=12)
    check(model, {"x": x})


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "p": 1},
        {"kernel_shape": [2, 2], "p": 3, "dilations": [2, 2]},
        {"kernel_shape": [3], "auto_pad": "SAME_UPPER", "p": 2},
    ],
    ids=str,
)
def test_lp_pool(attrs: dict) -> None:
    x = rand(1, 2, 5, 5) if len(attrs["kernel_shape"]) == 2 else rand(1, 2, 6)
    check_op("LpPool", [("x", x)], attrs, opset=18)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p: int) -> None:
    check_op("GlobalLpPool", [("x", rand(1, 3, 4, 2))], {"p": p})


def _unpool_model(
    x_shape: tuple[int, ...],
    attrs: dict,
    output_shape: tuple[int, ...] | None = None,
    constant: bool = True,
) -> onnx.ModelProto:
    ins = ["x", "i"] + (["shape"] if output_shape is not None else [])
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
        helper.make_tensor_value_info("i", TensorProto.INT64, list(x_shape)),
    ]
    inits = []
    if output_shape is not None:
        if constant:
            inits.append(numpy_helper.from_array(np.array(output_shape, np.int64), "shape"))
        else:
            inputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [len(x_shape)]))
    node = helper.make_node("MaxUnpool", ins, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def _pooled(shape: tuple[int, ...], attrs: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """MaxPool's Indices over a random input of ``shape`` (onnxruntime's: onnx.reference's
    are wrong for some windows), with random values to unpool in place of the pooled ones
    (overlapping windows may pick one element twice: which of them is written last then
    shows)."""
    pool = make_model("MaxPool", [("u", rand(*shape, seed=seed))], attrs, n_outputs=2)
    _, idx = onnxruntime_outputs(pool, {"u": rand(*shape, seed=seed)})
    return rand(*idx.shape, seed=seed + 1), idx


def _unpooled(x: np.ndarray, idx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` written at the flat positions ``idx`` of zeros of ``shape``, in order."""
    y = np.zeros(int(np.prod(shape)), x.dtype)
    for k, v in zip(idx.reshape(-1), x.reshape(-1), strict=True):
        y[k] = v
    return y.reshape(shape)


#: (MaxPool input shape, attributes), the unpooled shape of its output the same.
UNPOOL = {
    "plain": ((1, 2, 4, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "overlap": ((2, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "stride_1": ((1, 1, 5, 4), {"kernel_shape": [2, 3]}),
    "pads": ((1, 2, 5, 5), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "asym": ((1, 1, 6, 5), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]}),
    "1d": ((2, 2, 9), {"kernel_shape": [3], "strides": [3]}),
    "3d": ((1, 2, 4, 4, 6), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
}


@pytest.mark.parametrize("case", sorted(UNPOOL))
def test_max_unpool(case: str) -> None:
    # Unpooling MaxPool's Indices: as onnx.reference and onnxruntime do it.
    shape, attrs = UNPOOL[case]
    x, idx = _pooled(shape, attrs)
    model = _unpool_model(x.shape, attrs)
    feeds = {"x": x, "i": idx}
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got, _unpooled(x, idx, shape))
    np.testing.assert_array_equal(got, onnx_reference_outputs(model, feeds)[0])
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, feeds)[0])


@pytest.mark.parametrize(
    "shape,attrs",
    [
        # (6 pooled by 3 with stride 2 and pads 1 gives 3, which unpools to 5.)
        ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((1, 1, 5, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((2, 1, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # (the unpooled shape)
    ],
    ids=["pads", "odd", "same"],
)
def test_max_unpool_constant_output_shape(shape: tuple[int, ...], attrs: dict) -> None:
    # A constant output_shape is the shape MaxPool's input had: its indices count over it,
    # as onnxruntime unpools them (onnx.reference scatters them over the unpooled shape and
    # pads the result, which agrees only when the two shapes are the same).
    x, idx = _pooled(shape, attrs)
    model = _unpool_model(x.shape, attrs, shape)
    feeds = {"x": x, "i": idx}
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got, _unpooled(x, idx, shape))
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, feeds)[0])


def test_max_unpool_output_shape_refusals() -> None:
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    with pytest.raises(UnsupportedOpError, match="known only at run time"):
        polyonnx.InferenceSession(_unpool_model((1, 1, 2, 2), attrs, (1, 1, 5, 5), False))
    with pytest.raises(ShapeError, match="a window lies past its end"):
        polyonnx.InferenceSession(_unpool_model((1, 1, 3, 2), attrs, (1, 1, 4, 4)))


@pytest.mark.parametrize(
    "bad",
    [
        -1,  # negative
        2 * 4 * 6,  # one past the end of Y
        10**12,
        -(2**62),
        1,  # inside Y, but in another window than the element's own
        4 * 6 + 8,  # the element's own position in the next channel
    ],
)
def test_max_unpool_hostile_index_raises(bad: int) -> None:
    # An index that is not a position of its element's window writes nowhere: the run
    # raises, and the session runs on afterwards.
    shape, attrs = UNPOOL["plain"]
    x, idx = _pooled(shape, attrs)
    model = _unpool_model(x.shape, attrs)
    sess = polyonnx.InferenceSession(model)
    hostile = idx.copy()
    hostile[0, 0, 1, 0] = bad  # (its window: rows 2-3, columns 0-1 of channel 0)
    with pytest.raises(polyonnx.InputError, match="out of range in MaxUnpool"):
        sess.run(None, {"x": x, "i": hostile})
    [got] = sess.run(None, {"x": x, "i": idx})
    np.testing.assert_array_equal(got, _unpooled(x, idx, shape))
