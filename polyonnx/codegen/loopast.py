"""A small loop AST: what codegen consumes, read off the isl AST.

Keeping isl out of the LLVM emitter means the emitter can be tested on hand-built trees and the
isl AST is walked in exactly one place (:func:`from_isl`).

Example:
    >>> str(For("c0", IConst(0), IOp("le", (IVar("c0"), IConst(3))), 1,
    ...         (Call("S0", (IVar("c0"),)),)))
    'for (c0 = 0; (c0 <= 3); c0 += 1) { S0(c0); }'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import islpy as isl

from polyonnx.errors import CodegenError


@dataclass(frozen=True, slots=True)
class IVar:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class IConst:
    value: int

    def __str__(self) -> str:
        return str(self.value)


_SYMBOLS = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "le": "<=",
    "lt": "<",
    "ge": ">=",
    "gt": ">",
    "eq": "==",
    "and": "&&",
    "or": "||",
}


@dataclass(frozen=True, slots=True)
class IOp:
    """An integer/boolean operation with isl's semantics (``fdiv_q`` rounds down, ``pdiv_q``
    and ``pdiv_r`` take a non-negative dividend, ``select`` picks by its first argument)."""

    op: str
    args: tuple[IExpr, ...]

    def __str__(self) -> str:
        if self.op in _SYMBOLS and len(self.args) == 2:
            return f"({self.args[0]} {_SYMBOLS[self.op]} {self.args[1]})"
        return f"{self.op}({', '.join(map(str, self.args))})"


IExpr = IVar | IConst | IOp


@dataclass(frozen=True, slots=True)
class Call:
    """Execute statement ``stmt`` at the instance given by ``args`` (one per domain dim)."""

    stmt: str
    args: tuple[IExpr, ...]

    def __str__(self) -> str:
        return f"{self.stmt}({', '.join(map(str, self.args))});"


@dataclass(frozen=True, slots=True)
class For:
    iterator: str
    init: IExpr
    cond: IExpr
    inc: int
    body: tuple[LNode, ...]

    def __str__(self) -> str:
        inner = " ".join(map(str, self.body))
        return (
            f"for ({self.iterator} = {self.init}; {self.cond}; {self.iterator} += {self.inc})"
            f" {{ {inner} }}"
        )


@dataclass(frozen=True, slots=True)
class If:
    cond: IExpr
    then: tuple[LNode, ...]
    orelse: tuple[LNode, ...] = ()

    def __str__(self) -> str:
        text = f"if ({self.cond}) {{ {' '.join(map(str, self.then))} }}"
        return text + (f" else {{ {' '.join(map(str, self.orelse))} }}" if self.orelse else "")


@dataclass(frozen=True, slots=True)
class Mark:
    """An isl mark node: a hint (``parallel``, ``vector``, ``unroll`` ...) for its subtree."""

    name: str
    body: tuple[LNode, ...]

    def __str__(self) -> str:
        return f"// {self.name}\n{{ {' '.join(map(str, self.body))} }}"


LNode = For | If | Mark | Call


def marked_loop(node: LNode, name: str) -> For | None:
    """The loop a ``name`` mark (``vector``, ``unroll``...) holds when ``node`` is that mark
    around one loop, else None."""
    if isinstance(node, Mark) and node.name == name and len(node.body) == 1:
        loop = node.body[0]
        return loop if isinstance(loop, For) else None
    return None


def calls(node: LNode) -> Iterator[Call]:
    """The statement calls in ``node``'s subtree."""
    if isinstance(node, Call):
        yield node
    elif isinstance(node, If):
        for child in (*node.then, *node.orelse):
            yield from calls(child)
    else:
        for child in node.body:
            yield from calls(child)


# (islpy's stubs omit the members named after keywords: and_, or_, for_, if_.)
_OPS = {
    isl.ast_expr_op_type.add: "add",
    isl.ast_expr_op_type.sub: "sub",
    isl.ast_expr_op_type.mul: "mul",
    isl.ast_expr_op_type.minus: "neg",
    isl.ast_expr_op_type.div: "div",
    isl.ast_expr_op_type.fdiv_q: "fdiv_q",
    isl.ast_expr_op_type.pdiv_q: "pdiv_q",
    isl.ast_expr_op_type.pdiv_r: "pdiv_r",
    isl.ast_expr_op_type.zdiv_r: "zdiv_r",
    isl.ast_expr_op_type.min: "min",
    isl.ast_expr_op_type.max: "max",
    isl.ast_expr_op_type.eq: "eq",
    isl.ast_expr_op_type.le: "le",
    isl.ast_expr_op_type.lt: "lt",
    isl.ast_expr_op_type.ge: "ge",
    isl.ast_expr_op_type.gt: "gt",
    isl.ast_expr_op_type.and_: "and",  # type: ignore[attr-defined]
    isl.ast_expr_op_type.and_then: "and",
    isl.ast_expr_op_type.or_: "or",  # type: ignore[attr-defined]
    isl.ast_expr_op_type.or_else: "or",
    isl.ast_expr_op_type.select: "select",
    isl.ast_expr_op_type.cond: "select",
}


def expr_from_isl(e: isl.AstExpr) -> IExpr:
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        return IConst(int(e.get_val().to_python()))
    if kind == isl.ast_expr_type.id:
        return IVar(e.get_id().get_name())
    op = e.get_op_type()
    if op not in _OPS:
        raise CodegenError(f"isl AST expression op {op} is not supported")
    return IOp(_OPS[op], tuple(expr_from_isl(e.get_op_arg(i)) for i in range(e.get_op_n_arg())))


def from_isl(node: isl.AstNode) -> tuple[LNode, ...]:
    """Convert an isl AST into loop-AST nodes."""
    kind = node.get_type()
    if kind == isl.ast_node_type.block:
        children = node.block_get_children()
        return tuple(x for i in range(children.n_ast_node()) for x in from_isl(children.get_at(i)))
    if kind == isl.ast_node_type.for_:  # type: ignore[attr-defined]
        inc = expr_from_isl(node.for_get_inc())
        if not isinstance(inc, IConst):
            raise CodegenError("non-constant loop increment")
        return (
            For(
                node.for_get_iterator().get_id().get_name(),
                expr_from_isl(node.for_get_init()),
                expr_from_isl(node.for_get_cond()),
                inc.value,
                from_isl(node.for_get_body()),
            ),
        )
    if kind == isl.ast_node_type.if_:  # type: ignore[attr-defined]
        orelse = from_isl(node.if_get_else_node()) if node.if_has_else_node() else ()
        return (If(expr_from_isl(node.if_get_cond()), from_isl(node.if_get_then_node()), orelse),)
    if kind == isl.ast_node_type.user:
        call = node.user_get_expr()
        target = call.get_op_arg(0).get_id().get_name()
        return (
            Call(
                target,
                tuple(expr_from_isl(call.get_op_arg(i)) for i in range(1, call.get_op_n_arg())),
            ),
        )
    if kind == isl.ast_node_type.mark:
        return (Mark(node.mark_get_id().get_name(), from_isl(node.mark_get_node())),)
    raise CodegenError(f"unexpected isl AST node type {kind}")


def to_data(nodes: tuple[LNode, ...]) -> list:
    """A JSON-able form of a loop AST (for the compile cache; no pickle)."""

    def expr(e: IExpr) -> object:
        if isinstance(e, IVar):
            return e.name
        if isinstance(e, IConst):
            return e.value
        return [e.op, *map(expr, e.args)]

    def node(n: LNode) -> list:
        if isinstance(n, For):
            return ["for", n.iterator, expr(n.init), expr(n.cond), n.inc, to_data(n.body)]
        if isinstance(n, If):
            return ["if", expr(n.cond), to_data(n.then), to_data(n.orelse)]
        if isinstance(n, Mark):
            return ["mark", n.name, to_data(n.body)]
        return ["call", n.stmt, [expr(a) for a in n.args]]

    return [node(n) for n in nodes]


def from_data(data: list) -> tuple[LNode, ...]:
    """Inverse of :func:`to_data`."""

    def expr(e: object) -> IExpr:
        if isinstance(e, str):
            return IVar(e)
        if isinstance(e, int):
            return IConst(e)
        assert isinstance(e, list)
        return IOp(e[0], tuple(expr(a) for a in e[1:]))

    def node(n: list) -> LNode:
        kind = n[0]
        if kind == "for":
            return For(n[1], expr(n[2]), expr(n[3]), n[4], from_data(n[5]))
        if kind == "if":
            return If(expr(n[1]), from_data(n[2]), from_data(n[3]))
        if kind == "mark":
            return Mark(n[1], from_data(n[2]))
        return Call(n[1], tuple(expr(a) for a in n[2]))

    return tuple(node(n) for n in data)
