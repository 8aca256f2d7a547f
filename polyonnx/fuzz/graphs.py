"""Random valid graphs: a chain of supported ops on random shapes, dtypes and attributes."""

from __future__ import annotations

import numpy as np

from polyonnx.fuzz.builder import MAX_ELEMENTS, Builder, Value
from polyonnx.fuzz.case import Case, Draw
from polyonnx.fuzz.ops import GROWERS


def random_graph(draw: Draw) -> Case:
    """A random valid model of supported ops (1 to 5 steps), with random feeds."""
    opset = draw.choice([13, 17, 18])
    b = Builder(draw, opset)
    dtype = draw.choice(["float32"] * 6 + ["float64", "int32", "int64"])
    rank = draw.integer(1, 4) if dtype.startswith("int") else draw.choice([1, 2, 3, 4, 4, 4])
    shape = tuple(draw.integer(1, 6) for _ in range(rank))
    first = b.input(b.data(shape, dtype))
    v = Value(first, shape, dtype)
    outputs = []
    for _ in range(draw.integer(1, 5)):
        grown = draw.choice(GROWERS)(b, v)
        if grown is None:
            continue
        if draw.integer(0, 5) == 0:
            outputs.append(v)  # an intermediate is an output too
        v = grown
        if np.prod(v.shape) > MAX_ELEMENTS:
            break
    if not b.nodes:
        v = b.node("Relu" if not dtype.startswith("uint") else "Abs", [first], dtype)
    if v.name == first:
        v = b.node("Neg", [first], dtype)
    outputs = [o for o in outputs if o.name != first and o.name != v.name] + [v]
    model = b.model(outputs)
    return Case(
        "graph",
        model.SerializeToString(),
        b.feeds,
        f"opset {opset}: {' -> '.join(b.ops)} on {dtype}{list(shape)}",
    )
