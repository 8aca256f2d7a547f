"""Checked builds: every buffer access is range-checked and a violation is a clear InputError."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.codegen import loopast as la
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.errors import InputError
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import default_schedule
from polyonnx.testing import onnxruntime_outputs
from polyonnx.testing.zoo import mnist_model
from tests.reliability.models import const, conv_net, model, tensor

CHECKED = polyonnx.Options(checked=True)


def _shift_kernel(n: int = 8) -> Kernel:
    """A deliberately wrong kernel: ``y[i] = x[i + 1]`` for i in [0, n) reads x[n]."""
    i = Aff.var("i")
    stmt = Stmt("S0", Access("y", (i,)), Load("x", (i + 1,), "float32"))
    return Kernel(
        "shift",
        (Buffer("x", "float32", (n,), "input"), Buffer("y", "float32", (n,), "output")),
        (Loop("i", 0, n, (stmt,)),),
    )


def _write_past_kernel(n: int = 8) -> Kernel:
    """Another wrong kernel: ``y[2 i] = x[i]`` writes past y's end."""
    i = Aff.var("i")
    stmt = Stmt("S0", Access("y", (i * 2,)), Load("x", (i,), "float32"))
    return Kernel(
        "stretch",
        (Buffer("x", "float32", (n,), "input"), Buffer("y", "float32", (n,), "output")),
        (Loop("i", 0, n, (stmt,)),),
    )


@pytest.mark.parametrize("make", [_shift_kernel, _write_past_kernel])
def test_an_out_of_bounds_access_is_trapped_in_checked_mode(make):
    kernel = make()
    run = kernel_callable(
        kernel, la.from_isl(build_ast(default_schedule(kernel).schedule)), CHECKED
    )
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    with pytest.raises(InputError, match=f"kernel {kernel.name}: run-time check failed"):
        run({"x": x, "y": y})


def test_in_bounds_kernels_run_unchanged_in_checked_mode():
    i = Aff.var("i")
    stmt = Stmt("S0", Access("y", (i,)), Load("x", (i * 0 + 7 - i,), "float32"))
    kernel = Kernel(
        "reverse",
        (Buffer("x", "float32", (8,), "input"), Buffer("y", "float32", (8,), "output")),
        (Loop("i", 0, 8, (stmt,)),),
    )
    run = kernel_callable(
        kernel, la.from_isl(build_ast(default_schedule(kernel).schedule)), CHECKED
    )
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    run({"x": x, "y": y})
    np.testing.assert_array_equal(y, x[::-1])


def _range_checks(options: polyonnx.Options) -> int:
    return str(polyonnx.compile(conv_net(), options).module()).count("in_range")


def test_checked_mode_adds_range_checks_to_the_module():
    assert _range_checks(CHECKED) > _range_checks(polyonnx.Options()) + 10


def _gather_model() -> onnx.ModelProto:
    idx = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    return model(
        [helper.make_node("Gather", ["t", "i"], ["y"], name="lookup", axis=0)],
        [idx],
        [tensor("y", [3, 2])],
        [const("t", np.arange(8, dtype=np.float32).reshape(4, 2))],
    )


def _pool_model() -> onnx.ModelProto:
    return model(
        [
            helper.make_node(
                "AveragePool",
                ["x"],
                ["a"],
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
                strides=[2, 2],
                ceil_mode=1,
            ),
            helper.make_node(
                "MaxPool", ["x"], ["m"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
            ),
            helper.make_node("Concat", ["a", "m"], ["c"], axis=1),
            helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1]),
        ],
        [tensor("x", [1, 2, 7, 7])],
        [tensor("y", [None] * 4)],
    )


def _broadcast_model() -> onnx.ModelProto:
    return model(
        [
            helper.make_node("Mul", ["x", "s"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Sigmoid", ["a"], ["y"]),
        ],
        [tensor("x", [2, 3, 4]), tensor("s", [3, 1])],
        [tensor("y", [2, 3, 4])],
        [const("b", np.linspace(-1, 1, 4).astype(np.float32))],
    )


REPRESENTATIVE = {
    "conv_net": (conv_net, {"x": (1, 3, 8, 8)}),
    "mnist": (mnist_model, {"Input3": (1, 1, 28, 28)}),
    "pools": (_pool_model, {"x": (1, 2, 7, 7)}),
    "broadcast": (_broadcast_model, {"x": (2, 3, 4), "s": (3, 1)}),
}


@pytest.mark.parametrize("name", sorted(REPRESENTATIVE))
def test_representative_models_match_onnxruntime_in_checked_mode(name):
    make, shapes = REPRESENTATIVE[name]
    m = make()
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    got = polyonnx.InferenceSession(m, options=CHECKED).run(None, feeds)
    for a, b in zip(got, onnxruntime_outputs(m, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_data_dependent_index_out_of_range_names_the_node():
    sess = polyonnx.InferenceSession(_gather_model())
    np.testing.assert_array_equal(
        sess.run(None, {"i": np.array([3, 0, 1])})[0], [[6, 7], [0, 1], [2, 3]]
    )
    with pytest.raises(InputError, match="out of range in lookup"):
        sess.run(None, {"i": np.array([0, 4, 1])})
    with pytest.raises(InputError, match="out of range in lookup"):
        sess.run(None, {"i": np.array([0, -5, 1])})


def test_the_environment_variable_turns_checked_mode_on(monkeypatch):
    for value, want in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("POLYONNX_CHECKED", value)
        assert polyonnx.Options().checked is want
