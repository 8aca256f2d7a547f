"""Distinct kernels are scheduled, and kernel objects compiled, by pools of forked processes:
the results are those of the in-process path, and so are the errors and messages."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import pipeline, schedule_driver
from polyonnx.codegen import objects
from polyonnx.errors import ScheduleError
from polyonnx.schedule.budget import BudgetExceeded
from polyonnx.testing import onnxruntime_outputs
from tests.reliability.models import conv_net

OPTIONS = polyonnx.Options(cache=False, num_threads=1)


@pytest.fixture
def pools(monkeypatch):
    """Pools from two kernels on (the small test models have few), on two processes at least."""
    monkeypatch.setattr(schedule_driver, "PARALLEL_MIN_KERNELS", 2)
    monkeypatch.setattr(objects, "PARALLEL_MIN_MODULES", 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


def _program():
    return pipeline.lower(pipeline.to_graph(conv_net(), None, OPTIONS))


def test_forked_loops_are_the_in_process_loops(pools):
    program = _program()
    forked = pipeline.schedule(program, OPTIONS)
    here = pipeline.schedule(program, OPTIONS, trees=True)
    assert [loops for _, loops in forked] == [loops for _, loops in here]
    # Schedule trees stay in the workers; trees=True keeps them.
    assert all(s is None for s, _ in forked) and all(s is not None for s, _ in here)


def test_forked_compile_runs_like_onnxruntime(pools):
    m = conv_net()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = polyonnx.InferenceSession(m, options=OPTIONS)
    np.testing.assert_allclose(
        sess.run(None, {"x": x})[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-4, atol=1e-6
    )


def test_compiles_from_several_threads_at_once(pools):
    errors: list[BaseException] = []

    def compile_one() -> None:
        try:
            polyonnx.InferenceSession(conv_net(), options=OPTIONS)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=compile_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_worker_error_is_raised_as_in_process(pools):
    tiny = polyonnx.Options(cache=False, isl_max_operations=100)
    with pytest.raises(ScheduleError, match=r"kernel k\d+_\w+: isl exceeded .* \(nodes conv"):
        pipeline.schedule(_program(), tiny)


def test_fallback_messages_of_workers_reach_stderr(pools, monkeypatch, capsys):
    def over_budget(kernel, tiling, parallel):
        raise BudgetExceeded(f"kernel {kernel.name}", 1)

    monkeypatch.setattr(schedule_driver, "default_schedule", over_budget)
    program = _program()
    pipeline.schedule(program, polyonnx.Options(cache=False, verbose=True))
    err = capsys.readouterr().err
    assert err.count("falling back to the kernel's own loop order") == len(program.kernels)


def test_emit_isl_keeps_every_schedule_tree(pools):
    text = pipeline.emit(conv_net(), "isl", OPTIONS)
    assert text.count("// kernel ") == len(_program().kernels)


def test_forked_objects_are_the_in_process_objects(pools, monkeypatch):
    compiled = pipeline.compile(conv_net(), OPTIONS)
    modules = compiled.kernel_modules()
    forked = objects.compile_objects(modules, OPTIONS, jit=True)
    monkeypatch.setattr(objects, "PARALLEL_MIN_MODULES", len(modules) + 1)
    monkeypatch.setattr(objects, "PARALLEL_MIN_BYTES", 1 << 40)
    assert objects.compile_objects(modules, OPTIONS, jit=True) == forked


def test_an_error_building_a_module_in_a_worker_is_raised_as_in_process(pools):
    def broken():
        raise ValueError("no IR today")

    compiled = pipeline.compile(conv_net(), OPTIONS)
    with pytest.raises(ValueError, match="no IR today"):
        objects.compile_objects([*compiled.kernel_modules(), ("broken", broken)], OPTIONS, jit=True)


def test_one_thread_proves_no_parallel_loops():
    # On one thread codegen runs every loop in order: the schedules carry no parallel marks.
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "big_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 32, 32])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    one = pipeline.emit(model, "ast", polyonnx.Options(cache=False, num_threads=1))
    two = pipeline.emit(model, "ast", polyonnx.Options(cache=False, num_threads=2))
    assert "// parallel" not in one and "// parallel" in two
