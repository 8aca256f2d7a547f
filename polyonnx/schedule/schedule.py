"""``Schedule``: a legality-checked, replayable schedule of one krnl kernel.

A schedule is immutable: each verb returns a new :class:`Schedule` (so an exploration script can
branch from any point) whose trace is the old trace plus the verb's directive. Loops are named
after the kernel's iterators (``n, oc, oh, ow, ic, kh, kw``); verbs that create loops derive names
from them (``oc_o``/``oc_i`` for a split, ``oc_0..oc_n`` for a multi-level tile).

Every verb is validated (``check_<verb>``), applied to the tree (``apply_<verb>``) and the result
is accepted only if isl proves it respects every RAW, WAR and WAW dependence of the kernel and
no ``parallel`` or ``vector`` loop carries one; otherwise :class:`ScheduleError` names the verb,
the statements, the buffer element and the distance of a violated dependence. A strategy that
applies many verbs proves only the result: :meth:`Schedule.apply_unverified` applies a verb
without the proof, and the schedule it returns is not :attr:`~Schedule.verified` (the pipeline
refuses it) until :meth:`Schedule.verify` proves it.

Example:
    >>> from polyonnx.testing.examples import matmul
    >>> s = Schedule.from_kernel(matmul(16, 16, 16))
    >>> s = s.tile(("i", "j"), (4, 8)).parallel("i_o")
    >>> print(s)
    for i_o in [0, 4):  # = floor(i/4), parallel
      for j_o in [0, 2):  # = floor(j/8)
        for i_i in [0, 4):  # = i mod 4
          for j_i in [0, 8):  # = j mod 8
            S0: C[i, j] = 0.0
            for k in [0, 16):
              S1: C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))
    >>> print(s.trace)  # s.trace.to_json() is its JSON form, which replays
    tile(i, j, ((4, 8),))
    parallel(i_o)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

import islpy as isl
import numpy as np

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Kernel
from polyonnx.schedule.astgen import build_ast
from polyonnx.schedule.legality import (
    check_not_carried,
    check_order,
    dependences_in,
    loops_that_may_carry,
)
from polyonnx.schedule.poly import Dependences, PolyKernel
from polyonnx.schedule.scheduled import ScheduledKernel
from polyonnx.schedule.signature import kernel_signature
from polyonnx.schedule.trace import Trace
from polyonnx.schedule.tree import (
    Band,
    Node,
    Path,
    band_map,
    band_paths,
    bands_above,
    bands_on_path,
    get,
    initial_tree,
    instances,
    prefix_map,
    render,
    stmts,
    to_isl,
    walk,
)
from polyonnx.schedule.verbs import (
    VERBS,
    CacheRead,
    CacheWrite,
    ComputeAt,
    Directive,
    Distribute,
    Fuse,
    Isolate,
    Pack,
    Parallel,
    Reorder,
    Reverse,
    ReverseComputeAt,
    Skew,
    Split,
    Tile,
    Unroll,
    Vectorize,
)

VECTOR_BYTES = 32
"""Bytes in one vector register of the target (AVX2's 256-bit ``ymm``): float32 width 8."""


class _Model:
    """What every schedule of one kernel shares: its polyhedral model and dependences.

    A staging verb (``cache_read``, ``cache_write``, ``pack``) makes a new kernel; its meaning
    is its statements run in the schedule tree the verb produced (``order``), so its
    dependences are computed in that order, and the trace still belongs to the ``original``
    kernel (signature included)."""

    def __init__(
        self, kernel: Kernel, original: _Model | None = None, order: Node | None = None
    ) -> None:
        self.kernel = kernel
        self.poly = PolyKernel.build(kernel)
        self.original: Kernel = original.original if original else kernel
        self.signature: str = original.signature if original else kernel_signature(kernel)
        self._order = order

    @functools.cached_property
    def deps(self) -> Dependences:
        if self._order is None:
            return self.poly.dependences()
        return dependences_in(self.poly, to_isl(self._order, self.poly))


class Schedule:
    """A kernel plus a schedule tree and the trace of verbs that made it."""

    def __init__(
        self, model: _Model, tree: Node, directives: tuple[Directive, ...], unverified: int = 0
    ) -> None:
        self._model = model
        self.tree = tree
        self.directives = directives
        self._created: tuple[str, ...] = ()
        self._unverified = unverified  # the last directives, not yet proved legal

    @staticmethod
    def from_kernel(kernel: Kernel) -> Schedule:
        """The kernel's own loop structure (what the compiler runs by default).

        Example:
            >>> from polyonnx.testing.examples import matmul
            >>> print(Schedule.from_kernel(matmul(4, 5, 3)))
            for i in [0, 4):
              for j in [0, 5):
                S0: C[i, j] = 0.0
                for k in [0, 3):
                  S1: C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))
        """
        model = _Model(kernel)
        return Schedule(model, initial_tree(model.poly), ())

    # ------------------------------------------------------------------ views

    @property
    def kernel(self) -> Kernel:
        return self._model.kernel

    @property
    def original(self) -> Kernel:
        """The kernel the trace starts from (``kernel`` differs after a staging verb)."""
        return self._model.original

    @property
    def poly(self) -> PolyKernel:
        return self._model.poly

    @property
    def dependences(self) -> Dependences:
        return self._model.deps

    @property
    def signature(self) -> str:
        return self._model.signature

    @functools.cached_property
    def loops(self) -> tuple[str, ...]:
        """Loop names, outermost first (pre-order)."""
        return tuple(band_paths(self.tree))

    @property
    def created(self) -> tuple[str, ...]:
        """The loops the last verb made (e.g. ``("j_o", "j_i")`` after ``split("j", 8)``)."""
        return self._created

    @property
    def statements(self) -> tuple[str, ...]:
        return stmts(self.tree)

    @property
    def trace(self) -> Trace:
        return Trace(self.kernel.name, self.signature, self.directives)

    @functools.cached_property
    def isl_schedule(self) -> isl.Schedule:
        """The isl schedule tree codegen follows."""
        return to_isl(self.tree, self.poly)

    def isl_text(self) -> str:
        """The raw isl schedule tree."""
        return str(self.isl_schedule)

    def ast_text(self) -> str:
        """The loops isl's AST generator makes of this schedule, as C."""
        return build_ast(self.isl_schedule).to_C_str()

    def scheduled(self) -> ScheduledKernel:
        """The kernel, its model and this schedule's isl tree, as the pipeline takes them;
        refused while the schedule is not :attr:`verified`."""
        if not self.verified:
            raise ScheduleError(
                f"schedule of kernel {self.kernel.name}: "
                f"{'; '.join(self._pending())} not proved legal (verify() it)"
            )
        return ScheduledKernel(self.kernel, self.poly, self.isl_schedule, self.trace)

    def __str__(self) -> str:
        return render(self.tree, self.poly)

    def __repr__(self) -> str:
        unverified = f", {self._unverified} unverified" if self._unverified else ""
        return f"<Schedule of {self.kernel.name}: {len(self.directives)} verbs{unverified}>"

    # ------------------------------------------------------------------ applying verbs

    def apply(self, d: Directive) -> Schedule:
        """Check ``d``, apply it and return the new schedule if it is legal."""
        return self.apply_unverified(d).verify()

    def apply_all(self, directives: Iterable[Directive]) -> Schedule:
        """Check and apply each directive in turn, and accept the result if it is legal: the
        legality check (the costly part) runs once, for the final schedule, so the schedules in
        between need not be legal. A refusal names every directive.

        Example:
            >>> from polyonnx.testing.examples import chain
            >>> s = Schedule.from_kernel(chain(4, 16))
            >>> s.apply_all([Split("j", 8), Vectorize("j_i", 8)]).loops[:3]
            ('i', 'j_o', 'j_i')
        """
        new = self
        for d in directives:
            new = new.apply_unverified(d)
        return new.verify()

    def apply_unverified(self, d: Directive) -> Schedule:
        """``d`` validated and applied, its legality not yet proved: the new schedule is not
        :attr:`verified` (:meth:`scheduled` refuses it) until :meth:`verify` proves it. A
        strategy applies its verbs so and proves the result once, as :meth:`apply_all` does;
        the schedules in between need not be legal.

        Example:
            >>> from polyonnx.testing.examples import chain
            >>> s = Schedule.from_kernel(chain(4, 16)).apply_unverified(Split("j", 8, floor=True))
            >>> s.created, s.verified
            (('j_o', 'j_i'), False)
            >>> s.apply_unverified(Vectorize("j_i", 0, True)).verify().verified
            True
        """
        entry = VERBS.get(getattr(d, "verb", ""))
        if entry is None or not isinstance(d, entry[0]):
            raise ScheduleError(f"not a schedule directive: {d!r}")
        _, check, apply = entry
        check(self.tree, self.poly, d)
        result = apply(self.tree, self.poly, d)
        if isinstance(result, tuple):  # a staging verb: a new kernel
            kernel, tree = result
            model = _Model(kernel, self._model, tree)
        else:
            model, tree = self._model, result
        before = set(self.loops)
        new = Schedule(model, tree, self.directives + (d,), unverified=self._unverified + 1)
        new._created = tuple(n for n in new.loops if n not in before)
        return new

    @property
    def verified(self) -> bool:
        """Whether the schedule is proved legal: made by checked verbs only, or by
        :meth:`apply_unverified` and then :meth:`verify`."""
        return self._unverified == 0

    def verify(self, what: str = "") -> Schedule:
        """This schedule, proved legal (see the module docstring): refused with
        :class:`ScheduleError` naming ``what`` (by default: the directives applied unverified)
        and a violated dependence. Proved once: the schedule is then :attr:`verified`."""
        if self._unverified:
            verb = what or "; ".join(self._pending())
            check_order(verb, self.poly, self.dependences, self.isl_schedule)
            self._check_marks(verb)
            self._unverified = 0  # (a fact about this immutable schedule, found once)
        return self

    def replay(self, trace: Trace) -> Schedule:
        """Apply the directives of ``trace`` to this schedule (each checked), e.g. to the
        kernel's own loops: ``Schedule.from_kernel(kernel).replay(trace)``; refused with
        :class:`ScheduleError` if the trace was recorded on a kernel of another signature."""
        if self.signature != trace.signature:
            raise ScheduleError(
                f"trace of kernel {trace.kernel} (signature {trace.signature}) "
                f"does not fit kernel {self.kernel.name} (signature "
                f"{self.signature})"
            )
        s = self
        for d in trace.directives:
            s = s.apply(d)
        return s

    def _pending(self) -> list[str]:
        return [str(d) for d in self.directives[len(self.directives) - self._unverified :]]

    def _check_marks(self, verb: str) -> None:
        """Refuse a ``parallel`` or ``vector`` loop that carries a dependence, and a vector
        loop holding loops."""
        paths = band_paths(self.tree)
        for _, node in walk(self.tree):
            if not isinstance(node, Band) or node.mark not in ("parallel", "vector"):
                continue  # an unroll mark runs the iterations in order
            for name in self._may_carry(paths, node.named or (node.name,)):
                band = get(self.tree, paths[name])
                assert isinstance(band, Band)
                check_not_carried(
                    verb,
                    name,
                    self.poly,
                    self.dependences,
                    prefix_map(self.tree, paths[name], self.poly, inclusive=False),
                    band_map(band, self.poly),
                )
            if node.mark == "vector" and any(isinstance(n, Band) for _, n in walk(node.child)):
                raise ScheduleError(f"{verb}: the vector loop {node.name} would hold loops")

    def _may_carry(self, paths: Mapping[str, Path], names: tuple[str, ...]) -> list[str]:
        """Of the loops ``names`` of one mark, those that :func:`check_not_carried` must
        check: found with one distance computation when they are nested over the same
        statements (one nest), else all of them."""
        deepest = max(names, key=lambda n: len(paths[n]))
        under = stmts(get(self.tree, paths[deepest]))
        if any(
            paths[deepest][: len(paths[n])] != paths[n] or stmts(get(self.tree, paths[n])) != under
            for n in names
        ):
            return list(names)
        depth = {n: bands_above(self.tree, paths[n]) for n in names}
        columns = [b.sched for b in bands_on_path(self.tree, paths[deepest])]
        may = loops_that_may_carry(
            self.dependences, instances(self.poly, under), columns, [depth[n] for n in names]
        )
        return [n for n in names if depth[n] in may]

    # ------------------------------------------------------------------ verbs

    def split(self, loop: str, factor: int, floor: bool = False) -> Schedule:
        """Split ``loop`` into ``{loop}_o`` and ``{loop}_i`` (inner trip count ``factor``);
        with ``floor``, ``{loop}_o`` is the tile's first value and ``{loop}_i`` is ``loop``
        (see :class:`~polyonnx.schedule.verbs.Split`)."""
        return self.apply(Split(loop, factor, floor))

    def tile(self, loops: Sequence[str], *levels: Sequence[int]) -> Schedule:
        """Tile adjacent nested ``loops``; one size per loop per level, outermost level first:
        ``tile(("i", "j"), (32, 32))`` or two levels ``tile(("i", "j"), (64, 64), (8, 8))``."""
        return self.apply(Tile(tuple(loops), tuple(tuple(lv) for lv in levels)))

    def reorder(self, *loops: str) -> Schedule:
        """Put the named loops of one perfect nest in this order (outermost first)."""
        return self.apply(Reorder(tuple(loops)))

    def interchange(self, a: str, b: str) -> Schedule:
        """Swap two loops of one perfect nest."""
        paths = band_paths(self.tree)
        outer_first = len(paths.get(a, ())) <= len(paths.get(b, ()))
        return self.reorder(b, a) if outer_first else self.reorder(a, b)

    def fuse(self, first: str, second: str, depth: int = 1) -> Schedule:
        """Fuse the adjacent sibling loop ``second`` into ``first`` (``depth`` levels)."""
        return self.apply(Fuse(first, second, depth))

    def distribute(self, loop: str) -> Schedule:
        """Split ``loop`` (and the loops perfectly nested in it) over its body's parts."""
        return self.apply(Distribute(loop))

    def compute_at(self, block: str, loop: str) -> Schedule:
        """Compute the producer ``block`` (loop or statement) inside consumer loop ``loop``."""
        return self.apply(ComputeAt(block, loop))

    def reverse_compute_at(self, block: str, loop: str) -> Schedule:
        """Compute the consumer ``block`` inside producer loop ``loop``."""
        return self.apply(ReverseComputeAt(block, loop))

    def vectorize(self, loop: str, width: int | None = None, mark: bool = False) -> Schedule:
        """Run innermost ``loop`` in vector lanes (width: the target's, for the statements'
        element type); with ``mark``, only mark it ``vector`` and leave the strip-mining to
        codegen."""
        if mark:
            return self.apply(Vectorize(loop, 0, True))
        return self.apply(Vectorize(loop, width or self.vector_width(loop)))

    def parallel(self, loop: str, named: Sequence[str] = ()) -> Schedule:
        """Run the iterations of ``loop`` on several threads; with ``named``, mark ``loop``
        ``parallel`` naming the loops (``loop`` or perfectly nested in it) that may run in
        parallel: codegen runs the first of them that isl generates."""
        return self.apply(Parallel(loop, tuple(named)))

    def unroll(self, loop: str, factor: int = 0, mark: bool = False) -> Schedule:
        """Unroll ``loop`` fully (``factor`` 0) or by ``factor``; with ``mark``, codegen
        unrolls it (where its trip count is constant) instead of isl."""
        return self.apply(Unroll(loop, factor, mark))

    def skew(self, outer: str, inner: str, factor: int = 1) -> Schedule:
        """``inner += factor * outer``."""
        return self.apply(Skew(outer, inner, factor))

    def reverse(self, loop: str) -> Schedule:
        """Run ``loop`` backwards."""
        return self.apply(Reverse(loop))

    def isolate(self, loop: str, through: str = "", tiles: Sequence[str] = ()) -> Schedule:
        """Generate the full tiles of the loop inside ``loop`` separately; with ``through``
        and ``tiles``, the full tiles of the floor-split ``tiles`` of the one isl band
        ``loop`` .. ``through``."""
        return self.apply(Isolate(loop, through, tuple(tiles)))

    def cache_read(self, buffer: str, loop: str) -> Schedule:
        """Copy the part of ``buffer`` read under ``loop`` into a new temp buffer at the start of
        each iteration of ``loop``; the reads under ``loop`` read the copy."""
        return self.apply(CacheRead(buffer, loop))

    def cache_write(self, buffer: str, loop: str) -> Schedule:
        """The statements under ``loop`` write ``buffer``'s tile into a new temp buffer, copied
        back after each iteration of ``loop``."""
        return self.apply(CacheWrite(buffer, loop))

    def pack(
        self, buffer: str, loop: str, order: Sequence[int] = (), factors: Sequence[int] = ()
    ) -> Schedule:
        """``cache_read`` into a temp laid out by ``factors`` (split tile dimension ``d`` by
        ``factors[d]`` when > 1) and ``order`` (a permutation of the resulting dimensions):
        ``pack("B", "k_o", (1, 0, 2), (0, 8))`` is the BLIS B panel ``[j/8, k, j%8]``."""
        return self.apply(Pack(buffer, loop, tuple(order), tuple(factors)))

    def vector_width(self, loop: str) -> int:
        """Lanes of one vector register for the widest element the loop's statements write."""
        path = band_paths(self.tree).get(loop)
        if path is None:
            raise ScheduleError(
                f"vectorize: no loop named {loop!r}; loops are {', '.join(self.loops)}"
            )
        widest = max(
            np.dtype(self.kernel.buffer(self.poly.stmts[s].stmt.write.buffer).dtype).itemsize
            for s in stmts(get(self.tree, path))
        )
        return max(VECTOR_BYTES // widest, 1)
