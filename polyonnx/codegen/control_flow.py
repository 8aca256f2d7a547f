"""The control flow of a model's entry point: a kernel of an If's branch runs only when its
guard holds (:mod:`polyonnx.frontend.control`); the kernels of a run-time loop's body
(:mod:`polyonnx.graph.loops`), consecutive in the program (fusion keeps them together), run
as::

    i = start; going = condition and the Loop's own guard
    while i < trip and going:
        iteration[] = i; running[] = true      # the buffers the body reads
        <the body's kernels, the loop-carried copies last>
        going = next_condition[]; i += 1

Loops nest: a kernel's guard lists the loops it runs in, outermost first.

Example:
    >>> from polyonnx.pipeline import compile
    >>> from polyonnx.testing.examples import run_time_loop_model
    >>> "lp.header:" in str(compile(run_time_loop_model()).entry_module())
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from llvmlite import ir

from polyonnx.codegen.llvm_types import I1, I8, I64
from polyonnx.errors import CodegenError
from polyonnx.graph.loops import Guard, RunTimeLoop, enclosing


@dataclass(frozen=True, slots=True)
class _OpenLoop:
    """A loop being emitted: its counter and condition (stack slots), the header block that
    tests them, the block after the loop, the iteration number (loaded in the header)."""

    loop: RunTimeLoop
    counter: ir.Value
    going: ir.Value
    header: ir.Block
    after: ir.Block
    iteration: ir.Value


@dataclass
class ControlFlow:
    """The loops open where the builder ``b`` emits, in the entry point ``function``;
    ``address(value)``: a pointer to a value's buffer."""

    b: ir.IRBuilder
    function: ir.Function
    loops: Iterable[RunTimeLoop]
    address: Callable[[str], ir.Value]
    by_running: dict[str, RunTimeLoop] = field(init=False)
    opened: list[_OpenLoop] = field(default_factory=list)
    emitted: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.by_running = {loop.running: loop for loop in self.loops}

    def move_to(self, guard: Guard) -> Guard:
        """Close and open loops so that the next kernel, of ``guard``, runs in the loops its
        guard lists; the rest of its guard (an If's conditions)."""
        path = enclosing(guard, self.by_running)
        while tuple(o.loop.running for o in self.opened) != path[: len(self.opened)]:
            self._close(self.opened.pop())
        for running in path[len(self.opened) :]:
            if running in self.emitted:
                name = self.by_running[running].name
                raise CodegenError(f"the kernels of loop {name!r} are not consecutive")
            self.emitted.add(running)
            self.opened.append(self._open(self.by_running[running]))
        return tuple(g for g in guard if g[0] not in self.by_running)

    def holds(self, conditions: Sequence[tuple[str, bool]]) -> ir.Value:
        """Whether each bool value (one byte) equals its flag."""
        b, value = self.b, ir.Constant(I1, 1)
        for cond, flag in conditions:
            true = b.icmp_unsigned("!=", b.load(self.address(cond), typ=I8), ir.Constant(I8, 0))
            value = b.and_(value, true if flag else b.not_(true))
        return value

    def _open(self, loop: RunTimeLoop) -> _OpenLoop:
        """The loop's header, then the start of its body, which writes the iteration number
        and the condition (true) where the body reads them."""
        b, address = self.b, self.address
        own = [g for g in loop.guard if g[0] not in self.by_running]
        going = self.holds(own)  # a Loop in an If's branch runs only when the branch does
        if loop.condition:
            initial = b.load(address(loop.condition), typ=I8)
            going = b.and_(going, b.icmp_unsigned("!=", initial, ir.Constant(I8, 0)))
        trip = b.load(address(loop.trip), typ=I64) if loop.trip else ir.Constant(I64, (1 << 63) - 1)
        # Stack slots in the entry block, which LLVM promotes to registers.
        entry = ir.IRBuilder(self.function.entry_basic_block)
        entry.position_at_start(self.function.entry_basic_block)
        counter, flag = entry.alloca(I64), entry.alloca(I1)
        b.store(ir.Constant(I64, loop.start), counter)
        b.store(going, flag)
        header = b.append_basic_block(f"{loop.name}.header")
        body = b.append_basic_block(f"{loop.name}.body")
        after = b.append_basic_block(f"{loop.name}.after")
        b.branch(header)
        b.position_at_end(header)
        i = b.load(counter, typ=I64)
        b.cbranch(b.and_(b.icmp_signed("<", i, trip), b.load(flag, typ=I1)), body, after)
        b.position_at_end(body)
        b.store(i, address(loop.iteration))
        b.store(ir.Constant(I8, 1), address(loop.running))
        return _OpenLoop(loop, counter, flag, header, after, i)

    def _close(self, o: _OpenLoop) -> None:
        """The end of an iteration: the body's condition output decides whether another
        runs."""
        b, loop = self.b, o.loop
        if loop.next_condition != loop.running:
            done = b.load(self.address(loop.next_condition), typ=I8)
            b.store(b.icmp_unsigned("!=", done, ir.Constant(I8, 0)), o.going)
        b.store(b.add(o.iteration, ir.Constant(I64, 1)), o.counter)
        b.branch(o.header)
        b.position_at_end(o.after)
