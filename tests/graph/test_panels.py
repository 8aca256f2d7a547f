"""The MatMul panels pass: the width it records is the one the lowering packs B in, results
vs numpy through the krnl interpreter, and the pipeline records the target's tile width."""

from __future__ import annotations

import numpy as np
import pytest

from polyonnx.graph.passes.panels import PANEL_ATTR, matmul_panels
from polyonnx.krnl.lower.gemm import PACK_MIN_ROWS
from polyonnx.options import Options
from polyonnx.pipeline import to_graph
from polyonnx.schedule_driver import target_tiling
from tests.krnl.harness import graph_from_model, make_model, node_kernel, rand, run_krnl


@pytest.mark.parametrize("width", [8, 16, 32])
@pytest.mark.parametrize("constant", [False, True])
def test_b_is_packed_in_panels_of_the_recorded_width(width: int, constant: bool) -> None:
    # 70 columns: a ragged last panel for every width.
    a, b = rand(PACK_MIN_ROWS, 40), rand(40, 70, seed=1)
    model = make_model("MatMul", [("a", a), ("b", b)], constants={"b": b} if constant else None)
    graph = matmul_panels(graph_from_model(model), width)
    kernel = node_kernel(graph, graph.nodes[0])
    panels = [buf.shape for buf in kernel.buffers if buf.name.endswith("__panels")]
    assert panels == [(-(-70 // width), 40, width)]
    feeds = {"a": a} if constant else {"a": a, "b": b}
    np.testing.assert_allclose(run_krnl(graph, feeds)["y"], a @ b, rtol=1e-4, atol=1e-4)


def test_only_onnx_matmuls_get_a_width() -> None:
    model = make_model("Gemm", [("a", rand(4, 8)), ("b", rand(8, 4, seed=1))])
    graph = matmul_panels(graph_from_model(model), 16)
    assert graph.nodes[0].attr(PANEL_ATTR, None) is None


@pytest.mark.parametrize(("cpu", "width"), [("znver3", 16), ("znver4", 32), (None, None)])
def test_the_pipeline_records_the_targets_register_tile_width(
    cpu: str | None, width: int | None
) -> None:
    # Two AVX2 vectors under znver3, two AVX-512 ones under znver4; the host's own.
    model = make_model("MatMul", [("a", rand(4, 8)), ("b", rand(8, 64, seed=1))])
    options = Options(num_threads=1, cpu=cpu)
    (node,) = [n for n in to_graph(model, None, options).nodes if n.op_type == "MatMul"]
    assert node.attr(PANEL_ATTR) == (width or target_tiling(options).vector)
