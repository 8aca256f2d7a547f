"""Nests under a recurrence: the step of a recurrent layer, scheduled inside its step loop.

A **recurrent nest** is a chain of loops (a recurrent layer's directions ``d`` and steps
``s``) over a sequence of loop nests in which an earlier nest reads what a later one writes:
the state an LSTM step's update writes is what the next step's recurrent product reads, so
the step loop is sequential and each step's nests run one after the other. The strategies
for top-level nests leave such a chain its own loops; this plan schedules each nest of the
step:

* a reduction nest (the recurrent product ``G[.., v] = sum_h state[h] * R^T[h, .., v]``, a
  GEMV for a batch of one) becomes register tiles of ``rows x blocks x lanes``: ``rows``
  iterations of a loop the vector-moving loads do not depend on (the batch rows share every
  weight vector), ``blocks`` side-by-side blocks of ``lanes`` of the vector loop (independent
  accumulators, so the FMA chains overlap; a GEMV has nothing else to overlap), the whole
  reduction inside the tile; where the vector loop is too short for a tile, its loads and
  stores are vectorised around the reduction;
* an element-wise nest (the gate non-linearities and the state update) gets its innermost
  loop vectorised;
* the loops of the chain that carry no dependence (the directions) are left to the parallel
  plan as the nest's outer band; with one direction, each product's loops around its tiles
  are, and the product runs on the threads inside each step.

:func:`plan_recurrent` makes the plan (a :class:`RecurrentPlan`), :func:`apply_recurrent`
applies it with the schedule verbs.

Example (a bidirectional LSTM, batch 1, hidden 256, AVX-512: the whole row of a gate's weights
in one tile of 16 accumulators; ``d_4`` becomes the parallel loop):
    >>> from polyonnx import pipeline
    >>> from polyonnx.schedule.strategies import plan_kernel
    >>> from polyonnx.testing.examples import lstm_model
    >>> (kernel,) = pipeline.lower(pipeline.to_graph(lstm_model(hidden=256))).kernels
    >>> s = Schedule.from_kernel(kernel)
    >>> plan = plan_kernel(s, Tiling.for_vector_bits(512))
    >>> print(plan.nests[4])
    recurrent (d_4, s_2):
      product (b_4, q_2, v_2) over (h_2): tile 1 row x 8 blocks x 32 lanes
      vectorize v_3 of (b_5, v_3)
    >>> s, bands = apply_recurrent(s, plan.nests[4])
    >>> bands
    [('d_4', 's_2')]
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from polyonnx.krnl.ir import Aff, Kernel, Loop, Stmt, loads
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.strategies.nests import band_chain, chain, extent
from polyonnx.schedule.strategies.pointwise import VectorPlan, apply_pointwise
from polyonnx.schedule.strategies.reduction import ReductionNest
from polyonnx.schedule.strategies.tiling import Tiling
from polyonnx.schedule.tree import Band, Node, band_paths, get, single_valued
from polyonnx.schedule.tree import Sequence as TreeSequence
from polyonnx.schedule.verbs import Distribute, Reorder, Split, Unroll, Vectorize


@dataclass(frozen=True, slots=True)
class ProductPlan:
    """A reduction nest under the recurrence as register tiles of ``rows x blocks x lanes``,
    or (``lanes`` 0) with its vector loop's loads and stores vectorised around the reduction.
    Loops are schedule names."""

    outer: tuple[str, ...]
    """The nest's outer loops (the last one carries the vector lanes)."""
    reduction: tuple[str, ...]
    row: int | None
    """The outer loop (by position) whose ``rows`` iterations share each vector load; None:
    one row."""
    rows: int
    blocks: int
    """Blocks of ``lanes`` of the vector loop side by side in the tile."""
    lanes: int

    def __str__(self) -> str:
        text = f"product ({', '.join(self.outer)}) over ({', '.join(self.reduction)})"
        if not self.lanes:
            return text + f": {self.outer[-1]} vectorized around the reduction"
        row = f"{self.outer[self.row]} {self.rows} rows" if self.row is not None else "1 row"
        return text + f": tile {row} x {self.blocks} blocks x {self.lanes} lanes"


@dataclass(frozen=True, slots=True)
class RecurrentPlan:
    """The plans of the nests of a recurrent nest's step (None: a nest keeps its loops)."""

    loops: tuple[str, ...]
    """The chain of loops around the step (schedule names), outermost first."""
    nests: tuple[ProductPlan | VectorPlan | None, ...]

    def __str__(self) -> str:
        lines = [f"recurrent ({', '.join(self.loops)}):"]
        lines += [f"  {n if n is not None else 'own loops'}" for n in self.nests]
        return "\n".join(lines)


def plan_recurrent(nest: Loop, tree: Node, s: Schedule, tiling: Tiling) -> RecurrentPlan | None:
    """The plan of the top-level ``nest`` (``tree``: its schedule subtree, the kernel's own
    loops) when it is a recurrent nest, else None."""
    loops, body = chain(nest)
    if len(body) < 2 or not all(isinstance(n, Loop) for n in body) or not _feeds_back(body):
        return None
    names = []
    for _ in loops:
        if not isinstance(tree, Band):
            return None
        names.append(tree.name)
        tree = tree.child
    if not isinstance(tree, TreeSequence) or len(tree.children) != len(body):
        return None
    plans = [
        _plan_nest(inner, band_chain(sub), s.kernel, tiling)
        for inner, sub in zip(body, tree.children, strict=True)
    ]
    return RecurrentPlan(tuple(names), tuple(plans))


def _feeds_back(nests: tuple) -> bool:
    """Whether some nest reads a buffer that a later nest writes (through the next iteration
    of the loop around them)."""
    written = [{st.write.buffer for st in _statements(n)} for n in nests]
    for k, n in enumerate(nests):
        read = {ld.buffer for st in _statements(n) for ld in loads(st.body)}
        if any(read & later for later in written[k + 1 :]):
            return True
    return False


def _statements(node: object) -> list[Stmt]:
    if isinstance(node, Stmt):
        return [node]
    assert isinstance(node, Loop)
    return [st for child in node.body for st in _statements(child)]


def _plan_nest(
    nest: Loop, names: list[str], kernel: Kernel, tiling: Tiling
) -> ProductPlan | VectorPlan | None:
    product = _product(nest)
    if product is not None:
        n_outer = len(product.outer)
        return _plan_product(product, names[:n_outer], names[n_outer:], kernel, tiling)
    loops, body = chain(nest)
    if not all(isinstance(st, Stmt) and _along(st, loops[-1].iterator) for st in body):
        return None
    return VectorPlan(tuple(names[: len(loops)]))


def _along(stmt: Stmt, loop: str) -> bool:
    """Whether ``stmt`` writes consecutive elements along ``loop``."""
    last = stmt.write.index[-1] if stmt.write.index else None
    return isinstance(last, Aff) and last.coeff(loop) == 1 and not stmt.guards


def _product(nest: Loop) -> ReductionNest | None:
    """``nest`` as a reduction nest whose write runs along its last outer loop, else None."""
    outer, body = chain(nest)
    if len(body) != 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
        return None
    inner, leaf = chain(body[1])
    if len(leaf) != 1 or not isinstance(leaf[0], Stmt):
        return None
    init, update = body[0], leaf[0]
    if init.guards or update.guards or update.write != init.write:
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in (*outer, *inner)):
        return None
    if not _along(init, outer[-1].iterator):
        return None
    return ReductionNest(tuple(outer), init, tuple(inner), update)


def _plan_product(
    nest: ReductionNest,
    outer: list[str],
    reduction: list[str],
    kernel: Kernel,
    tiling: Tiling,
) -> ProductPlan:
    """The register tile of a recurrent product: rows of the loop the vector-moving loads do
    not depend on first (they share every load), then blocks of the vector loop, within the
    reduction tile's accumulator budget (``tiling.unroll`` rows of two vectors)."""
    its = [lp.iterator for lp in nest.outer]
    vec = its[-1]
    itemsize = np.dtype(kernel.buffer(nest.init.write.buffer).dtype).itemsize
    width = max(tiling.vector // 2 * 4 // itemsize, 1)  # (a tile is two float32 vectors wide)
    budget = 2 * tiling.unroll
    length = extent(nest.outer, vec)
    lanes = next((n * width for n in (2, 1) if length % (n * width) == 0), 0)
    if not lanes:
        return ProductPlan(tuple(outer), tuple(reduction), None, 1, 1, 0)
    vectors = lanes // width
    moving = [
        ld
        for ld in loads(nest.update.body)
        if ld.buffer != nest.update.write.buffer
        and ld.index
        and isinstance(ld.index[-1], Aff)
        and ld.index[-1].coeff(vec)
    ]
    shared = [
        n
        for n in its[:-1]
        if extent(nest.outer, n) >= 2
        and not any(isinstance(i, Aff) and i.coeff(n) for ld in moving for i in ld.index)
    ]
    row = its.index(shared[-1]) if shared else None
    rows = _divisor(extent(nest.outer, its[row]), budget // vectors) if row is not None else 1
    blocks = _divisor(length // lanes, budget // (vectors * rows))
    if rows == 1 and blocks == 1 and vectors == 2 and length // width >= 2:
        lanes, blocks = width, 2  # (an unrolled loop is what makes it a register tile)
    if rows == 1 and blocks == 1:
        return ProductPlan(tuple(outer), tuple(reduction), None, 1, 1, 0)
    return ProductPlan(
        tuple(outer), tuple(reduction), row if rows > 1 else None, rows, blocks, lanes
    )


def _divisor(n: int, most: int) -> int:
    """The largest divisor of ``n`` up to ``most`` (at least 1)."""
    return next(k for k in range(max(min(n, most), 1), 0, -1) if n % k == 0)


def apply_recurrent(s: Schedule, plan: RecurrentPlan) -> tuple[Schedule, list[tuple[str, ...]]]:
    """``plan`` applied to ``s`` (unverified), and the outer bands it leaves (the candidates
    for ``parallel``: the parallel plan finds the loops that carry no dependence): the chain,
    when a loop of it besides the steps has more than one iteration (a bidirectional layer's
    directions); else the loops of each product left around its tiles, which then run in
    parallel within each step (one direction's recurrent GEMV, of megabytes of weights, on
    every core: the step is bound by the weights' stream, which each core adds bandwidth to)."""
    for nest in plan.nests:
        if isinstance(nest, ProductPlan):
            s = _apply_product(s, nest)
        elif isinstance(nest, VectorPlan):
            s, _ = apply_pointwise(s, nest)
    paths = band_paths(s.tree)
    others = [get(s.tree, paths[n]) for n in plan.loops[:-1]]
    if not all(isinstance(b, Band) and single_valued(b, s.poly) for b in others):
        return s, [plan.loops]
    # (a product without tiles has its vector loop distributed over the init and the
    # updates: the loops outside it are the band)
    outer = [n.outer if n.lanes else n.outer[:-1] for n in plan.nests if isinstance(n, ProductPlan)]
    return s, [band for band in (_kept(loops, paths) for loops in outer) if band]


def _kept(loops: tuple[str, ...], paths: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """The first of ``loops`` that are still loops of the schedule (a split renames its loop:
    the tiles' loops are inside the ones kept)."""
    return tuple(itertools.takewhile(paths.__contains__, loops))


def _apply_product(s: Schedule, plan: ProductPlan) -> Schedule:
    outer, reduction = list(plan.outer), list(plan.reduction)
    if not plan.lanes:
        # The init and the updates each a vector loop; the reduction outside the updates'.
        s = s.apply_unverified(Distribute(outer[-1]))
        (update,) = s.created
        s = s.apply_unverified(Reorder((*reduction, update)))
        s = s.apply_unverified(Vectorize(outer[-1], 0, mark=True))
        return s.apply_unverified(Vectorize(update, 0, mark=True))
    tiles, points, current = list(outer), [], list(outer)
    if plan.row is not None:
        s, tiles[plan.row], row_point = _split(s, current, outer[plan.row], plan.rows)
        points.append(row_point)
    s, tiles[-1], lanes = _split(s, current, outer[-1], plan.blocks * plan.lanes)
    if plan.blocks > 1:
        s, block, lanes = _split(s, current, lanes, plan.lanes)
        points.append(block)
    points.append(lanes)
    if [*tiles, *points] != current:
        s = s.apply_unverified(Reorder((*tiles, *points)))
    # The points over the init, and a copy of them inside the reduction loops.
    s = s.apply_unverified(Distribute(points[0]))
    copies = list(s.created)
    s = s.apply_unverified(Reorder((*reduction, *copies)))
    for group in (points, copies):
        for p in group[:-1]:
            s = s.apply_unverified(Unroll(p, 0, mark=True))
        s = s.apply_unverified(Vectorize(group[-1], 0, mark=True))
    return s


def _split(s: Schedule, current: list[str], loop: str, size: int) -> tuple[Schedule, str, str]:
    """``s`` with ``loop`` split by ``size`` (the inner loop from 0: an unrolled or vector
    loop of ``size`` iterations), its outer and inner loops; they replace ``loop`` in the
    loop order ``current``."""
    s = s.apply_unverified(Split(loop, size))
    outer, inner = s.created
    at = current.index(loop)
    current[at : at + 1] = [outer, inner]
    return s, outer, inner
