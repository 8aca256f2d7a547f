"""The IR digest: equal for equal compiles, different when the code differs."""

from __future__ import annotations

import onnx
import onnx.helper as oh

from polyonnx.testing.digest import _differences, digest_model


def _relu_model(n: int) -> onnx.ModelProto:
    return oh.make_model(
        oh.make_graph(
            [oh.make_node("Relu", ["x"], ["y"])],
            "g",
            [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n])],
            [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n])],
        )
    )


def test_same_model_same_digest() -> None:
    a = digest_model(_relu_model(64), num_threads=1)
    b = digest_model(_relu_model(64), num_threads=1)
    assert a == b
    assert len(a["kernels"]) == 1


def test_different_code_differs() -> None:
    a = {"m/t1": digest_model(_relu_model(64), num_threads=1)}
    b = {"m/t1": digest_model(_relu_model(65), num_threads=1)}
    diffs = _differences(a, b)
    assert any("kernel k0_Relu differs" in d for d in diffs)
    assert any("program differs" in d for d in diffs)
