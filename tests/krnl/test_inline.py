"""Point-wise producer nests are inlined into their consumers inside a kernel."""

from polyonnx.krnl.inline import inline_pointwise
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt, maximum

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
