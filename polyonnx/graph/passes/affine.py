"""Per-channel affine maps: inference BatchNormalization as ``x * s + t``, and chains of
multiplications and additions by constants merged into one ``x * s + t``.

A BatchNormalization that no Conv absorbs (:mod:`~polyonnx.graph.passes.bn_fold`: one after a
Concat, an Add or a graph input, as in pre-activation networks) is an element-wise op in
disguise: with constant statistics, ``s = scale / sqrt(var + eps)`` and ``t = B - mean * s``
are computed once here instead of a square root and a division per element at run time, and
the ``Mul``/``Add`` it becomes fuses with its neighbours and follows a channel-blocked layout.
A chain of such nodes (a Caffe "Scale" layer after a BN: ``Mul`` by a constant, ``Add`` a
constant) then collapses into one multiply-add: ``(x * a + b) * c + d = x * (a c) + (b c + d)``.

Example:
    >>> import numpy as np
    >>> from polyonnx.graph.ir import Graph, Node, Value, fresh_name
    >>> v = {n: Value(n, "float32", (1, 2, 3, 3)) for n in ("x", "y", "z")}
    >>> consts = {"scale": np.ones(2, "float32"), "bias": np.zeros(2, "float32"),
    ...           "mean": np.zeros(2, "float32"), "var": np.ones(2, "float32"),
    ...           "k": np.full((2, 1, 1), 2, "float32")}
    >>> v.update({n: Value(n, "float32", a.shape) for n, a in consts.items()})
    >>> g = Graph("g", (v["x"],), (v["z"],), (
    ...     Node("bn", "BatchNormalization", ("x", "scale", "bias", "mean", "var"), ("y",)),
    ...     Node("m", "Mul", ("y", "k"), ("z",))), v, consts)
    >>> print(merge_affine(batchnorm_to_affine(g)).nodes[0])
    m: z = Mul(x, m_scale)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.passes.chain import Step, chain

#: Ops ``x op c`` (``c`` constant) that are affine in ``x``.
_AFFINE_OPS = frozenset({"Mul", "Add", "Sub"})


@dataclasses.dataclass(frozen=True, slots=True)
class _Affine:
    """``y = x * scale + shift`` on the variable input ``x``; either part may be None."""

    x: str
    scale: np.ndarray | None
    shift: np.ndarray | None

    def then(self, other: _Affine) -> _Affine:
        """This map followed by ``other`` (whose input is this map's output)."""
        scale, shift = self.scale, self.shift
        if other.scale is not None:
            scale = other.scale if scale is None else scale * other.scale
            shift = None if shift is None else shift * other.scale
        if other.shift is not None:
            shift = other.shift if shift is None else shift + other.shift
        return _Affine(self.x, scale, shift)


def batchnorm_to_affine(graph: Graph) -> Graph:
    """Every inference BatchNormalization with constant parameters and a float input becomes
    ``Mul(x, s)`` then ``Add(., t)`` on per-channel constants (see the module docstring)."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        affine = _batchnorm_affine(n, graph, consts)
        if affine is None:
            nodes.append(n)
            continue
        nodes.extend(_emit(n, affine, values, consts, taken))
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _batchnorm_affine(n: Node, graph: Graph, consts: Mapping[str, np.ndarray]) -> _Affine | None:
    if n.op_type != "BatchNormalization" or n.domain or n.guard:
        return None
    if int(n.attr("training_mode", 0)):
        return None
    if any(n.outputs[1:]) or any(i not in consts for i in n.inputs[1:5]):
        return None
    x = graph.value(n.inputs[0])
    if x.dtype not in ("float32", "float64") or len(x.shape) < 2:
        return None
    # One statistic per channel, or (spatial=0, before opset 9) per activation.
    per_activation = not int(n.attr("spatial", 1))
    shape = x.dims[1:] if per_activation else x.dims[1:2]
    scale, bias, mean, var = (consts[i].astype(np.float64) for i in n.inputs[1:5])
    if any(a.shape != shape for a in (scale, bias, mean, var)):
        return None
    s = scale / np.sqrt(var + float(n.attr("epsilon", 1e-5)))
    t = bias - mean * s
    broadcast = shape + (1,) * (len(x.shape) - 1 - len(shape))
    return _Affine(x.name, s.reshape(broadcast), t.reshape(broadcast))


def merge_affine(graph: Graph) -> Graph:
    """Chains of ``Mul``/``Add``/``Sub`` by constants (each link read only by the next, the
    constants not widening the result) become one ``Mul`` and one ``Add``."""
    consts = dict(graph.constants)
    values = dict(graph.values)
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    maps = {n.name: _node_affine(n, graph, consts) for n in graph.nodes}
    producers = graph.producers()

    def absorbed(n: Node) -> bool:
        """Whether ``n``'s map is folded into its single consumer's."""
        out = n.outputs[0]
        users = consumers.get(out, [])
        return (
            maps[n.name] is not None
            and out not in outputs
            and len(users) == 1
            and maps[users[0].name] is not None
            and maps[users[0].name].x == out  # type: ignore[union-attr]
            and users[0].guard == n.guard
        )

    taken = set(consts) | set(values) | {n.name for n in graph.nodes}
    nodes: list[Node] = []
    for n in graph.nodes:
        affine = maps[n.name]
        if affine is None or absorbed(n):
            if affine is None:
                nodes.append(n)
            continue
        chain = [affine]
        while (p := producers.get(chain[0].x)) is not None and absorbed(p):
            chain.insert(0, maps[p.name])  # type: ignore[arg-type]
        if len(chain) == 1:
            nodes.append(n)
            continue
        whole = chain[0]
        for link in chain[1:]:
            whole = whole.then(_Affine(whole.x, link.scale, link.shift))
        nodes.extend(_emit(n, whole, values, consts, taken))
    kept = {o for node in nodes for o in node.outputs}
    inputs = {i for node in nodes for i in node.inputs}
    gone = {o for node in graph.nodes for o in node.outputs} - kept
    values = {k: v for k, v in values.items() if k not in gone or k in inputs}
    return dataclasses.replace(graph, nodes=tuple(nodes), values=values, constants=consts)


def _node_affine(n: Node, graph: Graph, consts: Mapping[str, np.ndarray]) -> _Affine | None:
    """``n`` as an affine map of its one variable input, when it is ``x op c``."""
    if n.op_type not in _AFFINE_OPS or n.domain or len(n.inputs) != 2 or len(n.outputs) != 1:
        return None
    a, b = n.inputs
    if (a in consts) == (b in consts):
        return None
    x, c = (b, a) if a in consts else (a, b)
    out, xv = graph.value(n.outputs[0]), graph.value(x)
    if xv.dtype not in ("float32", "float64") or out.shape != xv.shape:
        return None  # (a constant that widens the result is a broadcast, not a map of x)
    k = consts[c].astype(np.float64)
    if n.op_type == "Mul":
        return _Affine(x, k, None)
    if n.op_type == "Add":
        return _Affine(x, None, k)
    # Sub: x - c, or c - x = x * -1 + c.
    return _Affine(x, None, -k) if x == a else _Affine(x, -np.ones_like(k), k)


def _emit(
    n: Node,
    affine: _Affine,
    values: dict[str, Value],
    consts: dict[str, np.ndarray],
    taken: set[str],
) -> list[Node]:
    """``Mul`` and ``Add`` nodes computing ``affine`` into ``n``'s output (named after ``n``),
    an identity part left out (an all-identity map is still one ``Mul`` by 1, so the output
    is computed)."""
    steps = [
        Step(op, arr, label)
        for op, arr, neutral, label in (
            ("Mul", affine.scale, 1.0, "scale"),
            ("Add", affine.shift, 0.0, "shift"),
        )
        if arr is not None and not np.all(arr == neutral)
    ] or [Step("Mul", np.ones((1,)), "scale")]
    return chain(n, affine.x, steps, values, consts, taken)
