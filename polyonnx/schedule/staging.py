"""Staging a tile of a buffer in a local buffer: the kernel rewrite behind ``cache_read``,
``cache_write`` and ``pack``.

Unlike the other verbs these change the kernel, not only the schedule tree: a new temp buffer
(the tile), a new copy statement, and the statements under the chosen loop ``L`` reading (or
writing) the tile instead of the buffer. The tile of one iteration of ``L`` (and its outer
loops, the *prefix* ``q``) is computed with isl: the image of the statements' accesses under the
instances with that prefix. Its bounding box has a fixed size and an offset ``O(q)`` affine in
the prefix values; the temp has the box's shape (optionally split and permuted: ``pack``), and an
access ``B[e(x)]`` becomes ``T[e(x) - O(q)]``.

To keep every index affine in krnl, each rewritten statement gets the prefix values as extra
iterators (``S1[i, j, k]`` becomes ``S1[i, j, k, k_o]`` with the guard ``4*k_o <= k <= 4*k_o +
3``), innermost, one value per instance; the bands of the prefix read them directly. The copy
statement iterates over the prefix values and the tile's elements; it copies exactly the
elements the tile accesses (the isl image), or — for ``cache_read`` when that set is not a
single affine polyhedron — its convex hull clipped to the buffer (extra reads, never extra
writes).

Example (``mm`` tiled, ``cache_read(B, k_o)``)::

    for k_o in [0, 4):  # = floor(k/4)          for k_o in [0, 4):  # = floor(k/4)
      for j_o ...                                  S2: B_cache[t0, t1] = B[4*k_o + t0, t1]
        S1: C[i, j] += A[i, k] * B[k, j]           for j_o ...
                                                     S1: C[i, j] += A[i, k] * B_cache[k - 4*k_o, j]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import (
    Access,
    Aff,
    Buffer,
    Cond,
    Expr,
    Index,
    Kernel,
    Load,
    Loop,
    Stmt,
    loads,
    map_children,
)
from polyonnx.krnl.ir import Node as KNode
from polyonnx.schedule.poly import PolyKernel
from polyonnx.schedule.tree import (
    Band,
    Leaf,
    Node,
    Path,
    Sequence,
    children,
    find,
    fresh,
    get,
    instances,
    prefix_map,
    sequence,
    stmts,
    universe,
)


@dataclass(frozen=True)
class Layout:
    """How a tile is laid out in the temp: ``factors[d] > 1`` splits tile dimension ``d`` into
    an outer and an inner dimension of ``factors[d]``; ``order`` permutes the resulting
    dimensions (empty: keep them in order)."""

    factors: tuple[int, ...] = ()
    order: tuple[int, ...] = ()


def stage(
    tree: Node,
    poly: PolyKernel,
    buffer: str,
    loop: str,
    verb: str,
    *,
    write: bool,
    layout: Layout = Layout(),
) -> tuple[Kernel, Node]:
    """The kernel and tree with ``buffer``'s tile staged at ``loop`` (see the module doc)."""
    kernel = poly.kernel
    try:
        buf = kernel.buffer(buffer)
    except KeyError:
        raise ScheduleError(
            f"{verb}: no buffer named {buffer!r}; buffers are "
            f"{', '.join(b.name for b in kernel.buffers)}"
        ) from None
    path = find(tree, loop, verb)
    band = get(tree, path)
    assert isinstance(band, Band)
    if band.mark == "vector":
        raise ScheduleError(f"{verb}: {loop} is a vector loop; stage at a loop outside it")
    under = stmts(band)
    touching = _touching(poly, under, buffer, verb, write)
    bid = poly.buffer_ids[buffer]
    below = instances(poly, under)
    prefix = prefix_map(tree, path, poly)
    elems = isl.UnionSet(f"{{ {bid}[{', '.join(f'e{d}' for d in range(len(buf.shape)))}] }}")
    accesses = (poly.writes if write else poly.reads).intersect_domain(below).intersect_range(elems)
    if write:
        _check_tile_reads(tree, poly, buffer, bid, under, prefix, verb)
    region = isl.Map.from_union_map(prefix.reverse().apply_range(accesses))
    offsets, sizes = _box(region, len(buf.shape), bid, verb, buffer, loop)
    dims, shape = _layout(layout, sizes, verb)
    taken_bufs = {b.name for b in kernel.buffers}
    tname = fresh(f"{kernel.name}_{buffer}_{'pack' if layout != Layout() else 'cache'}", taken_bufs)
    temp = Buffer(tname, buf.dtype, shape, "temp")
    qnames = _prefix_names(tree, path)

    # The copy statement: iterators q (prefix values) and l (the temp's dimensions).
    taken_stmts = {s for s in poly.stmts}
    cname = fresh(f"S{len(poly.stmts)}", taken_stmts)
    q_its = [fresh(n, set()) for n in qnames]
    l_its = _fresh_all([f"t{k}" for k in range(len(dims))], set(q_its))
    elem = _elements(offsets, q_its, dims, l_its, layout)
    copy_loops, copy_guards = _copy_domain(
        region, bid, q_its, l_its, elem, shape, buf.shape, exact=write, verb=verb
    )
    lvars = tuple(Aff.var(n) for n in l_its)
    if write:
        copy = Stmt(cname, Access(buffer, tuple(elem)), Load(tname, lvars, buf.dtype), copy_guards)
    else:
        copy = Stmt(cname, Access(tname, lvars), Load(buffer, tuple(elem), buf.dtype), copy_guards)
    copy_nest: KNode = copy
    for it, (lo, hi) in reversed(list(zip(q_its + l_its, copy_loops, strict=True))):
        copy_nest = Loop(it, lo, hi + 1, (copy_nest,))

    # The statements under the loop that touch the buffer: extra iterators, redirected access.
    rewritten: dict[
        str, tuple[Stmt, tuple[str, ...], tuple[tuple[str, int, int], ...], tuple[str, ...]]
    ] = {}
    for name in touching:
        info = poly.stmts[name]
        its = set(info.iterators)
        extra = [fresh(n, its) for n in qnames]
        guards, values = _alias(_prefix_guards(prefix, poly, name, extra), extra, info.iterators)
        offset_affs = [_aff(o, values) for o in offsets]
        q_range = _ranges(prefix, poly, name)
        bounds: list[tuple[str, int, int]] = [
            (e, lo, hi) for e, v, (lo, hi) in zip(extra, values, q_range, strict=True) if e == v
        ]

        def redirect(
            index: tuple,
            _its: set = its,
            _bounds: list = bounds,
            _guards: list = guards,
            _off: list = offset_affs,
        ) -> tuple[Aff, ...]:
            rel = [Aff.lift(ix) - o for ix, o in zip(index, _off, strict=True)]
            out: list[Aff] = []
            for d, f in enumerate(_factors(layout, len(rel))):
                if f > 1:
                    u = fresh(f"u{d}", _its)
                    _bounds.append((u, 0, -(-sizes[d] // f) - 1))
                    _guards.append(Cond(rel[d] - Aff.var(u) * f))
                    _guards.append(Cond(Aff.var(u) * f + (f - 1) - rel[d]))
                    out.extend((Aff.var(u), rel[d] - Aff.var(u) * f))
                else:
                    out.append(rel[d])
            return tuple(out[k] for k in _order(layout, len(out)))

        stmt = info.stmt
        write_ = stmt.write
        if write and stmt.write.buffer == buffer:
            write_ = Access(tname, redirect(stmt.write.index))
        body = _redirect_loads(stmt.body, buffer, tname, redirect)
        new = replace(stmt, write=write_, body=body, guards=stmt.guards + tuple(guards))
        rewritten[name] = (new, tuple(b[0] for b in bounds), tuple(bounds), tuple(values))

    new_kernel = replace(
        kernel,
        buffers=kernel.buffers + (temp,),
        body=_rewrite_body(kernel.body, rewritten) + (copy_nest,),
    )
    new_tree = _rewrite_tree(tree, path, poly, rewritten, cname, q_its, l_its, write)
    return new_kernel, new_tree


# --------------------------------------------------------------------------- checks


def _touching(
    poly: PolyKernel, under: tuple[str, ...], buffer: str, verb: str, write: bool
) -> list[str]:
    """The statements under the loop that read or write ``buffer``; refusals for what staging
    cannot express."""
    readers = [
        s for s in under if any(ld.buffer == buffer for ld in loads(poly.stmts[s].stmt.body))
    ]
    writers = [s for s in under if poly.stmts[s].stmt.write.buffer == buffer]
    for s in readers:
        for ld in loads(poly.stmts[s].stmt.body):
            if ld.buffer == buffer and not all(isinstance(i, Aff) for i in ld.index):
                raise ScheduleError(
                    f"{verb}: {s} reads {buffer} at a computed index "
                    f"({ld}); only affine accesses can be staged"
                )
    if write:
        if not writers:
            raise ScheduleError(f"{verb}: no statement under the loop writes {buffer}")
    else:
        if writers:
            raise ScheduleError(
                f"{verb}: {buffer} is written under the loop (by "
                f"{', '.join(writers)}); a read cache would go stale — "
                "use cache_write, or stage at a loop inside which it is "
                "only read"
            )
        if not readers:
            raise ScheduleError(f"{verb}: no statement under the loop reads {buffer}")
    return sorted(set(readers) | set(writers), key=list(poly.stmts).index)


def _check_tile_reads(
    tree: Node,
    poly: PolyKernel,
    buffer: str,
    bid: str,
    under: tuple[str, ...],
    prefix: isl.UnionMap,
    verb: str,
) -> None:
    """``cache_write``: each read of ``buffer`` under the loop must read a value written in the
    same iteration of the loop (the tile starts with no values of its own)."""
    from polyonnx.schedule.tree import to_isl

    below = instances(poly, under)
    rank = len(poly.kernel.buffer(buffer).shape)
    elem = isl.UnionSet(f"{{ {bid}[{', '.join(f'e{d}' for d in range(rank))}] }}")
    sinks = poly.reads.intersect_domain(below).intersect_range(elem)
    if sinks.is_empty():
        return
    sources = poly.writes.intersect_range(elem)
    flow = (
        isl.UnionAccessInfo.from_sink(sinks)
        .set_must_source(sources)
        .set_schedule(to_isl(tree, poly))
        .compute_flow()
    )
    missing = flow.get_may_no_source()
    if not missing.is_empty():
        m = missing.get_map_list().get_at(0)
        raise ScheduleError(
            f"{verb}: {m.get_tuple_name(isl.dim_type.in_)} reads {buffer} "
            f"values the loop's iteration did not write ({m.domain()}); a "
            "write cache cannot supply them"
        )
    same = prefix.apply_range(prefix.reverse())
    outside = flow.get_may_dependence().subtract(same)
    if not outside.is_empty():
        from polyonnx.schedule.legality import describe

        raise ScheduleError(
            f"{verb}: the {describe('RAW', outside, poly)} crosses the "
            f"loop's iterations: a write cache of {buffer} would not hold "
            "that value"
        )


# --------------------------------------------------------------------------- the tile


def _box(
    region: isl.Map, rank: int, bid: str, verb: str, buffer: str, loop: str
) -> tuple[list[tuple[list[int], int]], list[int]]:
    """Per buffer dimension: the tile's offset (coefficients on the prefix values, constant)
    and size. The offset is the affine piece of the lower bound that gives the smallest
    box."""
    if region.is_empty():
        raise ScheduleError(f"{verb}: the statements under {loop} access no element of {buffer}")
    nq = region.dim(isl.dim_type.in_)
    q = [f"q{m}" for m in range(nq)]
    e = [f"e{d}" for d in range(rank)]
    wrapped = region.wrap()
    offsets, sizes = [], []
    for d in range(rank):
        best = None
        for _, aff in region.dim_min(d).get_pieces():
            if aff.dim(isl.dim_type.div):
                continue
            coeffs = [aff.get_coefficient_val(isl.dim_type.in_, m).to_python() for m in range(nq)]
            const = aff.get_constant_val().to_python()
            if not all(isinstance(c, int) for c in coeffs + [const]):
                continue
            expr = str(_aff((coeffs, const), q))
            rel = isl.Map(
                f"{{ [[{', '.join(q)}] -> {bid}[{', '.join(e)}]] -> [v] : v = {e[d]} - ({expr}) }}"
            )
            values = wrapped.apply(rel)
            lo = values.dim_min_val(0).to_python()
            if not isinstance(lo, int) or lo < 0:
                continue
            size = values.dim_max_val(0).to_python() + 1
            if best is None or size < best[1]:
                best = ((coeffs, const), size)
        if best is None:
            raise ScheduleError(
                f"{verb}: the part of {buffer} read under {loop} has no "
                f"tile offset affine in the enclosing loops (dimension {d})"
            )
        offsets.append(best[0])
        sizes.append(best[1])
    return offsets, sizes


def _factors(layout: Layout, rank: int) -> tuple[int, ...]:
    return layout.factors or (0,) * rank


def _order(layout: Layout, n: int) -> tuple[int, ...]:
    return layout.order or tuple(range(n))


def _layout(
    layout: Layout, sizes: list[int], verb: str
) -> tuple[list[tuple[int, str]], tuple[int, ...]]:
    """The temp's dimensions (tile dimension, ``"o"``/``"i"``/``""``) and shape."""
    factors = _factors(layout, len(sizes))
    if len(factors) != len(sizes) or any(not isinstance(f, int) or f < 0 for f in factors):
        raise ScheduleError(
            f"{verb}: factors must be {len(sizes)} non-negative integers (0 or 1: no split)"
        )
    dims: list[tuple[int, str]] = []
    shape: list[int] = []
    for d, (f, n) in enumerate(zip(factors, sizes, strict=True)):
        if f > 1:
            dims += [(d, "o"), (d, "i")]
            shape += [-(-n // f), f]
        else:
            dims.append((d, ""))
            shape.append(n)
    order = _order(layout, len(dims))
    if sorted(order) != list(range(len(dims))):
        raise ScheduleError(
            f"{verb}: order must be a permutation of 0..{len(dims) - 1} (the "
            "tile's dimensions after splitting)"
        )
    return [dims[k] for k in order], tuple(shape[k] for k in order)


def _elements(
    offsets: list[tuple[list[int], int]],
    q_its: list[str],
    dims: list[tuple[int, str]],
    l_its: list[str],
    layout: Layout,
) -> list[Aff]:
    """The buffer element of temp element ``l`` in tile ``q``."""
    factors = _factors(layout, len(offsets))
    elem = [_aff(o, q_its) for o in offsets]
    for (d, part), it in zip(dims, l_its, strict=True):
        elem[d] = elem[d] + (Aff.var(it) * factors[d] if part == "o" else Aff.var(it))
    return elem


def _aff(offset: tuple[list[int], int], names: list[str]) -> Aff:
    coeffs, const = offset
    out = Aff.lift(const)
    for c, n in zip(coeffs, names, strict=True):
        out = out + Aff.var(n) * c
    return out


def _copy_domain(
    region: isl.Map,
    bid: str,
    q_its: list[str],
    l_its: list[str],
    elem: list[Aff],
    shape: tuple[int, ...],
    buf_shape: tuple[int, ...],
    *,
    exact: bool,
    verb: str,
) -> tuple[list[tuple[int, int]], tuple[Cond, ...]]:
    """Loop bounds and guards of the copy statement: the tile's elements, exactly (or, when
    ``exact`` is not required, a convex over-approximation inside the buffer)."""
    names = q_its + l_its
    qs = ", ".join(f"c{m}" for m in range(len(q_its)))
    ren = {n: f"c{k}" for k, n in enumerate(names)}
    cs = ", ".join(ren[n] for n in names)

    def txt(a: Aff) -> str:
        return str(a.substitute({n: Aff.var(v) for n, v in ren.items()}))

    conds = [f"0 <= {ren[n]} < {s}" for n, s in zip(l_its, shape, strict=True)]
    conds += [f"0 <= {txt(a)} < {s}" for a, s in zip(elem, buf_shape, strict=True)]
    h = isl.Map(
        f"{{ C[{cs}] -> [[{qs}] -> {bid}[{', '.join(txt(a) for a in elem)}]] : "
        f"{' and '.join(conds)} }}"
    )
    dom = h.intersect_range(region.wrap()).domain().coalesce()
    if dom.n_basic_set() != 1 or dom.dim(isl.dim_type.div):
        if exact:
            raise ScheduleError(
                f"{verb}: the elements written in one iteration of the loop "
                "are not a single affine polyhedron (strided or a union); "
                "a copy-out would write elements that were not written"
            )
        hull = dom.remove_divs().convex_hull().intersect(h.domain().remove_divs().convex_hull())
        dom = isl.Set.from_basic_set(hull)
    bounds = [
        (dom.dim_min_val(k).to_python(), dom.dim_max_val(k).to_python()) for k in range(len(names))
    ]
    ranges = " and ".join(
        f"{lo} <= {ren[n]} <= {hi}" for n, (lo, hi) in zip(names, bounds, strict=True)
    )
    box = isl.Set(f"{{ C[{cs}] : {ranges} }}")
    guards = _conds(dom.gist(box), names)
    return bounds, guards


def _conds(s: isl.Set, names: list[str]) -> tuple[Cond, ...]:
    """The constraints of a single, div-free basic set as krnl guards."""
    s = s.coalesce()
    if s.n_basic_set() != 1 or s.dim(isl.dim_type.div):
        raise ScheduleError("staging: a guard is not affine")
    out = []
    cl = s.get_basic_set_list().get_at(0).get_constraint_list()
    for c in (cl.get_at(k) for k in range(cl.n_constraint())):
        a = Aff.lift(int(c.get_constant_val().to_python()))
        for k, n in enumerate(names):
            v = int(c.get_coefficient_val(isl.dim_type.set, k).to_python())
            if v:
                a = a + Aff.var(n) * v
        out.append(Cond(a, eq=c.is_equality()))
    return tuple(out)


# --------------------------------------------------------------------------- statements


def _prefix_names(tree: Node, path: Path) -> list[str]:
    names, node = [], tree
    for depth in range(len(path) + 1):
        if isinstance(node, Band):
            names.append(node.name)
        if depth < len(path):
            node = children(node)[path[depth]]
    return names


def _fresh_all(names: list[str], taken: set[str]) -> list[str]:
    return [fresh(n, taken) for n in names]


def _prefix_guards(
    prefix: isl.UnionMap, poly: PolyKernel, name: str, extra: list[str]
) -> list[Cond]:
    """Constraints tying the extra iterators to the prefix values of statement ``name``."""
    info = poly.stmts[name]
    graph = isl.Map.from_union_map(prefix.intersect_domain(universe(poly, [name])))
    dom = isl.Set.from_union_set(instances(poly, [name]))
    context = isl.Map.from_domain_and_range(dom, isl.Set.universe(graph.range().get_space()))
    linked = graph.wrap().gist(context.wrap()).flatten()
    return list(_conds(linked, list(info.iterators) + extra))


def _alias(
    guards: list[Cond], extra: list[str], its: tuple[str, ...]
) -> tuple[list[Cond], list[str]]:
    """Prefix values equal to an iterator (``q == i``) are that iterator: no extra iterator,
    no guard. Returns the remaining guards and the name standing for each prefix value."""
    alias: dict[str, str] = {}
    for g in guards:
        terms = dict(g.aff.terms)
        if g.eq and not g.aff.const and len(terms) == 2:
            (a, ca), (b, cb) = sorted(terms.items(), key=lambda t: t[0] not in extra)
            if a in extra and a not in alias and b in its and ca == -cb and abs(ca) == 1:
                alias[a] = b
    sub = {a: Aff.var(b) for a, b in alias.items()}
    kept = [Cond(g.aff.substitute(sub), g.eq) for g in guards]
    kept = [g for g in kept if not g.aff.is_const]
    return kept, [alias.get(e, e) for e in extra]


def _ranges(prefix: isl.UnionMap, poly: PolyKernel, name: str) -> list[tuple[int, int]]:
    values = isl.Set.from_union_set(prefix.intersect_domain(instances(poly, [name])).range())
    return [
        (values.dim_min_val(m).to_python(), values.dim_max_val(m).to_python())
        for m in range(values.dim(isl.dim_type.set))
    ]


def _redirect_loads(
    e: Expr, buffer: str, temp: str, redirect: Callable[[tuple[Index, ...]], tuple[Aff, ...]]
) -> Expr:
    if isinstance(e, Load):
        if e.buffer == buffer:
            return Load(temp, redirect(e.index), e.dtype)
        return e
    return map_children(e, lambda c: _redirect_loads(c, buffer, temp, redirect))


def _rewrite_body(nodes: tuple[KNode, ...], rewritten: dict) -> tuple[KNode, ...]:
    out: list[KNode] = []
    for n in nodes:
        if isinstance(n, Loop):
            out.append(replace(n, body=_rewrite_body(n.body, rewritten)))
        elif n.name in rewritten:
            stmt, _, bounds, _ = rewritten[n.name]
            node: KNode = stmt
            for it, lo, hi in reversed(bounds):
                node = Loop(it, lo, hi + 1, (node,))
            out.append(node)
        else:
            out.append(n)
    return tuple(out)


# --------------------------------------------------------------------------- tree


def _rewrite_tree(
    tree: Node,
    path: Path,
    poly: PolyKernel,
    rewritten: dict,
    cname: str,
    q_its: list[str],
    l_its: list[str],
    write: bool,
) -> Node:
    """Every band's function extended to the new iterators (the prefix bands read them), the
    copy statement placed at the loop."""
    spaces = {}
    for name, (_, extra, _, values) in rewritten.items():
        spaces[name] = (poly.stmts[name].iterators, extra, values)
    copy_space = f"{cname}[{', '.join(q_its + l_its)}]"

    def sched(band: Band, m: int | None) -> isl.UnionPwAff:
        out = None
        pieces = band.sched.get_pw_aff_list()
        for pa in (pieces.get_at(k) for k in range(pieces.n_pw_aff())):
            s = pa.get_domain_space().get_tuple_name(isl.dim_type.set)
            if s in spaces:
                its, extra, values = spaces[s]
                full = f"{s}[{', '.join(its + extra)}]"
                if m is not None:
                    piece = isl.PwAff(f"{{ {full} -> [({values[m]})] }}")
                else:
                    piece = pa.pullback_multi_aff(
                        isl.MultiAff(f"{{ {full} -> {s}[{', '.join(its)}] }}")
                    )
                pa = piece
            upa = isl.UnionPwAff.from_pw_aff(pa)
            out = upa if out is None else out.union_add(upa)
        if m is not None:
            upa = isl.UnionPwAff(f"{{ {copy_space} -> [({q_its[m]})] }}")
            out = upa if out is None else out.union_add(upa)
        assert out is not None
        return out

    def walk(node: Node, rest: Path | None, m: int) -> Node:
        on_path = rest is not None
        if isinstance(node, Leaf):
            return node
        if isinstance(node, Sequence):
            kids = [
                walk(c, rest[1:] if on_path and rest and rest[0] == k else None, m)
                for k, c in enumerate(node.children)
            ]
            return Sequence(tuple(kids))
        new = replace(node, sched=sched(node, m if on_path else None))
        if on_path and not rest:
            child = walk(node.child, None, m + 1)
            body = [child, Leaf(cname)] if write else [Leaf(cname), child]
            return replace(new, child=sequence(body))
        return replace(new, child=walk(node.child, rest[1:] if rest is not None else None, m + 1))

    return walk(tree, path, 0)
