"""Small kernels for the schedule tests: one per dependence pattern the verbs must respect."""

from __future__ import annotations

from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt, ge, lt
from polyonnx.krnl.ir import maximum as kmax
from polyonnx.testing.examples import chain, cumsum, matmul, rnn, stencil

F32 = "float32"
a = Aff.var


def conv(relu: bool = False, c: int = 3, oc: int = 4, h: int = 6) -> Kernel:
    """3x3 convolution with padding 1 (guards), optionally followed by a ReLU nest."""
    n, o, y, x, i, ky, kx = (a(v) for v in ("n", "oc", "oh", "ow", "ic", "kh", "kw"))
    init = Stmt("S0", Access("Y", (n, o, y, x)), Const(0.0, F32))
    guards = (ge(y + ky - 1, 0), lt(y + ky - 1, h), ge(x + kx - 1, 0), lt(x + kx - 1, h))
    update = Stmt(
        "S1",
        Access("Y", (n, o, y, x)),
        Load("Y", (n, o, y, x), F32)
        + Load("X", (n, i, y + ky - 1, x + kx - 1), F32) * Load("W", (o, i, ky, kx), F32),
        guards,
    )
    nest = Loop(
        "n",
        0,
        1,
        (
            Loop(
                "oc",
                0,
                oc,
                (
                    Loop(
                        "oh",
                        0,
                        h,
                        (
                            Loop(
                                "ow",
                                0,
                                h,
                                (
                                    init,
                                    Loop(
                                        "ic",
                                        0,
                                        c,
                                        (Loop("kh", 0, 3, (Loop("kw", 0, 3, (update,)),)),),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    buffers = [
        Buffer("X", F32, (1, c, h, h), "input"),
        Buffer("W", F32, (oc, c, 3, 3), "input"),
        Buffer("Y", F32, (1, oc, h, h), "temp" if relu else "output"),
    ]
    body: tuple = (nest,)
    if relu:
        idx = tuple(a(f"i{d}") for d in range(4))
        s2 = Stmt("S2", Access("R", idx), kmax(Load("Y", idx, F32), 0.0))
        inner: Loop | Stmt = s2
        for d, ext in reversed(list(enumerate((1, oc, h, h)))):
            inner = Loop(f"i{d}", 0, ext, (inner,))
        body = (nest, inner)
        buffers.append(Buffer("R", F32, (1, oc, h, h), "output"))
    return Kernel("conv_relu" if relu else "conv", tuple(buffers), body)


def maxpool(c: int = 2, h: int = 6) -> Kernel:
    """2x2 max pooling, stride 2."""
    ch, y, x, ky, kx = (a(v) for v in ("c", "oh", "ow", "kh", "kw"))
    init = Stmt("S0", Access("Z", (ch, y, x)), Const(-1e30, F32))
    upd = Stmt(
        "S1",
        Access("Z", (ch, y, x)),
        kmax(Load("Z", (ch, y, x), F32), Load("X", (ch, y * 2 + ky, x * 2 + kx), F32)),
    )
    nest = Loop(
        "c",
        0,
        c,
        (
            Loop(
                "oh",
                0,
                h // 2,
                (Loop("ow", 0, h // 2, (init, Loop("kh", 0, 2, (Loop("kw", 0, 2, (upd,)),)))),),
            ),
        ),
    )
    return Kernel(
        "maxpool",
        (Buffer("X", F32, (c, h, h), "input"), Buffer("Z", F32, (c, h // 2, h // 2), "output")),
        (nest,),
    )


ZOO = {
    "matmul": lambda: matmul(6, 10, 4),
    "conv": conv,
    "conv_relu": lambda: conv(relu=True),
    "maxpool": maxpool,
    "chain": chain,
    "cumsum": cumsum,
    "rnn": rnn,
    "stencil": lambda: stencil(5, 9),
}
"""name -> kernel builder."""
