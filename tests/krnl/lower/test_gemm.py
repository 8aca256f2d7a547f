"""Gemm and MatMul vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.krnl.lower.gemm import PACK_MIN_ROWS
from tests.krnl.harness import check_op, graph_from_model, make_model, node_kernel, rand


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (4,), (3, 4), (3, 1), (1,), ()], ids=str)
def test_gemm(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    a = rand(*((5, 3) if trans_a else (3, 5)))
    b = rand(*((4, 5) if trans_b else (5, 4)), seed=1)
    inputs = [("a", a), ("b", b)]
    if c_shape is not None:
        inputs.append(("c", rand(*c_shape, seed=2)))
    check_op("Gemm", inputs, {"transA": trans_a, "transB": trans_b}, constants=("b", "c"))


@pytest.mark.parametrize("alpha,beta", [(0.5, 1.0), (1.0, 2.0), (-1.5, 0.0), (2.0, 0.25)])
def test_gemm_alpha_beta(alpha: float, beta: float) -> None:
    check_op(
        "Gemm",
        [("a", rand(2, 3)), ("b", rand(3, 4, seed=1)), ("c", rand(2, 4, seed=2))],
        {"alpha": alpha, "beta": beta},
    )


SHAPES = [
    ((3, 4), (4, 2)),
    ((2, 3, 4), (4, 5)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 1, 2, 3), (3, 3, 2)),
    ((1, 2, 3), (2, 3, 2)),
    ((5,), (2, 5, 3)),
]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    check_op("MatMul", [("a", rand(*shapes[0])), ("b", rand(*shapes[1], seed=1))])


def test_matmul_int() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    check_op("MatMul", [("a", a), ("b", b)])


def test_matmul_through_packed_panels() -> None:
    # N >= 64 and K >= 32: B is read through 32-column panels (packed by a nest when A has
    # PACK_MIN_ROWS rows, or at compile time when constant), including a ragged last panel
    # and batch dimensions.
    check_op("MatMul", [("a", rand(PACK_MIN_ROWS, 40)), ("b", rand(40, 70, seed=1))])
    check_op("MatMul", [("a", rand(2, 3, 40)), ("b", rand(40, 96, seed=2))], constants=("b",))


@pytest.mark.parametrize(("a_shape", "packed"), [((2, 40), False), ((2, 16, 40), True)])
def test_a_run_time_b_is_packed_only_for_enough_rows(a_shape: tuple, packed: bool) -> None:
    # Two rows read B once each: packing it would cost two passes more than the product.
    # Batches count as rows (each batch reads all of B).
    model = make_model("MatMul", [("a", rand(*a_shape)), ("b", rand(40, 96, seed=3))])
    graph = graph_from_model(model)
    kernel = node_kernel(graph, graph.nodes[0])
    assert any(b.name.endswith("__panels") for b in kernel.buffers) == packed
    check_op("MatMul", [("a", rand(*a_shape)), ("b", rand(40, 96, seed=3))])
