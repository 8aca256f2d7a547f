"""NonZero, Compress and Unique: data-dependent extents lowered to a maximal buffer + a count.

The kernels are run by the krnl interpreter; the valid part (the leading corner the count
selects) is compared with numpy, the op's definition in the ONNX reference.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from polyonnx.errors import UnsupportedOpError
from polyonnx.frontend.importer import import_model
from polyonnx.graph.passes.fuse import fuse
from polyonnx.krnl import ir
from polyonnx.krnl.program import build_program
from tests.krnl.interp import interpret

_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **attrs) -> onnx.ModelProto:
    """One node; outputs typed like the first input (first output) or int64 (the rest;
    NonZero's one output too), their shapes left to inference."""
    node = helper.make_node(op, list(inputs), outputs, **attrs)
    x = next(iter(inputs.values()))
    first = _TYPES[x.dtype] if op != "NonZero" else TensorProto.INT64
    rank = 2 if op == "NonZero" else 1 if "axis" not in attrs else x.ndim
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(k, _TYPES[v.dtype], list(v.shape))
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(
                o, first if k == 0 else TensorProto.INT64, [None] * (rank if k == 0 else 1)
            )
            for k, o in enumerate(outputs)
            if o
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """Interpret the program's kernels; the valid part of every output, and the krnl text."""
    graph = import_model(model)
    program = build_program(graph, [g.nodes for g in fuse(graph)])
    arrays: dict[str, np.ndarray] = dict(feeds)
    for k in program.kernels:
        for b in k.buffers:
            root = program.root(b.name)
            if root in arrays and b.name not in arrays:
                arrays[b.name] = arrays[root].reshape(b.shape)
        interpret(k, arrays)
    outs = []
    for v in program.outputs:
        buf = arrays[v.name]
        dyn = program.dynamic.get(v.name)
        if dyn is not None:
            buf = buf[tuple(slice(0, int(arrays[c][0])) if c else slice(None) for c in dyn.counts)]
        outs.append(buf)
    return outs, str(program)


@pytest.mark.parametrize(
    "x",
    [
        np.array([[1, 0], [1, 1]], np.bool_),
        np.array([[0.0, 2.5, 0.0], [-1.0, 0.0, 3.0]], np.float32),
        np.zeros((2, 3, 2), np.int32),
        np.array([0, 0, 7, 0, 1], np.int64),
    ],
)
def test_non_zero(x: np.ndarray) -> None:
    [y], text = _run(_model("NonZero", {"x": x}, ["y"]), {"x": x})
    np.testing.assert_array_equal(y, np.array(np.nonzero(x), np.int64))
    assert "out NonZero_0__count: int64[1]" in text  # the count is live after the kernel


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis: int | None) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    n = x.size if axis is None else x.shape[axis]
    cond = np.array([True, False, True, True, False, True, False][: max(n - 1, 1)], np.bool_)
    attrs = {} if axis is None else {"axis": axis}
    [y], _ = _run(
        _model("Compress", {"x": x, "cond": cond}, ["y"], **attrs), {"x": x, "cond": cond}
    )
    np.testing.assert_array_equal(y, np.compress(cond, x, axis=axis))


def _np_unique(x: np.ndarray, axis: int | None, sorted_: bool) -> list[np.ndarray]:
    y, idx, inv, cnt = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.argsort(order)
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], rank[inv.reshape(-1)]
    return [y, idx.astype(np.int64), inv.reshape(-1).astype(np.int64), cnt.astype(np.int64)]


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize(
    "x,axis",
    [
        (np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32), None),
        (np.array([[1, 3], [1, 3], [0, 9]], np.int64), None),
        (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), 0),
        (
            np.array(
                [[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]], np.float32
            ),
            1,
        ),
        (np.array([[1, 0, 1], [0, 2, 0], [0, 3, 0]], np.int32), -1),
    ],
)
def test_unique(x: np.ndarray, axis: int | None, sorted_: int) -> None:
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    got, _ = _run(_model("Unique", {"x": x}, ["y", "idx", "inv", "cnt"], **attrs), {"x": x})
    for g, want in zip(got, _np_unique(x, axis, bool(sorted_)), strict=True):
        np.testing.assert_array_equal(g, want)


def test_graph_types_the_extent_symbolically() -> None:
    x = np.zeros((2, 3), np.float32)
    g = import_model(_model("Unique", {"x": x}, ["y", "", "inv"]))
    assert g.value("y").shape == ("Unique_0_count",)
    assert g.value("inv").shape == (6,)  # inverse_indices has one entry per element


def test_count_scan_is_a_real_dependence() -> None:
    # The running counter is read and written in every iteration of the scan: isl sees a
    # loop-carried dependence from the statement to itself, so the scan stays in order.
    from polyonnx.schedule.poly import PolyKernel

    x = np.ones(5, np.float32)
    graph = import_model(_model("NonZero", {"x": x}, ["y"]))
    [kernel] = build_program(graph, [g.nodes for g in fuse(graph)]).kernels
    [bump] = [
        s.name
        for _, s in kernel.statements()
        if s.write.buffer.endswith("__count") and ir.loads(s.body)
    ]
    raw = str(PolyKernel.build(kernel).dependences().raw)
    assert f"{bump}[i0] -> {bump}[1 + i0]" in raw or f"{bump}[i0] -> {bump}[i0' = 1 + i0]" in raw, (
        raw
    )


def test_a_node_reading_a_data_dependent_value_is_refused() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [None, None])
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Neg", ["nz"], ["y"])],
            "g",
            [x],
            [y],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    with pytest.raises(UnsupportedOpError, match="only as graph outputs"):
        import_model(model)


def test_constant_input_folds_to_a_static_shape() -> None:
    c = helper.make_tensor("c", TensorProto.FLOAT, [3], [0.0, 1.0, 2.0])
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("NonZero", ["c"], ["y"])],
            "g",
            [],
            [helper.make_tensor_value_info("y", TensorProto.INT64, [None, None])],
            [c],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    assert import_model(model).value("y").shape == (1, 2)
