"""String values: the fixed-width code-point representation and the pass that sizes them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.strings import type_strings
from polyonnx.graph.strings import element_type, fixed_width, is_string, storage, string_width


def test_a_string_is_its_code_points_zero_padded() -> None:
    sized = fixed_width(np.array([["é", "ab"], [b"\xc3\xa0", ""]], dtype=object))
    assert sized.dtype == np.dtype("U2") and sized.shape == (2, 2)
    assert sized.view(np.uint32).reshape(2, 2, 2).tolist() == [
        [[0xE9, 0], [97, 98]],
        [[0xE0, 0], [0, 0]],
    ]
    assert fixed_width(np.array(["", ""], dtype=object)).dtype == np.dtype("U1")
    assert fixed_width(np.array(["ab"], dtype=object), 5).dtype == np.dtype("U5")


def test_what_is_not_a_string_or_too_long_is_refused() -> None:
    with pytest.raises(TypeError, match="found int 3"):
        fixed_width(np.array(["a", 3], dtype=object))
    with pytest.raises(ValueError, match="3 code points does not fit width 2"):
        fixed_width(np.array(["abc"], dtype=object), 2)
    with pytest.raises(ValueError, match="holds the code point 0"):
        fixed_width(np.array(["a\0b"], dtype=object))


def test_dtype_helpers() -> None:
    assert [string_width(d) for d in ("U12", "U0", "uint32", "object")] == [12, None, None, None]
    assert is_string("object") and is_string("U3") and not is_string("float32")
    assert element_type("U3") == element_type("U9") == "string"
    assert storage("U3", (2, 4)) == ("uint32", (2, 4, 3))
    assert storage("float32", (2,)) == ("float32", (2,))


def _graph(nodes: list[Node], values: list[Value], inputs: list[str], outputs: list[str], **c):
    vals = {v.name: v for v in values}
    return Graph(
        "g",
        tuple(vals[i] for i in inputs),
        tuple(vals[o] for o in outputs),
        tuple(nodes),
        vals,
        {k: np.asarray(v, dtype=object) for k, v in c.items()},
    )


def test_widths_flow_from_inputs_and_constants() -> None:
    g = _graph(
        [
            Node("cat", "StringConcat", ("x", "c"), ("xc",)),
            Node("norm", "StringNormalizer", ("xc",), ("y",)),
            Node("eq", "Equal", ("y", "c"), ("z",)),
        ],
        [
            Value("x", "object", (2,)),
            Value("c", "object", (2,)),
            Value("xc", "object", (2,)),
            Value("y", "object", (2,)),
            Value("z", "bool", (2,)),
        ],
        ["x"],
        ["z", "y"],
        c=["abc", "de"],
    )
    typed = type_strings(g, {"x": 4})
    assert [str(typed.value(v)) for v in ("x", "c", "xc", "y", "z")] == [
        "x: U4[2]",
        "c: U3[2]",
        "xc: U7[2]",
        "y: U7[2]",
        "z: bool[2]",
    ]
    assert typed.constants["c"].dtype == np.dtype("U3")
    assert [v.dtype for v in typed.outputs] == ["bool", "U7"]
    with pytest.raises(ShapeError, match="input 'x' is a string tensor: compiling it needs"):
        type_strings(g, {})
    bad = dataclasses.replace(g, constants={"c": np.array(["a", b"\xff"], dtype=object)})
    with pytest.raises(ModelError, match="constant 'c': 'utf-8' codec can't decode"):
        type_strings(bad, {"x": 1})


def test_an_op_without_string_loops_is_refused() -> None:
    g = _graph(
        [Node("t", "Transpose", ("x",), ("y",))],
        [Value("x", "object", (2,)), Value("y", "object", (2,))],
        ["x"],
        ["y"],
    )
    with pytest.raises(UnsupportedOpError, match="Transpose .*node 't'.*string tensors"):
        type_strings(g, {"x": 1})


def test_a_graph_without_strings_is_unchanged() -> None:
    x = Value("x", "float32", (2,))
    g = Graph("g", (x,), (x,), (), {"x": x})
    assert type_strings(g, {}) is g
