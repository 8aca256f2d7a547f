"""The recurrent plan: the nests of a recurrent layer's step loop get register tiles and vector
loops (the top-level strategies leave a step loop its own loops), the directions a parallel
loop, and the schedule computes what the kernel's own loops compute."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx import pipeline
from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies import Tiling, apply_kernel_plan, parallel, plan_kernel
from polyonnx.schedule.strategies.recurrent import RecurrentPlan, plan_recurrent
from polyonnx.tune.measure import random_arrays, run
from tests.krnl.harness import RecurrentCase as Case
from tests.krnl.harness import case_arrays, case_model
from tests.schedule.zoo import chain

AVX512 = Tiling.for_vector_bits(512, threads=2)
AVX2 = Tiling.for_vector_bits(256, threads=2)


def _kernel(case: Case) -> Kernel:
    model = case_model(case, case_arrays(case, 0), case.layout)
    (kernel,) = pipeline.lower(pipeline.to_graph(model)).kernels
    return kernel


def _recurrent(s: Schedule, tiling: Tiling) -> list[str]:
    return [str(n) for n in plan_kernel(s, tiling).nests if isinstance(n, RecurrentPlan)]


def test_the_step_of_a_batch_one_lstm_is_a_gemv_tile_and_a_vector_update():
    s = Schedule.from_kernel(_kernel(Case("LSTM", 5, 1, 8, 64, "bidirectional")))
    assert _recurrent(s, AVX512) == [
        "recurrent (d_4, s_2):\n"
        "  product (b_4, q_2, v_2) over (h_2): tile 1 row x 2 blocks x 32 lanes\n"
        "  vectorize v_3 of (b_5, v_3)"
    ]
    assert _recurrent(s, AVX2) == [
        "recurrent (d_4, s_2):\n"
        "  product (b_4, q_2, v_2) over (h_2): tile 1 row x 4 blocks x 16 lanes\n"
        "  vectorize v_3 of (b_5, v_3)"
    ]


def test_batch_rows_share_the_weight_vectors():
    s = Schedule.from_kernel(_kernel(Case("GRU", 3, 4, 8, 64, attrs={"linear_before_reset": 1})))
    (plan,) = _recurrent(s, AVX512)
    assert "tile b_2 4 rows x 2 blocks x 32 lanes" in plan


def test_a_hidden_size_no_tile_fits_is_vectorized_around_the_reduction():
    s = Schedule.from_kernel(_kernel(Case("RNN", 3, 1, 4, 20)))
    (plan,) = _recurrent(s, AVX512)
    assert "v_1 vectorized around the reduction" in plan


def test_the_directions_run_in_parallel_and_the_step_in_register_tiles(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    s = Schedule.from_kernel(_kernel(Case("LSTM", 5, 1, 8, 64, "bidirectional")))
    ast = apply_kernel_plan(s, plan_kernel(s, AVX512)).verify().ast_text()
    # The directions' loop parallel, the step loop inside, the gates' tiles (q) inside it.
    assert (
        "  // parallel c0\n"
        "  for (int c0 = 0; c0 <= 1; c0 += 1)\n"
        "    for (int c1 = 0; c1 <= 4; c1 += 1) {\n"
        "      for (int c2 = 0; c2 <= 3; c2 += 1) {\n"
        "        // unroll\n"
    ) in ast
    assert "S7(c0, c1, 0, c2, 32 * c4 + c5, c3)" in ast  # (h = c3 outside the tile's points)


@pytest.mark.parametrize("hidden", [64, 20])  # (a register-tiled product; one that is not)
def test_one_direction_runs_its_step_products_in_parallel(monkeypatch, hidden):
    # One direction: no loop of the chain to share, so each step's recurrent product runs
    # on the threads (its gates' loop), inside the sequential step loop; the result is the
    # kernel's own loops' (run on one thread: the marks are what is checked here).
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    kernel = _kernel(Case("LSTM", 5, 1, 8, hidden, "forward"))
    s = Schedule.from_kernel(kernel)
    tuned = apply_kernel_plan(s, plan_kernel(s, AVX512)).verify()
    # the step loop (the one direction's loop is elided), then the gates' loop in parallel
    assert "for (int c0 = 0; c0 <= 4; c0 += 1) {\n    // parallel c1\n" in tuned.ast_text()
    arrays = random_arrays(kernel)
    want, got = run(s, arrays), run(tuned, arrays)
    for out in (b.name for b in kernel.buffers if b.kind == "output"):
        np.testing.assert_allclose(got[out], want[out], rtol=1e-5, atol=1e-5, err_msg=out)


def test_a_step_that_reads_a_megabyte_of_weights_runs_in_parallel():
    # 300 units: 1.4 MB of recurrent weights read in every step, in 361k multiply-adds (below
    # the instance threshold): the weights' stream per run is what counts, not once per kernel
    s = Schedule.from_kernel(_kernel(Case("LSTM", 5, 1, 8, 300, "forward")))
    assert "// parallel" in apply_kernel_plan(s, plan_kernel(s, AVX512)).verify().ast_text()
    s = Schedule.from_kernel(_kernel(Case("LSTM", 5, 1, 8, 64, "forward")))  # (64 KB: no)
    assert "// parallel" not in apply_kernel_plan(s, plan_kernel(s, AVX512)).verify().ast_text()


def test_nests_without_a_recurrence_are_not_a_recurrent_nest():
    s = Schedule.from_kernel(chain())
    assert plan_recurrent(s.kernel.body[0], s.tree.children[0], s, AVX512) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "case",
    [
        Case("LSTM", 4, 1, 6, 64, "bidirectional", peep=True, lens=True),
        Case("GRU", 3, 3, 5, 32, "reverse"),
        Case("RNN", 3, 2, 4, 20, "bidirectional"),
    ],
    ids=str,
)
@pytest.mark.parametrize("tiling", [AVX512, AVX2], ids=["avx512", "avx2"])
def test_the_recurrent_schedule_computes_what_the_own_loops_do(case, tiling):
    kernel = _kernel(case)
    arrays = random_arrays(kernel)
    if case.lens:
        arrays["l"] = np.array([case.seq], np.int32)
    s = Schedule.from_kernel(kernel)
    tuned = apply_kernel_plan(s, plan_kernel(s, tiling, parallel=False)).verify()
    want, got = run(s, arrays), run(tuned, arrays)
    for out in (b.name for b in kernel.buffers if b.kind == "output"):
        np.testing.assert_allclose(got[out], want[out], rtol=1e-5, atol=1e-5, err_msg=out)
