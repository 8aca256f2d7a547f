"""Codegen follows the isl AST: a different schedule tree gives different code, same results."""

import islpy as isl
import numpy as np
import pytest

from polyonnx.codegen import loopast as la
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.emit import emit_kernel
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.errors import InputError
from polyonnx.krnl.ir import Access, Aff, Buffer, Cast, Const, Kernel, Load, Loop, Stmt, binary
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import default_schedule
from polyonnx.testing.examples import matmul, stencil


def _run(kernel, schedule, arrays):
    kernel_callable(kernel, la.from_isl(build_ast(schedule)))(arrays)


def _llvm_text(kernel, schedule) -> str:
    from llvmlite import ir

    module = ir.Module()
    emit_kernel(module, kernel, la.from_isl(build_ast(schedule)), CodegenConfig())
    return str(module)


def _tiled(schedule: isl.Schedule, sizes: list[int]) -> isl.Schedule:
    band = schedule.get_root().child(0)
    while band.get_type() != isl.schedule_node_type.band:
        band = band.child(0)
    space = band.band_get_space()
    mv = isl.MultiVal.zero(space)
    for d, s in enumerate(sizes):
        mv = mv.set_val(d, isl.Val.int_from_si(schedule.get_ctx(), s))
    return band.band_tile(mv).get_schedule()


def test_matmul_matches_numpy():
    k = matmul(13, 7, 5)
    rng = np.random.default_rng(0)
    a, b = rng.random((13, 5), np.float32), rng.random((5, 7), np.float32)
    c = np.zeros((13, 7), np.float32)
    _run(k, default_schedule(k).schedule, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_changing_the_schedule_tree_changes_the_code_not_the_result():
    k = matmul(10, 6, 4)
    base = default_schedule(k).schedule
    tiled = _tiled(base, [4])
    assert build_ast(tiled).to_C_str() != build_ast(base).to_C_str()
    assert _llvm_text(k, tiled) != _llvm_text(k, base)
    rng = np.random.default_rng(1)
    a, b = rng.random((10, 4), np.float32), rng.random((4, 6), np.float32)
    c1, c2 = np.zeros((10, 6), np.float32), np.zeros((10, 6), np.float32)
    _run(k, base, {"A": a, "B": b, "C": c1})
    _run(k, tiled, {"A": a, "B": b, "C": c2})
    np.testing.assert_array_equal(c1, c2)


def test_loops_come_from_the_ast():
    # The emitted function has exactly the loops of the isl AST: one header block per `for`.
    k = stencil(5, 6)
    sched = default_schedule(k).schedule
    ast = la.from_isl(build_ast(sched))
    text = _llvm_text(k, sched)
    n_for = str(ast[0]).count("for (")
    assert text.count(".header:") == n_for == 2


def test_stencil_runs_in_order():
    k = stencil(4, 8)
    a = np.random.default_rng(2).random((4, 9), np.float32)
    want = a.copy()
    for t in range(1, 4):
        for i in range(8):
            want[t, i] = want[t - 1, i] + want[t - 1, i + 1]
    _run(k, default_schedule(k).schedule, {"A": a})
    np.testing.assert_allclose(a, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_division_by_zero_does_not_trap(dtype):
    i = Aff.var("i")
    body = binary("div", Load("x", (i,), dtype), Load("y", (i,), dtype))
    k = Kernel(
        "div",
        (
            Buffer("x", dtype, (4,), "input"),
            Buffer("y", dtype, (4,), "input"),
            Buffer("z", dtype, (4,), "output"),
        ),
        (Loop("i", 0, 4, (Stmt("S0", Access("z", (i,)), body),)),),
    )
    x = np.array([7, 8, 9, 10], dtype)
    y = np.array([2, 0, 3, 0], dtype)
    z = np.full(4, 99, dtype)
    _run(k, default_schedule(k).schedule, {"x": x, "y": y, "z": z})
    assert list(z) == [3, 0, 3, 0]


def test_computed_index_out_of_range_is_reported():
    i = Aff.var("i")
    gather = Load("x", (Cast(Load("idx", (i,), "int64"), "int64"),), "float32")
    k = Kernel(
        "gather",
        (
            Buffer("x", "float32", (3,), "input"),
            Buffer("idx", "int64", (2,), "input"),
            Buffer("y", "float32", (2,), "output"),
        ),
        (Loop("i", 0, 2, (Stmt("S0", Access("y", (i,)), gather),)),),
    )
    run = kernel_callable(k, la.from_isl(build_ast(default_schedule(k).schedule)))
    x = np.array([1, 2, 3], np.float32)
    y = np.zeros(2, np.float32)
    run({"x": x, "idx": np.array([2, 0]), "y": y})
    assert list(y) == [3, 1]
    with pytest.raises(InputError, match="run-time check failed"):
        run({"x": x, "idx": np.array([0, 3]), "y": y})


def test_bool_buffers_round_trip():
    i = Aff.var("i")
    body = binary("lt", Load("x", (i,), "float32"), Const(0.5, "float32"))
    k = Kernel(
        "lt",
        (Buffer("x", "float32", (3,), "input"), Buffer("y", "bool", (3,), "output")),
        (Loop("i", 0, 3, (Stmt("S0", Access("y", (i,)), body),)),),
    )
    y = np.zeros(3, bool)
    _run(k, default_schedule(k).schedule, {"x": np.array([0.1, 0.9, 0.4], np.float32), "y": y})
    assert list(y) == [True, False, True]


def test_address_arithmetic_is_folded_and_numbered():
    # A register-tiled matmul's unrolled statements compute the same address terms again and
    # again: each is emitted once per block, and nothing multiplies by 0 or 1 or adds 0.
    import re

    k = matmul(32, 64, 9)
    text = _llvm_text(k, default_schedule(k).schedule)
    for block in re.split(r"\n(?=[\w.\"]+:\n)", text):
        arithmetic = re.findall(r"= ((?:add|sub|mul|sdiv|srem) nsw i64 .*|sdiv i64 .*)", block)
        assert len(arithmetic) == len(set(arithmetic)), block
    assert not re.search(r"(mul nsw i64 [^\n]*, (0|1)|add nsw i64 [^\n]*, 0)\n", text)
    rng = np.random.default_rng(3)
    a, b = rng.random((32, 9), np.float32), rng.random((9, 64), np.float32)
    c = np.zeros((32, 64), np.float32)
    _run(k, default_schedule(k).schedule, {"A": a, "B": b, "C": c})
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_only_an_accumulation_multiply_add_may_fuse():
    """``y = x * w + b`` rounds the product, then the sum, as ONNX's reference does (an FMA
    would round once: a different float in about a third of the elements); a reduction's
    ``acc + x * w`` may be an FMA (its order is the schedule's anyway)."""
    from onnx import TensorProto, helper

    import polyonnx
    from polyonnx.testing import onnx_reference_outputs

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])],
        "muladd",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4099]) for n in "xwb"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4099])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(4099).astype(np.float32) for n in "xwb"}
    [got] = polyonnx.InferenceSession(model).run(None, feeds)
    np.testing.assert_array_equal(got, onnx_reference_outputs(model, feeds)[0])

    kernel = matmul(4, 4, 4)
    text = _llvm_text(kernel, default_schedule(kernel).schedule)
    assert "fmul contract" in text and "fadd contract" in text
