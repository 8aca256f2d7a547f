"""RNN, GRU, LSTM compiled natively (the default schedule: the input projection's GEMM, the
step's register-tiled recurrent product and vectorised update, directions on threads) against
onnxruntime, on random shapes: directions, batch > 1, sequence_lens (reverse too), initial
states, peepholes, linear_before_reset, layout 1, weights fed at run time, 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest

import polyonnx
from polyonnx.testing import assert_relative_error, onnxruntime_outputs
from tests.krnl.harness import TO_BATCH_MAJOR, case_arrays, case_model
from tests.krnl.harness import RecurrentCase as Case


def _check(case: Case, threads: int, seed: int = 0) -> None:
    arrays = case_arrays(case, seed)
    model = case_model(case, arrays, case.layout)
    reference = case_model(case, arrays, 0)
    feeds0 = {i.name: arrays[i.name] for i in reference.graph.input}
    want = onnxruntime_outputs(reference, feeds0)
    if case.layout:  # (onnxruntime has no batch-major layout: its results, transposed)
        want = [want[0].transpose(2, 0, 1, 3), *(w.transpose(1, 0, 2) for w in want[1:])]
    feeds = {
        n: a.transpose(TO_BATCH_MAJOR[n]) if case.layout and n in TO_BATCH_MAJOR else a
        for n, a in feeds0.items()
    }
    session = polyonnx.InferenceSession(model, options=polyonnx.Options(num_threads=threads))
    got = session.run(None, feeds)
    assert_relative_error(got, want, 1e-4, [o.name for o in model.graph.output])


def _random_cases() -> list[Case]:
    """Shapes drawn once (seeded): hidden sizes that fill register tiles and ones that do not."""
    rng = np.random.default_rng(17)
    cases = []
    for op, direction, layout, lens, initial in [
        ("LSTM", "forward", 0, False, False),
        ("LSTM", "reverse", 0, True, True),
        ("LSTM", "bidirectional", 1, True, False),
        ("GRU", "bidirectional", 0, False, True),
        ("GRU", "reverse", 1, True, False),
        ("RNN", "bidirectional", 0, True, True),
        ("RNN", "forward", 1, False, False),
    ]:
        hidden = int(rng.choice([5, 16, 24, 32, 48, 64]))
        cases.append(
            Case(
                op,
                int(rng.integers(1, 9)),
                int(rng.integers(1, 6)),
                int(rng.integers(1, 40)),
                hidden,
                direction,
                layout,
                lens,
                initial,
            )
        )
    return cases


CASES = [
    *_random_cases(),
    Case("LSTM", 7, 1, 20, 64, "bidirectional", initial=True, peep=True),
    Case("LSTM", 5, 3, 12, 32, "forward", peep=True, attrs={"input_forget": 1}),
    Case("LSTM", 4, 2, 9, 32, "bidirectional", fed=True, lens=True),
    Case("LSTM", 6, 1, 8, 16, "forward", attrs={"clip": 0.7}),
    Case("GRU", 6, 1, 10, 32, "bidirectional", attrs={"linear_before_reset": 1}),
    Case("GRU", 5, 4, 7, 64, "forward", lens=True, attrs={"linear_before_reset": 1}),
    Case("GRU", 5, 2, 7, 48, "reverse", fed=True, attrs={"linear_before_reset": 1}),
    Case("GRU", 3, 3, 6, 32, "bidirectional", fed=True),
    Case("RNN", 6, 2, 11, 32, "bidirectional", fed=True, attrs={"clip": 1.5}),
    Case(
        "RNN",
        5,
        2,
        4,
        32,
        "bidirectional",
        attrs={"activations": ["Relu", "Tanh"]},  # (one step loop per direction)
    ),
    Case(
        "GRU",
        4,
        1,
        5,
        32,
        "bidirectional",
        attrs={
            "activations": ["HardSigmoid", "Tanh", "Sigmoid", "LeakyRelu"],
            "activation_alpha": [0.3, 0.2],
            "activation_beta": [0.4],
        },
    ),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_recurrent_layer_matches_onnxruntime(case: Case) -> None:
    _check(case, threads=1)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.direction == "bidirectional"][:4] + CASES[:1], ids=str
)
def test_recurrent_layer_on_two_threads(case: Case) -> None:
    _check(case, threads=2, seed=1)
