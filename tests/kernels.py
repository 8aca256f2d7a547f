"""Hand-built krnl kernels shared by the schedule and codegen tests."""

from __future__ import annotations

from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt

F32 = "float32"


def matmul(m: int = 4, n: int = 5, k: int = 3) -> Kernel:
    """C[i, j] = sum_k A[i, k] * B[k, j] with an init statement inside the (i, j) loops."""
    i, j, kk = Aff.var("i"), Aff.var("j"), Aff.var("k")
    init = Stmt("S0", Access("C", (i, j)), Const(0.0, F32))
    update = Stmt(
        "S1",
        Access("C", (i, j)),
        Load("C", (i, j), F32) + Load("A", (i, kk), F32) * Load("B", (kk, j), F32),
    )
    return Kernel(
        "matmul",
        (
            Buffer("A", F32, (m, k), "input"),
            Buffer("B", F32, (k, n), "input"),
            Buffer("C", F32, (m, n), "output"),
        ),
        (Loop("i", 0, m, (Loop("j", 0, n, (init, Loop("k", 0, k, (update,)))),)),),
    )


def stencil(t: int = 4, n: int = 8) -> Kernel:
    """A[t, i] = A[t-1, i] + A[t-1, i+1]: dependence distances (1, 0) and (1, -1)."""
    tt, i = Aff.var("t"), Aff.var("i")
    body = Load("A", (tt - 1, i), F32) + Load("A", (tt - 1, i + 1), F32)
    s = Stmt("S0", Access("A", (tt, i)), body)
    return Kernel(
        "stencil",
        (Buffer("A", F32, (t, n + 1), "output"),),
        (Loop("t", 1, t, (Loop("i", 0, n, (s,)),)),),
    )
