"""Tune ResNet50 (or one of its layers) for this machine, then compare the model untuned, tuned
and in onnxruntime, interleaved in one process (only ratios measured so mean anything on a
loaded machine).

    python examples/tune_resnet50.py --budget 20m --threads 1   # the light ResNet50
    python examples/tune_resnet50.py --layer --budget 3m         # one stage-2 3x3 conv + ReLU
    python examples/tune_resnet50.py --small                     # CI: a tiny conv, 10 s

The records go to ``--db`` (default: a file beside this script's output, not the database
compile reads by default, so trying the example changes nothing else); run it again to go
on tuning where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.testing import onnxruntime_session

RESNET50 = os.path.join(
    os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx"
)


def conv_layer(channels: int, size: int, seed: int = 0) -> onnx.ModelProto:
    """Conv 3x3 (pad 1, bias) + ReLU: a ResNet50 stage-2 layer once BatchNorm is folded."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "resnet50_conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def timed(
    runs: list[Callable[[], object]], rounds: int, one_thread: bool
) -> tuple[list[float], int]:
    """Median time of each run, called in turn (the order rotating each round). With one
    thread, the CPU time of this thread: on a loaded machine wall time mostly measures the
    OS's time slices (see docs/tuning.md, Measuring)."""
    clock = time.thread_time if one_thread else time.perf_counter
    times: list[list[float]] = [[] for _ in runs]
    for run in runs:
        run()
    for r in range(rounds):
        for k in range(len(runs)):
            i = (k + r) % len(runs)
            t0 = clock()
            runs[i]()
            times[i].append(clock() - t0)
    return [statistics.median(t) for t in times], rounds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--budget", default="20m")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--db", default="tune_resnet50.sqlite")
    p.add_argument("--layer", action="store_true", help="one 3x3 conv layer (128 ch, 28x28)")
    p.add_argument("--small", action="store_true", help="a tiny conv and a 10 s budget (CI)")
    p.add_argument("--ray", help="auto, or a Ray cluster's address")
    args = p.parse_args()
    if args.small:
        model, budget = conv_layer(16, 8), "10s"
    elif args.layer:
        model, budget = conv_layer(128, 28), args.budget
    else:
        model, budget = onnx.load(RESNET50), args.budget
    options = polyonnx.Options(num_threads=args.threads)
    report = polyonnx.tune(
        model, budget=budget, db=args.db, options=options, ray=args.ray, progress=True
    )
    print(report)

    # The same model untuned, tuned (compile reads the records) and in onnxruntime.
    untuned = polyonnx.InferenceSession(model, options=dataclasses.replace(options, tuning_db=""))
    tuned = polyonnx.InferenceSession(
        model, options=dataclasses.replace(options, tuning_db=args.db)
    )
    reference = onnxruntime_session(model, threads=args.threads)
    name = untuned.get_inputs()[0].name
    shape = [int(d) for d in untuned.get_inputs()[0].shape]
    feed = {name: np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)}
    error = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(tuned.run(None, feed), reference.run(None, feed), strict=True)
    )
    runs = [lambda s=s: s.run(None, feed) for s in (untuned, tuned, reference)]
    (t_untuned, t_tuned, t_ort), n = timed(runs, rounds=30, one_thread=args.threads == 1)
    load = os.getloadavg()[0]
    print(
        f"interleaved medians of {n} runs ({'CPU' if args.threads == 1 else 'wall'} time, "
        f"load {load:.1f}): untuned {t_untuned * 1e3:.2f} ms, "
        f"tuned {t_tuned * 1e3:.2f} ms, onnxruntime {t_ort * 1e3:.2f} ms\n"
        f"tuned / untuned {t_tuned / t_untuned:.3f}x, tuned / onnxruntime {t_tuned / t_ort:.3f}x,"
        f" untuned / onnxruntime {t_untuned / t_ort:.3f}x; tuned vs onnxruntime: max |diff| "
        f"{error:.2e}"
    )
    return 0 if error <= 1e-4 * max(1.0, float(np.max(np.abs(reference.run(None, feed)[0])))) else 1


if __name__ == "__main__":
    sys.exit(main())
