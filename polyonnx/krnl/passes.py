"""The krnl passes: what runs on a fusion group's kernel after its nodes are lowered, in order.

A fusion group lowers to one loop nest per node, each writing a buffer of its own
(:func:`polyonnx.krnl.program.build_kernel`). The passes of :data:`PASSES` then rewrite that
kernel into the one the scheduler sees, each a ``Kernel -> Kernel`` function reading what it
needs of the program around the kernel from a :class:`KernelContext`. They run in this order,
each relying on the ones before:

1. ``distribute_finishes`` (:mod:`~polyonnx.krnl.distribute`): a reduction's finish
   (``y = acc / n``) moves out of its nest into a nest of its own, so that the reduction is a
   nest the scheduler register-tiles and the finish an epilogue like any other.
2. ``inline_pointwise`` (:mod:`~polyonnx.krnl.inline`): point-wise producers are substituted
   into their consumers, so a chain of epilogues (``Add -> Relu``) becomes one nest. Before
   the next pass: it matches a reduction's temp to the one epilogue reading it.
3. ``sink_pointwise`` (:mod:`~polyonnx.krnl.sink`): a point-wise reader of a temp that
   several statements write piece by piece (a Winograd convolution's output tiles) moves
   into those statements instead.
4. ``accumulate_in_place`` (:mod:`~polyonnx.krnl.in_place`): a reduction accumulates straight
   into the buffer its epilogue writes.
5. ``residual_in_place`` (:mod:`~polyonnx.krnl.residual`): a reduction whose epilogue adds a
   dying residual starts its sums at the residual, in the residual's memory. It looks for the
   reduction writing the epilogue's output, which the pass before made so.
6. ``store_placed`` (:mod:`~polyonnx.krnl.placement`): the inputs of a concatenation done in
   place move into their slices of its memory (after the epilogues are in place, as below).
7. ``store_bordered`` (:mod:`~polyonnx.krnl.borders`): zero-bordered values move into their
   bordered buffers. After the epilogues are in place: the passes before match a temp to the
   value it becomes by shape, and a bordered buffer is larger than its value.
8. ``fold_in_partials`` (:mod:`~polyonnx.krnl.partials`): a reduction along a contiguous
   innermost loop folds into a row of vector partials, whose loop carries nothing. After the
   passes that match reductions by their shape (the rows it makes are no longer one loop).
9. ``renumber_statements``: the statements are named ``S0``, ``S1``, ... in kernel order.
   Last: lowerings name their statements with placeholders, and the passes merge and drop
   statements.

``polyonnx compile --emit krnl --after PASS`` (:func:`polyonnx.pipeline.emit` with ``after``)
prints the kernels as they are after ``PASS``, or as lowered with ``--after lower``.

Example:
    >>> [p.name for p in PASSES]  # doctest: +NORMALIZE_WHITESPACE
    ['distribute_finishes', 'inline_pointwise', 'sink_pointwise', 'accumulate_in_place',
     'residual_in_place', 'store_placed', 'store_bordered', 'fold_in_partials',
     'renumber_statements']
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from polyonnx.krnl import ir
from polyonnx.krnl.borders import store_bordered
from polyonnx.krnl.distribute import distribute_finishes
from polyonnx.krnl.in_place import accumulate_in_place
from polyonnx.krnl.inline import inline_pointwise
from polyonnx.krnl.partials import fold_in_partials
from polyonnx.krnl.placement import Placement, store_placed
from polyonnx.krnl.residual import residual_in_place
from polyonnx.krnl.sink import sink_pointwise


@dataclass(frozen=True, slots=True)
class KernelContext:
    """What the program around a fusion group decides for its kernel (see
    :func:`polyonnx.krnl.program.build_program`)."""

    live_out: frozenset[str] = frozenset()
    """Values used after the kernel (by later kernels or as graph outputs): its outputs."""
    dying: frozenset[str] = frozenset()
    """Values no later kernel reads: an epilogue's residual among them may give its memory to
    the epilogue's output (``residual_in_place``)."""
    fixed: frozenset[str] = frozenset()
    """Values that keep their own memory (graph outputs, outputs with data-dependent
    extents); zero-bordered values keep theirs too."""
    borders: Mapping[str, ir.Border] = field(default_factory=dict)
    """Values stored zero-bordered, by value name (:func:`polyonnx.krnl.borders.zero_borders`)."""
    placements: Mapping[str, Placement] = field(default_factory=dict)
    """Values stored in a slice of a concatenation's memory, by value name
    (:func:`polyonnx.krnl.placement.concat_placements`)."""
    tile_bytes: int = 0
    """The target's register-tile width in bytes (two vectors): how many bytes of partial
    accumulators a reduction along a contiguous loop folds into (:mod:`polyonnx.krnl.partials`;
    0: none), and what lowerings ask of a vector loop (:attr:`LowerContext.tile_bytes`)."""


@dataclass(frozen=True, slots=True)
class PassResult:
    """A kernel after one pass (or several), and the outputs that now live in a value's memory
    (``{output: value}``, from ``residual_in_place``: the program records them in
    :attr:`~polyonnx.krnl.program.Program.storage`)."""

    kernel: ir.Kernel
    shared: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KernelPass:
    """A named krnl pass: ``run(kernel, context)`` is the rewritten kernel."""

    name: str
    run: Callable[[ir.Kernel, KernelContext], PassResult]


def renumber_statements(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with its statements named ``S0``, ``S1``, ... in kernel order."""
    counter = itertools.count()

    def renumber(nodes: tuple[ir.Node, ...]) -> tuple[ir.Node, ...]:
        return tuple(
            replace(n, name=f"S{next(counter)}")
            if isinstance(n, ir.Stmt)
            else replace(n, body=renumber(n.body))
            for n in nodes
        )

    return replace(kernel, body=renumber(kernel.body))


def _residual_in_place(kernel: ir.Kernel, context: KernelContext) -> PassResult:
    kernel, shared = residual_in_place(kernel, context.dying, {*context.fixed, *context.borders})
    return PassResult(kernel, shared)


PASSES: tuple[KernelPass, ...] = (
    KernelPass("distribute_finishes", lambda k, _: PassResult(distribute_finishes(k))),
    KernelPass("inline_pointwise", lambda k, _: PassResult(inline_pointwise(k))),
    KernelPass("sink_pointwise", lambda k, _: PassResult(sink_pointwise(k))),
    KernelPass("accumulate_in_place", lambda k, _: PassResult(accumulate_in_place(k))),
    KernelPass("residual_in_place", _residual_in_place),
    KernelPass("store_placed", lambda k, c: PassResult(store_placed(k, c.placements))),
    KernelPass("store_bordered", lambda k, c: PassResult(store_bordered(k, c.borders))),
    KernelPass("fold_in_partials", lambda k, c: PassResult(fold_in_partials(k, c.tile_bytes))),
    KernelPass("renumber_statements", lambda k, _: PassResult(renumber_statements(k))),
)
"""The krnl passes in the order they run (see the module docstring for why)."""

LOWERED = "lower"
"""The name ``after`` takes for the kernel as lowered, before any pass."""

AFTER: tuple[str, ...] = (LOWERED, *(p.name for p in PASSES))
"""Where :func:`run_passes` may stop: :data:`LOWERED` or a pass's name."""


def run_passes(kernel: ir.Kernel, context: KernelContext, after: str | None = None) -> PassResult:
    """``kernel`` through :data:`PASSES` in order, up to and including the pass named
    ``after`` (every pass when None; none for :data:`LOWERED`)."""
    if after is not None and after not in AFTER:
        raise ValueError(f"no krnl pass {after!r}; choose one of {', '.join(AFTER)}")
    shared: dict[str, str] = {}
    for kernel_pass in PASSES[: len(PASSES) if after is None else AFTER.index(after)]:
        result = kernel_pass.run(kernel, context)
        kernel = result.kernel
        shared.update(result.shared)
    return PassResult(kernel, shared)
