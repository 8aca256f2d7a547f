"""Default schedules: what the compiler does to a kernel when the user gives no schedule.

Each top-level loop nest of a kernel gets a strategy by its shape:

* a **reduction nest** (outer loops over an output, an init statement, inner reduction loops and
  an update statement — Conv, MatMul, Gemm, pooling) is register-tiled: the output is cut into
  ``unroll x vector`` tiles, the reduction loops run inside the tile, the ``unroll`` rows are
  unrolled by isl and the ``vector`` columns are emitted as vector code, so the tile's
  accumulators stay in registers for the whole reduction. Elementwise nests that read the
  reduction's output point for point (bias, ReLU, residual Add) are fused into the same tile.
* any other nest gets its innermost loop vectorized.

Every result is checked against the kernel's exact dependences; a strategy whose schedule does
not respect them is dropped for the kernel's own loop structure, which always does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import islpy as isl
import numpy as np

from polyonnx.krnl.ir import Aff, Kernel, Loop, Stmt, loads
from polyonnx.schedule.poly import PolyKernel, StmtInfo, initial_schedule

VECTOR_MARK = "vector"
UNROLL_MARK = "unroll"


@dataclass(frozen=True)
class ScheduledKernel:
    """A kernel with its polyhedral model and the schedule tree codegen will follow."""

    kernel: Kernel
    poly: PolyKernel
    schedule: isl.Schedule


@dataclass(frozen=True)
class Tiling:
    """Register-tile sizes of the reduction strategy."""

    unroll: int = 4
    vector: int = 16
    depth: int = 256
    """Reduction iterations per cache block (see :func:`_reduction_split`)."""

    @staticmethod
    def for_vector_bits(bits: int) -> Tiling:
        """Two float32 vectors wide; as many rows as the register file holds accumulators for
        (16 vector registers with AVX2, 32 with AVX-512)."""
        return Tiling(unroll=8 if bits >= 512 else 6, vector=2 * bits // 32)

    def rows(self, extent: int) -> int:
        """Unrolled rows for a loop of ``extent``: the largest divisor of it between half the
        budget and the budget, so the tiles have no ragged edge, else the budget."""
        for u in range(self.unroll, max(self.unroll // 2, 1) - 1, -1):
            if extent % u == 0:
                return u
        return self.unroll


def default_schedule(kernel: Kernel, tiling: Tiling | None = None,
                     parallel: bool = True) -> ScheduledKernel:
    """The kernel's schedule: the strategies above when legal, else its own loop structure.

    With ``parallel``, the outermost loop of each nest with enough work is marked ``parallel``
    when it carries no dependence.
    """
    poly = PolyKernel.build(kernel)
    tiling = tiling or Tiling()
    deps = poly.dependences().all
    try:
        parts = _strategy(poly, tiling)
    except _NotApplicable:
        parts = None
    if parts is None:
        parts = [_initial_nest(poly, n) if isinstance(n, Loop) else _leaf(poly, [n.name])
                 for n in kernel.body]
    if parallel:
        parts = [_parallel_outer(poly, p, deps) for p in parts]
    sched = _sequence(parts)
    if respects(poly, sched, deps):
        return ScheduledKernel(kernel, poly, sched)
    return ScheduledKernel(kernel, poly, initial_schedule(poly))


def plain_schedule(kernel: Kernel) -> ScheduledKernel:
    """The kernel's own loop structure, untransformed."""
    poly = PolyKernel.build(kernel)
    return ScheduledKernel(kernel, poly, initial_schedule(poly))


def respects(poly: PolyKernel, schedule: isl.Schedule,
             deps: isl.UnionMap | None = None) -> bool:
    """Whether ``schedule`` executes every dependence source before its sink."""
    order = schedule.get_map()
    deps = poly.dependences().all if deps is None else deps
    return deps.is_subset(order.lex_lt_union_map(order))


PARALLEL_MARK = "parallel"
MIN_PARALLEL_INSTANCES = 32768
"""Statement instances below which a nest stays on one thread (waking a team costs µs)."""


def _parallel_outer(poly: PolyKernel, part: isl.Schedule, deps: isl.UnionMap) -> isl.Schedule:
    """Mark the top band of ``part`` ``parallel c<d> ...``, naming the AST loops (by schedule
    depth) that may run in parallel, when the nest has enough work.

    The loop of band member ``m`` is parallel when every dependence that has distance 0 on
    the members before it has distance 0 on ``m`` too: under the mark, a loop that codegen
    meets first has all the members before it fixed (isl made no loop for them), so the
    dependences among its iterations are exactly those.
    """
    node = part.get_root().child(0)
    if node.get_type() != isl.schedule_node_type.band:
        return part
    domain = node.get_domain()
    if _instances(poly, domain) < MIN_PARALLEL_INSTANCES:
        return part
    inner = deps.intersect_domain(domain).intersect_range(domain)
    n = node.band_n_member()
    band = node.band_get_partial_schedule_union_map()
    distances = inner.apply_domain(band).apply_range(band).deltas()
    dims = [f"x{k}" for k in range(n)]
    safe = []
    for m in range(n):
        prefix = " and ".join(f"{d} = 0" for d in dims[:m]) or "true"
        carried = isl.UnionSet(f"{{ [{', '.join(dims)}] : {prefix} and {dims[m]} != 0 }}")
        if distances.intersect(carried).is_empty():
            safe.append(f"c{node.get_schedule_depth() + m}")
    if not safe:
        return part
    return node.insert_mark(isl.Id(" ".join([PARALLEL_MARK, *safe]))).get_schedule()


def _instances(poly: PolyKernel, domain: isl.UnionSet) -> int:
    """Statement instances of ``domain``, counted from the krnl loops (guards ignored)."""
    total = 0
    names = set()
    domain.foreach_set(lambda s: names.add(s.get_tuple_name()))
    for name in names:
        count = 1
        for lp in poly.stmts[name].loops:
            count *= max(lp.upper.const - lp.lower.const, 1)
        total += count
    return total


class _NotApplicable(Exception):
    pass


# ------------------------------------------------------------------------ schedule-tree pieces


def _space(info: StmtInfo) -> str:
    return f"{info.stmt.name}[{', '.join(info.iterators)}]"


def _band(stmts: dict[str, Sequence[str]], poly: PolyKernel) -> isl.MultiUnionPwAff:
    """A band: for each statement, its list of schedule expressions (same length for all)."""
    dims = {len(v) for v in stmts.values()}
    if len(dims) != 1:
        raise _NotApplicable
    n = dims.pop()
    pieces = []
    for d in range(n):
        parts = "; ".join(f"{_space(poly.stmts[s])} -> [({exprs[d]})]" for s, exprs in
                          stmts.items())
        pieces.append(f"{{ {parts} }}")
    return isl.MultiUnionPwAff(f"[{', '.join(pieces)}]")


def _leaf(poly: PolyKernel, names: Sequence[str]) -> isl.Schedule:
    spaces = "; ".join(_space(poly.stmts[s]) for s in names)
    return isl.Schedule.from_domain(poly.domain.intersect(isl.UnionSet(f"{{ {spaces} }}")))


def _with_band(sched: isl.Schedule, band: isl.MultiUnionPwAff, *, mark: str | None = None,
               unroll: bool = False, isolate: str | None = None) -> isl.Schedule:
    sched = sched.insert_partial_schedule(band)
    node = sched.get_root().child(0)
    if unroll:
        # Codegen unrolls loops under this mark (isl's own unrolling makes AST generation slow).
        node = node.insert_mark(isl.Id(UNROLL_MARK)).child(0)
    if isolate:
        node = node.band_set_ast_build_options(isl.UnionSet(isolate))
    if mark:
        node = node.insert_mark(isl.Id(mark))
    return node.get_schedule()


def _sequence(parts: Sequence[isl.Schedule]) -> isl.Schedule:
    out = parts[0]
    for p in parts[1:]:
        out = out.sequence(p)
    return out


# ------------------------------------------------------------------------ strategies


def _chain(node: Loop) -> tuple[list[Loop], tuple]:
    """The perfectly nested loops from ``node`` down, and the body below them."""
    loops = [node]
    while len(loops[-1].body) == 1 and isinstance(loops[-1].body[0], Loop):
        loops.append(loops[-1].body[0])
    return loops, loops[-1].body


def _strategy(poly: PolyKernel, tiling: Tiling) -> list[isl.Schedule] | None:
    nests = list(poly.kernel.body)
    parts: list[isl.Schedule] = []
    i = 0
    changed = False
    while i < len(nests):
        nest = nests[i]
        if not isinstance(nest, Loop):
            parts.append(_leaf(poly, [nest.name]))
            i += 1
            continue
        reduction = _reduction_nest(nest)
        if reduction is not None:
            # Fuse following elementwise nests that read this nest's output point for point.
            epilogue = []
            while i + 1 + len(epilogue) < len(nests):
                e = _pointwise_consumer(nests[i + 1 + len(epilogue)], reduction)
                if e is None:
                    break
                epilogue.append(e)
            try:
                parts.extend(_tile_reduction(poly, reduction, epilogue, tiling))
            except _NotApplicable:
                parts.append(_initial_nest(poly, nest))
                i += 1
                continue
            i += 1 + len(epilogue)
            changed = True
            continue
        vec = _vector_nest(poly, nest)
        changed = changed or vec is not None
        parts.append(vec if vec is not None else _initial_nest(poly, nest))
        i += 1
    return parts if changed else None


def _initial_nest(poly: PolyKernel, nest: Loop) -> isl.Schedule:
    sub = PolyKernel(Kernel(poly.kernel.name, poly.kernel.buffers, (nest,)), poly.stmts,
                     poly.buffer_ids, poly.domain, poly.writes, poly.reads)
    stmts = [s.name for _, s in sub.kernel.statements()]
    spaces = "; ".join(_space(poly.stmts[s]) for s in stmts)
    sched = initial_schedule(sub)
    return sched.intersect_domain(isl.UnionSet(f"{{ {spaces} }}"))


@dataclass(frozen=True)
class _Reduction:
    outer: list[Loop]
    init: Stmt
    inner: list[Loop]
    update: Stmt


def _reduction_nest(nest: Loop) -> _Reduction | None:
    outer, body = _chain(nest)
    if len(body) != 2 or not isinstance(body[0], Stmt) or not isinstance(body[1], Loop):
        return None
    inner, leaf = _chain(body[1])
    if len(leaf) != 1 or not isinstance(leaf[0], Stmt):
        return None
    init, update = body[0], leaf[0]
    names = [lp.iterator for lp in outer]
    if init.guards or update.write != init.write or len(outer) < 2:
        return None
    if tuple(init.write.index) != tuple(Aff.var(n) for n in names[-len(init.write.index):]):
        return None
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in outer):
        return None
    return _Reduction(outer, init, inner, update)


def _pointwise_consumer(nest: object, red: _Reduction) -> Stmt | None:
    """A nest ``for i...: S: y[i...] = f(out[i...], ...)`` over exactly the reduction's output."""
    if not isinstance(nest, Loop):
        return None
    loops, body = _chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt) or len(loops) != len(red.outer):
        return None
    stmt = body[0]
    if stmt.guards or any((a.lower, a.upper) != (b.lower, b.upper)
                          for a, b in zip(loops, red.outer, strict=True)):
        return None
    point = tuple(Aff.var(lp.iterator) for lp in loops)
    if stmt.write.index != point:
        return None
    reads_out = [ld for ld in loads(stmt.body) if ld.buffer == red.init.write.buffer]
    if not reads_out or any(ld.index != point for ld in reads_out):
        return None
    return stmt


def _tile_reduction(poly: PolyKernel, red: _Reduction, epilogue: list[Stmt],
                    tiling: Tiling) -> list[isl.Schedule]:
    names = [lp.iterator for lp in red.outer]
    vec = names[-1]
    if _extent(red.outer, vec) < 8:
        raise _NotApplicable
    # Unroll the outer loop that the vector-moving loads do not depend on: the rows of the
    # register tile then share each vector load (conv: output pixels share a weight vector).
    moving = [ld for ld in loads(red.update.body) if ld.buffer != red.update.write.buffer
              and ld.index and isinstance(ld.index[-1], Aff) and ld.index[-1].coeff(vec)]

    def used_by_moving(n: str) -> bool:
        return any(not isinstance(i, Aff) or i.coeff(n) for ld in moving for i in ld.index)

    candidates = [n for n in names[:-1] if not used_by_moving(n) and _extent(red.outer, n) >= 2]
    row = candidates[-1] if candidates else None
    u = tiling.rows(_extent(red.outer, row)) if row else 1
    v = tiling.vector
    update_its = list(poly.stmts[red.update.name].iterators)
    inner_names = update_its[len(names):]
    # Loop order of the tiles: sweeping the other loops inside a vector tile re-reads the
    # other operands once per vector tile; the kernel's own order re-reads the moving operand
    # (conv weights) once per outer iteration. Take the smaller traffic (measured on ResNet50's
    # convolutions: 512->2048 at 7x7 goes from 37 to 54 GF/s, 256->128 at 56x56 stays).
    order = list(range(len(names)))
    sizes = {b.name: b.nbytes for b in poly.kernel.buffers}
    moving_bytes = sum(sizes[b] for b in {ld.buffer for ld in moving})
    other_bytes = sum(sizes[b] for b in {ld.buffer for ld in loads(red.update.body)}
                      if b != red.update.write.buffer and b not in {ld.buffer for ld in moving})
    # The moving operand is swept once per row tile of every outer iteration.
    sweeps = int(np.prod([_extent(red.outer, n) for n in names if n not in (vec, row)]))
    sweeps *= -(-_extent(red.outer, row) // u) if row else 1
    if other_bytes * -(-_extent(red.outer, vec) // v) < moving_bytes * sweeps:
        order = [len(names) - 1, *range(len(names) - 1)]

    def its_of(stmt: Stmt) -> list[str]:
        return list(poly.stmts[stmt.name].iterators)

    def outer_exprs(its: Sequence[str]) -> list[str]:
        exprs = []
        for k in order:
            n, it = names[k], its[k]
            size = u if n == row else v if n == vec else 1
            exprs.append(f"{size}*floor(({it})/{size})" if size > 1 else it)
        return exprs

    tile = {red.init.name: outer_exprs(its_of(red.init)),
            red.update.name: outer_exprs(update_its)}
    for e in epilogue:
        tile[e.name] = outer_exprs(its_of(e))

    def register_tile(stmt: Stmt, inner: list[str] | None = None) -> isl.Schedule:
        its = its_of(stmt)
        sched = _with_band(_leaf(poly, [stmt.name]), _band({stmt.name: [its[names.index(vec)]]},
                                                           poly), mark=VECTOR_MARK)
        if row:
            sched = _with_band(sched, _band({stmt.name: [its[names.index(row)]]}, poly),
                               unroll=True)
        if inner:
            sched = _with_band(sched, _band({stmt.name: inner}, poly))
        return sched

    parts = [register_tile(red.init), register_tile(red.update, inner_names),
             *(register_tile(e) for e in epilogue)]
    # Isolate the full tiles, so their inner loops have constant trip counts (the partial tiles
    # at the edges get their own, general code).
    dims = [f"d{k}" for k in range(len(names))]
    full = [f"{dims[order.index(names.index(vec))]} <= {_extent(red.outer, vec) - v}"]
    ragged = _extent(red.outer, vec) % v
    if row:
        full.append(f"{dims[order.index(names.index(row))]} <= {_extent(red.outer, row) - u}")
        ragged = ragged or _extent(red.outer, row) % u
    isolate = (f"{{ isolate[[] -> [{', '.join(dims)}]] : {' and '.join(full)} }}"
               if ragged else None)
    depth = _reduction_split(red, tiling)
    if depth is None or epilogue:
        return [_with_band(_sequence(parts), _band(tile, poly), isolate=isolate)]
    # A long reduction is cut into chunks of ``depth`` (cache blocking): the operands of one
    # chunk stay in cache while every output tile of a row takes its share. The chunk loop sits
    # after the first loop that really iterates, which stays free to run in parallel.
    at = next((pos + 1 for pos, k in enumerate(order) if _extent(red.outer, names[k]) > 1), 1)
    first = inner_names[0]
    chunked = [*tile[red.update.name][:at], f"{depth}*floor(({first})/{depth})",
               *tile[red.update.name][at:]]
    shifted = [f"d{k}" for k in range(len(names) + 1)]
    full_upd = [c.replace(f"d{k} ", f"e{k + (k >= at)} ") for c in full for k in
                range(len(names)) if c.startswith(f"d{k} ")]
    isolate_upd = (f"{{ isolate[[] -> [{', '.join(shifted)}]] : "
                   f"{' and '.join(full_upd).replace('e', 'd')} }}" if ragged else None)
    init = _with_band(parts[0], _band({red.init.name: tile[red.init.name]}, poly),
                      isolate=isolate)
    update = _with_band(parts[1], _band({red.update.name: chunked}, poly), isolate=isolate_upd)
    return [init, update]


def _reduction_split(red: _Reduction, tiling: Tiling) -> int | None:
    """The chunk of the first reduction loop when the reduction is longer than the tiling's
    depth (preferring a divisor of that loop's extent), else None."""
    if any(not (lp.lower.is_const and lp.upper.is_const) for lp in red.inner):
        return None
    extents = [lp.upper.const - lp.lower.const for lp in red.inner]
    total = int(np.prod(extents))
    if total <= tiling.depth:
        return None
    per = total // extents[0]
    chunk = max(1, tiling.depth // per)
    if chunk >= extents[0]:
        return None
    divisors = [d for d in range(chunk, max(chunk // 2, 1) - 1, -1) if extents[0] % d == 0]
    return divisors[0] if divisors else chunk


def _extent(loops: Sequence[Loop], name: str) -> int:
    for lp in loops:
        if lp.iterator == name:
            return lp.upper.const - lp.lower.const
    raise KeyError(name)


def _vector_nest(poly: PolyKernel, nest: Loop) -> isl.Schedule | None:
    """The nest's own loops, with its innermost loop marked for vector code."""
    loops, body = _chain(nest)
    if len(body) != 1 or not isinstance(body[0], Stmt) or len(loops) < 1:
        return None
    stmt = body[0]
    its = list(poly.stmts[stmt.name].iterators)
    if stmt.write.index and stmt.write.index[-1] != Aff.var(its[-1]):
        return None
    inner = its[-1]
    transposed = _transposing_loop(stmt, its, loops)
    if transposed is not None:
        # A transpose: lanes run along ``inner`` but a load's contiguous dimension follows
        # ``transposed``. Cut ``inner`` into tiles and run ``transposed`` inside a tile, so the
        # lines the strided loads touch are reused by the next values of ``transposed``.
        width = 16
        sched = _with_band(_leaf(poly, [stmt.name]), _band({stmt.name: [inner]}, poly),
                           mark=VECTOR_MARK)
        sched = _with_band(sched, _band({stmt.name: [transposed]}, poly))
        outer = [f"{width}*floor(({it})/{width})" if it == inner else it
                 for it in its[:-1] if it != transposed] + [f"{width}*floor(({inner})/{width})"]
        return _with_band(sched, _band({stmt.name: outer}, poly))
    sched = _with_band(_leaf(poly, [stmt.name]), _band({stmt.name: [inner]}, poly),
                       mark=VECTOR_MARK)
    if len(its) > 1:
        sched = _with_band(sched, _band({stmt.name: its[:-1]}, poly))
    return sched


def _transposing_loop(stmt: Stmt, its: list[str], loops: list[Loop]) -> str | None:
    """The loop along which some load of ``stmt`` is contiguous, when that is not the innermost
    loop (and the innermost loop moves that load with a stride)."""
    inner = its[-1]
    for ld in loads(stmt.body):
        last = ld.index[-1] if ld.index else None
        if not isinstance(last, Aff) or last.coeff(inner) or len(last.terms) != 1:
            continue
        name = last.terms[0][0]
        if last.terms[0][1] == 1 and name in its[:-1] and any(
                isinstance(i, Aff) and i.coeff(inner) for i in ld.index) and \
                _extent(loops, name) >= 8:
            return name
    return None
