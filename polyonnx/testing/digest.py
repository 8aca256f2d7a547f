"""Digests of everything the compiler produces for a set of models: the proof that a
refactoring changed no behaviour.

For each model and configuration (threads, vector width), the digest records the krnl program
after its passes, the memory plan and the constants it runs with, and per kernel its function
symbol (a hash of the canonical kernel, its loops and the codegen configuration) and the
sha256 of its LLVM module's text; plus the entry point's module (its per-compile prefix
replaced). Two digests are equal exactly when the compiler emitted the same IR.

Usage::

    python -m polyonnx.testing.digest --out before.json          # every model, every config
    python -m polyonnx.testing.digest --compare before.json      # exit 1 on any difference
    python -m polyonnx.testing.digest --models mnist resnet50 --configs t1 --out quick.json
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from polyonnx.testing.zoo import light_model, mnist_model

LIGHT = (
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
)


def models() -> dict[str, Callable[[], onnx.ModelProto]]:
    out: dict[str, Callable[[], onnx.ModelProto]] = {"mnist": mnist_model}
    for name in LIGHT:
        out[name] = functools.partial(light_model, name)
    return out


def _avx2_features() -> str:
    """The host's feature string with every AVX-512 feature turned off (256-bit vectors)."""
    from polyonnx.codegen.target import host_cpu

    return ",".join("-" + f[1:] if f.startswith("+avx512") else f for f in host_cpu()[2].split(","))


def configs() -> dict[str, dict]:
    """Named Options keyword sets: the host at 1 and 2 threads, and AVX2 code at 2 threads."""
    return {
        "t1": {"num_threads": 1},
        "t2": {"num_threads": 2},
        "avx2-t2": {"num_threads": 2, "cpu": "haswell", "features": _avx2_features()},
    }


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:20]


def digest_model(model: onnx.ModelProto, **options: Any) -> dict:
    """The digest of one model compiled with ``Options(**options)`` (cache off)."""
    import polyonnx

    compiled = polyonnx.compile(model, polyonnx.Options(cache=False, **options))
    program = compiled.program
    constants = hashlib.sha256()
    for name in sorted(program.constants):
        array = np.ascontiguousarray(program.constants[name])
        constants.update(f"{name}:{array.dtype}:{array.shape}".encode())
        constants.update(array.tobytes())
    modules = dict(compiled.kernel_modules())
    kernels = []
    for (kernel, _), symbol in zip(compiled.asts, compiled.symbols, strict=True):
        kernels.append(
            {"name": kernel.name, "symbol": symbol, "llvm": _sha(str(modules[symbol]()))}
        )
    entry = str(compiled.entry_module()).replace(compiled.prefix, "PREFIX")
    return {
        "program": _sha(str(program)),
        "constants": constants.hexdigest()[:20],
        "storage": _sha(json.dumps(dict(program.storage), sort_keys=True)),
        "metadata": _sha(compiled.metadata()),
        "entry": _sha(entry),
        "kernels": kernels,
    }


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        if key not in new or key not in old:
            out.append(f"{key}: only in {'before' if key in old else 'after'}")
            continue
        a, b = old[key], new[key]
        for field in ("program", "constants", "storage", "metadata", "entry"):
            if a[field] != b[field]:
                out.append(f"{key}: {field} differs")
        if len(a["kernels"]) != len(b["kernels"]):
            out.append(f"{key}: {len(a['kernels'])} kernels before, {len(b['kernels'])} after")
            continue
        for ka, kb in zip(a["kernels"], b["kernels"], strict=True):
            if ka != kb:
                out.append(f"{key}: kernel {ka['name']} differs ({ka} -> {kb})")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m polyonnx.testing.digest", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--models", nargs="+", choices=sorted(models()), default=None)
    parser.add_argument("--configs", nargs="+", choices=sorted(configs()), default=None)
    parser.add_argument("--out", help="write the digest to this JSON file")
    parser.add_argument(
        "--compare", help="compare with a digest written before; exit 1 if anything differs"
    )
    args = parser.parse_args(argv)
    builders, settings = models(), configs()
    names = args.models or list(builders)
    chosen = args.configs or list(settings)
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        # (compare what the earlier digest covered, unless told otherwise)
        if args.models is None:
            names = sorted({k.split("/")[0] for k in before})
        if args.configs is None:
            chosen = sorted({k.split("/")[1] for k in before})
    result = {}
    for name in names:
        model = builders[name]()
        for config in chosen:
            start = time.perf_counter()
            result[f"{name}/{config}"] = digest_model(model, **settings[config])
            print(
                f"{name}/{config}: {len(result[f'{name}/{config}']['kernels'])} kernels, "
                f"{time.perf_counter() - start:.1f} s",
                file=sys.stderr,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.compare:
        if args.models or args.configs:  # a subset: compare what was digested now
            before = {k: v for k, v in before.items() if k in result}
        diffs = _differences(before, result)
        for d in diffs:
            print(d)
        print(
            f"{len(result)} digests compared: "
            f"{'identical' if not diffs else f'{len(diffs)} differences'}"
        )
        return 1 if diffs else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
