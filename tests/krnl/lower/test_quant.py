"""MatMulInteger and QLinearMatMul vs onnxruntime; PackedMatMulInteger (their byte dot
product form) vs the exact integer sum."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from polyonnx.graph.passes import qlinear_as_float, remove_identities
from tests.krnl.harness import check_op, graph_from_model, run_krnl


def test_matmul_integer() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, (2, 3, 4), dtype=np.uint8)
    b = rng.integers(0, 255, (4, 5), dtype=np.uint8)
    check_op(
        "MatMulInteger",
        [("a", a), ("b", b), ("az", np.array(12, np.uint8)), ("bz", np.array(200, np.uint8))],
    )


def test_qlinear_matmul() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(0, 255, (2, 4), dtype=np.uint8)
    b = rng.integers(0, 255, (4, 3), dtype=np.uint8)
    check_op(
        "QLinearMatMul",
        [
            ("a", a),
            ("as", np.array(0.02, np.float32)),
            ("az", np.array(113, np.uint8)),
            ("b", b),
            ("bs", np.array(0.01, np.float32)),
            ("bz", np.array(114, np.uint8)),
            ("ys", np.array(0.05, np.float32)),
            ("yz", np.array(118, np.uint8)),
        ],
    )


def _dynamic_matmul(a_dtype: type, cast: bool, depth: int = 8) -> tuple[onnx.ModelProto, dict]:
    """MatMulInteger of a run-time A (and zero point) by constant int8 weights with a zero
    point, read as float32 by a Cast (``cast``) or as int32."""
    rng = np.random.default_rng(2)
    info = np.iinfo(a_dtype)
    a = rng.integers(info.min, info.max + 1, (2, 3, depth)).astype(a_dtype)
    w = rng.integers(-100, 101, (depth, 5)).astype(np.int8)
    nodes = [helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["s"])]
    if cast:
        nodes.append(helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT))
    a_type = helper.np_dtype_to_tensor_dtype(np.dtype(a_dtype))
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("a", a_type, a.shape),
            helper.make_tensor_value_info("az", a_type, ()),
        ],
        [
            helper.make_tensor_value_info(
                "y" if cast else "s", TensorProto.FLOAT if cast else TensorProto.INT32, (2, 3, 5)
            )
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int8(-20), "wz")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"a": a, "az": np.array(info.max // 3, a_dtype)}
    return model, feeds


@pytest.mark.parametrize("a_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("cast", [False, True])
def test_packed_matmul_integer_sums_four_bytes_at_a_time_exactly(a_dtype: type, cast: bool) -> None:
    """On a target with a byte dot product, MatMulInteger sums ``dot4``s of A's bytes (an int8
    A's sign bits flipped) by the packed centred weights, less the zero point times the
    weights' column sums: MatMulInteger's int32 answer (or its float32 Cast) exactly."""
    model, feeds = _dynamic_matmul(a_dtype, cast)
    graph = qlinear_as_float(graph_from_model(model), dot4=True)
    assert [n.op_type for n in graph.nodes][0] == "PackedMatMulInteger"
    got = run_krnl(remove_identities(graph), feeds)["y" if cast else "s"]
    w = np.asarray(graph_from_model(model).constants["w"]).astype(np.int64) + 20
    want = (feeds["a"].astype(np.int64) - int(feeds["az"])) @ w
    np.testing.assert_array_equal(got, want.astype(np.float32 if cast else np.int32))


@pytest.mark.parametrize(
    ("depth", "weight_zero"), [(6, 0), (8, 120)], ids=["depth-not-4k", "centred-past-int8"]
)
def test_packed_matmul_integer_only_where_the_weights_pack(depth: int, weight_zero: int) -> None:
    """A depth that is no multiple of 4, or centred weights outside int8, keep the float form."""
    model, _ = _dynamic_matmul(np.uint8, True, depth)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.int8(weight_zero), "wz"))
    ops = [n.op_type for n in qlinear_as_float(graph_from_model(model), dot4=True).nodes]
    assert "PackedMatMulInteger" not in ops and "MatMul" in ops
