"""Schedule verbs: what each does to the loop nest, what is refused and why, trace round trips."""

import islpy as isl
import numpy as np
import pytest

from polyonnx.errors import ScheduleError
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.trace import Trace
from polyonnx.testing.examples import matmul, stencil
from polyonnx.tune.measure import run
from tests.schedule.zoo import ZOO, chain, conv, cumsum, rnn


def _arrays(kernel, seed=0):
    rng = np.random.default_rng(seed)
    return {b.name: rng.uniform(-1, 1, b.shape).astype(b.dtype) for b in kernel.buffers}


def _same_result(s: Schedule) -> None:
    arrays = _arrays(s.kernel)
    want = run(Schedule.from_kernel(s.kernel), arrays)
    got = run(s, arrays)
    for b in s.kernel.buffers:
        if b.kind == "output":
            np.testing.assert_allclose(got[b.name], want[b.name], rtol=1e-5, atol=1e-5)


def test_initial_schedule_names_loops_after_iterators():
    s = Schedule.from_kernel(matmul(4, 5, 3))
    assert s.loops == ("i", "j", "k")
    assert str(s) == (
        "for i in [0, 4):\n  for j in [0, 5):\n    S0: C[i, j] = 0.0\n"
        "    for k in [0, 3):\n      S1: C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))"
    )
    assert Schedule.from_kernel(chain()).loops == ("i", "j", "i_1", "j_1", "i_2", "j_2")


def test_initial_tree_orders_like_the_kernel():
    from polyonnx.schedule.poly import initial_schedule

    for build in ZOO.values():
        s = Schedule.from_kernel(build())
        # The same order of the instances (the isl tree leaves out loops of one iteration).
        ours = s.isl_schedule.get_map()
        theirs = initial_schedule(s.poly).get_map().intersect_domain(s.poly.domain)
        assert ours.lex_lt_union_map(ours).is_equal(theirs.lex_lt_union_map(theirs))


def test_loops_of_one_iteration_are_left_out_of_the_isl_tree():
    # conv() has a batch loop n of one iteration: the schedule keeps it (it has a name and
    # verbs may use it), the isl tree does not, and a parallel mark names only real loops.
    s = Schedule.from_kernel(conv())
    assert s.loops[0] == "n"
    times = isl.Set.from_union_set(s.isl_schedule.get_map().range())
    assert times.dim(isl.dim_type.set) == 7  # oc, oh, ow, the sequence, ic, kh, kw
    marked = s.parallel("n", named=("n", "oc"))
    assert "parallel c0" in marked.isl_text()
    assert marked.ast_text().splitlines()[0] == "// parallel c0"
    assert "parallel" not in s.parallel("n", named=("n",)).isl_text()
    _same_result(marked)


def test_split_and_tile_print_their_loops():
    s = Schedule.from_kernel(matmul(16, 16, 16))
    text = str(s.split("j", 4))
    assert "for j_o in [0, 4):  # = floor(j/4)" in text
    assert "for j_i in [0, 4):  # = j mod 4" in text
    t = s.distribute("j").tile(("k", "j_1"), (8, 4))
    assert t.loops == ("i", "j", "k_o", "j_1_o", "k_i", "j_1_i")
    two = Schedule.from_kernel(matmul(16, 16, 16)).tile(("i", "j"), (8, 8), (2, 4))
    assert two.loops[:6] == ("i_0", "j_0", "i_1", "j_1", "i_2", "j_2")
    _same_result(two)


def test_tile_refuses_non_adjacent_loops():
    with pytest.raises(ScheduleError, match="adjacent"):
        Schedule.from_kernel(conv()).tile(("oc", "ow"), (2, 2))


def test_reorder_needs_a_perfect_nest():
    with pytest.raises(ScheduleError, match="perfectly nested"):
        Schedule.from_kernel(matmul()).reorder("k", "j")
    s = Schedule.from_kernel(matmul()).distribute("j").reorder("k", "j_1")
    assert s.loops == ("i", "j", "k", "j_1")
    _same_result(s)


def test_interchanging_the_stencil_loops_is_refused_with_its_witness():
    with pytest.raises(ScheduleError) as e:
        Schedule.from_kernel(stencil()).interchange("t", "i")
    msg = str(e.value)
    assert (
        "RAW dependence S0[t=" in msg and "on A[" in msg and "(distance (1, -1) in (t, i))" in msg
    )


def test_skew_makes_the_stencil_interchangeable():
    s = Schedule.from_kernel(stencil(5, 9)).skew("t", "i", 1).interchange("t", "i")
    assert s.loops == ("i", "t")
    _same_result(s)


def test_reversing_the_cumsum_scan_is_refused():
    s = Schedule.from_kernel(cumsum())
    with pytest.raises(ScheduleError, match=r"reverse\(i_1\).*RAW dependence S1"):
        s.reverse("i_1")
    _same_result(s.reverse("r_1").reverse("i"))


def test_parallelising_the_rnn_time_loop_is_refused():
    s = Schedule.from_kernel(rnn())
    with pytest.raises(ScheduleError, match=r"parallel\(t\): loop t carries the RAW"):
        s.parallel("t")
    ok = s.parallel("j")
    assert "# parallel" in str(ok)
    assert 'mark: "parallel"' in ok.isl_text()


def test_reduction_loops_are_named_as_such():
    with pytest.raises(ScheduleError, match="k_i is a reduction loop of S1 .into C."):
        Schedule.from_kernel(matmul(4, 16, 3)).vectorize("k", 2)


def test_relu_moved_into_the_conv_reduction_loop_runs_after_its_last_iteration():
    s = Schedule.from_kernel(conv(relu=True))
    inside = s.reverse_compute_at("i0", "ic")
    _same_result(inside)
    # Each ReLU instance sits in the last input channel of its pixel, after that channel's
    # taps: (oc, oh, ow, the reduction nest, ic = 2, after its body); n, a loop of one
    # iteration, is not in the isl tree.
    m = inside.scheduled().schedule.get_map()
    relu = m.intersect_domain(isl.UnionSet("{ S2[0, 1, 3, 3] }"))
    last_tap = m.intersect_domain(isl.UnionSet("{ S1[0, 1, 3, 3, 2, 2, 2] }"))
    assert str(relu.range()).startswith("{ [1, 3, 3, 1, 2, 1,")
    assert str(last_tap.range()).startswith("{ [1, 3, 3, 1, 2, 0,")
    fused = s.fuse("n", "i0", 4)
    assert fused.loops == ("n", "oc", "oh", "ow", "ic", "kh", "kw")
    _same_result(fused)
    _same_result(s.reverse_compute_at("i0", "ow"))


def test_compute_at_puts_a_producer_in_a_consumer_tile():
    s = Schedule.from_kernel(chain()).tile(("i_1", "j_1"), (2, 4))
    moved = s.compute_at("i", "j_1_o")
    text = str(moved)
    assert text.index("S0:") < text.index("S1:")
    assert text.index("for j_1_o") < text.index("S0:")
    _same_result(moved)


def test_fuse_and_distribute_are_inverse_orders():
    s = Schedule.from_kernel(chain())
    fused = s.fuse("i", "i_1", 2).fuse("i", "i_2", 2)
    assert fused.loops == ("i", "j")
    back = fused.distribute("i")
    assert back.isl_schedule.get_map().is_equal(s.isl_schedule.get_map())
    with pytest.raises(ScheduleError, match="right after"):
        s.fuse("i", "i_2")


def test_vectorize_splits_isolates_and_marks():
    s = Schedule.from_kernel(chain(5, 20)).vectorize("j")
    assert s.directives[-1].width == 8
    ast = s.ast_text()
    assert "// vector" in ast
    assert "c2 <= 7" in ast or "c3 <= 7" in ast  # the full tiles' vector loop: 8 iterations
    band = [n for n in s.loops if n.endswith("_i")]
    assert band == ["j_i"]
    _same_result(s)
    with pytest.raises(ScheduleError, match="only an innermost loop"):
        Schedule.from_kernel(chain()).vectorize("i")


def test_unroll_full_and_by_factor():
    s = Schedule.from_kernel(matmul(4, 6, 8))
    full = s.unroll("k")
    assert "unroll[0]" in full.isl_text()
    assert full.ast_text().count("S1(") == 8
    part = s.unroll("k", 4)
    assert part.loops == ("i", "j", "k_o", "k_i")
    _same_result(part)
    with pytest.raises(ScheduleError, match="more than"):
        Schedule.from_kernel(matmul(4, 4, 100)).unroll("k")


def test_isolate_separates_full_tiles():
    s = Schedule.from_kernel(chain(2, 20)).split("j", 8).isolate("j_o")
    assert "isolate" in s.isl_text()
    assert s.ast_text().count("S0(") == 2
    _same_result(s)


def test_illegal_requests_leave_no_trace():
    s = Schedule.from_kernel(stencil())
    with pytest.raises(ScheduleError):
        s.interchange("t", "i")
    assert s.directives == ()
    with pytest.raises(ScheduleError, match="no loop named 'x'"):
        s.split("x", 2)


def test_unverified_verbs_are_proved_once_and_refused_until_then():
    from polyonnx.schedule.verbs import Reorder, Skew

    start = Schedule.from_kernel(stencil())
    assert start.verified
    # Interchanging alone is illegal; skewed first, the interchange is legal.
    bad = start.apply_unverified(Reorder(("i", "t")))
    assert not bad.verified and bad.directives == (Reorder(("i", "t")),)
    with pytest.raises(ScheduleError, match=r"reorder\(i, t\) not proved legal"):
        bad.scheduled()
    with pytest.raises(ScheduleError, match=r"^reorder\(i, t\): the RAW dependence"):
        bad.verify()
    assert not bad.verified
    good = start.apply_unverified(Skew("t", "i", 1)).apply_unverified(Reorder(("i", "t")))
    assert good.verify() is good and good.verified and good.loops == ("i", "t")
    assert good.scheduled().trace == good.trace
    _same_result(good)


def test_created_names_the_loops_a_verb_made():
    from polyonnx.schedule.verbs import Split

    s = Schedule.from_kernel(matmul()).apply_unverified(Split("j", 2, floor=True))
    assert s.created == ("j_o", "j_i") and s.loops == ("i", "j_o", "j_i", "k")


ROUND_TRIPS = {
    "split": (matmul, lambda s: s.split("j", 2)),
    "tile": (matmul, lambda s: s.distribute("j").tile(("k", "j_1"), (2, 3), (1, 1))),
    "reorder": (matmul, lambda s: s.distribute("j").reorder("k", "j_1")),
    "fuse": (chain, lambda s: s.fuse("i", "i_1", 2)),
    "distribute": (matmul, lambda s: s.distribute("i")),
    "compute_at": (chain, lambda s: s.compute_at("i", "j_1")),
    "reverse_compute_at": (chain, lambda s: s.reverse_compute_at("i_1", "i")),
    "vectorize": (chain, lambda s: s.vectorize("j_2", 4)),
    "parallel": (matmul, lambda s: s.parallel("i")),
    "unroll": (matmul, lambda s: s.unroll("k", 2)),
    "skew": (stencil, lambda s: s.skew("t", "i", 2)),
    "reverse": (chain, lambda s: s.reverse("j")),
    "isolate": (chain, lambda s: s.split("j", 2).isolate("j_o")),
    "cache_read": (matmul, lambda s: s.split("k", 2).cache_read("B", "k_o")),
    "cache_write": (matmul, lambda s: s.split("j", 2).cache_write("C", "j_o")),
    "pack": (matmul, lambda s: s.split("k", 2).pack("B", "k_o", (1, 0), ())),
}


@pytest.mark.parametrize("verb", sorted(ROUND_TRIPS))
def test_trace_round_trip(verb):
    build, script = ROUND_TRIPS[verb]
    kernel = build()
    s = script(Schedule.from_kernel(kernel))
    assert s.directives[-1].verb == verb
    again = Schedule.from_kernel(kernel).replay(Trace.from_json(s.trace.to_json()))
    assert again.isl_text() == s.isl_text()
    assert str(again) == str(s)
    assert again.trace == s.trace


def test_every_verb_has_a_round_trip_test():
    from polyonnx.schedule.verbs import VERBS

    assert set(VERBS) == set(ROUND_TRIPS)


def test_trace_refuses_another_signature():
    t = Schedule.from_kernel(matmul(4, 5, 3)).split("i", 2).trace
    with pytest.raises(ScheduleError, match="does not fit"):
        Schedule.from_kernel(matmul(4, 5, 4)).replay(t)
    with pytest.raises(ScheduleError, match="unknown verb"):
        Trace.from_json('{"signature": "x", "steps": [{"verb": "explode"}]}')


def test_dependences_are_exact_for_the_check():
    s = Schedule.from_kernel(stencil())
    assert s.dependences.raw.deltas().is_equal(isl.UnionSet("{ S0[1, 0]; S0[1, -1] }"))
