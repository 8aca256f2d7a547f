"""Einsum vs onnxruntime."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from tests.krnl.harness import check_op, rand

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->ji", [(2, 3)]),
    ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(2,), (3,)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (1, 3, 3, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ba", [(2, 3)]),
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    check_op(
        "Einsum",
        [(f"x{k}", rand(*s, seed=k)) for k, s in enumerate(shapes)],
        {"equation": equation},
        opset=12,
    )


def test_einsum_double() -> None:
    check_op(
        "Einsum",
        [("a", rand(2, 3, dtype="float64")), ("b", rand(3, seed=1, dtype="float64"))],
        {"equation": "ij,j->i"},
        opset=12,
    )


def test_a_lettered_axis_that_broadcasts_is_refused_by_name() -> None:
    # onnxruntime broadcasts h (1 vs 3) but ONNX shape inference types Y with h = 1: refused
    # naming the node and the letter, not a ShapeError about sizes.
    node = helper.make_node("Einsum", ["a", "b"], ["y"], "attn", equation="bhqd,bhkd->bhqk")
    g = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 1, 3, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3, 5, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOpError, match=r"'attn'.*index 'h' broadcasts"):
        polyonnx.InferenceSession(model)
