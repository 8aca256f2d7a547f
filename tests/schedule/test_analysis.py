"""What the general strategy reads from the polyhedral model: access strides and the loops of a
nest that carry dependences (exact, from isl)."""

import pytest

from polyonnx.krnl.ir import Aff, Load
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.analysis import NestDependences, stride
from polyonnx.schedule.tree import band_paths
from polyonnx.testing.examples import matmul, stencil
from tests.schedule.zoo import cumsum, rnn

i, j, k = Aff.var("i"), Aff.var("j"), Aff.var("k")


@pytest.mark.parametrize(
    "index, shape, iterator, want",
    [
        ((i, j), (4, 8), "j", 1),  # contiguous
        ((i, j), (4, 8), "i", 8),  # a row further
        ((j, i), (8, 4), "j", 4),  # transposed
        ((i, k), (4, 8), "j", 0),  # invariant: a broadcast
        ((i, j * 2 + k), (4, 8), "j", 2),  # strided (a stride-2 conv's input)
        ((i + j, j), (4, 8), "j", 9),  # along a diagonal
        ((i,), (4,), "i", 1),
    ],
)
def test_stride_of_an_access_along_a_loop(index, shape, iterator, want):
    assert stride(index, shape, iterator) == want


def test_a_computed_index_has_no_stride():
    gathered = Load("idx", (i,), "int64")
    assert stride((gathered, j), (4, 8), "j") is None


def _deps(s: Schedule, loop: str, depth: int) -> NestDependences:
    return NestDependences(s, band_paths(s.tree)[loop], depth)


def test_a_matmul_reduction_loop_carries_and_its_output_loops_are_free():
    s = Schedule.from_kernel(matmul(6, 10, 4))
    outer = _deps(s, "i", 2)  # (i, j): the init and the reduction below, k inside
    assert outer.depth == 2 and not outer.carried(0) and outer.free(0) and outer.free(1)
    red = _deps(s, "k", 1)  # k, inside i and j
    assert red.enclosing == 2 and red.carried(0) and not red.free(0)


def test_a_scan_loop_carries_its_dependence_the_rows_do_not():
    s = Schedule.from_kernel(cumsum())
    copy = _deps(s, "r", 2)
    assert copy.free(0) and copy.free(1)
    scan = _deps(s, "r_1", 2)
    assert scan.free(0) and not scan.free(1)
    assert scan.carried(1, outside=[0]) and not scan.carried(0)


def test_a_time_loop_carries_and_the_loops_inside_it_do_not_carry_with_it_outside():
    s = Schedule.from_kernel(rnn())
    assert _deps(s, "t", 1).carried(0)
    inside = _deps(s, "j", 1)  # j under t: each step's units are independent
    assert inside.enclosing == 1 and not inside.carried(0)


def test_a_stencil_in_time_carries_along_time_only():
    s = Schedule.from_kernel(stencil(5, 9))
    nest = _deps(s, "t", 2)
    assert nest.carried(0) and not nest.carried(1, outside=[0])
    # Alone outermost, i carries (A[t-1, i+1] feeds i at the next t); inside t it is free.
    assert nest.carried(1) and nest.free(1) and not nest.free(0)
