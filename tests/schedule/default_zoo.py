"""The kernels whose default-schedule ASTs are pinned in ``data/default_asts.json``.

Every distinct kernel (by signature) of MNIST and light ResNet50 (``polyonnx.testing.zoo``)
plus the small kernels of ``tests/schedule/zoo.py``, each under the tilings the pipeline uses for
AVX2 and AVX-512 hosts; the small kernels also with every nest big enough to be parallel.

Regenerate the fixture (only when a change to the default strategies is *meant* to change
the loops they produce)::

    .venv/bin/python -m tests.schedule.default_zoo --update
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator

from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.strategies import Tiling, default_schedule, parallel

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "default_asts.json")
# (for the 2-core machine the project is measured on: the thread count shapes parallel tiles)
TILINGS = {
    "avx2": Tiling.for_vector_bits(256, threads=2),
    "avx512": Tiling.for_vector_bits(512, threads=2),
}


@functools.cache
def model_kernels(tiling: Tiling) -> tuple[tuple[str, Kernel], ...]:
    """(model name, kernel) for each distinct kernel of the two models, their convolutions on
    the channel blocks of ``tiling`` (what a host with the matching vectors compiles, whatever
    host runs the tests)."""
    from polyonnx.frontend.importer import import_model
    from polyonnx.graph.passes import optimize
    from polyonnx.pipeline import choose_layouts, lower
    from polyonnx.testing.zoo import light_model, mnist_model

    out: dict[str, tuple[str, Kernel]] = {}
    for name, model in (("mnist", mnist_model()), ("resnet50", light_model("resnet50"))):
        graph = choose_layouts(optimize(import_model(model)), tiling)
        for k in lower(graph, tiling).kernels:
            out.setdefault(kernel_signature(k), (name, k))
    return tuple(out.values())


def cases() -> Iterator[tuple[str, Kernel, Tiling, int | None]]:
    """(key, kernel, tiling, MIN_PARALLEL_INSTANCES override or None)."""
    from tests.schedule.zoo import ZOO, conv, maxpool

    small = dict(ZOO)
    small["conv_big"] = lambda: conv(relu=True, c=8, oc=20, h=13)
    small["maxpool_big"] = lambda: maxpool(c=5, h=18)
    for tname, tiling in TILINGS.items():
        for model, k in model_kernels(tiling):
            yield f"{model}/{k.name}/{kernel_signature(k)}/{tname}", k, tiling, None
        for name, build in small.items():
            k = build()
            for par in (None, 1):
                yield f"zoo/{name}/{tname}/par{par or 'default'}", k, tiling, par


def default_ast(kernel: Kernel, tiling: Tiling, min_parallel: int | None) -> str:
    saved = parallel.MIN_PARALLEL_INSTANCES
    if min_parallel is not None:
        parallel.MIN_PARALLEL_INSTANCES = min_parallel
    try:
        return build_ast(default_schedule(kernel, tiling=tiling).schedule).to_C_str()
    finally:
        parallel.MIN_PARALLEL_INSTANCES = saved


def main() -> None:
    if "--update" not in sys.argv:
        sys.exit("usage: python -m tests.schedule.default_zoo --update")
    asts = {key: default_ast(k, t, p) for key, k, t, p in cases()}
    with open(FIXTURE, "w", encoding="utf-8") as f:
        json.dump(asts, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"{len(asts)} ASTs -> {FIXTURE}")


if __name__ == "__main__":
    main()
