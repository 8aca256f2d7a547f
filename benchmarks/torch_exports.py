"""PyTorch exports: torchvision models (random weights) and small torch modules, exported by
torch's TorchScript exporter (opset 17) or by ``torch.onnx.export(dynamo=True)``, run by
polyonnx and by onnxruntime on the same random input.

For each model: the largest difference of the outputs relative to the largest output, the
cold compile time, and the median latencies of polyonnx and onnxruntime timed in alternation
(:func:`polyonnx.bench.timing.interleaved_times`) with their ratio (> 1: polyonnx is slower).
A model polyonnx refuses is listed with the error; one torch cannot export, with torch's.

Needs torch and torchvision (not polyonnx dependencies: the CPU wheels are ~600 MB), e.g.
``pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu`` and, for
``--exporter dynamo``, ``onnxscript``. Nothing is downloaded at run time (no pretrained
weights).

Usage::

    python benchmarks/torch_exports.py                                  # all, TorchScript
    python benchmarks/torch_exports.py --exporter dynamo --threads 2
    python benchmarks/torch_exports.py --models resnet18 deeplabv3_mobilenet_v3_large
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

import polyonnx
from polyonnx.bench.timing import WARM_S, interleaved_times
from polyonnx.testing import onnxruntime_session

#: torchvision classifiers (and the input side they are built for) by constructor name.
CLASSIFIERS = {
    "resnet18": 224,
    "resnext50_32x4d": 224,
    "wide_resnet50_2": 224,
    "mobilenet_v2": 224,
    "mobilenet_v3_large": 224,
    "efficientnet_b0": 224,
    "efficientnet_v2_s": 224,
    "regnet_x_400mf": 224,
    "regnet_y_400mf": 224,
    "convnext_tiny": 224,
    "shufflenet_v2_x1_0": 224,
    "squeezenet1_1": 224,
    "googlenet": 224,
    "inception_v3": 299,
    "mnasnet0_5": 224,
    "vit_b_16": 224,
    "swin_t": 224,
    "maxvit_t": 224,
    "densenet121": 224,
    "alexnet": 224,
    "vgg11_bn": 224,
}
SEGMENTATION = ("deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large", "fcn_resnet50")
MODULES = ("transformer_encoder", "lstm", "gru", "multihead_attention")


def build(name: str) -> tuple[Any, tuple[Any, ...]]:
    """The torch module ``name`` in eval mode (random weights) and its example inputs."""
    import torch
    import torchvision

    torch.manual_seed(0)
    models = torchvision.models
    if name in CLASSIFIERS:
        extra = (
            {"aux_logits": False, "init_weights": True}
            if name in ("googlenet", "inception_v3")
            else {}
        )
        side = CLASSIFIERS[name]
        return getattr(models, name)(weights=None, **extra).eval(), (torch.randn(1, 3, side, side),)
    if name in SEGMENTATION:
        extra = {"aux_loss": False} if name == "fcn_resnet50" else {}
        model = getattr(models.segmentation, name)(weights=None, weights_backbone=None, **extra)
        return model.eval(), (torch.randn(1, 3, 224, 224),)
    if name == "r3d_18":
        return models.video.r3d_18(weights=None).eval(), (torch.randn(1, 3, 8, 56, 56),)
    return _module(name)


def _module(name: str) -> tuple[Any, tuple[Any, ...]]:
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, activation="gelu")
            self.encoder, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(64, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x).mean(1))

    class Recurrent(nn.Module):
        def __init__(self, kind: str) -> None:
            super().__init__()
            self.rnn = getattr(nn, kind)(20, 32, num_layers=2, batch_first=True, bidirectional=True)
            self.head = nn.Linear(64, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0][:, -1])

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

        def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            return self.attention(q, k, k, need_weights=False)[0]

    makers: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {
        "transformer_encoder": lambda: (Encoder(), (torch.randn(2, 10, 64),)),
        "lstm": lambda: (Recurrent("LSTM"), (torch.randn(2, 7, 20),)),
        "gru": lambda: (Recurrent("GRU"), (torch.randn(2, 7, 20),)),
        "multihead_attention": lambda: (
            Attention(),
            (torch.randn(2, 5, 32), torch.randn(2, 6, 32)),
        ),
    }
    module, inputs = makers[name]()
    return module.eval(), inputs


def export(name: str, exporter: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``name`` exported to ONNX, and feeds for its inputs."""
    import torch

    module, inputs = build(name)
    warnings.filterwarnings("ignore")  # (torch's exporters warn about every deprecation)
    if exporter == "dynamo":
        model = torch.onnx.export(module, inputs, dynamo=True, verbose=False).model_proto
    else:
        buffer = io.BytesIO()
        torch.onnx.export(module, inputs, buffer, opset_version=17, dynamo=False)
        model = onnx.load_from_string(buffer.getvalue())
    names = [i.name for i in model.graph.input]
    return model, {n: t.numpy() for n, t in zip(names, inputs, strict=False)}


def measure(name: str, exporter: str, threads: int, repeat: int, budget: float) -> str:
    """One row of the table."""
    try:
        model, feeds = export(name, exporter)
    except Exception as e:  # noqa: BLE001 - torch's own failure, reported as such
        return f"| {name} | torch could not export it: {type(e).__name__} | | | | | |"
    start = time.perf_counter()
    try:
        session = polyonnx.InferenceSession(
            model, options=polyonnx.Options(num_threads=threads, cache=False)
        )
        got = session.run(None, feeds)
    except polyonnx.PolyonnxError as e:
        return f"| {name} | refused: {type(e).__name__}: {str(e)[:120]} | | | | | |"
    compile_s = time.perf_counter() - start
    peer = onnxruntime_session(model, threads=threads)
    want = peer.run(None, feeds)
    error = max(
        float(np.max(np.abs(np.asarray(a, np.float64) - b)) / (np.max(np.abs(b)) or 1.0))
        for a, b in zip(got, want, strict=True)
    )
    ours, theirs = interleaved_times(
        [lambda: session.run(None, feeds), lambda: peer.run(None, feeds)],
        repeat,
        budget,
        WARM_S if threads > 1 else 0.0,
    )
    return (
        f"| {name} | {error:.1e} | {compile_s:.1f} | {ours.median * 1e3:.2f} | "
        f"{theirs.median * 1e3:.2f} | **{ours.median / theirs.median:.2f}** | {ours.rounds} |"
    )


def main(argv: list[str] | None = None) -> int:
    everything = [*CLASSIFIERS, *SEGMENTATION, "r3d_18", *MODULES]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=everything, choices=everything)
    parser.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds per model")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timing per model")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except ImportError:
        print("torch_exports.py needs torch and torchvision (see its docstring)", file=sys.stderr)
        return 0
    print(f"{args.exporter} exports, {args.threads} thread(s), polyonnx vs onnxruntime\n")
    print(
        "| model | max rel err | compile (s) | polyonnx (ms) | onnxruntime (ms) | ratio | rounds |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.models:
        print(measure(name, args.exporter, args.threads, args.repeat, args.budget), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
