"""float16 MatMul, Gemm, Conv and Softmax round as the reference does (numpy: float32 sums)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs
from tests.reliability.models import const, model, tensor

H = TensorProto.FLOAT16
RNG = np.random.default_rng(7)


def _half(*shape: int) -> np.ndarray:
    return RNG.uniform(0.0, 1.0, shape).astype(np.float16)


def _run_both(m, feeds):
    got = polyonnx.InferenceSession(m).run(None, feeds)
    ref = onnx_reference_outputs(m, feeds)
    return got, ref


def _within_one_ulp(got: np.ndarray, ref: np.ndarray) -> None:
    # float32 sums in another order may round to the neighbouring float16, never further.
    assert got.dtype == ref.dtype == np.float16
    ulp = np.spacing(np.abs(ref)).astype(np.float32)
    assert np.all(np.abs(got.astype(np.float32) - ref.astype(np.float32)) <= ulp)


def test_matmul_sums_in_float32():
    # 512 positive terms: summing in float16 drifts far beyond one unit in the last place.
    m = model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [tensor("a", [3, 512], H), tensor("b", [512, 5], H)],
        [tensor("y", [3, 5], H)],
    )
    feeds = {"a": _half(3, 512), "b": _half(512, 5)}
    got, ref = _run_both(m, feeds)
    _within_one_ulp(got[0], ref[0])


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_gemm_rounds_the_sum_then_adds_the_bias(alpha: float):
    m = model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=alpha)],
        [tensor("a", [4, 300], H)],
        [tensor("y", [4, 6], H)],
        [const("b", _half(6, 300)), const("c", _half(6))],
    )
    got, ref = _run_both(m, {"a": _half(4, 300)})
    _within_one_ulp(got[0], ref[0])


def test_depthwise_conv_sums_in_float32():
    m = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, pads=[2, 2])],
        [tensor("x", [1, 4, 300], H)],
        [tensor("y", [1, 4, 298], H)],
        [const("w", _half(4, 1, 7)), const("b", _half(4))],
    )
    got, ref = _run_both(m, {"x": _half(1, 4, 300)})
    _within_one_ulp(got[0], ref[0])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_sums_in_float32(op: str):
    m = model(
        [helper.make_node(op, ["x"], ["y"])],
        [tensor("x", [3, 700], H)],
        [tensor("y", [3, 700], H)],
    )
    got, ref = _run_both(m, {"x": _half(3, 700)})
    _within_one_ulp(got[0], ref[0])
