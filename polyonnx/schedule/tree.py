"""The schedule tree a :class:`~polyonnx.schedule.schedule.Schedule` edits, and its isl form.

Every loop is a one-member band with a name (``oc``, ``oc_o``, ``oc_i`` ...) and an isl affine
function of the statement instances below it; siblings sit in a :class:`Sequence`; each leaf is
one statement. Verbs rewrite this small immutable tree; :func:`to_isl` builds the isl schedule
tree from it (with ``mark`` nodes for ``parallel``/``vector``, the ``unroll`` AST loop type and
``isolate`` AST build options, and without the loops of one iteration), and that isl tree is
what legality checks and codegen see.

Example:
    >>> from polyonnx.testing.examples import matmul
    >>> from polyonnx.schedule.poly import PolyKernel
    >>> poly = PolyKernel.build(matmul(4, 5, 3))
    >>> print(render(initial_tree(poly), poly))
    for i in [0, 4):
      for j in [0, 5):
        S0: C[i, j] = 0.0
        for k in [0, 3):
          S1: C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import islpy as isl

from polyonnx.errors import ScheduleError
from polyonnx.krnl.ir import Loop, Stmt
from polyonnx.schedule.poly import PolyKernel

MARKS = ("parallel", "vector", "unroll")
"""Marks a band can carry: ``unroll`` is codegen's (it unrolls a loop with a constant trip
count), unlike :attr:`Band.unroll`, isl's own unrolling."""


@dataclass(frozen=True, eq=False)
class Band:
    """One loop: ``for name`` over the values of ``sched`` (a function of statement instances)."""

    name: str
    sched: isl.UnionPwAff
    child: Node
    mark: str = ""
    """``""`` or one of :data:`MARKS`: an isl mark node directly above this band."""
    unroll: bool = False
    isolate: bool = False
    """Separate the iterations whose child loop runs its full trip count (full tiles); with
    ``members > 1``, the iterations of the whole isl band given by ``full``."""
    named: tuple[str, ...] = ()
    """With mark ``parallel``: the loops (this one or loops perfectly nested in it) proved free
    of carried dependences; the mark names their AST iterators (``parallel c1 c3``)."""
    tile: tuple[int, ...] = ()
    """A loop made by a floor split (values ``size * floor(x / size)``): (size, end of the range
    of the split loop ``x``)."""
    members: int = 1
    """This band and the ``members - 1`` bands directly inside it are one isl band."""
    full: tuple[tuple[int, int], ...] = ()
    """With ``members > 1`` and ``isolate``: (member, bound) pairs; the full tiles are the
    iterations with every such member ``<= bound``."""
    grouped: bool = False
    """A member (not the first) of the isl band of a band above it."""


@dataclass(frozen=True)
class Sequence:
    """Children run one after the other."""

    children: tuple[Node, ...]


@dataclass(frozen=True)
class Leaf:
    """One statement."""

    stmt: str


Node = Band | Sequence | Leaf
Path = tuple[int, ...]
"""Child indices from the root (a band's only child is index 0)."""


# --------------------------------------------------------------------------- navigation


def stmts(node: Node) -> tuple[str, ...]:
    """The statements below ``node``, in tree order."""
    if isinstance(node, Leaf):
        return (node.stmt,)
    if isinstance(node, Band):
        return stmts(node.child)
    return tuple(s for c in node.children for s in stmts(c))


def children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Band):
        return (node.child,)
    if isinstance(node, Sequence):
        return node.children
    return ()


def walk(node: Node, path: Path = ()) -> Iterator[tuple[Path, Node]]:
    """Every node with its path, pre-order."""
    yield path, node
    for i, c in enumerate(children(node)):
        yield from walk(c, path + (i,))


@functools.lru_cache(maxsize=64)
def band_paths(tree: Node) -> Mapping[str, Path]:
    """Loop name -> path of its band (read-only: remembered for the few trees a schedule
    is made of, which verbs and checks look loops up in thousands of times)."""
    return MappingProxyType({n.name: p for p, n in walk(tree) if isinstance(n, Band)})


def get(tree: Node, path: Path) -> Node:
    for i in path:
        tree = children(tree)[i]
    return tree


def put(tree: Node, path: Path, new: Node) -> Node:
    """``tree`` with the node at ``path`` replaced by ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(tree, Band):
        return replace(tree, child=put(tree.child, rest, new))
    if isinstance(tree, Sequence):
        kids = list(tree.children)
        kids[head] = put(kids[head], rest, new)
        return sequence(kids)
    raise ValueError("a leaf has no children")


def sequence(nodes: list[Node] | tuple[Node, ...]) -> Node:
    """A sequence of ``nodes`` with nested sequences flattened (one node stays itself)."""
    flat: list[Node] = []
    for n in nodes:
        flat.extend(n.children if isinstance(n, Sequence) else (n,))
    return flat[0] if len(flat) == 1 else Sequence(tuple(flat))


def find(tree: Node, loop: str, verb: str) -> Path:
    """The path of loop ``loop``; a ScheduleError naming the known loops if there is none."""
    paths = band_paths(tree)
    if loop not in paths:
        raise ScheduleError(
            f"{verb}: no loop named {loop!r}; loops are {', '.join(paths) or '(none)'}"
        )
    return paths[loop]


def fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_1``, ``name_2`` ... if taken; the result is added to ``taken``."""
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out


# --------------------------------------------------------------------------- isl helpers


def universe(poly: PolyKernel, names: tuple[str, ...] | list[str]) -> isl.UnionSet:
    """All instances of the named statements' spaces (no bounds)."""
    out = isl.UnionSet.empty(poly.domain.get_space())
    for name in names:
        its = ", ".join(poly.stmts[name].iterators)
        out = out.union(isl.UnionSet(f"{{ {name}[{its}] }}"))
    return out


def instances(poly: PolyKernel, names: tuple[str, ...] | list[str]) -> isl.UnionSet:
    """The iteration domains of the named statements."""
    key = tuple(names)
    out = poly.instances_memo.get(key)
    if out is None:
        out = poly.instances_memo[key] = poly.domain.intersect(universe(poly, names))
    return out


def band_map(band: Band, poly: PolyKernel) -> isl.UnionMap:
    """``band.sched`` as a relation on the instances of its statements."""
    return isl.UnionMap.from_union_pw_aff(band.sched).intersect_domain(instances(poly, stmts(band)))


def value_range(band: Band, poly: PolyKernel) -> tuple[int, int]:
    """The smallest and largest value the loop takes."""
    values = band_map(band, poly).range()
    lo = isl.Set.from_union_set(values.lexmin()).sample_point()
    hi = isl.Set.from_union_set(values.lexmax()).sample_point()
    return (
        int(lo.get_coordinate_val(isl.dim_type.set, 0).to_python()),
        int(hi.get_coordinate_val(isl.dim_type.set, 0).to_python()),
    )


def bands_on_path(tree: Node, path: Path, inclusive: bool = True) -> list[Band]:
    """The bands on the way to the node at ``path``, outermost first: the loops enclosing it,
    and the node itself when it is a band and ``inclusive``."""
    out, node = [], tree
    for depth in range(len(path) + inclusive):
        if isinstance(node, Band):
            out.append(node)
        if depth < len(path):
            node = children(node)[path[depth]]
    return out


def bands_above(tree: Node, path: Path) -> int:
    """The loops enclosing the node at ``path``: its position in :func:`prefix_map`'s values."""
    return len(bands_on_path(tree, path, inclusive=False))


def prefix_map(tree: Node, path: Path, poly: PolyKernel, inclusive: bool = True) -> isl.UnionMap:
    """Instances below ``path`` -> the values of the loops on the way there (outermost first),
    the node at ``path`` included when it is a band and ``inclusive``."""
    below = instances(poly, stmts(get(tree, path)))
    return values_map(below, [band.sched for band in bands_on_path(tree, path, inclusive)])


def values_map(below: isl.UnionSet, columns: list[isl.UnionPwAff]) -> isl.UnionMap:
    """The instances ``below`` -> the values of ``columns`` (loop schedules), in order."""
    out = isl.UnionMap.from_domain(below)
    for column in columns:
        out = out.flat_range_product(isl.UnionMap.from_union_pw_aff(column).intersect_domain(below))
    return out


# --------------------------------------------------------------------------- construction


def initial_tree(poly: PolyKernel) -> Node:
    """The kernel's own loop structure; loops named after their krnl iterators (a repeated
    iterator name gets a suffix: the second ``n`` is ``n_1``)."""
    taken: set[str] = set()

    def build(nodes: tuple[Loop | Stmt, ...]) -> Node:
        out: list[Node] = []
        for n in nodes:
            if isinstance(n, Stmt):
                out.append(Leaf(n.name))
                continue
            name = fresh(n.iterator, taken)
            child = build(n.body)
            pieces = "; ".join(
                f"{s}[{', '.join(poly.stmts[s].iterators)}] -> [({n.iterator})]"
                for s in stmts(child)
            )
            out.append(Band(name, isl.UnionPwAff(f"{{ {pieces} }}"), child))
        return sequence(out)

    return build(poly.kernel.body)


def to_isl(tree: Node, poly: PolyKernel) -> isl.Schedule:
    """The isl schedule tree of ``tree`` over the kernel's iteration domain."""
    root = isl.Schedule.from_domain(poly.domain).get_root().child(0)
    return _build(root, tree, poly).get_schedule()


def _build(at: isl.ScheduleNode, node: Node, poly: PolyKernel) -> isl.ScheduleNode:
    """Insert ``node`` at the leaf ``at``; return the isl node where ``node`` starts."""
    if isinstance(node, Leaf):
        return at
    if isinstance(node, Sequence):
        filters = isl.UnionSetList.alloc(poly.domain.get_ctx(), len(node.children))
        for c in node.children:
            filters = filters.add(instances(poly, stmts(c)))
        at = at.insert_sequence(filters)
        for i, c in enumerate(node.children):
            at = _build(at.child(i).child(0), c, poly).parent().parent()
        return at
    if _elided(node, poly):
        # isl makes no loop of a band that takes one value (a batch of 1, a channel tile as
        # wide as the channels ...), but each band is one more dimension of every set the AST
        # generator builds (docs/performance.md, *Compile time*).
        # A parallel mark moves to the band's loops inside it (see _mark_text).
        at = _build(at, node.child, poly)
        text = _mark_text(node, at.get_schedule_depth(), poly)
        return at.insert_mark(isl.Id(text)) if text else at
    depth = at.get_schedule_depth()
    below = instances(poly, stmts(node))
    chain = [node]
    while len(chain) < node.members:
        assert isinstance(chain[-1].child, Band)
        chain.append(chain[-1].child)
    band = isl.MultiUnionPwAff.from_union_pw_aff(isl_values(node).intersect_domain(below))
    for member in chain[1:]:
        band = band.flat_range_product(
            isl.MultiUnionPwAff.from_union_pw_aff(isl_values(member).intersect_domain(below))
        )
    at = at.insert_partial_schedule(band)
    if node.unroll:
        at = at.band_member_set_ast_loop_type(0, isl.ast_loop_type.unroll)
    if node.isolate and node.members > 1:
        full = tuple((m, bound // _tile_step(chain[m])) for m, bound in node.full)
        at = at.band_set_ast_build_options(_isolate_band(depth, len(chain), full))
    elif node.isolate:
        at = at.band_set_ast_build_options(_full_tiles(at, node, poly))
    at = _build(at.child(0), chain[-1].child, poly).parent()
    text = _mark_text(node, depth, poly)
    return at.insert_mark(isl.Id(text)) if text else at


def isl_values(band: Band) -> isl.UnionPwAff:
    """The band's values in the isl tree: a tile loop's (a floor split's) tile index
    ``floor(x / size)`` rather than its first value ``size * floor(x / size)``. Both order the
    instances alike, but the AST generator reasons about the first values through an integer
    division in every set it builds: DenseNet-121's blocked convolutions took 2x as long."""
    step = _tile_step(band)
    if step == 1:
        return band.sched
    return band.sched.scale_down_val(isl.Val(step)).floor()


def _tile_step(band: Band) -> int:
    """How far apart the values of ``band`` are in :func:`isl_values`' terms: a tile loop's
    size, else 1."""
    return band.tile[0] if band.tile else 1


def single_valued(band: Band, poly: PolyKernel) -> bool:
    """Whether ``band`` takes a single value on the instances below it (a loop of one
    iteration)."""
    out = poly.single_value_memo.get(band)
    if out is None:
        values = band_map(band, poly).range()
        out = poly.single_value_memo[band] = (
            values.n_set() == 1 and isl.Set.from_union_set(values).is_singleton()
        )
    return out


def _elided(band: Band, poly: PolyKernel) -> bool:
    """Whether ``band`` is left out of the isl tree: a plain loop of one iteration."""
    return (
        band.members == 1
        and not band.grouped
        and not band.isolate
        and not band.unroll
        and single_valued(band, poly)
    )


def _mark_text(band: Band, depth: int, poly: PolyKernel) -> str:
    """The isl mark above ``band`` (at schedule depth ``depth``), or "" for none: a
    ``parallel`` mark names the AST iterators (``c<schedule depth>``) of the loops in
    ``band.named`` that are in the isl tree (``parallel c1 c3``); a band left out of it
    (:func:`_elided`) is no loop, and keeps no other mark."""
    if not band.mark or (_elided(band, poly) and not band.named):
        return ""
    if not band.named:
        return band.mark
    depths = {}
    node: Node = band
    while isinstance(node, Band):
        if node.grouped or not _elided(node, poly):
            depths[node.name] = depth
            depth += 1
        node = node.child
    named = [f"c{depths[n]}" for n in band.named if n in depths]
    return " ".join([band.mark, *named]) if named else ""


def _isolate_band(depth: int, members: int, full: tuple[tuple[int, int], ...]) -> isl.UnionSet:
    """The isl ``isolate`` option of an isl band of ``members`` at schedule depth ``depth``:
    the iterations with member ``m <= bound`` for each (m, bound) of ``full``."""
    prefix = ", ".join(f"p{k}" for k in range(depth))
    dims = [f"d{k}" for k in range(members)]
    cond = " and ".join(f"{dims[m]} <= {bound}" for m, bound in full)
    return isl.UnionSet(f"{{ isolate[[{prefix}] -> [{', '.join(dims)}]] : {cond} }}")


def _full_tiles(at: isl.ScheduleNode, band: Band, poly: PolyKernel) -> isl.UnionSet:
    """The isl ``isolate`` option of ``band``: its iterations (after the outer loops) in which
    its child loop takes every value in its range."""
    inner = band.child
    if not isinstance(inner, Band):
        raise ScheduleError(f"isolate({band.name}): its body is not a loop")
    domain = at.get_domain()
    outer = (
        at.get_prefix_schedule_union_map()
        .range_product(isl.UnionMap.from_union_pw_aff(isl_values(band)))
        .intersect_domain(domain)
    )
    tiles = isl.Set.from_union_set(domain.apply(outer))
    points = isl.Set.from_union_set(
        domain.apply(outer.range_product(isl.UnionMap.from_union_pw_aff(isl_values(inner))))
    ).unwrap()
    lo, hi = (v // _tile_step(inner) for v in value_range(inner, poly))
    box = isl.Map.from_domain_and_range(tiles, isl.Set(f"{{ [c] : {lo} <= c <= {hi} }}"))
    full = tiles.subtract(box.subtract(points).domain())
    return isl.UnionSet.from_set(full.set_tuple_name("isolate"))


# --------------------------------------------------------------------------- printing


def expression(band: Band) -> str:
    """The loop's value as a function of its statement's iterators, e.g. ``floor(j/8)``."""
    pieces = band.sched.get_pw_aff_list()
    text = str(pieces.get_at(0))
    m = re.search(r"->\s*\[\((.*)\)\]", text)
    expr = m.group(1) if m else text
    prev = None
    while prev != expr:
        prev, expr = expr, re.sub(r"\((\w+)\)", r"\1", expr)
    return expr


def render(tree: Node, poly: PolyKernel) -> str:
    """A readable loop nest: each loop with its range, its value in terms of the statement
    iterators (when that is not the loop name) and its annotations."""
    lines: list[str] = []

    def emit(node: Node, depth: int) -> None:
        pad = "  " * depth
        if isinstance(node, Leaf):
            lines.append(pad + str(poly.stmts[node.stmt].stmt))
        elif isinstance(node, Sequence):
            for c in node.children:
                emit(c, depth)
        else:
            lo, hi = value_range(node, poly)
            notes = [f"= {expression(node)}"] if expression(node) != node.name else []
            mark = f"{node.mark} ({', '.join(node.named)})" if node.named else node.mark
            band = (
                f"isolate full tiles of this and {node.members - 1} loops inside"
                if node.members > 1
                else "isolate full tiles"
            )
            notes += [
                t
                for t, on in (
                    (mark, bool(node.mark)),
                    ("unroll", node.unroll),
                    (band, node.isolate),
                )
                if on
            ]
            tail = f"  # {', '.join(notes)}" if notes else ""
            lines.append(f"{pad}for {node.name} in [{lo}, {hi + 1}):{tail}")
            emit(node.child, depth + 1)

    emit(tree, 0)
    return "\n".join(lines)
