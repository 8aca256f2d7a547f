"""Staging verbs (cache_read, cache_write, pack): the kernel they make, refusals, and a packed
GEMM compiled through the whole pipeline."""

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import polyonnx
from polyonnx.errors import ScheduleError
from polyonnx.runtime.session import Executable
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.trace import Trace
from polyonnx.testing.examples import matmul
from polyonnx.tune.measure import run
from tests.schedule.zoo import chain, conv, cumsum


def _same_result(s: Schedule) -> None:
    rng = np.random.default_rng(0)
    arrays = {b.name: rng.uniform(-1, 1, b.shape).astype(b.dtype) for b in s.original.buffers}
    want = run(Schedule.from_kernel(s.original), arrays)
    got = run(s, arrays)
    for b in s.original.buffers:
        if b.kind == "output":
            np.testing.assert_allclose(got[b.name], want[b.name], rtol=1e-5, atol=1e-5)


def _tiled(m=6, n=10, k=5):
    return Schedule.from_kernel(matmul(m, n, k)).distribute("j").tile(("k", "j_1"), (4, 4))


def test_cache_read_copies_the_tile_at_the_loop():
    s = _tiled().cache_read("B", "k_o")
    text = str(s)
    assert "S2: matmul_B_cache[t0, t1] = B[4*k_o + t0, t1]" in text
    assert "matmul_B_cache[k - 4*k_o, j]" in text
    assert text.index("for k_o") < text.index("S2:") < text.index("for j_1_o")
    assert s.kernel.buffer("matmul_B_cache").shape == (4, 10)
    assert s.original is Schedule.from_kernel(s.original).replay(s.trace).original
    _same_result(s)


def test_pack_lays_out_the_b_panel():
    s = _tiled().pack("B", "k_o", (1, 0, 2), (0, 2))
    assert s.kernel.buffer("matmul_B_pack").shape == (5, 4, 2)
    assert "B[4*k_o + t1, 2*t0 + t2]" in str(s)
    _same_result(s)
    with pytest.raises(ScheduleError, match="permutation"):
        _tiled().pack("B", "k_o", (0, 0, 1), (0, 2))


def test_cache_write_copies_out_after_the_body():
    s = Schedule.from_kernel(matmul(6, 10, 5)).split("j", 4).cache_write("C", "j_o")
    text = str(s)
    assert text.index("S1:") < text.index("S2: C[")
    assert s.kernel.buffer("matmul_C_cache").shape == (1, 4)
    _same_result(s)
    _same_result(Schedule.from_kernel(conv(relu=True)).cache_write("Y", "oh"))


def test_staging_refusals():
    s = Schedule.from_kernel(matmul(6, 10, 5))
    with pytest.raises(ScheduleError, match="C is written under the loop"):
        s.cache_read("C", "k")
    with pytest.raises(ScheduleError, match="RAW dependence S1.*crosses the loop"):
        s.cache_write("C", "k")  # S1 reads the value S0 wrote outside k
    with pytest.raises(ScheduleError, match="no buffer named"):
        s.cache_read("Z", "k")
    staged = _tiled().cache_read("B", "k_o")
    with pytest.raises(ScheduleError, match=r"parallel\(i\): loop i carries the W"):
        staged.parallel("i")  # every i would fill the one B tile at once
    with pytest.raises(ScheduleError):
        staged.reorder("j_1_o", "k_o")  # the copy sits between them now


def test_stages_compose_with_later_verbs():
    s = _tiled().cache_read("B", "k_o").cache_read("A", "j_1_o").vectorize("j_1_i", 4)
    _same_result(s)
    again = Schedule.from_kernel(s.original).replay(Trace.from_json(s.trace.to_json()))
    assert again.isl_text() == s.isl_text()
    _same_result(Schedule.from_kernel(chain()).fuse("i", "i_1", 2).cache_read("A", "i"))


def test_packed_matmul_compiles_and_runs():
    m, k, n = 8, 12, 16
    model = oh.make_model(
        oh.make_graph(
            [oh.make_node("MatMul", ["a", "b"], ["c"])],
            "mm",
            [
                oh.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [m, k]),
                oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [k, n]),
            ],
            [oh.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [m, n])],
        )
    )
    kernel = polyonnx.compile(model).program.kernels[0]
    s = (
        Schedule.from_kernel(kernel)
        .distribute("j")
        .tile(("k", "j_1"), (4, 8))
        .pack("b", "k_o", (1, 0, 2), (0, 4))
    )
    compiled = polyonnx.compile(model, schedules={kernel.name: s.trace.to_json()})
    assert any(b.name.endswith("_b_pack") for b in compiled.program.kernels[0].buffers)
    sess = Executable.from_compiled(compiled)  # what InferenceSession runs
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    (c,) = sess.run([a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loop", ["r", "i", "i_1"])
def test_cache_read_of_an_inexact_region_is_refused_not_a_crash(loop: str) -> None:
    # After compute_at the elements of X read in one iteration are a union (the copy's row and
    # the scan's point), so the staged region is their hull, whose guards are not affine here.
    # This raised AttributeError (an isl call that islpy does not have) instead.
    s = Schedule.from_kernel(cumsum()).compute_at("r", "i_1")
    with pytest.raises(ScheduleError, match="not affine"):
        s.cache_read("X", loop)
