"""Reductions along a contiguous loop fold into vector partials (krnl/partials.py): which rows
are rewritten, that the rewritten kernels compute what the originals do (the interpreter),
and whole models against numpy and onnxruntime, including the remainder of a row, integer and
boolean folds, NaN and infinities."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.krnl import ir
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
from polyonnx.krnl.partials import fold_in_partials, identity
from polyonnx.options import Options
from polyonnx.testing import onnxruntime_outputs
from polyonnx.testing.examples import softmax_rows
from tests.krnl.interp import interpret

I, R = Aff.var("i"), Aff.var("r")


def _row_fold(op: str, dtype: str, n: int, x_index: tuple[Aff, ...] = (I, R)) -> Kernel:
    """``acc[i] = op(acc[i], x[i, r])`` over rows of ``n``, started at op's identity."""
    acc = Load("acc", (I,), dtype)
    body = (
        Stmt("S0", Access("acc", (I,)), identity(op, dtype)),
        Loop(
            "r",
            0,
            n,
            (Stmt("S1", Access("acc", (I,)), ir.binary(op, acc, Load("x", x_index, dtype))),),
        ),
    )
    shape = (n, 3) if x_index == (R, I) else (3, n)
    return Kernel(
        "fold",
        (Buffer("x", dtype, shape, "input"), Buffer("acc", dtype, (3,), "output")),
        (Loop("i", 0, 3, body),),
    )


def _statements(kernel: Kernel) -> list[str]:
    return [str(s) for _, s in kernel.statements()]


def test_a_softmax_row_folds_both_reductions_into_partials() -> None:
    k = fold_in_partials(softmax_rows(rows=4, n=37), 32)  # 8 float32 lanes: 4 steps and 5 left
    parts = [b for b in k.buffers if "__part" in b.name]
    assert [(b.name, b.shape) for b in parts] == [("M__part0", (4, 8)), ("S__part0", (4, 8))]
    text = "\n".join(_statements(k))
    assert "max(M[i], max_lanes(M__part0[i, 0:8]))" in text
    assert "(S[i] + add_lanes(S__part0[i, 0:8]))" in text
    # The exp stays with the sum it feeds, at the same element.
    assert "Y[i, l1 + 8*t1] = exp((X[i, l1 + 8*t1] - M[i]))" in text
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 37)).astype(np.float32)
    want: dict[str, np.ndarray] = {"X": x}
    interpret(softmax_rows(rows=4, n=37), want)
    got: dict[str, np.ndarray] = {"X": x}
    interpret(k, got)
    np.testing.assert_allclose(got["Y"], want["Y"], rtol=1e-6)


@pytest.mark.parametrize(
    ("kernel", "why"),
    [
        (_row_fold("add", "float32", 15), "shorter than two rows of partials"),
        (_row_fold("add", "float32", 64, (R, I)), "the row is not the contiguous axis"),
        (_row_fold("add", "float16", 64), "a float16 sum keeps its order"),
        (_row_fold("sub", "float32", 64), "not associative"),
    ],
)
def test_rows_that_stay_as_they_are(kernel: Kernel, why: str) -> None:
    assert fold_in_partials(kernel, 32) is kernel, why


def test_no_partial_bytes_no_change() -> None:
    kernel = _row_fold("add", "float32", 64)
    assert fold_in_partials(kernel, 0) is kernel


def test_a_row_reading_its_iterator_stays() -> None:
    fold = Stmt("S1", Access("acc", (I,)), Load("acc", (I,), "int64") + ir.Iter("r"))
    body = (Stmt("S0", Access("acc", (I,)), ir.Const(0, "int64")), Loop("r", 0, 64, (fold,)))
    kernel = Kernel("iota", (Buffer("acc", "int64", (3,), "output"),), (Loop("i", 0, 3, body),))
    assert fold_in_partials(kernel, 32) is kernel


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        ("add", "float32"),
        ("mul", "float64"),
        ("max", "float16"),
        ("min", "int32"),
        ("add", "int64"),
        ("or", "bool"),
        ("and", "bool"),
        ("max", "uint8"),
    ],
)
def test_every_fold_computes_what_it_did(op: str, dtype: str) -> None:
    kernel = _row_fold(op, dtype, 45)
    folded = fold_in_partials(kernel, 16)
    assert folded is not kernel
    rng = np.random.default_rng(1)
    if dtype == "bool":
        x = rng.random((3, 45)) < (0.97 if op == "and" else 0.03)
    elif dtype.startswith(("int", "uint")):
        x = rng.integers(0, 100, (3, 45)).astype(dtype)
    else:
        x = (1 + rng.random((3, 45)) / 50).astype(dtype)  # products stay finite
    want: dict[str, np.ndarray] = {"x": x}
    interpret(kernel, want)
    got: dict[str, np.ndarray] = {"x": x}
    interpret(folded, got)
    np.testing.assert_allclose(got["acc"], want["acc"], rtol=1e-5)


def _reduce_model(op: str, shape: list[int], dtype: int, **attrs: object) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info("x", dtype, shape)],
        [helper.make_tensor_value_info("y", dtype, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("ReduceSum", {"axes": [-1]}),  # (opset 17: an attribute for the others, an input here)
        ("ReduceMax", {"axes": [-1]}),
        ("ReduceMin", {"axes": [2], "keepdims": 0}),
        ("ReduceProd", {"axes": [-1]}),
        ("ReduceL2", {"axes": [-1]}),
        ("ReduceLogSumExp", {"axes": [-1]}),
        ("ReduceMean", {}),
        ("Softmax", {"axis": -1}),
        ("LogSoftmax", {"axis": -1}),
    ],
)
@pytest.mark.parametrize("length", [33, 128, 203])
def test_reductions_over_the_last_axis_match_onnxruntime(
    op: str, attrs: dict[str, object], length: int
) -> None:
    if op == "ReduceSum":
        model = _reduce_model(op, [2, 5, length], TensorProto.FLOAT)
        axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
        model.graph.initializer.append(axes)
        model.graph.node[0].input.append("axes")
    else:
        model = _reduce_model(op, [2, 5, length], TensorProto.FLOAT, **attrs)
    rng = np.random.default_rng(length)
    x = (
        1 + rng.random((2, 5, length)) / 100
        if op == "ReduceProd"
        else rng.standard_normal((2, 5, length))
    ).astype(np.float32)
    got = polyonnx.InferenceSession(model, options=Options(num_threads=1)).run(None, {"x": x})
    want = onnxruntime_outputs(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=1e-6)


def test_max_and_min_keep_nan_and_infinities() -> None:
    x = np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32)
    x[0, 77] = np.nan  # in the partials' part of the row
    x[1, 99] = np.nan  # in the remainder (100 = 3 steps of 32 lanes + 4)
    x[2, :] = -np.inf
    x[3, 5] = np.inf
    for op, ref in (("ReduceMax", np.max), ("ReduceMin", np.min)):
        model = _reduce_model(op, [4, 100], TensorProto.FLOAT, axes=[1], keepdims=0)
        for checked in (False, True):
            got = polyonnx.InferenceSession(model, options=Options(num_threads=1, checked=checked))
            np.testing.assert_array_equal(got.run(None, {"x": x})[0], ref(x, axis=1))


@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64, TensorProto.DOUBLE])
def test_integer_and_double_sums(dtype: int) -> None:
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    model = _reduce_model("ReduceMax", [3, 70], dtype, axes=[1])
    x = np.random.default_rng(2).integers(-1000, 1000, (3, 70)).astype(np_dtype)
    got = polyonnx.InferenceSession(model, options=Options(num_threads=1)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.max(axis=1, keepdims=True))
    model = _reduce_model("ReduceSum", [3, 70], dtype)
    got = polyonnx.InferenceSession(model, options=Options(num_threads=1)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.sum(keepdims=True))
