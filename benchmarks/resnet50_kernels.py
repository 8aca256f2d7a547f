"""ResNet50's convolutions one by one: polyonnx against onnxruntime in the same run.

The distinct Conv shapes are read off the real graph (``light_model("resnet50")`` from
:mod:`polyonnx.testing.zoo`, imported with :func:`polyonnx.pipeline.to_graph`, so BatchNorm is
already folded and every conv has a bias): (C_in, C_out, H, W, kernel, stride, pads, group) and
how many times each occurs. Each becomes a one-op Conv model (batch 1, random weights and bias)
run by polyonnx (``InferenceSession(num_threads=t)``) and by onnxruntime (CPU provider,
``intra_op_num_threads=t``, ``inter_op_num_threads=1``; t = 1 by default).

Per shape: median ms of both, GFLOP/s of polyonnx (2 FLOP per multiply-add, bias not counted),
its fraction of the FP32 FMA peak (``--peak`` GFLOP/s per core, else the fastest round of
``benchmarks/peak.py``'s kernel measured first — other processes only slow rounds down; times
``t`` cores), the ratio polyonnx / onnxruntime in time
(> 1: polyonnx is slower), and the shape's count in ResNet50. The last line weights every shape
by its count: the time ResNet50's convolutions would take. Outputs are compared with
onnxruntime's (max |difference| / max |onnxruntime|, flagged above ``--rtol``).

The machine is shared and noisy: polyonnx and onnxruntime runs alternate and every time is a
median.

Usage::

    python benchmarks/resnet50_kernels.py                  # every shape, 1 thread
    python benchmarks/resnet50_kernels.py --limit 5 --repeat 30
    python benchmarks/resnet50_kernels.py --threads 2 --peak 165
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.bench.peak import measure_peak
from polyonnx.bench.timing import WARM_S, interleaved
from polyonnx.pipeline import to_graph
from polyonnx.testing import max_errors, onnxruntime_session
from polyonnx.testing.zoo import light_model

#: Options that keep convolutions in ONNX's layout (one kernel per Conv, not three).
ONNX_LAYOUT = polyonnx.Options(channel_blocks=False)


@dataclass(frozen=True, order=True)
class ConvShape:
    """One convolution at batch 1 (2-D, NCHW)."""

    c_in: int
    c_out: int
    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    group: int = 1
    dilation: tuple[int, int] = (1, 1)

    @property
    def out_hw(self) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        top, left, bottom, right = self.pads
        return (
            (self.h + top + bottom - dh * (kh - 1) - 1) // sh + 1,
            (self.w + left + right - dw * (kw - 1) - 1) // sw + 1,
        )

    @functools.cached_property
    def flops(self) -> int:
        """The conv kernel's arithmetic as :func:`polyonnx.kernel_flops` counts it: 2 per
        multiply-add (the bias, which starts the sums, is not counted)."""
        (conv,) = polyonnx.list_kernels(conv_model(self), options=ONNX_LAYOUT)
        return conv.flops

    @property
    def label(self) -> str:
        kh, kw = self.kernel
        text = f"{self.c_in}→{self.c_out} {self.h}x{self.w} k{kh}x{kw} s{self.stride[0]}"
        if any(self.pads):
            text += f" p{self.pads[0]}" if len(set(self.pads)) == 1 else f" p{self.pads}"
        if self.group != 1:
            text += f" g{self.group}"
        if self.dilation != (1, 1):
            text += f" d{self.dilation[0]}"
        return text


def resnet50_convs() -> list[tuple[ConvShape, int]]:
    """Every distinct Conv of ResNet50 with its count, in order of first appearance."""
    # (in ONNX's layout: the compiler's own graph has them as channel-blocked ConvBlocked)
    graph = to_graph(light_model("resnet50"), options=ONNX_LAYOUT)
    counts: Counter[ConvShape] = Counter()
    for node in graph.nodes:
        if node.op_type != "Conv":
            continue
        x, w = graph.value(node.inputs[0]).shape, graph.value(node.inputs[1]).shape
        if len(x) != 4 or x[0] != 1:
            raise SystemExit(f"unexpected Conv input {x} at node {node.name}")
        kernel = tuple(node.attr("kernel_shape", w[2:]))
        counts[
            ConvShape(
                int(x[1]),
                int(w[0]),
                int(x[2]),
                int(x[3]),
                (int(kernel[0]), int(kernel[1])),
                tuple(node.attr("strides", (1, 1))),  # type: ignore[arg-type]
                tuple(node.attr("pads", (0, 0, 0, 0))),  # type: ignore[arg-type]
                int(node.attr("group", 1)),
                tuple(node.attr("dilations", (1, 1))),
            )
        ] += 1  # type: ignore[arg-type]
        if node.attr("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            raise SystemExit(f"Conv {node.name}: auto_pad is not handled here")
    return list(counts.items())


def conv_model(s: ConvShape, seed: int = 0) -> onnx.ModelProto:
    """A one-op Conv model of shape ``s`` with random weights (scaled by 1/sqrt(fan-in)) and
    bias as initializers."""
    rng = np.random.default_rng(seed)
    fan_in = s.c_in // s.group * s.kernel[0] * s.kernel[1]
    weight = (
        rng.standard_normal((s.c_out, s.c_in // s.group, *s.kernel)) / np.sqrt(fan_in)
    ).astype(np.float32)
    bias = rng.standard_normal(s.c_out).astype(np.float32)
    oh, ow = s.out_hw
    node = helper.make_node(
        "Conv",
        ["x", "w", "b"],
        ["y"],
        kernel_shape=list(s.kernel),
        strides=list(s.stride),
        pads=list(s.pads),
        group=s.group,
        dilations=list(s.dilation),
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, s.c_in, s.h, s.w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, s.c_out, oh, ow])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    shape: ConvShape
    count: int
    polyonnx_s: float
    ort_s: float
    runs: int
    rel_err: float


def measure(s: ConvShape, count: int, threads: int, repeat: int, budget_s: float) -> Row:
    """Compile the one-op model with polyonnx and onnxruntime and time both, interleaved."""
    model = conv_model(s)
    sess = polyonnx.InferenceSession(model, num_threads=threads)
    ref = onnxruntime_session(model, threads=threads, inter_op_threads=1)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, s.c_in, s.h, s.w), dtype=np.float32)}
    err = max_errors(sess.run(None, feeds), ref.run(None, feeds)).relative
    (poly_s, ort_s), runs = interleaved(
        [lambda: sess.run(None, feeds), lambda: ref.run(None, feeds)],
        repeat,
        budget_s,
        warm_s=WARM_S if threads > 1 else 0.0,
    )
    return Row(s, count, poly_s, ort_s, runs, err)


def table(rows: Sequence[Row], peak: float, threads: int, rtol: float) -> str:
    """The rows as a Markdown table, with the count-weighted total."""
    lines = [
        "| conv (C_in→C_out HxW kernel stride pads) | count | GFLOP | polyonnx ms | "
        "GFLOP/s | of peak | onnxruntime ms | polyonnx / ort | runs | rel err |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        gflops = r.shape.flops / r.polyonnx_s / 1e9
        flag = " **MISMATCH**" if not r.rel_err <= rtol else ""
        lines.append(
            f"| {r.shape.label} | {r.count} | {r.shape.flops / 1e9:.3f} | "
            f"{r.polyonnx_s * 1e3:.3f} | {gflops:.1f} | "
            f"{gflops / (peak * threads):.0%} | {r.ort_s * 1e3:.3f} | "
            f"{r.polyonnx_s / r.ort_s:.2f} | {r.runs} | {r.rel_err:.1e}{flag} |"
        )
    flops = sum(r.count * r.shape.flops for r in rows)
    poly = sum(r.count * r.polyonnx_s for r in rows)
    ref = sum(r.count * r.ort_s for r in rows)
    lines.append(
        f"| **total, weighted by count** ({len(rows)} shapes) | "
        f"{sum(r.count for r in rows)} | {flops / 1e9:.3f} | {poly * 1e3:.2f} | "
        f"{flops / poly / 1e9:.1f} | {flops / poly / 1e9 / (peak * threads):.0%} | "
        f"{ref * 1e3:.2f} | {poly / ref:.2f} | | |"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--threads", type=int, default=1, help="threads for polyonnx and onnxruntime (default 1)"
    )
    p.add_argument(
        "--repeat", type=int, default=30, help="timed rounds per shape (default 30; at least 3)"
    )
    p.add_argument(
        "--budget",
        type=float,
        default=3.0,
        help="seconds of timed rounds per shape before --repeat is cut",
    )
    p.add_argument("--limit", type=int, default=None, help="only the first N distinct shapes")
    p.add_argument(
        "--peak",
        type=float,
        default=None,
        help="FP32 peak GFLOP/s per core (default: measured with peak.py's kernel)",
    )
    p.add_argument(
        "--rtol",
        type=float,
        default=1e-3,
        help="largest accepted max|polyonnx - ort| / max|ort| (default 1e-3)",
    )
    args = p.parse_args(argv)
    print(
        f"polyonnx {polyonnx.__version__}, onnxruntime {ort.__version__}; threads "
        f"{args.threads} (polyonnx num_threads, ort intra_op; inter_op 1)"
    )
    peak = args.peak
    if peak is None:
        peak = measure_peak(threads=1, repeat=20, best=True)
        print(
            f"peak: {peak:.1f} GFLOP/s per core (fastest of 20 rounds of benchmarks/peak.py's "
            "kernel, 1 thread, measured now; pass --peak to fix it)"
        )
    else:
        print(f"peak: {peak:.1f} GFLOP/s per core (--peak)")
    print(
        "Shared, noisy machine: polyonnx and onnxruntime runs interleaved, medians; "
        "polyonnx / ort > 1 means polyonnx is slower.\n",
        flush=True,
    )
    shapes = resnet50_convs()[: args.limit]
    rows = []
    for shape, count in shapes:
        rows.append(measure(shape, count, args.threads, args.repeat, args.budget))
        print(f"  done: {shape.label}", file=sys.stderr, flush=True)
    print(table(rows, peak, args.threads, args.rtol))
    bad = [r.shape.label for r in rows if not r.rel_err <= args.rtol]
    if bad:
        print(f"\nMISMATCH vs onnxruntime (rel err > {args.rtol:g}): {', '.join(bad)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
