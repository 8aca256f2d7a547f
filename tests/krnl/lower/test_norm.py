"""BatchNormalization, LRN, Softmax and LogSoftmax vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand


def _bn_inputs(c: int) -> list[tuple[str, np.ndarray]]:
    return [
        ("scale", rand(c, seed=1)),
        ("bias", rand(c, seed=2)),
        ("mean", rand(c, seed=3)),
        ("var", np.abs(rand(c, seed=4)) + 0.5),
    ]


@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (2, 3), (1, 2, 5), (1, 2, 2, 3, 2)], ids=str)
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm(shape: tuple[int, ...], opset: int) -> None:
    check_op(
        "BatchNormalization",
        [("x", rand(*shape)), *_bn_inputs(shape[1])],
        {"epsilon": 1e-3},
        opset=opset,
        constants=("scale", "bias", "mean", "var"),
    )


def test_batch_norm_default_epsilon_runtime_stats() -> None:
    check_op("BatchNormalization", [("x", rand(1, 3, 2, 2)), *_bn_inputs(3)])


@pytest.mark.parametrize("size", [1, 3, 5])  # onnxruntime rejects even sizes
def test_lrn(size: int) -> None:
    check_op(
        "LRN", [("x", rand(1, 5, 3, 3))], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 1.5}
    )


def test_lrn_defaults() -> None:
    check_op("LRN", [("x", rand(2, 4, 2, 2))], {"size": 3})


CASES = [
    ((3, 5), None),
    ((2, 3, 4), None),
    ((2, 3, 4), 0),
    ((2, 3, 4), 1),
    ((2, 3, 4), -2),
    ((2, 3, 4), 2),
    ((4,), 0),
]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
def test_softmax(op: str, opset: int, shape: tuple[int, ...], axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    check_op(op, [("x", 3 * rand(*shape))], attrs, opset=opset)


def test_softmax_temps() -> None:
    model = make_model("Softmax", [("x", rand(2, 3, 4))], {"axis": 1}, opset=13)
    graph = graph_from_model(model)
    temps = {
        b.name: b.shape for b in node_kernel(graph, graph.nodes[0]).buffers if b.kind == "temp"
    }
    assert temps == {"softmax_0__max": (2, 4), "softmax_0__sum": (2, 4)}


def test_softmax_float64() -> None:
    check_op("Softmax", [("x", rand(2, 5, dtype="float64"))], opset=13)
