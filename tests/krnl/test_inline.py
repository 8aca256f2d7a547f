"""Point-wise producer nests are inlined into their consumers inside a kernel."""

from dataclasses import replace

import pytest

from polyonnx.krnl.inline import inline_pointwise
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt, maximum, unary

F32 = "float32"
I, J = Aff.var("i"), Aff.var("j")


def _nest(a: str, b: str, stmt: Stmt) -> Loop:
    return Loop(a, 0, 3, (Loop(b, 0, 4, (stmt,)),))


def _transpose_relu(temp_kind: str = "temp", read_index=(I, J)) -> Kernel:
    t = Stmt("S0", Access("t", (I, J)), Load("x", (J, I), F32))
    y = Stmt("S1", Access("y", (I, J)), maximum(Load("t", read_index, F32), 0.0))
    return Kernel(
        "k",
        (
            Buffer("x", F32, (4, 3), "input"),
            Buffer("t", F32, (3, 4), temp_kind),
            Buffer("y", F32, (3, 4), "output"),
        ),
        (_nest("i", "j", t), _nest("i", "j", y)),
    )


def test_transpose_then_relu_becomes_one_nest():
    k = inline_pointwise(_transpose_relu())
    assert [b.name for b in k.buffers] == ["x", "y"]
    assert str(k).splitlines()[1:] == [
        "  for i in [0, 3):",
        "    for j in [0, 4):",
        "      S1: y[i, j] = max(x[j, i], 0.0)",
        "}",
    ]


def test_iterators_are_renamed_to_the_consumers():
    t = Stmt(
        "S0",
        Access("t", (Aff.var("a"), Aff.var("b"))),
        Load("x", (Aff.var("b"), Aff.var("a")), F32),
    )
    y = Stmt("S1", Access("y", (I, J)), Load("t", (I, J), F32) * 2.0)
    k = Kernel(
        "k",
        (
            Buffer("x", F32, (4, 3), "input"),
            Buffer("t", F32, (3, 4), "temp"),
            Buffer("y", F32, (3, 4), "output"),
        ),
        (_nest("a", "b", t), _nest("i", "j", y)),
    )
    assert "S1: y[i, j] = (x[j, i] * 2.0)" in str(inline_pointwise(k))


def test_live_out_or_shifted_reads_stay_separate():
    for kernel in (_transpose_relu(temp_kind="output"), _transpose_relu(read_index=(I, J * 0))):
        assert inline_pointwise(kernel) == kernel


def _silu_after(extra: tuple[Stmt, ...] = ()) -> Kernel:
    """``s = sigmoid(x)``, then ``extra`` nests, then ``y = x * s`` (x read by both)."""
    x = Load("x", (I, J), F32)
    s = Stmt("S0", Access("s", (I, J)), unary("sigmoid", x))
    y = Stmt("S9", Access("y", (I, J)), x * Load("s", (I, J), F32))
    buffers = [
        Buffer("x", F32, (3, 4), "input"),
        Buffer("s", F32, (3, 4), "temp"),
        Buffer("z", F32, (3, 4), "output"),
        Buffer("y", F32, (3, 4), "output"),
    ]
    return Kernel("k", tuple(buffers), tuple(_nest("i", "j", n) for n in (s, *extra, y)))


def test_a_diamond_becomes_one_statement_past_other_nests():
    # x * sigmoid(x) with an unrelated nest between the two: s is substituted into y.
    between = Stmt("S1", Access("z", (I, J)), Load("x", (I, J), F32) + 1.0)
    k = inline_pointwise(_silu_after((between,)))
    assert "s" not in {b.name for b in k.buffers}
    assert [str(s) for _, s in k.statements()] == [
        "S1: z[i, j] = (x[i, j] + 1.0)",
        "S9: y[i, j] = (x[i, j] * sigmoid(x[i, j]))",
    ]


def test_a_temp_read_twice_in_one_statement_is_substituted_twice():
    y = Stmt("S1", Access("y", (I, J)), Load("t", (I, J), F32) * Load("t", (I, J), F32))
    k = replace(_transpose_relu(), body=(_transpose_relu().body[0], _nest("i", "j", y)))
    assert "S1: y[i, j] = (x[j, i] * x[j, i])" in str(inline_pointwise(k))


@pytest.mark.parametrize("why", ["two readers", "input overwritten between"])
def test_producers_stay_when_substitution_would_change_or_repeat_work(why: str):
    s = Load("s", (I, J), F32)
    if why == "two readers":  # sigmoid would be computed once per reader
        extra = Stmt("S1", Access("z", (I, J)), s + 1.0)
    else:  # the reader would see the new x
        extra = Stmt("S1", Access("x", (I, J)), s + 1.0)
    kernel = _silu_after((extra,))
    assert inline_pointwise(kernel) == kernel
