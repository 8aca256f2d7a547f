"""The search space: the strategies' plans sampled and mutated as data; every candidate
is proved legal or refused, and the legal ones compute what the kernel's own loops do."""

from __future__ import annotations

import dataclasses
import random

import pytest

import polyonnx
from polyonnx.errors import ScheduleError
from polyonnx.options import Options
from polyonnx.schedule.strategies import Tiling, apply_kernel_plan, default_schedule, plan_kernel
from polyonnx.schedule_driver import target_tiling
from polyonnx.tune.measure import check_outputs, random_arrays, run
from polyonnx.tune.space import SearchSpace
from tests.tune.models import conv_model, gemm_model

OPTIONS = Options(num_threads=1, cache=False)


def kernels():
    return [i.kernel for m in (gemm_model(), conv_model()) for i in polyonnx.list_kernels(m)]


@pytest.mark.parametrize("index", range(3))
def test_candidates_are_legal_or_refused_and_compute_the_same(index: int) -> None:
    kernel = kernels()[index]
    space = SearchSpace(kernel, OPTIONS)
    rng = random.Random(index)
    legal, refused, traces = [], 0, set()
    c = space.default()
    for step in range(16):
        c = space.mutate(c, rng) if step % 4 else space.sample(rng)
        try:
            s = space.schedule(c)
        except ScheduleError:
            refused += 1
            c = space.default()
            continue
        assert s.verified
        legal.append((c, s))
        traces.add(s.trace.to_json())
        assert len(space.features(c, s)) == len(space.features(*legal[0]))
    assert len(traces) >= 3
    arrays = random_arrays(kernel)
    want = run(polyonnx.Schedule.from_kernel(kernel), arrays, OPTIONS)
    # (Extra unroll marks can hit a codegen bug: see the xfail below; the tuner's output check
    # refuses those candidates.)
    for _, s in [(c, s) for c, s in legal if not c.extra][:3]:
        check_outputs(kernel, run(s, arrays, OPTIONS), want, 1e-4)


# (The tuner's output check once found wrong outputs here, on the strategy's 5-row AVX2 tile of
# the time; the general strategy's tile computes right: kept as a regression test.)
def test_an_unroll_mark_around_a_register_tile() -> None:
    kernels_ = polyonnx.list_kernels(conv_model(16, 10))
    kernel = next(k.kernel for k in kernels_ if k.name.endswith(("_Conv", "_ConvBlocked")))
    s = polyonnx.Schedule.from_kernel(kernel)
    s = apply_kernel_plan(s, plan_kernel(s, Tiling.for_vector_bits(256), False)).verify()
    arrays = random_arrays(kernel)
    want = run(polyonnx.Schedule.from_kernel(kernel), arrays, OPTIONS)
    check_outputs(kernel, run(s.unroll("kw", mark=True), arrays, OPTIONS), want, 1e-4)


def test_the_default_candidate_is_the_default_schedule() -> None:
    kernel = kernels()[0]
    space = SearchSpace(kernel, OPTIONS)
    tiling = target_tiling(OPTIONS)
    assert space.schedule(space.default()).trace == default_schedule(kernel, tiling, False).trace


@pytest.mark.parametrize("target", [None, "aarch64-linux-gnu"])
def test_samples_keep_the_targets_lanes_and_registers(target: str | None) -> None:
    options = dataclasses.replace(OPTIONS, target=target)
    space, rng = SearchSpace(kernels()[0], options), random.Random(0)
    want = target_tiling(options)
    for _ in range(5):
        tiling = space.sample(rng).tiling
        assert (tiling.lanes, tiling.registers) == (want.lanes, want.registers)
        assert tiling.vector % want.lanes == 0


def test_an_edited_plan_that_does_not_apply_is_refused() -> None:
    import dataclasses

    space = SearchSpace(kernels()[0], OPTIONS)
    c = space.default()
    nest = c.plan.nests[0]
    assert dataclasses.is_dataclass(nest)
    bad = dataclasses.replace(c.plan, nests=(*c.plan.nests, *c.plan.nests))  # nests twice
    with pytest.raises(ScheduleError):
        space.schedule(dataclasses.replace(c, plan=bad))


@pytest.mark.parametrize("index", range(3))
def test_mutation_chains_keep_the_target_and_fail_only_as_refusals(index: int) -> None:
    # (A 20-minute ResNet50 run died at a mutant with ``paired_rows=1``: planning divided by
    # the "one fewer" row count, 0. A mutant the strategies cannot plan is a refusal.)
    space, rng = SearchSpace(kernels()[index], OPTIONS), random.Random(100 + index)
    want = target_tiling(OPTIONS)
    for _ in range(6):
        c = space.default()
        for _ in range(12):
            try:
                c = space.mutate(c, rng)
            except ScheduleError:
                continue
            assert (c.tiling.lanes, c.tiling.registers) == (want.lanes, want.registers)
            assert min(c.tiling.unroll, c.tiling.vector, c.tiling.parallel_tiles) >= 1


@pytest.mark.parametrize("paired_rows", [1, 2])
def test_tiles_of_one_or_two_paired_rows_plan(paired_rows: int) -> None:
    kernel = next(k for k in kernels() if k.name.endswith(("_Conv", "_ConvBlocked")))
    tiling = dataclasses.replace(Tiling.for_vector_bits(512), paired_rows=paired_rows)
    s = polyonnx.Schedule.from_kernel(kernel)
    assert apply_kernel_plan(s, plan_kernel(s, tiling, False)).verify().verified
