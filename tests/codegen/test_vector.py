"""Loops under a ``vector`` mark become explicit vector code, with a scalar remainder."""

import islpy as isl
import numpy as np
import pytest
from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.krnl.ir import (
    Access,
    Aff,
    Buffer,
    Cast,
    Const,
    Iter,
    Kernel,
    Load,
    Loop,
    Stmt,
    Unary,
    binary,
    maximum,
)
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import default_schedule


def _mark_innermost(schedule: isl.Schedule) -> isl.Schedule:
    """Put a ``vector`` mark above the deepest band."""
    best = None

    def visit(node, depth):
        nonlocal best
        if node.get_type() == isl.schedule_node_type.band and (best is None or depth > best[0]):
            best = (depth, node)
        for c in range(node.n_children()):
            visit(node.child(c), depth + 1)

    visit(schedule.get_root(), 0)
    if best is None:  # a loop of one iteration is no band of the isl tree
        return schedule
    return best[1].insert_mark(isl.Id("vector")).get_schedule()


def _compile(kernel, vector=True):
    sched = default_schedule(kernel).schedule
    if vector:
        sched = _mark_innermost(sched)
    ast = la.from_isl(build_ast(sched))
    module = ir.Module()
    emit_kernel(module, kernel, ast, CodegenConfig())
    return kernel_callable(kernel, ast), str(module)


def _unary_kernel(n: int, dtype: str, body) -> Kernel:
    i = Aff.var("i")
    stmt = Stmt("S0", Access("y", (i,)), body(Load("x", (i,), dtype)))
    return Kernel(
        "k",
        (Buffer("x", dtype, (n,), "input"), Buffer("y", dtype, (n,), "output")),
        (Loop("i", 0, n, (stmt,)),),
    )


@pytest.mark.parametrize("n", [1, 7, 8, 37, 64])
def test_vector_relu_with_remainder(n):
    k = _unary_kernel(n, "float32", lambda x: maximum(x, 0.0) * 2.0)
    run, text = _compile(k)
    assert ("<8 x float>" in text) == (n >= 8)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_allclose(y, np.maximum(x, 0) * 2, rtol=1e-6)


@pytest.mark.parametrize("n", [5, 37])
def test_max_and_min_against_numbers_keep_nan_without_a_nan_check(n):
    # min(max(x, -1), 6) and max(2, x) with constants not NaN: one compare and select each
    # (x86's maxps / minps with the number first), and x NaN still gives NaN.
    k = _unary_kernel(
        n,
        "float32",
        lambda x: binary(
            "add", binary("min", maximum(x, -1.0), 6.0), maximum(Const(2.0, "float32"), x)
        ),
    )
    run, text = _compile(k)
    assert "select" in text and "fcmp uno" not in text  # (no NaN check of its own)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 8
    x[[0, 3]] = [np.nan, -np.inf]
    y = np.zeros(n, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, np.minimum(np.maximum(x, -1), 6) + np.maximum(2, x))


@pytest.mark.parametrize("dtype, width", [("float64", 4), ("int32", 8), ("int8", 32)])
def test_vector_width_follows_the_dtype(dtype, width):
    k = _unary_kernel(70, dtype, lambda x: Unary("abs", x) + Const(1, dtype))
    run, text = _compile(k)
    assert f"<{width} x" in text
    x = (np.random.default_rng(0).standard_normal(70) * 50).astype(dtype)
    y = np.zeros(70, dtype)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, (np.abs(x) + 1).astype(dtype))


def test_vector_libm_calls_and_iterators():
    n = 21
    i = Aff.var("i")
    body = Unary("tanh", Load("x", (i,), "float32")) + Cast(Iter("i"), "float32")
    k = Kernel(
        "k",
        (Buffer("x", "float32", (n,), "input"), Buffer("y", "float32", (n,), "output")),
        (Loop("i", 0, n, (Stmt("S0", Access("y", (i,)), body),)),),
    )
    run, text = _compile(k)
    assert "<8 x float>" in text
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_allclose(y, np.tanh(x) + np.arange(n), rtol=1e-5)


def test_broadcast_and_strided_loads_in_a_vector_loop():
    # y[i, j] = x[j, i] * s[i]  (vector over j: a strided gather and a broadcast)
    m, n = 5, 19
    i, j = Aff.var("i"), Aff.var("j")
    body = Load("x", (j, i), "float32") * Load("s", (i,), "float32")
    k = Kernel(
        "k",
        (
            Buffer("x", "float32", (n, m), "input"),
            Buffer("s", "float32", (m,), "input"),
            Buffer("y", "float32", (m, n), "output"),
        ),
        (Loop("i", 0, m, (Loop("j", 0, n, (Stmt("S0", Access("y", (i, j)), body),)),)),),
    )
    run, text = _compile(k)
    assert "<8 x float>" in text
    rng = np.random.default_rng(4)
    x, s = rng.random((n, m), np.float32), rng.random(m, np.float32)
    y = np.zeros((m, n), np.float32)
    run({"x": x, "s": s, "y": y})
    np.testing.assert_allclose(y, x.T * s[:, None], rtol=1e-6)


def test_reduction_across_lanes_falls_back_to_scalar():
    # s = sum_i x[i]: the write does not move with the vector loop, so codegen stays scalar.
    n = 20
    i = Aff.var("i")
    k = Kernel(
        "k",
        (Buffer("x", "float32", (n,), "input"), Buffer("s", "float32", (1,), "output")),
        (
            Stmt("S0", Access("s", (0,)), Const(0.0, "float32")),
            Loop(
                "i",
                0,
                n,
                (
                    Stmt(
                        "S1",
                        Access("s", (0,)),
                        Load("s", (Aff.lift(0),), "float32") + Load("x", (i,), "float32"),
                    ),
                ),
            ),
        ),
    )
    run, _ = _compile(k)
    x = np.random.default_rng(5).random(n, np.float32)
    s = np.zeros(1, np.float32)
    run({"x": x, "s": s})
    np.testing.assert_allclose(s[0], x.sum(), rtol=1e-5)


def test_vector_bool_compare():
    n = 13
    i = Aff.var("i")
    body = binary("lt", Load("x", (i,), "float32"), Const(0.0, "float32"))
    k = Kernel(
        "k",
        (Buffer("x", "float32", (n,), "input"), Buffer("y", "bool", (n,), "output")),
        (Loop("i", 0, n, (Stmt("S0", Access("y", (i,)), body),)),),
    )
    run, _ = _compile(k)
    x = np.random.default_rng(6).standard_normal(n).astype(np.float32)
    y = np.zeros(n, bool)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, x < 0)


def test_a_long_constant_vector_loop_stays_a_loop():
    # Regression (fuzz model seed 5319): 10^6 iterations must not become 10^6 / 8 straight-line
    # vector bodies.
    n = 1_000_000
    k = _unary_kernel(n, "float32", lambda x: x * 2.0)
    run, text = _compile(k)
    assert len(text) < 20_000
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, x * 2)


@pytest.mark.parametrize("step", [2, 3, 4, 5])
def test_short_strides_load_the_span_and_shuffle(step):
    # y[i] = x[step * i + 1]: up to 4 elements between lanes, one load of the span the lanes
    # cover and a shuffle; longer strides go lane by lane. The span ends at the last lane's
    # element: x has no element after it to read.
    n = 21
    i = Aff.var("i")
    size = step * (n - 1) + 2
    body = Load("x", (i * step + 1,), "float32") * 2.0
    k = Kernel(
        "k",
        (Buffer("x", "float32", (size,), "input"), Buffer("y", "float32", (n,), "output")),
        (Loop("i", 0, n, (Stmt("S0", Access("y", (i,)), body),)),),
    )
    run, text = _compile(k)
    assert (f"<{7 * step + 1} x float>" in text) == (step <= 4)  # (the span of 8 lanes)
    x = np.random.default_rng(step).standard_normal(size).astype(np.float32)
    y = np.zeros(n, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, x[1::step][:n] * 2)
