"""MatMul panel widths: the target's register-tile width, for the lowering's packed B.

A MatMul with a 2-D ``B`` reads it through panels of ``panel`` columns
(:mod:`polyonnx.krnl.lower.gemm`): for every ``k`` the columns one register tile needs are
contiguous. A panel as wide as the tile makes each of its rows one stream the tile reads
whole; a wider one (32 columns under AVX2's 16-lane tiles) has every tile read half of each
row, so a cache line serves one tile and the hardware prefetchers fetch the other half for
nothing (BERT's 128x768x3072 product: 46 -> 71 GFLOP/s on Zen 3 with panels of 16).

This pass records the width on each such MatMul as its ``panel`` attribute, which the
lowering reads.

Example:
    >>> from polyonnx.graph.ir import Graph, Node
    >>> g = Graph("g", (), (), (Node("m", "MatMul", ("a", "b"), ("y",)),))
    >>> matmul_panels(g, 16).nodes[0].attr("panel")
    16
"""

from __future__ import annotations

import dataclasses

from polyonnx.graph.ir import Graph, Node

PANEL_ATTR = "panel"
"""The attribute of a MatMul node that gives its B panels' width (columns)."""


def matmul_panels(graph: Graph, width: int) -> Graph:
    """``graph`` with every ONNX MatMul's ``panel`` attribute set to ``width`` columns."""

    def panelled(n: Node) -> Node:
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            return n
        attrs = {**dict(n.attrs), PANEL_ATTR: width}
        return Node(n.name, n.op_type, n.inputs, n.outputs, attrs, n.domain, n.guard)

    return dataclasses.replace(graph, nodes=tuple(panelled(n) for n in graph.nodes))
