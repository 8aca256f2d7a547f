"""Every string value sized: ``object`` (as imported) becomes ``U{width}`` (see
:mod:`polyonnx.graph.strings`).

The width of a graph input is given (the runtime reads it off the strings it is fed), a
constant's is its longest string's, and a node's string output takes the width its op's rule
computes from its inputs' widths (:data:`WIDTH_RULES`). A node of another op that reads or
writes strings is refused: those are the ops whose loops know the code-point axis.

Example:
    >>> from polyonnx.graph.ir import Graph, Node, Value
    >>> x, y = Value("x", "object", (3,)), Value("y", "object", ("n_count",))
    >>> g = Graph("g", (x,), (y,), (Node("n", "StringNormalizer", ("x",), ("y",)),),
    ...           {"x": x, "y": y})
    >>> print(type_strings(g, {"x": 5}))
    graph g(x: U5[3]) -> (y: U5[n_count])
      n: y = StringNormalizer(x)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.graph.ir import ML_DOMAIN, Graph, Node, Value
from polyonnx.graph.strings import UNSIZED, fixed_width, string_dtype, string_width

#: The ops that compute strings: the width of their string output from their inputs' widths.
WIDTH_RULES: dict[str, Callable[[Sequence[int]], int]] = {
    "StringNormalizer": lambda widths: widths[0],  # a code point maps to one code point
    "Identity": lambda widths: widths[0],
    "StringConcat": sum,
    "StringSplit": lambda widths: widths[0],  # substrings of the input
}
#: Views: their first input's strings under another shape (the other inputs are shapes or
#: axes, which hold no strings).
STRING_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
#: The ops that read strings and compute something else.
STRING_READERS = frozenset({"Equal", "RegexFullMatch", "TfIdfVectorizer"})


def _attribute_strings(node: Node, names: Sequence[str]) -> list[str]:
    """The strings of ``node``'s attributes ``names`` (string, strings or string tensor)."""
    found: list[str] = []
    for name in names:
        v = node.attr(name)
        items = v.reshape(-1).tolist() if isinstance(v, np.ndarray) else v
        for s in (items,) if isinstance(items, str | bytes) else items or ():
            if isinstance(s, bytes):
                s = s.decode("utf-8")
            if isinstance(s, str):
                found.append(s)
    return found


def _label_encoder_width(node: Node, widths: Sequence[int]) -> int:
    strings = _attribute_strings(
        node, ("values_strings", "values_tensor", "default_tensor", "classes_strings")
    )
    # (The spec's default_string when the node gives none.)
    strings += _attribute_strings(node, ("default_string",)) or ["_Unused"]
    return max(map(len, strings), default=1)


#: The ONNX-ML ops that read or write strings: the width of their string output (one of the
#: strings of their attributes, or of their input) from the node and its inputs' widths.
ML_WIDTH_RULES: dict[str, Callable[[Node, Sequence[int]], int]] = {
    "LabelEncoder": _label_encoder_width,
    "ArrayFeatureExtractor": lambda node, widths: widths[0],
    "OneHotEncoder": lambda node, widths: 1,  # (writes no string)
    "CategoryMapper": lambda node, widths: max(
        map(
            len,
            _attribute_strings(node, ("cats_strings",))
            + (_attribute_strings(node, ("default_string",)) or ["_Unused"]),
        )
    ),
    **dict.fromkeys(
        ("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier"),
        lambda node, widths: max(map(len, _attribute_strings(node, ("classlabels_strings",)))),
    ),
}


def type_strings(graph: Graph, widths: Mapping[str, int]) -> Graph:
    """``graph`` with every string value sized; ``widths`` gives each string input's width.
    ShapeError for a string input without one, UnsupportedOpError for an op that cannot
    compute on strings."""
    values = dict(graph.values)
    if not any(v.dtype == UNSIZED for v in values.values()):
        return graph
    constants = {name: _sized_constant(name, c) for name, c in graph.constants.items()}
    for name, c in constants.items():
        if c.dtype.kind == "U":
            width = string_dtype(c.dtype.itemsize // 4)  # (UTF-32: 4 bytes a code point)
            values[name] = dataclasses.replace(values[name], dtype=width)
    for v in graph.inputs:
        if v.dtype == UNSIZED:
            values[v.name] = dataclasses.replace(v, dtype=string_dtype(_input_width(v, widths)))
    for n in graph.nodes:
        read = [string_width(values[i].dtype) for i in n.inputs if i]
        writes = [o for o in n.outputs if o and values[o].dtype == UNSIZED]
        if not any(w is not None for w in read) and not writes:
            continue
        width = _output_width(n, read, bool(writes), graph.opset)
        for o in writes:
            values[o] = dataclasses.replace(values[o], dtype=width)
    return dataclasses.replace(
        graph,
        inputs=tuple(values[v.name] for v in graph.inputs),
        outputs=tuple(values[v.name] for v in graph.outputs),
        values=values,
        constants=constants,
    )


def _output_width(n: Node, read: Sequence[int | None], writes: bool, opset: int) -> str:
    """The dtype of node ``n``'s string outputs (``read``: its inputs' widths, None for an
    input that holds no strings); UnsupportedOpError when ``n`` cannot compute on strings."""
    known = [w for w in read if w is not None]
    if n.domain == ML_DOMAIN and n.op_type in ML_WIDTH_RULES:
        return string_dtype(max(ML_WIDTH_RULES[n.op_type](n, known), 1))
    if n.op_type in STRING_READERS and not writes and not n.domain:
        return ""
    if n.op_type in STRING_VIEWS and not n.domain and read[0] is not None:
        return string_dtype(read[0])
    if n.op_type not in WIDTH_RULES or n.domain or None in read:
        raise UnsupportedOpError(
            f"{n.domain}.{n.op_type}" if n.domain else n.op_type,
            None if n.domain else opset,
            n.name,
            "string tensors (polyonnx computes strings with "
            f"{', '.join(sorted({*WIDTH_RULES, *STRING_VIEWS, *STRING_READERS, *ML_WIDTH_RULES}))} "
            "only)",
        )
    return string_dtype(WIDTH_RULES[n.op_type](known))


def _sized_constant(name: str, c: np.ndarray) -> np.ndarray:
    """Constant ``c``, fixed-width if it holds strings; ModelError if it cannot be."""
    if c.dtype != object:
        return c
    try:
        return fixed_width(c)
    except (TypeError, ValueError) as e:
        raise ModelError(f"constant {name!r}: {e}") from None


def _input_width(v: Value, widths: Mapping[str, int]) -> int:
    if v.name not in widths:
        raise ShapeError(
            f"input {v.name!r} is a string tensor: compiling it needs its width, its "
            "longest string in code points (string_widths; InferenceSession reads it "
            "off the strings fed; shared libraries take no string inputs)"
        )
    return max(int(widths[v.name]), 1)
