"""The legality checks' shortcuts decide exactly what the plain isl formulations decide.

``Dependences.all`` computes RAW and WAW in one dataflow analysis and leaves out the WAR
dependences that the WAW ones imply; ``Dependences.to_keep`` keeps only those within stages of a
schedule that runs the kernel's stages in order;
``check_order`` first maps the dependences to (source time, sink time) instead of building the
lexicographic order between all instances; ``Schedule.verify`` asks
``loops_that_may_carry`` which loops of a nest need ``check_not_carried`` at all. All are
compared here with the definitions on random schedules, legal or not, of the zoo kernels.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyonnx.errors import ScheduleError
from polyonnx.schedule.legality import _runs_before, check_not_carried, loops_that_may_carry
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.tree import (
    Band,
    band_map,
    bands_above,
    bands_on_path,
    get,
    instances,
    prefix_map,
    stmts,
    walk,
)
from polyonnx.schedule.verbs import Reverse
from tests.schedule.test_properties import verb
from tests.schedule.zoo import ZOO


def _carries(s: Schedule, path: tuple[int, ...]) -> bool:
    """The definition: does ``check_not_carried`` refuse the loop at ``path``?"""
    band = get(s.tree, path)
    assert isinstance(band, Band)
    try:
        check_not_carried(
            "probe",
            band.name,
            s.poly,
            s.dependences,
            prefix_map(s.tree, path, s.poly, inclusive=False),
            band_map(band, s.poly),
        )
    except ScheduleError:
        return True
    return False


def _nests(s: Schedule) -> list[list[tuple[int, ...]]]:
    """Paths of each chain of directly nested loops over the same statements."""
    out = []
    for path, node in walk(s.tree):
        if not isinstance(node, Band):
            continue
        chain = [path]
        while isinstance(node.child, Band):
            node, chain = node.child, [*chain, (*chain[-1], 0)]
        out.append(chain)
    return out


def _compare(s: Schedule) -> None:
    kinds = s.dependences
    deps = kinds.all
    every = kinds.raw.union(kinds.war).union(kinds.waw)
    # (all leaves out the WAR of a read by the instance that writes the element: implied)
    assert deps.is_subset(every)
    order = s.isl_schedule.get_map()
    legal = every.is_subset(order.lex_lt_union_map(order))
    assert _runs_before(deps, order) == legal
    assert _runs_before(kinds.to_keep(s.isl_schedule), order) == legal
    if not legal:
        return  # (which loops carry what is asked of legal schedules only)
    for chain in _nests(s):
        below = instances(s.poly, stmts(get(s.tree, chain[-1])))
        depths = {bands_above(s.tree, p): p for p in chain}
        carries = {d for d, p in depths.items() if _carries(s, p)}
        # The whole nest, then each shorter prefix of it (answered from the first's distances).
        for k in range(len(chain), 0, -1):
            columns = [b.sched for b in bands_on_path(s.tree, chain[k - 1])]
            asked = [d for d in sorted(depths) if d < len(columns)]
            may = loops_that_may_carry(s.dependences, below, columns, asked)
            assert may == {d for d in carries if d < len(columns)}, s.trace


@pytest.mark.parametrize("name", sorted(ZOO))
def test_unscheduled_kernels(name):
    _compare(Schedule.from_kernel(ZOO[name]()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_schedules_legal_or_not(data):
    s = Schedule.from_kernel(ZOO[data.draw(st.sampled_from(sorted(ZOO)), label="kernel")]())
    for _ in range(data.draw(st.integers(0, 3), label="steps")):
        try:
            s = data.draw(verb(s))(s)
        except ScheduleError:
            continue
    if data.draw(st.booleans(), label="reverse a loop unchecked"):
        # Running a loop backwards breaks the order of what it carries: an illegal schedule.
        with contextlib.suppress(ScheduleError):  # (a marked loop is not reversed)
            s = s.apply_unverified(Reverse(data.draw(st.sampled_from(s.loops), label="loop")))
    _compare(s)
