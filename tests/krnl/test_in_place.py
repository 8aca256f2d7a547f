"""A reduction accumulates straight into the buffer its point-wise epilogue writes."""

import numpy as np
import pytest

from polyonnx.krnl.in_place import accumulate_in_place
from polyonnx.krnl.ir import Access, Aff, Kernel, Load, Loop, Stmt

from .harness import matvec_relu
from .interp import interpret

F32 = "float32"
I, K = Aff.var("i"), Aff.var("k")


def _run(kernel: Kernel) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal(5, np.float32),
        "w": rng.standard_normal((4, 5), np.float32),
        "b": rng.standard_normal(4, np.float32),
        "r": rng.standard_normal(4, np.float32),
    }
    interpret(kernel, arrays)
    return arrays


@pytest.mark.parametrize("residual", [False, True])
def test_reduction_accumulates_into_the_epilogue_output(residual: bool) -> None:
    before = matvec_relu(residual=residual)
    after = accumulate_in_place(before)
    assert "t" not in {b.name for b in after.buffers}
    text = str(after)
    assert "S1: y[i] = (y[i] + (w[i, k] * x[k]))" in text
    assert "S2: y[i] = max(" in text and "y[i]" in text.split("S2:")[1]
    np.testing.assert_allclose(_run(after)["y"], _run(before)["y"], rtol=1e-6)


def test_the_last_reader_takes_the_temp() -> None:
    # z = t after y = relu(t): z is the temp's last reader, so the reduction accumulates in z.
    before = matvec_relu((Stmt("S3", Access("z", (I,)), Load("t", (I,), F32)),))
    after = accumulate_in_place(before)
    assert "S1: z[i] = (z[i] + (w[i, k] * x[k]))" in str(after)
    want, got = _run(before), _run(after)
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


@pytest.mark.parametrize(
    "why, extra",
    [
        (
            "the target is read by another statement",
            (Stmt("S3", Access("z", (I,)), Load("y", (I,), F32)),),
        ),
        (
            "the target is written by another statement",
            (Stmt("S3", Access("y", (I,)), Load("x", (I,), F32)),),
        ),
    ],
)
def test_other_uses_keep_the_temp(why: str, extra: tuple[Stmt, ...]) -> None:
    kernel = matvec_relu(extra)
    assert accumulate_in_place(kernel) == kernel, why


def test_epilogue_reading_the_temp_elsewhere_keeps_it() -> None:
    # y[i] = t[3 - i]: renaming would read an element the epilogue has already rewritten.
    k = matvec_relu()
    flipped = Stmt("S2", Access("y", (I,)), Load("t", (3 - I,), F32))
    k = Kernel(k.name, k.buffers, (k.body[0], Loop("i", 0, 4, (flipped,))))
    assert accumulate_in_place(k) == k
