"""Fuzzing in CI: a bounded number of random graphs, corrupted models and corrupted feeds.

Cases are drawn by hypothesis (so a failure shrinks to a small graph) and run in a worker
process, so a crash or a hang fails the test instead of killing the run. ``derandomize`` keeps
CI reproducible; ``python -m polyonnx.fuzz`` runs longer campaigns from random seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyonnx.fuzz import MAKERS, Case, Worker

T = TypeVar("T")


class HypothesisDraw:
    """A :class:`polyonnx.fuzz.Draw` backed by hypothesis's ``data()`` (choices shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        return self.data.draw(st.sampled_from(options))


@pytest.fixture(scope="module")
def worker():
    with Worker(timeout=120) as w:
        yield w


def _check(worker: Worker, case: Case) -> None:
    outcome = worker.check(case)
    assert not outcome.failed, f"{outcome.status}: {outcome.detail}\ncase: {case.label}"


FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


@FUZZ
@given(data=st.data())
def test_random_graphs_match_onnxruntime(worker, data):
    _check(worker, MAKERS["graph"](HypothesisDraw(data)))


@FUZZ
@given(data=st.data())
def test_corrupted_models_compile_or_give_a_polyonnx_error(worker, data):
    _check(worker, MAKERS["model"](HypothesisDraw(data)))


@FUZZ
@given(data=st.data())
def test_corrupted_feeds_run_or_give_an_input_error(worker, data):
    _check(worker, MAKERS["feed"](HypothesisDraw(data)))


def test_the_campaign_command_prints_cases_tried_and_failures(capsys):
    from polyonnx.fuzz import main

    assert main(["--cases", "6", "--seed", "1000"]) == 0
    out = capsys.readouterr().out
    assert "cases tried: 6" in out and "failures: 0" in out


def test_an_answer_only_onnxruntimes_optimizer_disputes_passes():
    """onnxruntime 1.32's optimizer fuses a Transpose into a MatMul by a 1-D B wrongly (its
    unoptimized run, onnx.reference and polyonnx agree): the checker asks the unoptimized run
    before it calls a difference a failure."""
    from onnx import TensorProto, helper

    from polyonnx.fuzz.case import Case
    from polyonnx.fuzz.checker import check

    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 3]),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((4, 3, 3)).astype(np.float32),
        "v": rng.standard_normal(3).astype(np.float32),
    }
    assert (
        check(Case("graph", model.SerializeToString(), feeds, "transpose-matmul")).status == "pass"
    )
