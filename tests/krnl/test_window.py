"""Kernels that differ only in their place in a buffer share one schedule and one function."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import schedule_driver
from polyonnx.krnl.ir import Access, Aff, Buffer, Kernel, Load, Loop, Stmt
from polyonnx.krnl.window import windowed
from polyonnx.testing import assert_close, onnxruntime_outputs, random_feeds

F = TensorProto.FLOAT
i, j = Aff.var("i"), Aff.var("j")


def _copy(out_shape: tuple[int, ...], write: tuple[Aff, ...]) -> Kernel:
    s = Stmt("S0", Access("y", write), Load("x", (i, j), "float32"))
    loops = Loop("i", 0, 2, (Loop("j", 0, 4, (s,)),))
    return Kernel(
        "k",
        (Buffer("x", "float32", (2, 4), "input"), Buffer("y", "float32", out_shape, "output")),
        (loops,),
    )


def test_slices_of_one_buffer_become_one_kernel():
    a, b = windowed(_copy((6, 4), (i + 2, j))), windowed(_copy((6, 4), (i + 4, j)))
    assert a.kernel == b.kernel
    assert (a.offsets, b.offsets) == ((0, 8), (0, 16))  # 2 and 4 rows of 4
    assert str(a.kernel.body[0].body[0].body[0]) == "S0: y[i, j] = x[i, j]"


def test_what_stays_in_place():
    # Already at the start; along an inner axis (a zero-bordered value's interior), after an
    # outer axis of more than one element; the outermost axis of one element is skipped.
    for shape, write in [
        ((2, 4), (i, j)),
        ((2, 6), (i, j + 1)),
    ]:
        w = windowed(_copy(shape, write))
        assert w.offsets == (0, 0) and w.kernel == _copy(shape, write)
    w = windowed(_copy((1, 2, 6), (Aff.lift(0), i, j + 1)))  # (a rank-3 buffer of one batch)
    assert w.offsets == (0, 0)
    w = windowed(_copy((1, 5, 4), (Aff.lift(0), i + 3, j)))
    assert w.offsets == (0, 12)


def test_a_computed_index_keeps_its_buffer_in_place():
    gather = Load("x", (Load("idx", (i,), "int64"), j), "float32")
    s = Stmt("S0", Access("y", (i + 1, j)), Load("x", (i + 1, j), "float32") + gather)
    k = Kernel(
        "k",
        (
            Buffer("x", "float32", (3, 4), "input"),
            Buffer("idx", "int64", (2,), "input"),
            Buffer("y", "float32", (3, 4), "output"),
        ),
        (Loop("i", 0, 2, (Loop("j", 0, 4, (s,)),)),),
    )
    w = windowed(k)
    assert w.offsets == (0, 0, 4)  # y moves; x, read at a computed row too, does not


def _branches(n: int) -> onnx.ModelProto:
    """n equal 3x3 convs of one input, concatenated: n kernels that differ in their slice."""
    rng = np.random.default_rng(3)
    nodes, inits = [], []
    for k in range(n):
        w = (rng.standard_normal((8, 8, 3, 3)) / 9).astype("f4")
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("Conv", ["x", f"w{k}"], [f"c{k}"], pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
    nodes.append(helper.make_node("Concat", [f"r{k}" for k in range(n)], ["cat"], axis=1))
    nodes.append(helper.make_node("Sigmoid", ["cat"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "branches",
        [helper.make_tensor_value_info("x", F, [1, 8, 9, 9])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("checked", [False, True])
def test_the_slices_share_one_schedule_and_one_function(monkeypatch, checked):
    scheduled = []
    original = schedule_driver.schedule_kernel

    def counting(kernel, strategy, options):
        scheduled.append(kernel.name)
        return original(kernel, strategy, options)

    monkeypatch.setattr(schedule_driver, "schedule_kernel", counting)
    model = _branches(3)
    options = polyonnx.Options(num_threads=1, cache=False, checked=checked)
    compiled = polyonnx.compile(model, options)
    convs = [
        s
        for k, s in zip(compiled.program.kernels, compiled.symbols, strict=True)
        if "Conv" in k.name
    ]
    assert len(convs) == 3
    # One schedule for the three convolutions (and one for the sigmoid); one function,
    # except in checked code, whose bounds checks are against the whole concatenation.
    assert len(scheduled) == 2
    assert len(set(convs)) == (3 if checked else 1)
    sess = polyonnx.InferenceSession(model, options=options)
    feeds = random_feeds(sess.get_inputs())
    assert_close(sess.run(None, feeds), onnxruntime_outputs(model, feeds), rtol=1e-4, atol=1e-5)
