"""krnl: the loop-nest IR between the graph and the polyhedral model.

A :class:`Kernel` is a set of buffers plus a tree of :class:`Loop` nodes whose leaves are
:class:`Stmt` statements. Each statement has an affine iteration domain (the bounds of its
enclosing loops plus its own guards), one affine write and a scalar body whose loads carry affine
(or, for gathers, run-time computed) indices. The tree order is the statement order the kernel
means; the schedule stage turns it into an isl schedule tree and transforms it from there.

Everything is an immutable record; the printed form (``str(kernel)``) is the debug and golden
format.

Example:
    >>> i = Aff.var("i")
    >>> s = Stmt("S0", Access("y", (i,)), Load("x", (i,), "float32") * Const(2.0, "float32"))
    >>> print(Kernel("double", (Buffer("x", "float32", (4,), "input"),
    ...                        Buffer("y", "float32", (4,), "output")), (Loop("i", 0, 4, (s,)),)))
    kernel double(in x: float32[4], out y: float32[4]) {
      for i in [0, 4):
        S0: y[i] = (x[i] * 2.0)
    }
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from polyonnx.graph.ir import ENCODED_DTYPES

# --------------------------------------------------------------------------- affine expressions


@dataclass(frozen=True, slots=True)
class Aff:
    """An integer affine expression ``sum(coeff * var) + const`` over loop iterators."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    def __post_init__(self) -> None:
        names = [n for n, _ in self.terms]
        if names != sorted(set(names)) or any(c == 0 for _, c in self.terms):
            raise ValueError(f"Aff terms must be sorted, unique and non-zero: {self.terms}")

    @staticmethod
    def var(name: str) -> Aff:
        return Aff(((name, 1),), 0)

    @staticmethod
    def lift(x: AffLike) -> Aff:
        if isinstance(x, Aff):
            return x
        if isinstance(x, (int, np.integer)):
            return Aff((), int(x))
        raise TypeError(f"not an affine expression: {x!r}")

    @staticmethod
    def _make(coeffs: Mapping[str, int], const: int) -> Aff:
        return Aff(tuple(sorted((n, c) for n, c in coeffs.items() if c != 0)), const)

    def __add__(self, other: AffLike) -> Aff:
        o = Aff.lift(other)
        coeffs = dict(self.terms)
        for n, c in o.terms:
            coeffs[n] = coeffs.get(n, 0) + c
        return Aff._make(coeffs, self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> Aff:
        return Aff(tuple((n, -c) for n, c in self.terms), -self.const)

    def __sub__(self, other: AffLike) -> Aff:
        return self + (-Aff.lift(other))

    def __rsub__(self, other: AffLike) -> Aff:
        return Aff.lift(other) - self

    def __mul__(self, k: int) -> Aff:
        if not isinstance(k, (int, np.integer)):
            raise TypeError("an Aff can only be scaled by an integer")
        k = int(k)
        return Aff._make({n: c * k for n, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.terms)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coeff(self, name: str) -> int:
        return dict(self.terms).get(name, 0)

    def substitute(self, mapping: Mapping[str, Aff]) -> Aff:
        out = Aff((), self.const)
        for n, c in self.terms:
            out = out + (mapping[n] * c if n in mapping else Aff.var(n) * c)
        return out

    def evaluate(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * env[n] for n, c in self.terms)

    def extremes(self, box: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
        """The smallest and largest value over ``box``, the inclusive range of each iterator
        (see :func:`loop_box`)."""
        lo = hi = self.const
        for name, c in self.terms:
            r0, r1 = box[name]
            lo += min(c * r0, c * r1)
            hi += max(c * r0, c * r1)
        return lo, hi

    def __str__(self) -> str:
        parts: list[str] = []
        for n, c in self.terms:
            term = n if abs(c) == 1 else f"{abs(c)}*{n}"
            parts.append(("- " if c < 0 else "+ ") + term)
        if self.const or not parts:
            parts.append(("- " if self.const < 0 else "+ ") + str(abs(self.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]


AffLike = Aff | int


@dataclass(frozen=True, slots=True)
class Cond:
    """An affine constraint: ``aff >= 0`` (or ``aff == 0`` when ``eq``)."""

    aff: Aff
    eq: bool = False

    def __str__(self) -> str:
        return f"{self.aff} {'==' if self.eq else '>='} 0"


def ge(a: AffLike, b: AffLike) -> Cond:
    """``a >= b``."""
    return Cond(Aff.lift(a) - b)


def lt(a: AffLike, b: AffLike) -> Cond:
    """``a < b``."""
    return Cond(Aff.lift(b) - a - 1)


# --------------------------------------------------------------------------- scalar expressions

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",) + tuple(ENCODED_DTYPES)

MATH_OPS = frozenset(
    {
        "exp",
        "log",
        "sqrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "tanh",
        "sigmoid",
        "erf",
        "floor",
        "ceil",
        "round",
    }
)
"""The float functions of one argument, each the ONNX op of its name (``exp``: Exp)."""

UNARY_OPS = MATH_OPS | frozenset(
    {"neg", "abs", "not", "isnan", "isinf", "isposinf", "isneginf", "sign", "bitnot"}
)
BINARY_OPS = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "max",
        "min",
        "pow",
        "mod",
        "fmod",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "and",
        "or",
        "xor",
        "shl",
        "shr",
        "bitand",
        "bitor",
        "bitxor",
        "dot4",
    }
)
"""Binary ops, each the ONNX op of its name or the arithmetic it says; ``dot4`` (of int32s):
the sum of the four products of ``a``'s bytes, unsigned, by ``b``'s, signed, as int32 (x86's
``vpdpbusd`` lane), from which quantized MatMuls build their sums."""
COMPARISONS = frozenset(
    {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isposinf", "isneginf"}
)


class Expr:
    """Base of scalar expressions; every node has a ``dtype``."""

    __slots__ = ()
    dtype: str

    def _bin(self, op: str, other: Expr | float, swap: bool = False) -> Binary:
        o = other if isinstance(other, Expr) else Const(other, self.dtype)
        return Binary(op, o, self) if swap else Binary(op, self, o)

    def __add__(self, o: Expr | float) -> Binary:
        return self._bin("add", o)

    def __radd__(self, o: Expr | float) -> Binary:
        return self._bin("add", o, swap=True)

    def __sub__(self, o: Expr | float) -> Binary:
        return self._bin("sub", o)

    def __rsub__(self, o: Expr | float) -> Binary:
        return self._bin("sub", o, swap=True)

    def __mul__(self, o: Expr | float) -> Binary:
        return self._bin("mul", o)

    def __rmul__(self, o: Expr | float) -> Binary:
        return self._bin("mul", o, swap=True)

    def __truediv__(self, o: Expr | float) -> Binary:
        return self._bin("div", o)

    def __neg__(self) -> Unary:
        return Unary("neg", self)


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: float | int | bool
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")

    def __str__(self) -> str:
        return repr(self.value) if self.dtype not in FLOAT_DTYPES else repr(float(self.value))


Index = Aff | Expr
"""A load index: affine in the iterators, or an integer expression computed at run time."""


@dataclass(frozen=True, slots=True)
class Load(Expr):
    buffer: str
    index: tuple[Index, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.buffer}[{', '.join(str(i) for i in self.index)}]"


@dataclass(frozen=True, slots=True)
class Iter(Expr):
    """The value of a loop iterator (as int64), e.g. for ArgMax or Range."""

    name: str
    dtype: str = "int64"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: str
    x: Expr
    dtype: str = ""

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise ValueError(f"unknown unary op {self.op!r}")
        if not self.dtype:
            object.__setattr__(
                self, "dtype", "bool" if self.op in COMPARISONS | {"not"} else self.x.dtype
            )

    def __str__(self) -> str:
        return f"{self.op}({self.x})"


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = ""

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise ValueError(f"unknown binary op {self.op!r}")
        if self.a.dtype != self.b.dtype and self.op not in ("shl", "shr"):
            raise ValueError(f"{self.op}: operand dtypes differ ({self.a.dtype}, {self.b.dtype})")
        if self.op == "dot4" and self.a.dtype != "int32":
            raise ValueError(f"dot4 of {self.a.dtype}s: it sums the bytes of int32s")
        if not self.dtype:
            object.__setattr__(self, "dtype", "bool" if self.op in COMPARISONS else self.a.dtype)

    def __str__(self) -> str:
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(self.op)
        if symbol:
            return f"({self.a} {symbol} {self.b})"
        return f"{self.op}({self.a}, {self.b})"


@dataclass(frozen=True, slots=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr
    dtype: str = ""

    def __post_init__(self) -> None:
        if self.cond.dtype != "bool":
            raise ValueError("select condition must be bool")
        if self.a.dtype != self.b.dtype:
            raise ValueError(f"select arms differ ({self.a.dtype}, {self.b.dtype})")
        if not self.dtype:
            object.__setattr__(self, "dtype", self.a.dtype)

    def __str__(self) -> str:
        return f"select({self.cond}, {self.a}, {self.b})"


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    x: Expr
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}({self.x})"


@dataclass(frozen=True, slots=True)
class Bitcast(Expr):
    """``x``'s bits read as ``dtype`` (of the same width in registers): a float32's as a uint32,
    an encoded type's (see :data:`ENCODED_DTYPES`) as its code."""

    x: Expr
    dtype: str

    def __str__(self) -> str:
        return f"bits_{self.dtype}({self.x})"


@dataclass(frozen=True, slots=True)
class LaneFold(Expr):
    """``op`` folded over ``lanes`` consecutive elements along the last axis, from ``x`` on:
    ``op(x[..., i], x[..., i + 1], ..., x[..., i + lanes - 1])``, in any order (``op`` is
    associative and commutative: ``add``, ``mul``, ``max``, ``min``, ``or``, ``and``). A
    vector's horizontal fold: codegen reads the elements as one vector and halves it
    ``log2(lanes)`` times (:mod:`polyonnx.krnl.partials` folds its partials with it).

    Example:
        >>> print(LaneFold("max", Load("part", (Aff.var("i"), Aff.lift(0)), "float32"), 16))
        max_lanes(part[i, 0:16])
    """

    op: str
    x: Load
    lanes: int
    dtype: str = ""

    def __post_init__(self) -> None:
        if self.op not in LANE_FOLD_OPS:
            raise ValueError(f"{self.op!r} is no associative fold ({', '.join(LANE_FOLD_OPS)})")
        if self.lanes < 1 or self.lanes & (self.lanes - 1):
            raise ValueError(f"lane fold over {self.lanes} lanes: a power of two is needed")
        if not isinstance(self.x.index[-1], Aff):
            raise ValueError("a lane fold's lanes run along an affine last index")
        if not self.dtype:
            object.__setattr__(self, "dtype", self.x.dtype)

    def __str__(self) -> str:
        first = self.x.index[-1]
        *outer, _ = (str(i) for i in self.x.index)
        span = f"{first}:{first + self.lanes}" if isinstance(first, Aff) else "?"
        return f"{self.op}_lanes({self.x.buffer}[{', '.join([*outer, span])}])"


LANE_FOLD_OPS = ("add", "mul", "max", "min", "or", "and")


def unary(op: str, x: Expr) -> Unary:
    return Unary(op, x)


def binary(op: str, a: Expr, b: Expr | float) -> Binary:
    return Binary(op, a, b if isinstance(b, Expr) else Const(b, a.dtype))


def maximum(a: Expr, b: Expr | float) -> Binary:
    return binary("max", a, b)


def minimum(a: Expr, b: Expr | float) -> Binary:
    return binary("min", a, b)


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e`` (including run-time computed load indices)."""
    if isinstance(e, Load):
        return tuple(i for i in e.index if isinstance(i, Expr))
    if isinstance(e, Unary | Cast | Bitcast | LaneFold):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Select):
        return (e.cond, e.a, e.b)
    return ()


def map_children(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """``e`` with each direct sub-expression (see :func:`children`) replaced by ``f(sub)``:
    the one place rewrites of expression trees recurse through."""
    if isinstance(e, Load):
        return replace(e, index=tuple(f(i) if isinstance(i, Expr) else i for i in e.index))
    if isinstance(e, Unary | Cast | Bitcast):
        return replace(e, x=f(e.x))
    if isinstance(e, LaneFold):
        x = f(e.x)
        if not isinstance(x, Load):
            raise TypeError(f"{e}: a lane fold reads a buffer; its load became {x}")
        return replace(e, x=x)
    if isinstance(e, Binary):
        return replace(e, a=f(e.a), b=f(e.b))
    if isinstance(e, Select):
        return replace(e, cond=f(e.cond), a=f(e.a), b=f(e.b))
    return e


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of ``e``, pre-order."""
    yield e
    for c in children(e):
        yield from walk(c)


def loads(e: Expr) -> tuple[Load, ...]:
    """Every load of ``e`` (a lane fold's by its first element: see :func:`read_spans`)."""
    return tuple(x for x in walk(e) if isinstance(x, Load))


def read_spans(e: Expr) -> tuple[tuple[Load, int], ...]:
    """Every load of ``e`` with the elements it reads along the last axis from its index on:
    1, or a lane fold's lanes."""
    folded = {id(x.x): x.lanes for x in walk(e) if isinstance(x, LaneFold)}
    return tuple((ld, folded.get(id(ld), 1)) for ld in loads(e))


# --------------------------------------------------------------------------- statements and loops


@dataclass(frozen=True, slots=True, init=False)
class Access:
    """An affine write target ``buffer[index]`` (integers in ``index`` become constants)."""

    buffer: str
    index: tuple[Aff, ...]

    def __init__(self, buffer: str, index: Iterable[AffLike]) -> None:
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "index", tuple(Aff.lift(i) for i in index))

    def __str__(self) -> str:
        return f"{self.buffer}[{', '.join(str(i) for i in self.index)}]"


@dataclass(frozen=True, slots=True)
class Stmt:
    """``write = body`` for every point of the domain (enclosing loops and ``guards``)."""

    name: str
    write: Access
    body: Expr
    guards: tuple[Cond, ...] = ()

    def __str__(self) -> str:
        guard = f"  if {' and '.join(str(g) for g in self.guards)}" if self.guards else ""
        return f"{self.name}: {self.write} = {self.body}{guard}"


@dataclass(frozen=True, slots=True, init=False)
class Loop:
    """``for iterator in [lower, upper)`` over ``body`` (statements and inner loops); integer
    bounds become constants."""

    iterator: str
    lower: Aff
    upper: Aff
    body: tuple[Node, ...]

    def __init__(self, iterator: str, lower: AffLike, upper: AffLike, body: Iterable[Node]) -> None:
        object.__setattr__(self, "iterator", iterator)
        object.__setattr__(self, "lower", Aff.lift(lower))
        object.__setattr__(self, "upper", Aff.lift(upper))
        object.__setattr__(self, "body", tuple(body))


Node = Loop | Stmt
IndexT = TypeVar("IndexT", Aff, Index)  # an index: affine (a write) or also computed (a load)


def loop_box(loops: Iterable[Loop]) -> dict[str, tuple[int, int]]:
    """The inclusive range of each iterator of ``loops`` (outermost first), a bound that
    depends on outer loops taken at its extremes: the box around the nest's iterations."""
    box: dict[str, tuple[int, int]] = {}
    for lp in loops:
        box[lp.iterator] = (lp.lower.extremes(box)[0], lp.upper.extremes(box)[1] - 1)
    return box


def perfect_nest(node: Node) -> tuple[list[Loop], Stmt] | None:
    """The loops of a perfect nest from ``node`` down and the statement below them, or None
    when some loop has more than one child."""
    loops: list[Loop] = []
    while isinstance(node, Loop):
        if len(node.body) != 1:
            return None
        loops.append(node)
        node = node.body[0]
    return loops, node


def substitute(node: Node, at: Mapping[str, Aff]) -> Node:
    """``node`` with each iterator of ``at`` replaced by its affine expression, wherever it
    appears: write and load indices, guards, loop bounds.

    Example:
        >>> s = Stmt("S", Access("y", (Aff.var("i"),)), Load("x", (Aff.var("i") + 1,), "float32"))
        >>> print(substitute(s, {"i": Aff.var("j") + 2}))
        S: y[j + 2] = x[j + 3]
    """

    def expr(e: Expr) -> Expr:
        e = map_children(e, expr)
        if isinstance(e, Load):
            return replace(
                e, index=tuple(i.substitute(at) if isinstance(i, Aff) else i for i in e.index)
            )
        return e

    if isinstance(node, Stmt):
        return replace(
            node,
            write=Access(node.write.buffer, tuple(i.substitute(at) for i in node.write.index)),
            body=expr(node.body),
            guards=tuple(replace(g, aff=g.aff.substitute(at)) for g in node.guards),
        )
    return Loop(
        node.iterator,
        node.lower.substitute(at),
        node.upper.substitute(at),
        tuple(substitute(c, at) for c in node.body),
    )


def rename_buffers(nodes: tuple[Node, ...], names: Mapping[str, str]) -> tuple[Node, ...]:
    """``nodes`` with every access to buffer ``b`` (write or load) going to ``names[b]``;
    buffers not in ``names`` keep theirs."""
    return move_buffers(nodes, {b: (to, ()) for b, to in names.items()})


def move_buffers(
    nodes: tuple[Node, ...], moves: Mapping[str, tuple[str, tuple[int, ...]]]
) -> tuple[Node, ...]:
    """``nodes`` with every access ``b[i...]`` (write or load) going to ``to[i + offset...]``
    for ``moves[b] = (to, offset)`` (an empty offset: none); a computed index (a gather's)
    moves by an addition in its own integer type."""

    def index(buffer: str, idx: tuple[IndexT, ...]) -> tuple[str, tuple[IndexT, ...]]:
        if buffer not in moves:
            return buffer, idx
        to, offset = moves[buffer]
        if not offset:
            return to, idx
        return to, tuple(_shifted(i, o) for i, o in zip(idx, offset, strict=True))  # type: ignore[misc]

    def expr(e: Expr) -> Expr:
        e = map_children(e, expr)
        if not isinstance(e, Load):
            return e
        buffer, idx = index(e.buffer, e.index)
        return replace(e, buffer=buffer, index=idx)

    def node(n: Node) -> Node:
        if isinstance(n, Stmt):
            return replace(
                n, write=Access(*index(n.write.buffer, n.write.index)), body=expr(n.body)
            )
        return replace(n, body=tuple(node(c) for c in n.body))

    return tuple(node(n) for n in nodes)


def _shifted(i: Aff | Expr, offset: int) -> Aff | Expr:
    if isinstance(i, Aff):
        return i + offset
    return i if offset == 0 else binary("add", i, Const(offset, i.dtype))


@dataclass(frozen=True, slots=True)
class Buffer:
    """A dense row-major array. ``kind``: input, output (live after the kernel) or temp."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str = "temp"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"buffer {self.name}: unknown dtype {self.dtype!r}")
        if self.kind not in ("input", "output", "temp"):
            raise ValueError(f"buffer {self.name}: unknown kind {self.kind!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        short = {"input": "in", "output": "out", "temp": "tmp"}[self.kind]
        return f"{short} {self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, slots=True)
class Border:
    """Value ``value`` stored inside the zero-bordered buffer :attr:`buffer`: element ``i`` of
    the value at ``i + begin``, ``begin`` and ``end`` zero elements before and after it along
    each axis (see :mod:`polyonnx.krnl.borders`)."""

    value: str
    begin: tuple[int, ...]
    end: tuple[int, ...]

    @property
    def buffer(self) -> str:
        return f"{self.value}__bordered"

    def shape(self, value_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The buffer's shape around a value of ``value_shape``."""
        return tuple(
            lo + n + hi for lo, n, hi in zip(self.begin, value_shape, self.end, strict=True)
        )

    def covers(self, begin: tuple[int, ...], end: tuple[int, ...]) -> bool:
        """Whether the border is at least ``begin`` / ``end`` wide along every axis."""
        return all(
            have >= want
            for have, want in zip((*self.begin, *self.end), (*begin, *end), strict=True)
        )


@dataclass(frozen=True, slots=True)
class Kernel:
    """One compiled function: its buffers (the function's arguments, in order) and loop tree."""

    name: str
    buffers: tuple[Buffer, ...]
    body: tuple[Node, ...]
    ops: tuple[str, ...] = field(default=())
    """The ONNX node names this kernel computes (for listings and error messages)."""

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def statements(self) -> list[tuple[tuple[Loop, ...], Stmt]]:
        """Each statement with its enclosing loops, in program order."""
        out: list[tuple[tuple[Loop, ...], Stmt]] = []

        def visit(nodes: tuple[Node, ...], loops: tuple[Loop, ...]) -> None:
            for n in nodes:
                if isinstance(n, Stmt):
                    out.append((loops, n))
                else:
                    visit(n.body, loops + (n,))

        visit(self.body, ())
        return out

    def __str__(self) -> str:
        lines = [f"kernel {self.name}({', '.join(str(b) for b in self.buffers)}) {{"]

        def emit(nodes: tuple[Node, ...], depth: int) -> None:
            pad = "  " * depth
            for n in nodes:
                if isinstance(n, Stmt):
                    lines.append(pad + str(n))
                else:
                    lines.append(f"{pad}for {n.iterator} in [{n.lower}, {n.upper}):")
                    emit(n.body, depth + 1)

        emit(self.body, 1)
        lines.append("}")
        return "\n".join(lines)
