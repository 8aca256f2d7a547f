import islpy as isl

from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.poly import (
    PolyKernel,
    _sets,
    _without_updates,
    initial_schedule,
    isl_identifier,
)
from polyonnx.schedule.strategies import default_schedule
from polyonnx.testing.examples import matmul, stencil


def test_domain_and_accesses_of_matmul():
    poly = PolyKernel.build(matmul(4, 5, 3))
    assert poly.domain.is_equal(
        isl.UnionSet(
            "{ S0[i, j] : 0 <= i < 4 and 0 <= j < 5; S1[i, j, k] : 0 <= i < 4 and 0 <= j < 5 and "
            "0 <= k < 3 }"
        )
    )
    assert poly.reads.is_equal(
        isl.UnionMap(
            "{ S1[i, j, k] -> C[i, j]; S1[i, j, k] -> A[i, k]; S1[i, j, k] -> B[k, j] }"
        ).intersect_domain(poly.domain)
    )
    assert poly.writes.is_equal(
        isl.UnionMap("{ S0[i, j] -> C[i, j]; S1[i, j, k] -> C[i, j] }").intersect_domain(
            poly.domain
        )
    )


def test_matmul_dependences_are_exact():
    deps = PolyKernel.build(matmul(4, 5, 3)).dependences()
    expected = isl.UnionMap(
        "{ S0[i, j] -> S1[i, j, 0] : 0 <= i < 4 and 0 <= j < 5; "
        "S1[i, j, k] -> S1[i, j, k + 1] : 0 <= i < 4 and 0 <= j < 5 and "
        "0 <= k < 2 }"
    )
    assert deps.raw.is_equal(expected)
    assert deps.waw.is_equal(expected)


def test_stencil_dependence_distances():
    deps = PolyKernel.build(stencil()).dependences()
    deltas = deps.raw.deltas()
    assert deltas.is_equal(isl.UnionSet("{ S0[1, 0]; S0[1, -1] }"))


def test_initial_schedule_follows_the_loop_tree():
    sched = initial_schedule(PolyKernel.build(matmul()))
    text = build_ast(sched).to_C_str()
    assert text.count("for (") == 3
    assert text.index("S0(") < text.index("S1(")


def test_initial_schedule_respects_dependences():
    for kernel in (matmul(), stencil()):
        sk = default_schedule(kernel)
        order = sk.schedule.get_map()
        deps = sk.poly.dependences().all
        assert deps.is_subset(order.lex_lt_union_map(order))


def test_isl_identifier_sanitises_value_names():
    taken: set[str] = set()
    assert isl_identifier("gpu_0/data_0", taken) == "gpu_0_data_0"
    assert isl_identifier("gpu_0/data:0", taken) == "gpu_0_data_0_1"
    assert isl_identifier("0abc", taken) == "b_0abc"
    assert isl_identifier("min", taken) == "b_min"


def _may_analysis(sink: isl.UnionMap, source: isl.UnionMap, order) -> isl.UnionMap:
    info = isl.UnionAccessInfo.from_sink(sink).set_may_source(source).set_schedule(order)
    return info.compute_flow().get_may_dependence()


def _must_analysis(deps) -> isl.UnionMap:
    """RAW and WAW with isl's must-source analysis on every array, and the WAR of the reads
    that are not updates, all in one isl analysis each over the whole kernel (no shortcut)."""
    info = isl.UnionAccessInfo.from_sink(deps.reads.union(deps.writes))
    info = info.set_must_source(deps.writes).set_schedule(deps.order)
    last = info.compute_flow().get_may_dependence()
    reads = _without_updates(deps.reads, deps.writes)
    return last.union(_may_analysis(deps.writes, reads, deps.order))


def _winograd_kernel():
    import numpy as np
    import onnx.helper as oh
    from onnx import TensorProto, numpy_helper

    from polyonnx.options import Options
    from polyonnx.pipeline import lower, to_graph

    w = np.ones((32, 32, 3, 3), np.float32)
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4), oh.make_node("Relu", ["c"], ["y"])],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 16, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    program = lower(to_graph(model, None, Options(num_threads=1)))
    return next(k for k in program.kernels if k.name.endswith("WinogradConv"))


def _kernels():
    from tests.schedule.zoo import ZOO

    return [*(make() for make in ZOO.values()), _winograd_kernel()]


def test_single_assignment_arrays_shortcut_gives_the_exact_dependences():
    for kernel in _kernels():
        deps = PolyKernel.build(kernel).dependences()
        assert deps.all.is_equal(_must_analysis(deps)), kernel.name


def test_war_by_stages_is_isls_analysis_of_the_whole_kernel():
    for kernel in _kernels():
        deps = PolyKernel.build(kernel).dependences()
        assert deps.war.is_equal(_may_analysis(deps.writes, deps.reads, deps.order)), kernel.name


def _stage_instances(poly: PolyKernel, stages: dict[str, int], stage: int) -> isl.UnionSet:
    below = isl.UnionSet.empty(poly.domain.get_space())
    for part in _sets(poly.domain):
        if stages[part.get_tuple_name()] == stage:
            below = below.union(isl.UnionSet.from_set(part))
    return below


def test_the_dependences_among_one_stage_are_those_of_all():
    poly = PolyKernel.build(_winograd_kernel())
    deps = poly.dependences()
    assert deps.stages is not None and len(set(deps.stages.values())) > 3
    for stage in set(deps.stages.values()):
        below = _stage_instances(poly, deps.stages, stage)
        whole = deps.all.intersect_domain(below).intersect_range(below)
        assert deps.among(below).is_equal(whole), stage


def test_the_dependences_among_one_stage_need_no_analysis_of_the_whole_kernel():
    # (The whole kernel's analysis was computed as a dict.get default, and thrown away:
    # 55 of a YOLOv8n Winograd kernel's 73 ms of dataflow analysis.)
    poly = PolyKernel.build(_winograd_kernel())
    deps = poly.dependences()
    assert deps.stages is not None
    for stage in set(deps.stages.values()):
        deps.among(_stage_instances(poly, deps.stages, stage))
    assert "all" not in vars(deps)  # (the cached property was never computed)


def test_a_schedule_that_keeps_the_stages_keeps_only_their_own_dependences():
    deps = PolyKernel.build(_winograd_kernel()).dependences()
    assert deps.to_keep(deps.order).is_subset(deps.all)
    assert not deps.to_keep(deps.order).is_equal(deps.all)  # (nests feed the next ones)
