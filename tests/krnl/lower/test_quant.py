"""MatMulInteger and QLinearMatMul vs onnxruntime."""

from __future__ import annotations

import numpy as np

from tests.krnl.harness import check_op


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
