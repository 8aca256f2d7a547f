"""Which loops under a ``parallel`` mark run on the thread pool (no LLVM)."""

from polyonnx.codegen import loopast as la
from polyonnx.codegen.parallel import can_share, parallel_children

CALL = la.Call("S0", (la.IVar("c1"),))


def _loop(var: str, trip: int, body: tuple[la.LNode, ...], op: str = "le") -> la.For:
    bound = trip - 1 if op == "le" else trip
    return la.For(var, la.IConst(0), la.IOp(op, (la.IVar(var), la.IConst(bound))), 1, body)


def test_the_named_loop_runs_on_the_pool() -> None:
    loop = _loop("c0", 64, (CALL,))
    assert parallel_children(la.Mark("parallel c0", (loop,)), 2) == ((loop, True),)
    # A bare mark means its one loop.
    assert parallel_children(la.Mark("parallel", (loop,)), 2) == ((loop, True),)


def test_a_loop_too_short_to_share_out_pushes_the_mark_inside() -> None:
    inner = _loop("c1", 64, (CALL,))
    outer = _loop("c0", 3, (inner,))  # 3 iterations for 2 threads: one does twice the work
    mark = la.Mark("parallel c0 c1", (outer,))
    [(node, on_pool)] = parallel_children(mark, 2)
    assert not on_pool and node == _loop("c0", 3, (la.Mark("parallel c0 c1", (inner,)),))
    # With one thread the same loop is shared out evenly; 6 iterations are for two threads.
    assert parallel_children(mark, 1) == ((outer, True),)
    six = _loop("c0", 6, (inner,))
    assert parallel_children(la.Mark("parallel c0 c1", (six,)), 2) == ((six, True),)


def test_a_sequential_loop_keeps_the_mark_for_the_named_loops_inside() -> None:
    inner = _loop("c1", 64, (CALL,))
    chunks = _loop("c0", 64, (inner,))  # e.g. over reduction chunks: not named
    [(node, on_pool)] = parallel_children(la.Mark("parallel c1", (chunks,)), 2)
    assert not on_pool and node.body == (la.Mark("parallel c1", (inner,)),)
    # Under a bare mark of several nodes nothing is shared out.
    assert parallel_children(la.Mark("parallel", (CALL, chunks)), 2) == (
        (CALL, False),
        (chunks, False),
    )


def test_only_loops_counting_up_to_a_bound_are_shared() -> None:
    assert can_share(_loop("c0", 8, (CALL,))) and can_share(_loop("c0", 8, (CALL,), "lt"))
    down = la.For("c0", la.IConst(7), la.IOp("ge", (la.IVar("c0"), la.IConst(0))), -1, (CALL,))
    assert not can_share(down)
