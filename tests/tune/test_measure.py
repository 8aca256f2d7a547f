"""Kernels are built only from proved schedules, and timed on arrays aligned like a compiled
model's memory (64 bytes)."""

import numpy as np
import pytest

import polyonnx
from polyonnx.bench.profile import profile
from polyonnx.krnl.memory import aligned_array
from polyonnx.tune.measure import random_arrays


@pytest.mark.parametrize(
    "values",
    [np.arange(10, dtype=np.float32).reshape(2, 5), np.zeros((0, 3), np.int64), np.array(True)],
)
def test_aligned_array_is_an_aligned_copy(values: np.ndarray) -> None:
    out = aligned_array(values)
    assert out.ctypes.data % 64 == 0 and out.flags["C_CONTIGUOUS"] and out.flags["WRITEABLE"]
    np.testing.assert_array_equal(out, values)
    assert out.dtype == values.dtype and out.shape == values.shape


def test_random_arrays_are_aligned() -> None:
    kernel = polyonnx.op_kernel("Conv", [(1, 3, 9, 9), (4, 3, 3, 3)], {"pads": [1, 1, 1, 1]})
    arrays = random_arrays(kernel)
    assert {b.name for b in kernel.buffers} == set(arrays)
    assert all(a.ctypes.data % 64 == 0 for a in arrays.values())


def test_an_unverified_schedule_is_not_built() -> None:
    from polyonnx.errors import ScheduleError
    from polyonnx.schedule.verbs import Vectorize
    from polyonnx.testing.examples import matmul

    s = polyonnx.Schedule.from_kernel(matmul()).apply_unverified(Vectorize("k", 0, mark=True))
    with pytest.raises(ScheduleError, match="not proved legal"):
        polyonnx.build(s)
    with pytest.raises(ScheduleError, match="loop k carries the RAW dependence"):
        s.verify()


def test_profile_times_every_kernel() -> None:
    import onnx.helper as oh
    from onnx import TensorProto

    model = oh.make_model(
        oh.make_graph(
            [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Softmax", ["r"], ["y"])],
            "g",
            [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
            [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        )
    )
    compiled = polyonnx.compile(model)
    rows = profile(compiled, repeat=3)
    assert sorted(r.name for r in rows) == sorted(k.name for k, _ in compiled.asts)
    assert all(r.seconds > 0 for r in rows)


def test_profile_in_model_runs_the_model_on_its_own_memory() -> None:
    import onnx.helper as oh
    from onnx import TensorProto, numpy_helper

    w = numpy_helper.from_array(np.full((8, 4), 0.5, np.float32), "w")
    model = oh.make_model(
        oh.make_graph(
            [
                oh.make_node("MatMul", ["x", "w"], ["m"]),
                oh.make_node("Relu", ["m"], ["r"]),
                oh.make_node("Softmax", ["r"], ["y"]),
            ],
            "g",
            [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
            [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
            [w],
        )
    )
    compiled = polyonnx.compile(model)
    rows = profile(compiled, repeat=3, in_model=True)
    assert sorted(r.name for r in rows) == sorted(k.name for k, _ in compiled.asts)
    assert all(r.seconds > 0 for r in rows)
    # The places are the model's memory: running the kernels in order on them is an inference.
    from polyonnx.bench.profile import _model_memory
    from polyonnx.codegen.kernel_call import kernel_callable

    place = _model_memory(compiled, np.random.default_rng(0))
    for k, loops in compiled.asts:
        kernel_callable(k, loops, compiled.options)(
            {b.name: place(b.name, b.shape, b.dtype) for b in k.buffers}
        )
    x = place("x", (3, 8), "float32")
    assert x.min() > 0  # (random feeds)
    logits = np.maximum(x @ np.full((8, 4), 0.5, np.float32), 0)
    want = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(place("y", (3, 4), "float32"), want, rtol=1e-5)
