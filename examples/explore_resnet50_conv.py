"""Explore schedules of a ResNet50 3x3 convolution (128 -> 128 channels at 28x28, + ReLU).

Takes the conv kernel out of a one-layer model compiled in ONNX's NCHW layout (``LAYOUT``: the
compiler's default runs convolutions on channel-blocked tensors, a different kernel), tries a
grid of tile sizes and loop orders with
the checked schedule verbs, prints time and GFLOP/s of each (each result checked against the
kernel's own loop order), shows an illegal request being refused, saves the fastest trace and
compiles the model with it.

    python examples/explore_resnet50_conv.py                 # full grid (< 2 minutes)
    python examples/explore_resnet50_conv.py --small         # CI: a 2-point grid on 32 channels
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.runtime.session import Executable

LAYOUT = polyonnx.Options(channel_blocks=False)
REDUCTION = ("ic", "kh", "kw")
OUTPUT = ("oc", "oh", "ow")


def conv_model(channels: int, size: int, seed: int = 0) -> onnx.ModelProto:
    """Conv 3x3 (pad 1, bias) + ReLU: a ResNet50 stage-2 layer once BatchNorm is folded."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(
        (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32), "W"
    )
    b = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "B")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "resnet50_conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def candidate(base: polyonnx.Schedule, tiles: tuple[int, int], swap: bool) -> polyonnx.Schedule:
    """One point of the grid: the innermost output loop becomes a vector loop under the
    reduction loops; the other two output loops are tiled by ``tiles`` (their point loops
    swapped when ``swap``)."""
    out = [n for n in base.loops if n in OUTPUT]
    inner, tiled = out[-1], out[:2]
    s = base.distribute(inner)  # init statement | reduction nest
    (red,) = s.created  # the reduction nest's copy of `inner`
    s = s.reorder(*REDUCTION, red)  # reduction loops outside the vector loop
    s = s.vectorize(red)  # 8 lanes, full tiles isolated
    s = s.tile(tuple(tiled), tiles)
    return s.interchange(*s.created[2:]) if swap else s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small layer and grid (CI)")
    ap.add_argument("--out", default="best_conv_trace.json", help="where to save the best trace")
    args = ap.parse_args()
    channels, size = (32, 14) if args.small else (128, 28)
    tile_grid = [(1, 7), (2, 14)] if args.small else [(1, 7), (2, 7), (4, 14), (1, 28), (2, 28)]
    swaps = [False] if args.small else [False, True]

    start = time.perf_counter()
    model = conv_model(channels, size)
    print("kernels of the model:")
    for info in polyonnx.list_kernels(model, options=LAYOUT):
        print("  ", info)
    kernel = polyonnx.get_kernel(model, "conv", options=LAYOUT)
    base = polyonnx.Schedule.from_kernel(kernel)
    print(
        f"\nconv kernel {kernel.name}: {polyonnx.kernel_flops(kernel) / 1e6:.1f} MFLOP, loops "
        f"{', '.join(base.loops)}"
    )

    reference = polyonnx.run(base, polyonnx.random_arrays(kernel))
    rows: list[tuple[str, polyonnx.Schedule, polyonnx.Measurement]] = []
    baseline = polyonnx.measure(base, reference=reference, min_runs=3, min_time=0.1)
    rows.append(("kernel's own loop order", base, baseline))
    for tiles, swap in itertools.product(tile_grid, swaps):
        label = f"tile {tiles[0]}x{tiles[1]}{', point loops swapped' if swap else ''}"
        try:
            s = candidate(base, tiles, swap)
        except polyonnx.ScheduleError as e:
            print(f"refused: {label}: {e}")
            continue
        rows.append((label, s, polyonnx.measure(s, reference=reference, min_runs=3, min_time=0.1)))

    print(f"\n{'schedule':<48} {'time (ms)':>10} {'GFLOP/s':>8} {'speed-up':>9}")
    for label, _, m in rows:
        print(
            f"{label:<48} {m.median_s * 1e3:>10.2f} {m.gflops:>8.2f} "
            f"{baseline.median_s / m.median_s:>8.2f}x"
        )

    # Illegal requests: running the input-channel reduction loop in parallel, and reordering the
    # reduction loops (that would change the order of the float additions). Both are refused,
    # with the dependence that forbids them.
    for attempt, verb in (
        ("parallel(ic)", lambda: base.parallel("ic")),
        ("reorder(kh, kw, ic)", lambda: base.reorder("kh", "kw", "ic")),
    ):
        try:
            verb()
        except polyonnx.ScheduleError as e:
            print(f"\nrefused as expected: {e}")
        else:
            raise SystemExit(f"{attempt} was accepted: the legality check is broken")

    label, best, m = min(rows, key=lambda r: r[2].median_s)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({kernel.name: json.loads(best.trace.to_json())}, f, indent=1)
    print(f"\nbest: {label} ({m.gflops:.2f} GFLOP/s); trace saved to {args.out}:")
    print(best.trace)
    print(best)

    compiled = polyonnx.compile(model, LAYOUT, schedules=polyonnx.load_schedules(args.out))
    used = next(sk for sk in compiled.scheduled if sk.kernel.name == kernel.name)
    if str(used.schedule) != best.isl_text():
        raise SystemExit("the compiler did not use the saved schedule")
    x = np.random.default_rng(1).standard_normal((1, channels, size, size)).astype(np.float32)
    got = Executable.from_compiled(compiled).run([x])[0]
    want = polyonnx.InferenceSession(model, options=LAYOUT).run(None, {"x": x})[0]
    err = float(np.max(np.abs(got - want)))
    print(
        f"\nmodel compiled with the best trace: max |difference| from the default build {err:.2e}"
    )
    if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
        raise SystemExit("the scheduled model disagrees with the default build")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
