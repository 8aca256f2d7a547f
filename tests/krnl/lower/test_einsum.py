"""Einsum vs onnxruntime."""

from __future__ import annotations

import pytest

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
