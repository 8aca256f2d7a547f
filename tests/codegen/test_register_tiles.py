"""Register tiles: a reduction around ``unroll`` x ``vector`` accumulators keeps them in stack
slots (registers after LLVM's SROA), also when an epilogue reads them right after the loop; a
tile that needs more than the register file re-reads its last weight vector at each use."""

import ctypes
import dataclasses
import re

import numpy as np
import pytest
from llvmlite import ir

import polyonnx
from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.jit import jit
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.codegen.tile_emit import PREFETCH_BYTES
from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt, maximum
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import Tiling, default_schedule


def _matmul_relu(m: int, n: int, k: int) -> Kernel:
    """``acc = A @ B`` then ``y = max(acc, 0)``: the default schedule fuses the epilogue."""
    i, j, r = Aff.var("i"), Aff.var("j"), Aff.var("r")
    acc = Access("acc", (i, j))
    update = Stmt(
        "S1",
        acc,
        Load("acc", (i, j), "float32")
        + Load("a", (i, r), "float32") * Load("b", (r, j), "float32"),
    )
    return Kernel(
        "k",
        (
            Buffer("a", "float32", (m, k), "input"),
            Buffer("b", "float32", (k, n), "input"),
            Buffer("acc", "float32", (m, n), "temp"),
            Buffer("y", "float32", (m, n), "output"),
        ),
        (
            Loop(
                "i",
                0,
                m,
                (
                    Loop(
                        "j",
                        0,
                        n,
                        (Stmt("S0", acc, Const(0.0, "float32")), Loop("r", 0, k, (update,))),
                    ),
                ),
            ),
            Loop(
                "i",
                0,
                m,
                (
                    Loop(
                        "j",
                        0,
                        n,
                        (
                            Stmt(
                                "S2",
                                Access("y", (i, j)),
                                maximum(Load("acc", (i, j), "float32"), 0.0),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


@pytest.mark.parametrize("m, n, k", [(8, 32, 5), (13, 37, 9)])
def test_accumulators_live_in_slots_and_results_match(m: int, n: int, k: int) -> None:
    kernel = _matmul_relu(m, n, k)
    loops = la.from_isl(build_ast(default_schedule(kernel).schedule))
    module = ir.Module()
    emit_kernel(module, kernel, loops, CodegenConfig())
    # One slot per accumulator vector of a full tile (4 rows x 2 vectors of 8 lanes).
    assert str(module).count("alloca <8 x float>") >= 8
    assert "volatile" not in str(module)  # 8 accumulators + 2 vectors + 1 fit 16 registers
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    arrays = {
        "a": a,
        "b": b,
        "acc": np.zeros((m, n), np.float32),
        "y": np.zeros((m, n), np.float32),
    }
    kernel_callable(kernel, loops)(arrays)
    np.testing.assert_allclose(arrays["y"], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(arrays["acc"], a @ b, rtol=1e-5, atol=1e-5)


def test_paired_tile_two_unrolled_loops() -> None:
    # acc[b, r, o] += x[r, k] * w[b, k, o]: rows r share each x value, pairs of b blocks and
    # the vector o share each w vector; 7 rows x 2 blocks x 2 vector steps of 16 lanes.
    nb, nr, no, nk = 4, 7, 32, 5
    b, r, o, k = (Aff.var(n) for n in "brok")
    acc = Access("acc", (b, r, o))
    update = Stmt(
        "S1",
        acc,
        Load("acc", (b, r, o), "float32")
        + Load("x", (r, k), "float32") * Load("w", (b, k, o), "float32"),
    )
    kernel = Kernel(
        "k",
        (
            Buffer("x", "float32", (nr, nk), "input"),
            Buffer("w", "float32", (nb, nk, no), "input"),
            Buffer("acc", "float32", (nb, nr, no), "temp"),
            Buffer("y", "float32", (nb, nr, no), "output"),
        ),
        (
            Loop(
                "b",
                0,
                nb,
                (
                    Loop(
                        "r",
                        0,
                        nr,
                        (
                            Loop(
                                "o",
                                0,
                                no,
                                (
                                    Stmt("S0", acc, Const(0.0, "float32")),
                                    Loop("k", 0, nk, (update,)),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
            Loop(
                "b",
                0,
                nb,
                (
                    Loop(
                        "r",
                        0,
                        nr,
                        (
                            Loop(
                                "o",
                                0,
                                no,
                                (
                                    Stmt(
                                        "S2",
                                        Access("y", (b, r, o)),
                                        maximum(Load("acc", (b, r, o), "float32"), 0.0),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    tiling = Tiling(unroll=8, vector=32, paired_rows=7)
    ast = build_ast(default_schedule(kernel, tiling).schedule)
    assert ast.to_C_str().count("// unroll") >= 2
    loops = la.from_isl(ast)
    module = ir.Module()
    emit_kernel(module, kernel, loops, CodegenConfig(vector_bits=512))
    assert str(module).count("alloca <16 x float>") == nr * 2 * 2
    # 28 accumulators + 4 weight vectors + 1 broadcast > 32 registers: one weight vector is
    # loaded at each of its 7 uses (a memory operand) rather than spilling an accumulator.
    assert str(module).count("load volatile <16 x float>") == nr
    # The 28 accumulators are addressed from one pointer with constant offsets (one register
    # live across the reduction instead of 28 spilled addresses): rows 32 floats apart, the
    # two blocks 7 * 32, the two vector steps 16.
    geps = re.findall(r"getelementptr inbounds float, ptr (\S+), i64 (\d+)\n", str(module))
    assert len({base for base, _ in geps}) == 1
    assert sorted(int(off) for _, off in geps) == sorted(
        r * 32 + blk * 7 * 32 + j * 16
        for r in range(nr)
        for blk in range(2)
        for j in range(2)
        if (r, blk, j) != (0, 0, 0)
    )
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((nr, nk), np.float32), rng.standard_normal((nb, nk, no), np.float32)
    arrays = {
        "x": x,
        "w": w,
        "acc": np.zeros((nb, nr, no), np.float32),
        "y": np.zeros((nb, nr, no), np.float32),
    }
    kernel_callable(kernel, loops)(arrays)
    np.testing.assert_allclose(
        arrays["y"], np.maximum(np.einsum("rk,bko->bro", x, w), 0), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("above, prefetches", [(0, 0), (64 * 1024, 0), (1024, 2)])
def test_streamed_weights_are_prefetched_once_per_vector(above: int, prefetches: int) -> None:
    # acc[i, j] += a[i, r] * b[r, j] over a 4 x 2-vector tile: the two vectors of b the rows
    # share are loaded once per iteration; with b (8 KB) above the threshold each gets one
    # prefetch PREFETCH_BYTES ahead (not one per row), else none.
    kernel = _matmul_relu(8, 32, 64)
    loops = la.from_isl(build_ast(default_schedule(kernel).schedule))
    module = ir.Module()
    name = f"prefetching_matmul_{above}"  # (one JIT engine per process: a name of its own)
    emit_kernel(
        module, dataclasses.replace(kernel, name=name), loops, CodegenConfig(prefetch_above=above)
    )
    text = str(module)
    calls = re.findall(r'call void @"llvm.prefetch.p0"\(ptr (\S+), i32 0, i32 3, i32 1\)', text)
    assert len(calls) == prefetches
    for ahead in calls:  # PREFETCH_BYTES after a load's address
        assert re.search(
            rf"{re.escape(ahead)} = getelementptr i8, ptr \S+, i64 "
            rf"{PREFETCH_BYTES}\n",
            text,
        )
    # The prefetching code runs, with the same results.
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 64), np.float32), rng.standard_normal((64, 32), np.float32)
    arrays = {
        "a": a,
        "b": b,
        "acc": np.zeros((8, 32), np.float32),
        "y": np.zeros((8, 32), np.float32),
    }
    address = jit(module, name, polyonnx.Options())
    run = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * len(kernel.buffers))(address)
    assert run(*(arrays[buf.name].ctypes.data for buf in kernel.buffers)) == 0
    np.testing.assert_allclose(arrays["y"], np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("k, stores", [(9, 1), (600, 2)])
def test_bias_and_relu_stay_in_the_tile_registers(k: int, stores: int, residual: bool) -> None:
    # acc = bias; acc += a @ b; acc = max(acc, 0), all on the output: the bias goes straight
    # into the accumulators' slots and the ReLU reads them there, so each accumulator is
    # stored to memory once (by the ReLU), not three times (bias, sums, ReLU). A reduction
    # long enough to run in chunks does that in its first and last chunk (an `if` each) and
    # stores the running sums in the others: two stores in the code. With a residual updated
    # in place (krnl/residual.py: acc = bias + acc, y holding the residual), the init reads
    # it from memory into the slots.
    m, n = 8, 32
    i, j, r = Aff.var("i"), Aff.var("j"), Aff.var("r")
    y = Access("y", (i, j))
    init = Load("bias", (j,), "float32")
    if residual:
        init = init + Load("y", (i, j), "float32")
    kernel = Kernel(
        "k",
        (
            Buffer("a", "float32", (m, k), "input"),
            Buffer("b", "float32", (k, n), "input"),
            Buffer("bias", "float32", (n,), "input"),
            Buffer("y", "float32", (m, n), "output"),
        ),
        (
            Loop(
                "i",
                0,
                m,
                (
                    Loop(
                        "j",
                        0,
                        n,
                        (
                            Stmt("S0", y, init),
                            Loop(
                                "r",
                                0,
                                k,
                                (
                                    Stmt(
                                        "S1",
                                        y,
                                        Load("y", (i, j), "float32")
                                        + Load("a", (i, r), "float32")
                                        * Load("b", (r, j), "float32"),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
            Loop(
                "i",
                0,
                m,
                (Loop("j", 0, n, (Stmt("S2", y, maximum(Load("y", (i, j), "float32"), 0.0)),)),),
            ),
        ),
    )
    ast = build_ast(default_schedule(kernel).schedule)
    assert ("if (" in ast.to_C_str()) == (stores == 2)
    loops = la.from_isl(ast)
    module = ir.Module()
    emit_kernel(module, kernel, loops, CodegenConfig())
    text = str(module)
    slots = text.count("alloca <8 x float>")
    assert slots == 8  # 4 rows x 2 vectors
    assert len(re.findall(r"store <8 x float> \S+, ptr ", text)) == stores * slots
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    start = (
        rng.standard_normal((m, n)).astype(np.float32)
        if residual
        else np.full((m, n), np.nan, np.float32)
    )
    arrays = {"a": a, "b": b, "bias": bias, "y": start.copy()}
    kernel_callable(kernel, loops)(arrays)
    want = np.maximum(a @ b + bias + (start if residual else 0), 0)
    np.testing.assert_allclose(arrays["y"], want, rtol=1e-4, atol=1e-4)


def test_a_register_tile_inside_an_unrolled_loop():
    # A batch loop unrolled by codegen around a register tile: the tile's accumulators are
    # found again in each unrolled copy (their keys start with the copy's iteration).
    from polyonnx.schedule.schedule import Schedule
    from polyonnx.schedule.verbs import Unroll

    nb, m, n, nk = 2, 8, 32, 5
    b, i, j, r = (Aff.var(v) for v in "bijr")
    y = Access("y", (b, i, j))
    update = Stmt(
        "S1",
        y,
        Load("y", (b, i, j), "float32")
        + Load("a", (b, i, r), "float32") * Load("w", (r, j), "float32"),
    )
    kernel = Kernel(
        "k",
        (
            Buffer("a", "float32", (nb, m, nk), "input"),
            Buffer("w", "float32", (nk, n), "input"),
            Buffer("y", "float32", (nb, m, n), "output"),
        ),
        (
            Loop(
                "b",
                0,
                nb,
                (
                    Loop(
                        "i",
                        0,
                        m,
                        (
                            Loop(
                                "j",
                                0,
                                n,
                                (Stmt("S0", y, Const(0.0, "float32")), Loop("r", 0, nk, (update,))),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )
    s = Schedule.from_kernel(kernel).apply_all(default_schedule(kernel).trace.directives)
    s = s.apply(Unroll("b", mark=True))
    text = s.ast_text()
    assert text.count("// unroll") == 3 and text.index("// unroll") < text.index("for (int c3")
    loops = la.from_isl(build_ast(s.isl_schedule))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((nb, m, nk)).astype(np.float32)
    w = rng.standard_normal((nk, n)).astype(np.float32)
    arrays = {"a": a, "w": w, "y": np.full((nb, m, n), np.nan, np.float32)}
    kernel_callable(kernel, loops)(arrays)
    np.testing.assert_allclose(arrays["y"], np.einsum("bik,kj->bij", a, w), rtol=1e-5, atol=1e-5)


def test_an_unrolled_loop_that_does_not_move_the_write_is_no_row() -> None:
    # (A tuned MobileNetV2 conv, kw unrolled between its reduction and its rows, gave wrong
    # answers: each kw got its own accumulator of one element, and the last store won.)
    from polyonnx.tune.measure import random_arrays, run

    i, j, r, q = Aff.var("i"), Aff.var("j"), Aff.var("r"), Aff.var("q")
    y = Access("y", (i, j))
    update = Stmt(
        "S1",
        y,
        Load("y", (i, j), "float32")
        + Load("a", (i, r, q), "float32") * Load("b", (r, q, j), "float32"),
    )
    body = (Stmt("S0", y, Const(0.0, "float32")), Loop("r", 0, 2, (Loop("q", 0, 3, (update,)),)))
    kernel = Kernel(
        "k",
        (
            Buffer("a", "float32", (4, 2, 3), "input"),
            Buffer("b", "float32", (2, 3, 16), "input"),
            Buffer("y", "float32", (4, 16), "output"),
        ),
        (Loop("i", 0, 4, (Loop("j", 0, 16, body),)),),
    )
    s = polyonnx.Schedule.from_kernel(kernel).distribute("i").reorder("r", "q", "i_1", "j_1")
    s = s.unroll("q", mark=True).unroll("i_1", mark=True).vectorize("j_1", mark=True).verify()
    arrays = random_arrays(kernel)
    want = run(polyonnx.Schedule.from_kernel(kernel), arrays)["y"]
    np.testing.assert_allclose(run(s, arrays)["y"], want, rtol=1e-5, atol=1e-6)
