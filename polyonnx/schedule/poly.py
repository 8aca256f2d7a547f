"""The polyhedral model of a krnl kernel: isl domains, access relations and dependences.

Each statement ``S`` becomes an isl set ``{ S[i0, ..., ik] : bounds and guards }`` named after
the iterators of its enclosing loops; each load and the write become access relations to the
buffer's isl tuple. Loads with run-time computed indices (gathers) are over-approximated by the
buffer's whole extent along that dimension, which keeps the dependences conservative.

Example:
    >>> from polyonnx.krnl.ir import Aff, Access, Buffer, Kernel, Load, Loop, Stmt
    >>> i = Aff.var("i")
    >>> bufs = (Buffer("x", "float32", (4,), "input"), Buffer("y", "float32", (4,), "output"))
    >>> s = Stmt("S0", Access("y", (i,)), Load("x", (i,), "float32"))
    >>> k = Kernel("k", bufs, (Loop("i", 0, 4, (s,)),))
    >>> print(PolyKernel.build(k).domain)
    { S0[i] : 0 <= i <= 3 }
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

import islpy as isl

from polyonnx.krnl.ir import Aff, Cond, Expr, Kernel, Loop, Stmt, read_spans

K = TypeVar("K", bound=Hashable)

_ISL_WORDS = frozenset(
    {
        "and",
        "or",
        "not",
        "min",
        "max",
        "floor",
        "ceil",
        "mod",
        "exists",
        "true",
        "false",
        "infty",
        "NaN",
        "implies",
        "xor",
        "cond",
    }
)


def isl_identifier(name: str, taken: set[str]) -> str:
    """A fresh isl-safe identifier derived from ``name``."""
    base = re.sub(r"\W", "_", name) or "b"
    if base[0].isdigit() or base in _ISL_WORDS:
        base = "b_" + base
    out, k = base, 1
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


@dataclass(frozen=True)
class StmtInfo:
    """A statement with the loops around it and its isl names."""

    stmt: Stmt
    loops: tuple[Loop, ...]

    @property
    def iterators(self) -> tuple[str, ...]:
        return tuple(lp.iterator for lp in self.loops)


@dataclass(frozen=True)
class Dependences:
    """Exact dataflow dependences between the instances of statements with accesses ``reads``
    and ``writes`` run in ``order`` (isl union maps), each computed when first asked for: a
    legal schedule needs only :attr:`all`; the kinds name a violation."""

    reads: isl.UnionMap
    writes: isl.UnionMap
    order: isl.Schedule
    carried_memo: dict[tuple[int, ...], tuple] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Memo of :func:`polyonnx.schedule.legality.loops_that_may_carry`: the default strategy
    finds its parallel loops and the final check proves them with the same distances."""

    @functools.cached_property
    def raw(self) -> isl.UnionMap:
        """Write -> a later read of its element, with no write of the element in between."""
        return _flow(self.reads, self.writes, self.order, must=True)

    @functools.cached_property
    def war(self) -> isl.UnionMap:
        """Read -> every later write of its element."""
        return _may_flow(self.writes, self.reads, self.order)

    @functools.cached_property
    def waw(self) -> isl.UnionMap:
        """Write -> the next write of its element."""
        return _flow(self.writes, self.writes, self.order, must=True)

    @functools.cached_property
    def all(self) -> isl.UnionMap:
        """RAW, WAR and WAW together. RAW and WAW come from one flow computation (a third
        less isl work): the last write before an access to an element is the same whether
        the access reads or writes it. An array whose every element is written at most once
        (a temp between two nests) has no WAW, and the one write before a read is its last:
        its RAW needs no search for the last of several writes (isl's must-source analysis,
        which dominates the cost of kernels with many statements writing one temp)."""
        single = _single_assignment(self.writes)
        once = _may_flow(
            _on_arrays(self.reads, single), _on_arrays(self.writes, single), self.order
        )
        others = _on_arrays(self.writes, single, keep=False)
        sink = _on_arrays(self.reads, single, keep=False).union(others)
        last_write = _flow(sink, others, self.order, must=True)
        # A read by the instance that then writes the element (x = x + ...) needs no WAR of
        # its own: the writes of an element are kept in order by the WAW ones above, and so
        # is every later write after this instance (and no loop carries it but one that
        # carries a WAW).
        war = _may_flow(self.writes, _without_updates(self.reads, self.writes), self.order)
        return once.union(last_write).union(war).coalesce()

    @functools.cached_property
    def stages(self) -> dict[str, int] | None:
        """Statement name -> its stage: ``order`` runs its statements as a sequence of stages
        (a kernel's nests, one after another). None when it does not start with a sequence
        (or leaves a statement that accesses memory out of it)."""
        return _stages(self.order, self.reads.union(self.writes))

    @functools.cached_property
    def _local(self) -> dict[int, isl.UnionMap]:
        """Stage -> the dependences among its statements: its accesses' own :attr:`all` (the
        last write before an access within its stage is its last write overall, and an access
        with no write before it in its stage has none among those statements)."""
        assert self.stages is not None
        reads, writes = _by_stage(self.reads, self.stages), _by_stage(self.writes, self.stages)
        empty = isl.UnionMap.empty(self.reads.get_space())
        return {
            k: Dependences(reads.get(k, empty), writes.get(k, empty), self.order).all
            for k in sorted(set(reads) | set(writes))
        }

    def among(self, instances: isl.UnionSet) -> isl.UnionMap:
        """The dependences from and to ``instances``: of their stage alone when they are all
        of one stage (far less isl work than :attr:`all` for a kernel of several nests)."""
        names = {s.get_tuple_name() for s in _sets(instances)}
        stages = {self.stages.get(n) for n in names} if self.stages else set()
        stage = stages.pop() if len(stages) == 1 else None
        if stage is None:
            rel = self.all
        elif stage in self._local:
            rel = self._local[stage]
        else:  # (a stage that accesses no memory)
            return isl.UnionMap.empty(self.reads.get_space())
        return rel.intersect_domain(instances).intersect_range(instances)

    def to_keep(self, schedule: isl.Schedule) -> isl.UnionMap:
        """The dependences ``schedule`` must keep (source before sink) to be legal, given
        that it runs them as :attr:`all` says: only those within stages when ``schedule``
        runs the stages as a sequence in their order (each child of its top sequence holds
        statements of one stage, stages never going back), which keeps every other one."""
        children = _stages(schedule, self.reads.union(self.writes)) if self.stages else None
        if not children or not self.stages:
            return self.all
        held: dict[int, set[int]] = {}
        for name, child in children.items():
            held.setdefault(child, set()).add(self.stages[name])
        order = [held[child] for child in sorted(held)]
        if any(len(s) != 1 for s in order) or order != sorted(order, key=min):
            return self.all
        empty = isl.UnionMap.empty(self.reads.get_space())
        return functools.reduce(isl.UnionMap.union, self._local.values(), empty)


def _arrays(accesses: isl.UnionMap) -> dict[str, isl.UnionMap]:
    """``accesses`` (instances -> elements) split by the array accessed."""
    return _grouped(accesses, lambda m: m.get_tuple_name(isl.dim_type.out))


def _grouped(accesses: isl.UnionMap, key: Callable[[isl.Map], K]) -> dict[K, isl.UnionMap]:
    """``accesses`` split by ``key`` of each of its maps."""
    out: dict[K, isl.UnionMap] = {}
    for m in _maps(accesses):
        k = key(m)
        part = isl.UnionMap.from_map(m)
        out[k] = out[k].union(part) if k in out else part
    return out


def _sets(instances: isl.UnionSet) -> list[isl.Set]:
    sets: list[isl.Set] = []
    instances.foreach_set(sets.append)
    return sets


def _maps(accesses: isl.UnionMap) -> list[isl.Map]:
    maps: list[isl.Map] = []
    accesses.foreach_map(maps.append)
    return maps


def _without_updates(reads: isl.UnionMap, writes: isl.UnionMap) -> isl.UnionMap:
    """``reads`` without those of the element their instance writes: a read with its
    statement's write access (a statement writes one element), when that access names one
    element (not a computed index, which isl sees as any element of a dimension)."""
    written = {m.get_tuple_name(isl.dim_type.in_): m for m in _maps(writes)}
    out = isl.UnionMap.empty(reads.get_space())
    for m in _maps(reads):
        w = written.get(m.get_tuple_name(isl.dim_type.in_))
        if w is None or not (m.is_equal(w) and w.is_single_valued()):
            out = out.union(isl.UnionMap.from_map(m))
    return out


def _single_assignment(writes: isl.UnionMap) -> frozenset[str]:
    """The arrays of which no element is written twice."""
    return frozenset(name for name, w in _arrays(writes).items() if w.is_injective())


def _on_arrays(accesses: isl.UnionMap, arrays: frozenset[str], keep: bool = True) -> isl.UnionMap:
    """The accesses of ``accesses`` to ``arrays`` (``keep``) or to the other arrays."""
    out = isl.UnionMap.empty(accesses.get_space())
    for m in _maps(accesses):
        if (m.get_tuple_name(isl.dim_type.out) in arrays) == keep:
            out = out.union(isl.UnionMap.from_map(m))
    return out


def _flow(
    sink: isl.UnionMap, source: isl.UnionMap, order: isl.Schedule, must: bool
) -> isl.UnionMap:
    """isl's dataflow analysis: each access of ``sink`` from the last access of ``source``
    before it in ``order`` (``must``: a source access always happens), else from every one
    since the last must-source. Only the arrays both access are analysed (no other access
    has a dependence), and nothing when there are none."""
    common = frozenset(_arrays(sink)) & frozenset(_arrays(source))
    if not common:
        return isl.UnionMap.empty(sink.get_space())
    info = isl.UnionAccessInfo.from_sink(_on_arrays(sink, common))
    source = _on_arrays(source, common)
    info = info.set_must_source(source) if must else info.set_may_source(source)
    return info.set_schedule(order).compute_flow().get_may_dependence().coalesce()


def _may_flow(sink: isl.UnionMap, source: isl.UnionMap, order: isl.Schedule) -> isl.UnionMap:
    """:func:`_flow` with may-sources only: every ``source`` access before a ``sink`` access
    of the same element (a may-source kills none). Where ``order`` runs its statements in a
    sequence of stages (a kernel's nests, one after another), a source in an earlier stage
    than its sink precedes it whatever the iterations: those pairs are a join on the element,
    and isl's ordering analysis is needed only within each stage, on far fewer accesses."""
    stages = _stages(order, sink.union(source))
    if stages is None:
        return _flow(sink, source, order, must=False)
    sinks, sources = _by_stage(sink, stages), _by_stage(source, stages)
    out = isl.UnionMap.empty(sink.get_space())
    earlier = isl.UnionMap.empty(source.get_space())
    for k in sorted(set(sinks) | set(sources)):
        if k in sinks:
            out = out.union(earlier.apply_range(sinks[k].reverse()))
            if k in sources:
                out = out.union(_flow(sinks[k], sources[k], order, must=False))
        if k in sources:
            earlier = earlier.union(sources[k])
    return out.coalesce()


def _stages(order: isl.Schedule, accesses: isl.UnionMap) -> dict[str, int] | None:
    """Statement name -> the child it is in of the sequence at the top of ``order``; None
    when the schedule does not start with a sequence or leaves out a statement of
    ``accesses``."""
    top = order.get_root().child(0)
    if top.get_type() != isl.schedule_node_type.sequence:
        return None
    out: dict[str, int] = {}
    for k in range(top.n_children()):
        for s in _sets(top.child(k).filter_get_filter()):
            out[s.get_tuple_name()] = k
    if not {m.get_tuple_name(isl.dim_type.in_) for m in _maps(accesses)} <= out.keys():
        return None
    return out


def _by_stage(accesses: isl.UnionMap, stages: dict[str, int]) -> dict[int, isl.UnionMap]:
    """``accesses`` split by the stage of their statement (see :func:`_stages`)."""
    return _grouped(accesses, lambda m: stages[m.get_tuple_name(isl.dim_type.in_)])


@dataclass(frozen=True)
class PolyKernel:
    """A kernel's polyhedral model."""

    kernel: Kernel
    stmts: dict[str, StmtInfo]
    buffer_ids: dict[str, str]
    """krnl buffer name -> isl tuple name."""
    domain: isl.UnionSet
    writes: isl.UnionMap
    reads: isl.UnionMap
    instances_memo: dict[tuple[str, ...], isl.UnionSet] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Memo of :func:`polyonnx.schedule.tree.instances` (statement names -> their domain):
    schedule trees and legality checks ask for the same few sets over and over."""
    single_value_memo: dict[object, bool] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Memo of :func:`polyonnx.schedule.tree.single_valued` (band -> whether it takes one
    value): the isl tree of every schedule in a trace is built from the same bands."""

    @staticmethod
    def build(kernel: Kernel) -> PolyKernel:
        taken = {s.name for _, s in kernel.statements()}
        buffer_ids = {b.name: isl_identifier(b.name, taken) for b in kernel.buffers}
        shapes = {b.name: b.shape for b in kernel.buffers}
        stmts: dict[str, StmtInfo] = {}
        domain = writes = reads = None
        for loops, stmt in kernel.statements():
            info = StmtInfo(stmt, loops)
            stmts[stmt.name] = info
            dom = isl.Set(_domain_text(info))
            w = isl.UnionMap.from_map(
                _access(
                    info, buffer_ids[stmt.write.buffer], stmt.write.index, shapes[stmt.write.buffer]
                ).intersect_domain(dom)
            )
            udom = isl.UnionSet.from_set(dom)
            domain = udom if domain is None else domain.union(udom)
            writes = w if writes is None else writes.union(w)
            for ld, lanes in read_spans(stmt.body):
                access = _access(info, buffer_ids[ld.buffer], ld.index, shapes[ld.buffer], lanes)
                r = isl.UnionMap.from_map(access.intersect_domain(dom))
                reads = r if reads is None else reads.union(r)
        if domain is None:
            raise ValueError(f"kernel {kernel.name} has no statements")
        empty = isl.UnionMap.empty(domain.get_space())
        return PolyKernel(kernel, stmts, buffer_ids, domain, writes or empty, reads or empty)

    def dependences(self) -> Dependences:
        """RAW, WAR and WAW dependences in the kernel's original (tree) order."""
        return Dependences(self.reads, self.writes, initial_schedule(self))


def _space_text(info: StmtInfo) -> str:
    return f"{info.stmt.name}[{', '.join(info.iterators)}]"


def _cond_text(c: Cond) -> str:
    return f"{c.aff} {'=' if c.eq else '>='} 0"


def _domain_text(info: StmtInfo) -> str:
    conds = []
    for lp in info.loops:
        conds.append(f"{lp.lower} <= {lp.iterator} < {lp.upper}")
    conds.extend(_cond_text(g) for g in info.stmt.guards)
    return f"{{ {_space_text(info)} : {' and '.join(conds) or 'true'} }}"


def _access(
    info: StmtInfo,
    buffer_id: str,
    index: tuple[Aff | Expr, ...],
    shape: tuple[int, ...],
    lanes: int = 1,
) -> isl.Map:
    """The elements ``buffer[index]`` touches, ``lanes`` of them along the last axis."""
    outs, conds = [], []
    for d, ix in enumerate(index):
        if isinstance(ix, Aff) and lanes > 1 and d == len(index) - 1:
            outs.append(f"{buffer_id}_lane")
            conds.append(f"{ix} <= {outs[-1]} < {ix + lanes}")
        elif isinstance(ix, Aff):
            outs.append(str(ix))
        else:  # computed at run time: may touch the whole dimension
            outs.append(f"{buffer_id}_any{d}")
            conds.append(f"0 <= {outs[-1]} < {shape[d]}")
    where = f" : {' and '.join(conds)}" if conds else ""
    return isl.Map(f"{{ {_space_text(info)} -> {buffer_id}[{', '.join(outs)}]{where} }}")


def initial_schedule(poly: PolyKernel) -> isl.Schedule:
    """The schedule tree of the kernel's own loop structure: one band per loop, a sequence
    node where a loop holds several children."""

    def stmt_domain(name: str) -> isl.UnionSet:
        return poly.domain.intersect(isl.UnionSet(f"{{ {_space_text(poly.stmts[name])} }}"))

    def subtree_stmts(node: Loop | Stmt) -> list[str]:
        if isinstance(node, Stmt):
            return [node.name]
        return [s for child in node.body for s in subtree_stmts(child)]

    def build(nodes: tuple[Loop | Stmt, ...]) -> isl.Schedule:
        parts = []
        for node in nodes:
            if isinstance(node, Stmt):
                parts.append(isl.Schedule.from_domain(stmt_domain(node.name)))
                continue
            inner = build(node.body)
            pieces = "; ".join(
                f"{_space_text(poly.stmts[s])} -> [({node.iterator})]" for s in subtree_stmts(node)
            )
            parts.append(inner.insert_partial_schedule(isl.MultiUnionPwAff(f"[{{ {pieces} }}]")))
        sched = parts[0]
        for p in parts[1:]:
            sched = sched.sequence(p)
        return sched

    return build(poly.kernel.body)
