"""The default strategies as data: each nest's plan is a printable record, applying it is the
default schedule, and a changed plan is applied (and proved) like any other."""

import dataclasses

import numpy as np
import pytest

from polyonnx.errors import ScheduleError
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies import (
    KernelPlan,
    OwnLoops,
    Tiling,
    apply_kernel_plan,
    default_schedule,
    parallel,
    plan_kernel,
)
from polyonnx.schedule.strategies.parallel import plan_parallel
from polyonnx.schedule.strategies.reduction import Chunks, ReductionPlan
from polyonnx.testing.examples import matmul
from polyonnx.tune.measure import run
from tests.schedule.zoo import ZOO, conv

AVX512 = Tiling.for_vector_bits(512, threads=2)


def test_a_plan_prints_its_knobs(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    s = Schedule.from_kernel(matmul(64, 64, 1024))
    plan = plan_kernel(s, AVX512)
    assert str(plan) == (
        "reduction (i, j) over (k): tile i 8 rows x j 32 lanes, vector tiles "
        "outermost; chunks: k by 128 after 1 tile loop\nparallel outer loops"
    )
    tiled = apply_kernel_plan(s, dataclasses.replace(plan, parallel=False))
    # (the chunk loop k_o carries the reduction)
    assert (
        str(plan_parallel(tiled, [("j_1_o", "k_o", "i_1_o")]))
        == "parallel(j_1_o, named=(j_1_o, i_1_o))"
    )
    assert str(KernelPlan((OwnLoops("t"),), parallel=False)) == "own loops from t\none thread"


@pytest.mark.parametrize("name", sorted(ZOO))
def test_applying_the_plan_is_the_default_schedule(name):
    kernel = ZOO[name]()
    s = Schedule.from_kernel(kernel)
    try:
        got = apply_kernel_plan(s, plan_kernel(s, AVX512)).verify().ast_text()
    except ScheduleError:  # (the default schedule falls back to the kernel's own loops)
        assert name == "cumsum"  # (its vector mark is refused)
        got = s.ast_text()
    assert got == build_ast(default_schedule(kernel, AVX512).schedule).to_C_str()


def test_the_applied_plan_is_unverified_until_proved():
    s = Schedule.from_kernel(matmul(64, 64, 32))
    tiled = apply_kernel_plan(s, plan_kernel(s, AVX512))
    with pytest.raises(ScheduleError, match="not proved legal"):
        tiled.scheduled()
    assert tiled.verify().scheduled().trace == tiled.trace


def test_a_changed_plan_is_applied_and_computes_the_same():
    kernel = conv(relu=True, c=8, oc=20, h=13)
    s = Schedule.from_kernel(kernel)
    plan = plan_kernel(s, AVX512)
    red = plan.nests[0]
    assert isinstance(red, ReductionPlan) and red.rows == 5 and red.epilogues
    smaller = dataclasses.replace(red, rows=2, vector=8)
    assert "tile oc 2 rows x ow 8 lanes" in str(smaller)
    tuned = apply_kernel_plan(s, dataclasses.replace(plan, nests=(smaller,))).verify()
    arrays = {b.name: np.random.default_rng(0).random(b.shape, np.float32) for b in kernel.buffers}
    want, got = run(s, arrays), run(tuned, arrays)
    np.testing.assert_allclose(got["R"], want["R"], rtol=1e-5, atol=1e-5)


def test_an_inconsistent_plan_is_refused():
    with pytest.raises(ScheduleError, match="without ragged tiles"):
        ReductionPlan(
            ("i", "j"), ("k",), (("a", "b"),), 0, 4, None, 16, False, True, Chunks(0, 8, 1)
        )
    with pytest.raises(ScheduleError, match="0 rows"):
        ReductionPlan(("i", "j"), ("k",), (), 0, 0, None, 16, False, False, None)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_gemv_streams_its_matrix_in_chunks_of_a_few_rows_outside_the_tiles(threads):
    # y[0, j] = sum_k x[0, k] * W[k, j]: W is read once, no tile loop reuses it, so the
    # reduction is cut into chunks of Tiling.streams rows outside the vector tiles (which go
    # on along those rows), the lanes' loop in a block per thread first.
    kernel = matmul(1, 256, 64)
    tiling = Tiling.for_vector_bits(512, threads=threads)
    s = Schedule.from_kernel(kernel)
    plan = plan_kernel(s, tiling)
    red = plan.nests[0]
    assert isinstance(red, ReductionPlan) and red.row is None
    if threads == 1:
        assert red.chunks == Chunks(0, tiling.streams, 0)
    else:
        assert red.chunks == Chunks(0, tiling.streams, 1, 1, 128)  # 256 lanes, a block per thread
    tiled = apply_kernel_plan(s, plan).verify()
    arrays = {b.name: np.random.default_rng(0).random(b.shape, np.float32) for b in kernel.buffers}
    want, got = run(s, arrays), run(tiled, arrays)
    np.testing.assert_allclose(got["C"], want["C"], rtol=1e-5)


@pytest.mark.parametrize("m", [2, 3])
def test_a_few_rows_are_one_register_tile_and_stream_the_matrix(m):
    # C[i, j] = sum_k A[i, k] * B[k, j] for 2-3 rows: all rows in one tile (a tile of 8 rows
    # over 2 would leave only ragged edge tiles, in general code), and B, read by that one
    # tile only, streams in chunks of a few rows as a GEMV's does.
    kernel = matmul(m, 1000, 64)
    tiling = Tiling.for_vector_bits(512, threads=1)
    s = Schedule.from_kernel(kernel)
    red = plan_kernel(s, tiling).nests[0]
    assert isinstance(red, ReductionPlan)
    assert (red.outer[red.row], red.rows) == ("i", m)
    assert red.chunks == Chunks(0, tiling.streams, 0)
    tiled = apply_kernel_plan(s, plan_kernel(s, tiling)).verify()
    arrays = {b.name: np.random.default_rng(0).random(b.shape, np.float32) for b in kernel.buffers}
    np.testing.assert_allclose(run(tiled, arrays)["C"], run(s, arrays)["C"], rtol=1e-5)


@pytest.mark.parametrize(("m", "rows"), [(14, 7), (56, 4), (13, 6)])
def test_sixteen_registers_take_a_seventh_row_rather_than_a_ragged_tile(m, rows):
    # AVX2's 16 registers hold 6 rows of 2-vector accumulators besides B's two vectors and a
    # broadcast; with B read as FMA memory operands, 7. A loop of 14 (a 7x7 or 14x14 conv's
    # pixels) takes 7 rows rather than 6 and a ragged tile of 2; 56 keeps 4 rows, which divide
    # it with fewer loads per FMA; 13 has no such divisor and keeps 6 and an edge.
    kernel = matmul(m, 64, 32)
    tiling = Tiling.for_vector_bits(256, threads=1)
    s = Schedule.from_kernel(kernel)
    red = plan_kernel(s, tiling).nests[0]
    assert isinstance(red, ReductionPlan)
    assert (red.outer[red.row], red.rows, red.isolate) == ("i", rows, m % rows != 0)
    assert plan_kernel(s, AVX512).nests[0].rows == (7 if m == 14 else 8)  # (32 registers)
    tiled = apply_kernel_plan(s, plan_kernel(s, tiling)).verify()
    arrays = {b.name: np.random.default_rng(0).random(b.shape, np.float32) for b in kernel.buffers}
    np.testing.assert_allclose(run(tiled, arrays)["C"], run(s, arrays)["C"], rtol=1e-5)


def _lrn_kernel():
    from onnx import TensorProto, helper

    from polyonnx.pipeline import lower, to_graph

    shape = [1, 8, 6, 40]
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=2.0)],
        "lrn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return lower(to_graph(model), AVX512).kernels[0]


def test_an_input_read_through_windows_keeps_the_kernels_order():
    # LRN reads x[c + r0 - 2, h, w]: every outer loop moves the window, so the input is read
    # once whichever loop is outermost; the vector tiles outermost would only stride through
    # it, a few lines of each row per tile.
    kernel = _lrn_kernel()
    s = Schedule.from_kernel(kernel)
    red = plan_kernel(s, AVX512).nests[0]
    assert isinstance(red, ReductionPlan) and red.vector == 32
    assert not red.vector_first
    tiled = apply_kernel_plan(s, plan_kernel(s, AVX512)).verify()
    assert tiled.loops[:4] == ("n", "c", "h", "w_o")  # (the lanes' tiles innermost)
    arrays = {b.name: np.random.default_rng(0).random(b.shape, np.float32) for b in kernel.buffers}
    np.testing.assert_allclose(run(tiled, arrays)["y"], run(s, arrays)["y"], rtol=1e-6)
