"""Every kernel of a model against this host's roofline: where the model's time is lost.

The roofline (Williams, Waterman & Patterson, CACM 2009) of this host, both roofs measured
here: the FP32 FMA peak (``benchmarks/peak.py``'s generated FMA loop, the fastest of its
rounds, times the threads) and the memory bandwidth (STREAM-like copy and triad in numpy on
arrays far larger than the L3, one contiguous part per thread, the median of ``--bw-repeat``
runs; the triad ``a = b + s * c`` is the roof). Per kernel of the compiled model (timed by
:func:`polyonnx.bench.profile.profile` with ``in_model=True``: the model's order and memory):

- FLOPs as :func:`polyonnx.kernel_flops` counts them, bytes as the sizes of the kernel's
  input and output buffers (each read or written once: the traffic no schedule avoids;
  kernel-local temporaries are not counted), arithmetic intensity = FLOPs / bytes;
- achieved GFLOP/s and GB/s;
- the bound min(peak, intensity x bandwidth), whether compute or memory limits it, the
  achieved fraction of the bound (kernels whose data the previous kernels left in cache can
  exceed 100%: the DRAM roof is the conservative one), and the time lost against the bound,
  ``time - max(FLOPs / peak, bytes / bandwidth)``.

Rows are sorted by time lost. ``--png FILE`` draws the roofline (log-log) with every kernel
that computes as a point, its area proportional to its share of its model's time, the
worst ones labelled.

Usage::

    python benchmarks/roofline.py                                # a few models, 1 thread
    python benchmarks/roofline.py --models mobilenet_v2 --threads 2 --png mnv2.png
    python benchmarks/roofline.py --models lstm_speech --peak 110 --bandwidth 30 --top 10
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import polyonnx
from polyonnx.bench.models import MODELS
from polyonnx.bench.peak import measure_peak
from polyonnx.bench.roofline import Point, l3_bytes, measure_bandwidth, plot, points, table

DEFAULT_MODELS = ("mobilenet_v2", "lstm_speech", "bert_base_layer")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(DEFAULT_MODELS))
    p.add_argument("--threads", type=int, default=1, help="threads of the model and roofs")
    p.add_argument(
        "--repeat",
        type=int,
        default=20,
        help="passes over the model per kernel time (median; default 20)",
    )
    p.add_argument("--top", type=int, default=15, help="kernels listed per model")
    p.add_argument(
        "--peak",
        type=float,
        default=None,
        help="FP32 peak GFLOP/s per core (default: measured with peak.py's kernel)",
    )
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="memory bandwidth GB/s for all threads (default: measured, triad)",
    )
    p.add_argument(
        "--bw-mib",
        type=int,
        default=None,
        help="MiB per bandwidth array (default: 4 x L3, at least 64)",
    )
    p.add_argument("--bw-repeat", type=int, default=7, help="bandwidth runs (median)")
    p.add_argument("--png", default=None, help="write the roofline plot to this PNG file")
    args = p.parse_args(argv)
    t = args.threads
    print(
        f"polyonnx {polyonnx.__version__}, {t} thread(s). Shared, noisy machine: times are "
        "medians; the FMA peak is peak.py's fastest round.",
        flush=True,
    )
    peak = (measure_peak(threads=t, repeat=20, best=True) if args.peak is None else args.peak) * t
    if args.bandwidth is None:
        bw = measure_bandwidth(t, args.bw_repeat, args.bw_mib << 20 if args.bw_mib else None)
        print(
            f"memory bandwidth ({bw.array_mib} MiB arrays, L3 {l3_bytes() >> 20} MiB, median "
            f"of {bw.triad.rounds}): copy {bw.copy.median:.1f} GB/s, "
            f"triad {bw.triad.median:.1f} GB/s"
        )
        bandwidth = bw.triad.median
    else:
        bandwidth = args.bandwidth
    print(
        f"roofline: peak {peak:.1f} GFLOP/s, bandwidth {bandwidth:.1f} GB/s, ridge at "
        f"{peak / bandwidth:.1f} FLOP/byte\n",
        flush=True,
    )
    everything: list[Point] = []
    for name in args.models:
        compiled = polyonnx.compile(MODELS[name](), polyonnx.Options(num_threads=t))
        pts = points(name, compiled, peak, bandwidth, args.repeat)
        everything += pts
        print(f"### {name}\n\n{table(pts, args.top)}\n", flush=True)
    if args.png:
        plot(
            everything,
            peak,
            bandwidth,
            f"polyonnx {polyonnx.__version__}, {t} thread(s): {', '.join(args.models)}",
            args.png,
        )
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
