"""The default strategies: register tiles, vector and parallel marks, always legal."""

import numpy as np

from polyonnx.codegen import loopast as la
from polyonnx.codegen.kernel_call import kernel_callable
from polyonnx.krnl.ir import Access, Aff, Buffer, Const, Kernel, Load, Loop, Stmt
from polyonnx.options import Options
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import Tiling, default_schedule, parallel
from polyonnx.schedule.strategies.reduction import ReductionNest, reduction_chunks
from polyonnx.testing.examples import matmul, stencil


def _ast(kernel, **kw) -> str:
    return build_ast(default_schedule(kernel, **kw).schedule).to_C_str()


def test_matmul_gets_a_register_tile(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    text = _ast(matmul(64, 64, 32), tiling=Tiling(unroll=4, vector=16))
    assert "// unroll" in text and "// vector" in text and "// parallel" in text
    # the reduction loop runs inside the tile, around the unrolled rows
    assert text.index("// parallel") < text.index("c2 <= 31") < text.rindex("// unroll")


def test_a_loop_carrying_a_dependence_is_never_parallel(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    marks = [
        line.split()[2:]
        for line in _ast(stencil(64, 64)).splitlines()
        if line.strip().startswith("// parallel")
    ]
    # t (c0) carries the dependence; i (c1) does not, whatever t is.
    assert all("c0" not in names for names in marks)


def test_degenerate_outer_loops_do_not_hide_a_carried_dependence(monkeypatch):
    # for n in [0, 1): for t in [1, T): for i: A[n, t, i] = A[n, t-1, i] + 1 — n is a single
    # value, so the loop that would run in parallel is t, which carries the dependence.
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    n, t, i = Aff.var("n"), Aff.var("t"), Aff.var("i")
    s = Stmt("S0", Access("A", (n, t, i)), Load("A", (n, t - 1, i), "float32") + 1.0)
    k = Kernel(
        "k",
        (Buffer("A", "float32", (1, 32, 32), "output"),),
        (Loop("n", 0, 1, (Loop("t", 1, 32, (Loop("i", 0, 32, (s,)),)),)),),
    )
    text = _ast(k)
    # n may be named, but it is no loop (its band is left out of the isl tree): the t loop
    # (c0) that actually iterates is not named.
    assert "for (int c0 = 1; c0 <= 31" in text
    assert not any(
        "c0" in line.split()[2:]
        for line in text.splitlines()
        if line.strip().startswith("// parallel")
    )


def test_default_schedules_compute_the_same_results(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL_INSTANCES", 1)
    rng = np.random.default_rng(0)
    for m, n, kk in ((13, 37, 5), (64, 48, 70)):
        k = matmul(m, n, kk)
        loops = la.from_isl(build_ast(default_schedule(k).schedule))
        run = kernel_callable(k, loops, Options(num_threads=2))
        a, b = rng.random((m, kk), np.float32), rng.random((kk, n), np.float32)
        c = np.zeros((m, n), np.float32)
        run({"A": a, "B": b, "C": c})
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def _reduction(*extents: int) -> ReductionNest:
    names = [f"r{k}" for k in range(len(extents))]
    y = Access("y", (Aff.var("o"),))
    init = Stmt("S0", y, Load("b", (Aff.var("o"),), "float32"))
    update = Stmt("S1", y, Load("y", (Aff.var("o"),), "float32"))
    inner = tuple(Loop(n, 0, e, ()) for n, e in zip(names, extents, strict=True))
    return ReductionNest((Loop("o", 0, 64, ()),), init, inner, update)


def test_reduction_chunks_hold_about_depth_iterations():
    split = reduction_chunks
    assert split(_reduction(2, 32), 64) is None  # short enough: one chunk
    assert split(_reduction(8, 32), 64) == (0, 2)  # 1x1 conv: 2 blocks of 32 channels
    # 3x3 conv: a block of 32 channels has 288 iterations; its kernel rows (96) are the chunk
    assert split(_reduction(8, 3, 3, 32), 64) == (1, 1)
    assert split(
        _reduction(
            1024,
        ),
        128,
    ) == (0, 128)  # GEMM: chunks of k
    assert split(_reduction(3, 7, 7), 64) == (0, 1)  # RGB stem: one input channel


def _copy(rows: int) -> Kernel:
    i, j = Aff.var("i"), Aff.var("j")
    return Kernel(
        "copy",
        (
            Buffer("x", "float32", (rows, 1024), "input"),
            Buffer("y", "float32", (rows, 1024), "output"),
        ),
        (
            Loop(
                "i",
                0,
                rows,
                (
                    Loop(
                        "j",
                        0,
                        1024,
                        (Stmt("S0", Access("y", (i, j)), Load("x", (i, j), "float32")),),
                    ),
                ),
            ),
        ),
    )


def test_a_copy_runs_in_parallel_when_it_moves_enough_memory():
    # 128K instances, far below MIN_PARALLEL_INSTANCES; 512 KiB written: in parallel.
    assert "// parallel" in _ast(_copy(128))
    assert "// parallel" not in _ast(_copy(32))  # 128 KiB: one thread


def _copy_then_sum(summed: str) -> Kernel:
    """``t = x`` (512 KiB: a parallel copy), then ``y[i] = sum_j summed[i, j]`` (128K
    instances, 512 bytes written: too little work to be parallel on its own)."""
    i, j = Aff.var("i"), Aff.var("j")
    rows = (Loop("j", 0, 1024, (Stmt("S0", Access("t", (i, j)), Load("x", (i, j), "float32")),)),)
    total = (
        Stmt("S1", Access("y", (i,)), Const(0.0, "float32")),
        Loop(
            "j",
            0,
            1024,
            (
                Stmt(
                    "S2",
                    Access("y", (i,)),
                    Load("y", (i,), "float32") + Load(summed, (i, j), "float32"),
                ),
            ),
        ),
    )
    return Kernel(
        "copy_then_sum",
        (
            Buffer("x", "float32", (128, 1024), "input"),
            Buffer("z", "float32", (128, 1024), "input"),
            Buffer("t", "float32", (128, 1024), "temp"),
            Buffer("y", "float32", (128,), "output"),
        ),
        (Loop("i", 0, 128, rows), Loop("i", 0, 128, total)),
    )


def test_a_nest_reading_what_a_parallel_nest_wrote_runs_in_parallel_too():
    # Each core then reads the share of t its own cache holds; a sum of another input, with
    # the same work, stays on one thread.
    assert _ast(_copy_then_sum("t")).count("// parallel") == 2
    assert _ast(_copy_then_sum("z")).count("// parallel") == 1


def test_a_gemv_runs_in_parallel_when_it_streams_enough_weights():
    # A batch-1 fully connected layer: under a million multiply-adds, but 2 MiB of weights
    # streamed once per run; 1024 x 128 (512 KiB) stays on one thread.
    tiling = Tiling.for_vector_bits(512, threads=2)
    assert "// parallel" in _ast(matmul(1, 1024, 512), tiling=tiling)
    assert "// parallel" not in _ast(matmul(1, 128, 1024), tiling=tiling)


def test_a_window_is_not_streamed_in_chunks():
    # y[o, c] = sum_k x[o + k, c]: a pool along o on channels-last data. Each x row is read by
    # 12 neighbouring outputs (a window, not a stream read once): the 12 taps stay inside each
    # output tile, one pass over y, where chunks of 8 taps outside the tiles made two.
    o, k, c = Aff.var("o"), Aff.var("k"), Aff.var("c")
    acc = Load("y", (o, c), "float32")
    body = (
        Stmt("S0", Access("y", (o, c)), Const(0.0, "float32")),
        Loop(
            "k", 0, 12, (Stmt("S1", Access("y", (o, c)), acc + Load("x", (o + k, c), "float32")),)
        ),
    )
    kernel = Kernel(
        "window",
        (Buffer("x", "float32", (75, 32), "input"), Buffer("y", "float32", (64, 32), "output")),
        (Loop("o", 0, 64, (Loop("c", 0, 32, body),)),),
    )
    text = _ast(kernel, tiling=Tiling.for_vector_bits(256))
    assert text.count("S0(") == 1 and text.index("S0(") < text.index("S1(")
    # (an output loop comes first: no chunk of the taps outside it guards the zeroing)
    assert "if (" not in text
    x = np.random.default_rng(0).random((75, 32), np.float32)
    y = np.zeros((64, 32), np.float32)
    loops = la.from_isl(build_ast(default_schedule(kernel).schedule))
    kernel_callable(kernel, loops, Options(num_threads=1))({"x": x, "y": y})
    want = sum(x[j : j + 64] for j in range(12))
    np.testing.assert_allclose(y, want, rtol=1e-5)


def _matmul_by_constant(rows: int, b: np.ndarray):
    """A model of ``y = a @ b``: ``a`` an input of ``rows`` rows, ``b`` a constant."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, b.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, b.shape[1]])],
        [numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_a_gemm_streams_its_b_panels_once_not_per_row_tile():
    # 64x3136x256 with a constant B, packed in 98 panels of 32 columns (3.2 MB): the panels'
    # loop goes before the row tiles, so each panel's chunk serves all 8 row tiles from L1
    # (A, 64 KiB, is re-read per panel from L2) instead of B streamed once per row tile.
    import polyonnx
    from polyonnx.schedule_driver import target_tiling

    rng = np.random.default_rng(0)
    b = rng.random((256, 3136), np.float32)
    model = _matmul_by_constant(64, b)
    options = Options(num_threads=1)
    (info,) = polyonnx.list_kernels(model, options=options)
    text = _ast(info.kernel, tiling=target_tiling(options))
    (packed,) = [buf for buf in info.kernel.buffers if buf.name.endswith("__panels")]
    first_loop = text[text.index("for") : text.index("\n", text.index("for"))]
    assert f"c0 <= {packed.shape[0] - 1};" in first_loop, text
    a = rng.random((64, 256), np.float32)
    got = polyonnx.InferenceSession(model, options=options).run(None, {"a": a})[0]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4)


def test_a_gemm_whose_a_leaves_l2_sweeps_its_panels_inside_each_chunk(monkeypatch):
    # Y = A @ B, A 64 x 1024 (256 KiB), B constant, read through packed panels: with an L2 of
    # 256 KiB, A is more than half of it and Y (32 KiB) fits, so the reduction's chunk loop
    # goes outside the panel loop (each chunk of A stays in L2 across the panels); with
    # 4 MiB, the panels go first. The product is the same either way.
    import polyonnx
    from polyonnx import schedule_driver

    rng = np.random.default_rng(0)
    b = rng.standard_normal((1024, 128)).astype(np.float32)
    model = _matmul_by_constant(64, b)
    a = rng.standard_normal((64, 1024)).astype(np.float32)
    chunks_outside = []
    for l2 in (256 << 10, 4 << 20):
        monkeypatch.setattr(schedule_driver, "l2_bytes", lambda _options, l2=l2: l2)
        options = polyonnx.Options(num_threads=1, cache=False)
        (loops,) = [ast for k, ast in polyonnx.compile(model, options).asts if "MatMul" in k.name]
        outer = next(n for n in loops if isinstance(n, la.For))
        # the chunk loop: the accumulators are zeroed in its first iteration only
        chunks_outside.append(f"({outer.iterator} == 0)" in str(outer))
        (y,) = polyonnx.InferenceSession(model, options=options).run(None, {"a": a})
        np.testing.assert_allclose(y, a @ b, rtol=1e-4, atol=1e-3)
    # the outermost loop: chunks of the reduction, else the panels
    assert chunks_outside == [True, False]
