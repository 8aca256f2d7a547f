"""RNN, GRU, LSTM compiled natively (the default schedule: the input projection's GEMM, the
step's register-tiled recurrent product and vectorised update, directions on threads) against
onnxruntime, on random shapes: directions, batch > 1, sequence_lens (reverse too), initial
states, peepholes, linear_before_reset, layout 1, weights fed at run time, 1 and 2 threads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.testing import assert_relative_error, onnxruntime_outputs

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass(frozen=True)
class Case:
    op: str
    seq: int
    batch: int
    inp: int
    hidden: int
    direction: str = "forward"
    layout: int = 0
    lens: bool = False
    initial: bool = False
    peep: bool = False
    fed: bool = False
    """W, R and B as graph inputs rather than initializers (packed by a nest at run time)."""
    attrs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        flags = [
            f for f, on in (("lens", self.lens), ("h0", self.initial), ("peep", self.peep),
                            ("fed", self.fed)) if on
        ]  # fmt: skip
        extra = [f"{k}={v}" for k, v in self.attrs.items()]
        return "-".join(
            [
                self.op,
                f"T{self.seq}B{self.batch}I{self.inp}H{self.hidden}",
                self.direction,
                f"layout{self.layout}",
                *flags,
                *extra,
            ]
        )


def case_arrays(case: Case, seed: int) -> dict[str, np.ndarray]:
    """Inputs in layout 0 (onnxruntime's), weights scaled so the states stay in range."""
    rng = np.random.default_rng(seed)
    dirs = 2 if case.direction == "bidirectional" else 1
    g, h = GATES[case.op], case.hidden

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out = {
        "x": normal(case.seq, case.batch, case.inp),
        "w": normal(dirs, g * h, case.inp, scale=1 / np.sqrt(case.inp)),
        "r": normal(dirs, g * h, h, scale=1 / np.sqrt(h)),
        "b": normal(dirs, 2 * g * h, scale=0.5),
    }
    if case.lens:
        lens = rng.integers(1, case.seq + 1, case.batch).astype(np.int32)
        lens[0] = case.seq  # (one full row, so Y has no all-zero tail)
        out["l"] = lens
    if case.initial:
        out["h0"] = normal(dirs, case.batch, h)
        if case.op == "LSTM":
            out["c0"] = normal(dirs, case.batch, h)
    if case.peep:
        out["p"] = normal(dirs, 3 * h, scale=0.5)
    return out


_TO_BATCH_MAJOR = {"x": (1, 0, 2), "h0": (1, 0, 2), "c0": (1, 0, 2)}


def case_model(case: Case, arrays: dict[str, np.ndarray], layout: int) -> onnx.ModelProto:
    order = ["x", "w", "r", "b", "l", "h0"] + (["c0", "p"] if case.op == "LSTM" else [])
    names = [n if n in arrays else "" for n in order]
    while not names[-1]:
        names.pop()
    weights = {"w", "r", "b"} if not case.fed else set()
    arrays = {
        n: a.transpose(_TO_BATCH_MAJOR[n]) if layout and n in _TO_BATCH_MAJOR else a
        for n, a in arrays.items()
    }
    dirs = 2 if case.direction == "bidirectional" else 1
    t, b, h = case.seq, case.batch, case.hidden
    shapes = {
        "Y": [t, dirs, b, h] if not layout else [b, t, dirs, h],
        "Y_h": [dirs, b, h] if not layout else [b, dirs, h],
    }
    outputs = ["Y", "Y_h"] + (["Y_c"] if case.op == "LSTM" else [])
    shapes["Y_c"] = shapes["Y_h"]
    attrs = {"hidden_size": h, "direction": case.direction, **case.attrs}
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(case.op, names, outputs, name="rnn", **attrs)

    def info(n: str, a: np.ndarray) -> onnx.ValueInfoProto:
        kind = TensorProto.INT32 if a.dtype == np.int32 else TensorProto.FLOAT
        return helper.make_tensor_value_info(n, kind, list(a.shape))

    graph = helper.make_graph(
        [node],
        "rnn",
        [info(n, arrays[n]) for n in names if n and n not in weights],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs],
        [numpy_helper.from_array(arrays[n], n) for n in names if n in weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _check(case: Case, threads: int, seed: int = 0) -> None:
    arrays = case_arrays(case, seed)
    model = case_model(case, arrays, case.layout)
    reference = case_model(case, arrays, 0)
    feeds0 = {i.name: arrays[i.name] for i in reference.graph.input}
    want = onnxruntime_outputs(reference, feeds0)
    if case.layout:  # (onnxruntime has no batch-major layout: its results, transposed)
        want = [want[0].transpose(2, 0, 1, 3), *(w.transpose(1, 0, 2) for w in want[1:])]
    feeds = {
        n: a.transpose(_TO_BATCH_MAJOR[n]) if case.layout and n in _TO_BATCH_MAJOR else a
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
