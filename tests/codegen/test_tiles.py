"""The register-tile plan, without LLVM: which nests are register tiles, their accumulators'
positions and offsets, the loads re-read for register pressure or prefetched, and the init and
epilogue a tile group takes in."""

import pytest

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import Accesses
from polyonnx.codegen.config import CodegenConfig
from polyonnx.codegen.tiles import TileGroup, register_tile, tile_group
from polyonnx.krnl.ir import Access, Aff, Binary, Buffer, Const, Kernel, Load, Loop, Stmt, maximum
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.strategies import default_schedule
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.testing import examples

F32 = "float32"
ZERO = la.IConst(0)


def _groups(
    nodes: tuple[la.LNode, ...], accesses: Accesses, config: CodegenConfig
) -> list[TileGroup]:
    """The tile groups of a loop AST, found as emission looks for them (one thread)."""
    out, i = [], 0
    while i < len(nodes):
        group = tile_group(nodes, i, accesses, config)
        if group is not None:
            out.append(group)
            i += group.size
            continue
        node, i = nodes[i], i + 1
        if isinstance(node, la.If):
            out += _groups(node.then, accesses, config) + _groups(node.orelse, accesses, config)
        elif not isinstance(node, la.Call):
            out += _groups(node.body, accesses, config)
    return out


def _plan(kernel: Kernel, config: CodegenConfig, tiling: Tiling | None = None) -> list[TileGroup]:
    ast = la.from_isl(build_ast(default_schedule(kernel, tiling).schedule))
    return _groups(ast, Accesses.of(kernel), config)


@pytest.mark.parametrize("bits, width", [(256, 8), (512, 16)])
def test_a_matmul_tile_and_its_accumulators(bits: int, width: int) -> None:
    # C = A @ B, 16 x 64: the default schedule's tile is 4 rows x 16 columns under the k loop;
    # the accumulators are 4 rows x (16 / width) vectors, 64 floats apart per row.
    [group] = _plan(examples.matmul(16, 64, 8), CodegenConfig(vector_bits=bits))
    tile = group.tile
    assert tile.width == width and tile.call.stmt == "S1"
    assert [(a.position, a.step) for a in tile.accumulators] == [
        ((r,), j) for r in range(4) for j in range(16 // width)
    ]
    assert [a.offset for a in tile.accumulators] == [
        r * 64 + j * width for r in range(4) for j in range(16 // width)
    ]
    assert tile.rereads == frozenset()  # 8 accumulators + 2 vectors of B + 1 fit 16
    assert group.init is not None and group.epilogue is None  # C = 0 goes into the slots


@pytest.mark.parametrize("above, streamed", [(0, False), (1024, True), (4096, False)])
def test_streams_are_the_operands_above_the_prefetch_threshold(above: int, streamed: bool) -> None:
    # B (8 x 64 floats, 2 KiB) moves with the reduction loop along k; A's element is a
    # broadcast, not a vector stream.
    [group] = _plan(examples.matmul(16, 64, 8), CodegenConfig(prefetch_above=above))
    assert {ld.buffer for ld in group.tile.streams} == ({"B"} if streamed else set())


def _paired() -> Kernel:
    """acc[b, r, o] += x[r, k] * w[b, k, o]; y = max(acc, 0)."""
    nb, nr, no, nk = 4, 7, 32, 5
    b, r, o, k = (Aff.var(n) for n in "brok")
    acc = Access("acc", (b, r, o))
    update = Stmt(
        "S1", acc, Load("acc", (b, r, o), F32) + Load("x", (r, k), F32) * Load("w", (b, k, o), F32)
    )
    return Kernel(
        "k",
        (
            Buffer("x", F32, (nr, nk), "input"),
            Buffer("w", F32, (nb, nk, no), "input"),
            Buffer("acc", F32, (nb, nr, no), "temp"),
            Buffer("y", F32, (nb, nr, no), "output"),
        ),
        (
            Loop(
                "b",
                0,
                nb,
                (
                    Loop(
                        "r",
                        0,
                        nr,
                        (
                            Loop(
                                "o",
                                0,
                                no,
                                (Stmt("S0", acc, Const(0.0, F32)), Loop("k", 0, nk, (update,))),
                            ),
                        ),
                    ),
                ),
            ),
            Loop(
                "b",
                0,
                nb,
                (
                    Loop(
                        "r",
                        0,
                        nr,
                        (
                            Loop(
                                "o",
                                0,
                                no,
                                (
                                    Stmt(
                                        "S2",
                                        Access("y", (b, r, o)),
                                        maximum(Load("acc", (b, r, o), F32), 0.0),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


def test_a_paired_tile_over_the_register_file_rereads_its_last_weight_vector() -> None:
    # 7 rows x 2 channel blocks x 2 vectors of 16 lanes: 28 accumulators + 4 weight vectors
    # + 1 broadcast is one more than AVX-512's 32 registers, so the last weight vector (block
    # 1, vector step 1) is read from memory at each of its 7 uses, one per row.
    [group] = _plan(
        _paired(), CodegenConfig(vector_bits=512), Tiling(unroll=8, vector=32, paired_rows=7)
    )
    tile = group.tile
    assert len(tile.unrolled) == 2 and len(tile.accumulators) == 28
    assert sorted(a.offset for a in tile.accumulators) == sorted(
        r * 32 + blk * 7 * 32 + j * 16 for r in range(7) for blk in range(2) for j in range(2)
    )
    assert {(str(ld), position, step) for ld, position, step in tile.rereads} == {
        ("w[b, k, o]", (r, 1), 1) for r in range(7)
    }


def _depthwise() -> Kernel:
    """y[r, o] = sum_k x[r + k, o] * w[k, o]: each row reads its own window of x, every row
    the same vector of w (a depthwise conv's row of pixels in one channel block)."""
    nr, no, nk = 7, 16, 3
    r, o, k = (Aff.var(n) for n in "rok")
    y = Access("y", (r, o))
    update = Stmt(
        "S1", y, Load("y", (r, o), F32) + Load("x", (r + k, o), F32) * Load("w", (k, o), F32)
    )
    return Kernel(
        "k",
        (
            Buffer("x", F32, (nr + nk - 1, no), "input"),
            Buffer("w", F32, (nk, no), "input"),
            Buffer("y", F32, (nr, no), "output"),
        ),
        (
            Loop(
                "r",
                0,
                nr,
                (Loop("o", 0, no, (Stmt("S0", y, Const(0.0, F32)), Loop("k", 0, nk, (update,)))),),
            ),
        ),
    )


def test_a_tile_over_the_register_file_rereads_the_vectors_each_row_loads_for_itself() -> None:
    # AVX2, 7 rows x 2 vectors: 14 accumulators + 14 vectors of x (one per row and step) + 2
    # of w are 14 more than 16 registers. Each vector of x serves one FMA, so reading it as
    # the FMA's memory operand costs no load; w's, shared by the 7 rows, stay in registers.
    [group] = _plan(
        _depthwise(),
        CodegenConfig(vector_bits=256, vector_registers=16),
        Tiling.for_vector_bits(256),
    )
    tile = group.tile
    assert len(tile.accumulators) == 14
    assert {(str(ld), position, step) for ld, position, step in tile.rereads} == {
        ("x[k + r, o]", (r,), j) for r in range(7) for j in range(2)
    }


def test_a_window_each_row_reads_for_itself_is_not_prefetched() -> None:
    # x moves with the rows: the rows' windows overlap, so it is no stream to prefetch; w,
    # the same for every row, is.
    [group] = _plan(
        _depthwise(), CodegenConfig(vector_bits=256, prefetch_above=1), Tiling.for_vector_bits(256)
    )
    assert {ld.buffer for ld in group.tile.streams} == {"w"}


def _bias_matmul_relu(k: int) -> Kernel:
    """y = bias; y += a @ b; y = max(y, 0), all on y."""
    m, n = 8, 32
    i, j, r = Aff.var("i"), Aff.var("j"), Aff.var("r")
    y = Access("y", (i, j))
    return Kernel(
        "k",
        (
            Buffer("a", F32, (m, k), "input"),
            Buffer("b", F32, (k, n), "input"),
            Buffer("bias", F32, (n,), "input"),
            Buffer("y", F32, (m, n), "output"),
        ),
        (
            Loop(
                "i",
                0,
                m,
                (
                    Loop(
                        "j",
                        0,
                        n,
                        (
                            Stmt("S0", y, Load("bias", (j,), F32)),
                            Loop(
                                "r",
                                0,
                                k,
                                (
                                    Stmt(
                                        "S1",
                                        y,
                                        Load("y", (i, j), F32)
                                        + Load("a", (i, r), F32) * Load("b", (r, j), F32),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            ),
            Loop(
                "i",
                0,
                m,
                (Loop("j", 0, n, (Stmt("S2", y, maximum(Load("y", (i, j), F32), 0.0)),)),),
            ),
        ),
    )


@pytest.mark.parametrize("k, chunked", [(9, False), (600, True)])
def test_the_bias_and_relu_join_the_tile_group(k: int, chunked: bool) -> None:
    # The bias init before the tile and the ReLU after it cover every accumulator; a
    # reduction long enough to run in chunks has them in its first and last chunk (an `if`).
    [group] = _plan(_bias_matmul_relu(k), CodegenConfig())
    assert group.size == 3
    kind = la.If if chunked else la.Mark
    assert isinstance(group.init, kind) and isinstance(group.epilogue, kind)


# Hand-built loop ASTs: y[m, i] += a[r, m, i], the reduction c0 (over r) around an unrolled c1
# (over m) around a vector loop c2 (over i).


def _reduction_kernel(rows: int, lanes: int, dtype: str = F32) -> Kernel:
    r, m, i = Aff.var("r"), Aff.var("m"), Aff.var("i")
    total = Binary(
        "or" if dtype == "bool" else "add", Load("y", (m, i), dtype), Load("a", (r, m, i), dtype)
    )
    return Kernel(
        "k",
        (
            Buffer("a", dtype, (3, rows, lanes), "input"),
            Buffer("y", dtype, (rows, lanes), "output"),
        ),
        (
            Loop(
                "r",
                0,
                3,
                (
                    Loop(
                        "m",
                        0,
                        rows,
                        (Loop("i", 0, lanes, (Stmt("S0", Access("y", (m, i)), total),)),),
                    ),
                ),
            ),
        ),
    )


def _loop(var: str, trip: int, body: tuple[la.LNode, ...], start: la.IExpr = ZERO) -> la.For:
    last = la.IOp("add", (start, la.IConst(trip - 1)))
    return la.For(var, start, la.IOp("le", (la.IVar(var), last)), 1, body)


def _tile_ast(
    rows: int, lanes: int, args: tuple[str, ...] = ("c0", "c1", "c2"), row_start: la.IExpr = ZERO
) -> la.For:
    call = la.Call("S0", tuple(la.IVar(a) for a in args))
    return _loop(
        "c0",
        3,
        (
            la.Mark(
                "unroll",
                (
                    _loop(
                        "c1", rows, (la.Mark("vector", (_loop("c2", lanes, (call,)),)),), row_start
                    ),
                ),
            ),
        ),
    )


def test_a_hand_built_tile() -> None:
    tile = register_tile(_tile_ast(3, 16), Accesses.of(_reduction_kernel(3, 16)), CodegenConfig())
    assert tile is not None
    assert [(a.position, a.step, a.offset) for a in tile.accumulators] == [
        ((m,), j, m * 16 + j * 8) for m in range(3) for j in range(2)
    ]


@pytest.mark.parametrize(
    "why, ast, kernel",
    [
        (
            "a vector trip count that is no multiple of the width",
            _tile_ast(3, 12),
            _reduction_kernel(3, 12),
        ),
        (
            "more vector steps than straight-line code takes",
            _tile_ast(1, 72),
            _reduction_kernel(1, 72),
        ),
        (
            "rows that start where the reduction is (a skewed tile)",
            _tile_ast(3, 16, row_start=la.IVar("c0")),
            _reduction_kernel(3, 16),
        ),
        (
            "an accumulator the reduction moves",
            _tile_ast(3, 16, args=("c1", "c0", "c2")),
            _reduction_kernel(3, 16),
        ),
        ("bool accumulators", _tile_ast(3, 16), _reduction_kernel(3, 16, "bool")),
    ],
)
def test_no_register_tile(why: str, ast: la.For, kernel: Kernel) -> None:
    assert register_tile(ast, Accesses.of(kernel), CodegenConfig()) is None, why
