"""Parallel loops: which loops under a ``parallel`` mark run on polyonnx's thread pool, and
their outlining into chunk functions the pool calls (``polyonnx_parallel_for``, see
``parallel.c``).

A parallel loop's body becomes ``<kernel>.parallel<k>.body(ptr noalias buffers..., i64 first,
i64 last, i64 values...)``, which runs iterations ``first <= i <= last``; the pool calls the
wrapper ``<kernel>.parallel<k>(ptr ctx, i64 begin, i64 end)`` for chunk ``[begin, end)`` of the
iterations. ``ctx`` is an i64 array: a status slot that a failed run-time check sets, the loop's
bounds, every value of the enclosing loops and the buffer pointers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from llvmlite import ir

from polyonnx.codegen import loopast as la
from polyonnx.codegen.access import static_trip
from polyonnx.codegen.frame import Frame, close_frame, open_frame
from polyonnx.codegen.llvm_types import I32, I64, PTR, i64

PARALLEL_ENTRY = "polyonnx_parallel_for"

ChunkBody = Callable[[Frame, la.For, dict[str, ir.Value]], None]
"""``emit(frame, loop, env)``: emit ``loop`` (the chunk's iterations) into ``frame``."""


def parallel_children(mark: la.Mark, threads: int) -> tuple[tuple[la.LNode, bool], ...]:
    """The nodes to emit for a ``parallel`` mark's body, each with whether it is a loop to run
    on the pool.

    ``parallel c1 c3`` names the loops (AST iterators) the schedule proved free of carried
    dependences; they run on the pool when they come first under the mark (a bare
    ``parallel`` mark means its single loop). A loop of too few iterations to share out evenly
    among ``threads``, or one that must stay sequential (over reduction chunks), keeps the
    mark inside it: the named loops may come first there.

    Example:
        >>> loop = la.For("c0", la.IConst(0), la.IOp("le", (la.IVar("c0"), la.IConst(63))), 1,
        ...               (la.Call("S0", (la.IVar("c0"),)),))
        >>> [on_pool for _, on_pool in parallel_children(la.Mark("parallel c0", (loop,)), 2)]
        [True]
    """
    allowed = set(mark.name.split()[1:])
    out: list[tuple[la.LNode, bool]] = []
    for node in mark.body:
        if not isinstance(node, la.For):
            out.append((node, False))
            continue
        trip = static_trip(node)
        if (
            trip is not None
            and not shares_evenly(trip, threads)
            and _inner_loop_named(node, allowed)
        ):
            # Too few iterations to share out evenly: an inner named loop runs in parallel.
            out.append((_mark_inside(node, mark), False))
        elif node.iterator in allowed or (not allowed and len(mark.body) == 1):
            out.append((node, True))
        elif allowed:
            out.append((_mark_inside(node, mark), False))
        else:
            out.append((node, False))
    return tuple(out)


def shares_evenly(trip: int, threads: int) -> bool:
    """Whether ``trip`` iterations split among ``threads`` keep every thread within a quarter
    of the average: then the loop runs on the pool itself. Moving the pool to an inner loop
    instead costs a wake-up and a join per outer iteration (196 of them for a Winograd
    transform's 4 x 7 x 7 outer loops, which ran slower on two threads than on one).

    Example:
        >>> [shares_evenly(n, 2) for n in (1, 2, 3, 5, 7)]
        [False, True, False, True, True]
    """
    return trip >= threads and -(-trip // threads) * threads <= 1.25 * trip


def _mark_inside(node: la.For, mark: la.Mark) -> la.For:
    return replace(node, body=(replace(mark, body=node.body),))


def _inner_loop_named(node: la.For, names: set[str]) -> bool:
    """Whether a loop named in ``names`` is nested in ``node`` (through single-loop bodies)."""
    body = node.body
    while len(body) == 1 and isinstance(body[0], la.For):
        if body[0].iterator in names:
            return True
        body = body[0].body
    return False


def can_share(node: la.For) -> bool:
    """Whether ``node`` counts up to a bound (``i <= e`` or ``i < e``): its iterations can be
    numbered and shared out in chunks."""
    cond = node.cond
    return (
        isinstance(cond, la.IOp)
        and cond.op in ("le", "lt")
        and cond.args[0] == la.IVar(node.iterator)
        and node.inc > 0
    )


def run_on_pool(
    frame: Frame,
    node: la.For,
    env: Mapping[str, ir.Value],
    *,
    name: str,
    threads: int,
    emit_chunk: ChunkBody,
) -> None:
    """Emit loop ``node`` (:func:`can_share`) at ``frame``'s builder as a call of the thread
    pool on ``threads`` threads; ``emit_chunk`` emits its body into the outlined function
    ``<name>.body``, the loop bounded by its arguments ``parallel.lo`` and ``parallel.hi``."""
    b, module = frame.builder, frame.fn.module
    cond = node.cond
    assert isinstance(cond, la.IOp), "run_on_pool needs a loop that can_share"
    lower = frame.index.expr(node.init, env)
    upper = frame.index.expr(cond.args[1], env)
    if cond.op == "lt":
        upper = b.sub(upper, i64(1))
    names = sorted(env)
    buffers = list(frame.pointers)
    slots = 3 + len(names) + len(buffers)
    with b.goto_entry_block():
        ctx = b.alloca(I64, size=i64(slots), name="parallel.ctx")
    values = [
        i64(0),
        lower,
        upper,
        *(env[n] for n in names),
        *(b.ptrtoint(frame.pointers[n], I64) for n in buffers),
    ]
    for k, v in enumerate(values):
        b.store(v, _slot(b, ctx, k))

    # The chunk body is a function of its own whose buffer arguments are ``noalias`` (as the
    # kernel's are): read back from ``ctx`` they would lose that, and with it the register
    # tiles. It is not inlined into the wrapper: LLVM would optimise its loops twice.
    body_fn = ir.Function(
        module,
        ir.FunctionType(I32, [PTR] * len(buffers) + [I64] * (2 + len(names))),
        name=f"{name}.body",
    )
    body_fn.attributes.add("nounwind")
    body_fn.attributes.add("noinline")
    body_fn.linkage = "internal"
    args = list(body_fn.args)
    for a in args[: len(buffers)]:
        a.add_attribute("noalias")
    first, last = args[len(buffers)], args[len(buffers) + 1]
    inner_env = dict(zip(names, args[len(buffers) + 2 :], strict=True))
    inner_env["parallel.lo"], inner_env["parallel.hi"] = first, last
    inner = open_frame(
        body_fn,
        dict(zip(buffers, args[: len(buffers)], strict=True)),
        frame.declare,
        outlined=True,
        dot4_bits=frame.scalars.dot4_bits,
    )
    bounded = la.IOp("le", (la.IVar(node.iterator), la.IVar("parallel.hi")))
    emit_chunk(
        inner,
        la.For(node.iterator, la.IVar("parallel.lo"), bounded, node.inc, node.body),
        inner_env,
    )
    close_frame(inner)

    # The wrapper the pool calls: chunk [begin, end) of the iterations.
    outlined = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), name=name)
    outlined.attributes.add("nounwind")
    arg, begin, end = outlined.args
    ob = ir.IRBuilder(outlined.append_basic_block("entry"))
    loaded = [ob.load(_slot(ob, arg, k), typ=I64) for k in range(slots)]
    lo = loaded[1]
    inc = i64(node.inc)
    chunk_first = ob.add(lo, ob.mul(begin, inc))
    chunk_last = ob.add(lo, ob.mul(ob.sub(end, i64(1)), inc))
    pointers = [ob.inttoptr(raw, PTR) for raw in loaded[3 + len(names) :]]
    status = ob.call(body_fn, [*pointers, chunk_first, chunk_last, *loaded[3 : 3 + len(names)]])
    with ob.if_then(ob.icmp_unsigned("!=", status, ir.Constant(I32, 0)), likely=False):
        ob.store(ob.zext(status, I64), _slot(ob, arg, 0))
    ob.ret_void()
    count = b.add(b.sdiv(b.sub(upper, lower), i64(node.inc)), i64(1))
    pool = frame.declare(PARALLEL_ENTRY, ir.VoidType(), [PTR, PTR, I64, I32])
    b.call(pool, [outlined, ctx, count, ir.Constant(I32, threads)])
    status = b.load(_slot(b, ctx, 0), typ=I64)
    failed = b.icmp_unsigned("!=", status, i64(0))
    with b.if_then(failed, likely=False):
        b.ret(b.trunc(status, I32))


def _slot(builder: ir.IRBuilder, base: ir.Value, k: int) -> ir.Value:
    """The address of ``ctx[k]``."""
    return builder.gep(base, [i64(k)], inbounds=True, source_etype=I64)
