"""Rows reduced side by side (strategies/rows.py): softmax and normalisation rows."""

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.krnl.ir import Access, Aff, Load, Loop, Stmt
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies import Tiling, apply_kernel_plan, plan_kernel
from polyonnx.schedule.strategies.rows import RowsPlan
from polyonnx.testing import max_errors, onnxruntime_session, random_feeds
from polyonnx.testing.examples import softmax_rows
from polyonnx.tune.measure import random_arrays, run

AVX512 = Tiling.for_vector_bits(512)


def _plan(kernel):
    s = Schedule.from_kernel(kernel)
    return s, plan_kernel(s, AVX512, parallel=False)


@pytest.mark.parametrize("rows", [64, 29])
def test_softmax_rows_reduce_in_groups_and_sum_in_the_same_order(rows):
    s, plan = _plan(softmax_rows(rows, 40))
    (nest,) = plan.nests
    assert isinstance(nest, RowsPlan)
    assert (
        str(nest)
        == f"rows (i) in groups of {nest.rows}: r: reduce; r_1: vector, reduce; r_2: vector"
    )
    tuned = apply_kernel_plan(s, plan).verify()
    text = tuned.ast_text()
    assert text.count("// unroll") == 2 and text.count("// vector") == 2
    arrays = random_arrays(tuned.kernel)
    # Each row's sum keeps its order: the results are the own loops' to the bit.
    np.testing.assert_array_equal(run(tuned, arrays)["Y"], run(s, arrays)["Y"])


def test_rows_that_depend_on_each_other_keep_their_loops():
    kernel = softmax_rows(16, 40)
    i = Aff.var("i")
    (band,) = kernel.body
    # Each row's max starts from the previous row's: the row loop carries a dependence.
    seeded = Stmt("S0", Access("M", (i,)), Load("M", (i - 1,), "float32"))
    kernel = dataclasses.replace(
        kernel, body=(Loop(band.iterator, 1, band.upper, (seeded, *band.body[1:])),)
    )
    _, plan = _plan(kernel)
    assert not any(isinstance(n, RowsPlan) for n in plan.nests)


def _model(op: str, shape: list[int], **attrs: object) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, inputs = [], ["x"]
    if op == "LayerNormalization":
        for name in ("scale", "bias"):
            inits.append(
                numpy_helper.from_array(rng.standard_normal(shape[-1:]).astype(np.float32), name)
            )
            inputs.append(name)
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="n", **attrs)],
        "rows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("op", "shape"),
    [
        ("Softmax", [2, 3, 37, 50]),
        ("LogSoftmax", [29, 130]),
        ("LayerNormalization", [1, 21, 96]),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_row_kernels_match_onnxruntime(op, shape, threads):
    model = _model(op, shape, axis=-1)
    sess = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads))
    feeds = random_feeds(sess.get_inputs())
    got = sess.run(None, feeds)
    want = onnxruntime_session(model).run(None, feeds)
    assert max_errors(got, want).relative < 1e-5
