"""Element-wise activations: polyonnx against onnxruntime measured in the same run.

Each case is a small ONNX graph on one float32 tensor of ``--n`` values (default 2**20):
``Exp``, ``Log`` (of ``|x|``), ``Tanh``, ``Sigmoid``, ``Erf``, GELU in the erf form BERT
exports (``x * 0.5 * (1 + erf(x / sqrt 2))``, five nodes), SiLU (``x * sigmoid(x)``, two
nodes) and ``Softplus``. Inputs are standard normal times 4 (both branches of every
function's method). For each case: the median latency of polyonnx and of onnxruntime (CPU
provider, ``intra_op_num_threads``), timed in alternation round by round
(:func:`polyonnx.bench.timing.interleaved`), polyonnx's throughput in G values/s and the
ratio polyonnx / onnxruntime (> 1: polyonnx is slower), and the largest relative difference
of the two (max |polyonnx - ort| / max |ort|).

Usage::

    python benchmarks/elementwise.py                   # every case, 1 thread
    python benchmarks/elementwise.py --cases exp gelu --n 4194304 --repeat 50
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx.helper as oh

import polyonnx
from polyonnx.bench.timing import WARM_S, interleaved
from polyonnx.testing import import_onnxruntime, max_errors, onnxruntime_session

Nodes = Callable[[], list[onnx.NodeProto]]


def _op(op: str) -> Nodes:
    return lambda: [oh.make_node(op, ["x"], ["y"])]


def _log() -> list[onnx.NodeProto]:
    return [oh.make_node("Abs", ["x"], ["a"]), oh.make_node("Log", ["a"], ["y"])]


def _gelu_erf() -> list[onnx.NodeProto]:
    return [
        oh.make_node("Div", ["x", "sqrt2"], ["s"]),
        oh.make_node("Erf", ["s"], ["e"]),
        oh.make_node("Add", ["e", "one"], ["e1"]),
        oh.make_node("Mul", ["x", "e1"], ["m"]),
        oh.make_node("Mul", ["m", "half"], ["y"]),
    ]


def _silu() -> list[onnx.NodeProto]:
    return [oh.make_node("Sigmoid", ["x"], ["s"]), oh.make_node("Mul", ["x", "s"], ["y"])]


CASES: dict[str, Nodes] = {
    "exp": _op("Exp"),
    "log": _log,
    "tanh": _op("Tanh"),
    "sigmoid": _op("Sigmoid"),
    "erf": _op("Erf"),
    "gelu_erf": _gelu_erf,
    "silu": _silu,
    "softplus": _op("Softplus"),
}
"""Every case by name, in the table's order."""


def model(case: str, n: int) -> onnx.ModelProto:
    """The case's graph on a float32 tensor of ``n`` values."""
    f = onnx.TensorProto.FLOAT
    constants = [
        oh.make_tensor(name, f, [], [value])
        for name, value in (("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5))
    ]
    graph = oh.make_graph(
        CASES[case](),
        case,
        [oh.make_tensor_value_info("x", f, [n])],
        [oh.make_tensor_value_info("y", f, [n])],
        initializer=constants,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 19)])


def measure(
    case: str, n: int, threads: int, repeat: int, budget_s: float
) -> tuple[float, float, int, float]:
    """polyonnx's and onnxruntime's median seconds, the rounds, the relative difference."""
    m = model(case, n)
    sess = polyonnx.InferenceSession(m, options=polyonnx.Options(num_threads=threads, cache=False))
    ref = onnxruntime_session(m, threads=threads)
    feeds = {"x": (np.random.default_rng(0).standard_normal(n) * 4).astype(np.float32)}
    err = max_errors(sess.run(None, feeds), ref.run(None, feeds)).relative
    (poly_s, ort_s), runs = interleaved(
        [lambda: sess.run(None, feeds), lambda: ref.run(None, feeds)],
        repeat,
        budget_s,
        WARM_S if threads > 1 else 0.0,
    )
    return poly_s, ort_s, runs, err


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--n", type=int, default=1 << 20, help="values per tensor (default 2**20)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=30, help="timed rounds (default 30)")
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timed rounds per case")
    args = p.parse_args(argv)
    print(
        f"polyonnx {polyonnx.__version__}, onnxruntime {import_onnxruntime().__version__}, "
        f"{args.n} float32 values, {args.threads} thread(s)"
    )
    print(
        "| case | polyonnx (ms) | onnxruntime (ms) | polyonnx G values/s | runs | "
        "polyonnx / ort | max rel diff |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for case in args.cases:
        poly_s, ort_s, runs, err = measure(case, args.n, args.threads, args.repeat, args.budget)
        ratios.append(poly_s / ort_s)
        print(
            f"| {case} | {poly_s * 1e3:.3f} | {ort_s * 1e3:.3f} | {args.n / poly_s / 1e9:.2f} | "
            f"{runs} | {poly_s / ort_s:.2f} | {err:.1e} |",
            flush=True,
        )
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"| geometric mean | | | | | **{mean:.2f}** | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
