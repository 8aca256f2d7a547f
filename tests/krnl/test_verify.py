"""krnl.verify: each rule rejects a kernel breaking it, with a message naming the culprit."""

from __future__ import annotations

import pytest

from polyonnx.errors import ShapeError
from polyonnx.krnl import ir
from polyonnx.krnl.verify import check_lowered, verify

I, J = ir.Aff.var("i"), ir.Aff.var("j")
X = ir.Buffer("x", "float32", (4, 4), "input")
Y = ir.Buffer("y", "float32", (4, 4), "output")
XI = ir.Buffer("xi", "int32", (4,), "input")


def kernel(*body: ir.Node, buffers: tuple[ir.Buffer, ...] = (X, Y, XI)) -> ir.Kernel:
    return ir.Kernel("k", buffers, body)


def copy(
    name: str = "S0", src: str = "x", dst: str = "y", index: tuple[ir.Index, ...] = (I, J)
) -> ir.Stmt:
    return ir.Stmt(name, ir.Access(dst, (I, J)), ir.Load(src, index, "float32"))


def loops(*body: ir.Node, outer: str = "i", inner: str = "j") -> ir.Loop:
    return ir.Loop(outer, 0, 4, (ir.Loop(inner, 0, 4, body),))


def test_valid_kernel_passes() -> None:
    guarded = ir.Stmt(
        "S1",
        ir.Access("y", (I, J)),
        ir.Load("y", (I, J), "float32") + ir.Load("x", (J, I), "float32"),
        (ir.ge(I - 1, 0),),
    )
    gather = ir.Stmt(
        "S2", ir.Access("y", (I, J)), ir.Load("x", (I, ir.Load("xi", (J,), "int32")), "float32")
    )
    verify(kernel(loops(copy(), guarded, gather), loops(copy("S3"))))


@pytest.mark.parametrize(
    "bad,message",
    [
        (kernel(loops(copy(src="z"))), "statement S0: unknown buffer z"),
        (kernel(loops(copy(dst="z"))), "statement S0: unknown buffer z"),
        (kernel(loops(copy(index=(I,)))), "indexes x \\(rank 2\\) with 1 subscripts"),
        (kernel(ir.Loop("i", 0, 4, (copy(),))), "uses iterator j outside its loop"),
        (kernel(loops(copy(), outer="i", inner="i")), "iterator i is already bound"),
        (kernel(loops(copy(), copy())), "statement name S0 is used twice"),
        (kernel(loops(copy(dst="x"))), "statement S0 writes x, an input buffer"),
        (
            kernel(loops(ir.Stmt("S0", ir.Access("y", (I, J)), ir.Const(1, "int32")))),
            "writes a int32 value to y, a float32 buffer",
        ),
        (kernel(loops(copy()), buffers=(X, Y, X)), "buffer x is declared twice"),
        (
            kernel(
                loops(
                    ir.Stmt(
                        "S0",
                        ir.Access("y", (I, J)),
                        ir.Const(0.0, "float32"),
                        (ir.ge(ir.Aff.var("k"), 0),),
                    )
                )
            ),
            "guard uses iterator k",
        ),
        (
            kernel(ir.Loop("i", 0, J, (ir.Loop("j", 0, 4, (copy(),)),))),
            "loop i: upper bound uses iterator j",
        ),
        (
            kernel(loops(ir.Stmt("S0", ir.Access("y", (I, J)), ir.Cast(ir.Iter("k"), "float32")))),
            "uses iterator k outside its loop",
        ),
        (kernel(loops(copy(index=(I, 0)))), "index 0 of x is neither an Aff nor an Expr"),
        (
            kernel(loops(copy(index=(I, ir.Load("x", (I, J), "float32"))))),
            "computed index of x has dtype float32",
        ),
        (
            kernel(loops(ir.Stmt("S0", ir.Access("y", (I, J)), ir.Load("x", (I, J), "float64")))),
            "loads x as float64, the buffer is float32",
        ),
    ],
)
def test_rejects(bad: ir.Kernel, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        verify(bad)


def test_iterator_may_repeat_in_sibling_loops() -> None:
    verify(
        kernel(
            ir.Loop(
                "i", 0, 4, (ir.Loop("j", 0, 4, (copy("S0"),)), ir.Loop("j", 0, 4, (copy("S1"),)))
            )
        )
    )


def test_check_lowered_accepts_in_bound_and_guarded_accesses() -> None:
    # x[i - 1] is read only where the guard i >= 1 holds; x[j] in a loop whose bound depends
    # on i is left unchecked (the box would say j reaches 4 with i).
    guarded = ir.Stmt(
        "S0", ir.Access("y", (I, J)), ir.Load("x", (I - 1, J), "float32"), (ir.ge(I, 1),)
    )
    triangle = ir.Loop("i", 0, 4, (ir.Loop("j", 0, I + 1, (copy("S1"),)),))
    check_lowered(kernel(loops(guarded), triangle))


@pytest.mark.parametrize(
    ("index", "guards", "message"),
    [
        ((I + 1, J), (), r"reads x\[i \+ 1, j\] up to index 4 of axis 0, which has 4 elements"),
        ((I, J - 1), (ir.ge(J, 0),), r"reads x\[i, j - 1\] index -1 of axis 1"),
        ((I,), (), r"indexes x \(rank 2\) with 1 subscripts"),
    ],
)
def test_check_lowered_refuses_out_of_bounds(
    index: tuple[ir.Index, ...], guards: tuple[ir.Cond, ...], message: str
) -> None:
    stmt = ir.Stmt("S0", ir.Access("y", (I, J)), ir.Load("x", index, "float32"), guards)
    bad = ir.Kernel("k0_Add", (X, Y), (loops(stmt),), ("add_0",))
    with pytest.raises(ShapeError, match=r"node 'add_0': its lowering " + message):
        check_lowered(bad)
