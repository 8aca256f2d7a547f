"""RegexFullMatch: each string stepped through a DFA compiled from the pattern at compile time.

The pattern (:mod:`polyonnx.krnl.lower.dfa`) becomes four constant tables: the first code
point of each interval of the alphabet (``bounds``, a power of two long), the class of each
interval (``klass``), the transitions (``delta[state, class]``) and the accepting states. A
string's code points are read in order; each one's interval is found by a binary search of
fixed depth ``log2(len(bounds))`` (one statement a level), and the state steps. Padding (the
code point 0 past a string's end) is a class of its own that leaves the state as it is, so the
state after the last code point is the state after the padding::

    for i:  S: state[i] = 0
            for w:  S: lo[i] = 0
                    S: lo[i] = bounds[lo[i] + h] <= x[i, w] ? lo[i] + h : lo[i]  (h = P/2 .. 1)
                    S: state[i] = delta[state[i], klass[lo[i]]]
            S: y[i] = accept[state[i]]

``O(W log P)`` per string, whatever the pattern.
"""

from __future__ import annotations

from polyonnx.graph.ir import Node
from polyonnx.graph.strings import CODE_POINT, string_width
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import bad_attr, generic_iters, nest, unsupported, var
from polyonnx.krnl.lower.dfa import BadPattern, UnsupportedPattern, compile_pattern
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

I64 = "int64"


@register("RegexFullMatch", since=20)
def lower_regex_full_match(node: Node, ctx: LowerContext) -> Lowered:
    """RegexFullMatch: whether each string matches ``pattern`` as a whole (see the module
    docstring). ModelError for a pattern that does not parse, UnsupportedOpError for one a
    DFA cannot express (backreferences, lookaround) or whose DFA is too large.

    Example: ``pattern="[a-z]+@(yahoo|gmail)\\.com"`` gives ``[True, False]`` for
    ``["ab@gmail.com", "ab@hotmail.com"]``.
    """
    x, y = node.input(0), node.outputs[0]
    width = string_width(ctx.dtype(x))
    if width is None:
        raise unsupported(node, ctx, f"input {x!r} of type {ctx.dtype(x)} (it takes strings)")
    raw = node.attr("pattern")
    if raw is None:
        raise bad_attr(node, "pattern", "is required")
    pattern = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        dfa = compile_pattern(pattern)
    except BadPattern as e:
        raise bad_attr(node, "pattern", f"{pattern!r} is no regular expression: {e}") from None
    except UnsupportedPattern as e:
        raise unsupported(node, ctx, f"pattern {pattern!r}: {e} (it compiles to a DFA)") from None
    iters = generic_iters(ctx.shape(x))
    elem = tuple(var(n) for n, _ in iters)
    shape = tuple(e for _, e in iters)
    tables = {what: f"{node.name}__{what}" for what in ("bounds", "klass", "delta", "accept")}
    state = ir.Buffer(f"{node.name}__state", I64, shape)
    lo = ir.Buffer(f"{node.name}__lo", I64, shape)

    def at(buf: ir.Buffer) -> ir.Access:
        return ir.Access(buf.name, elem)

    def ld(buf: ir.Buffer) -> ir.Load:
        return ir.Load(buf.name, elem, I64)

    def table(what: str, index: ir.Expr, dtype: str) -> ir.Load:
        return ir.Load(tables[what], (index,), dtype)

    cp = ir.Load(x, (*elem, var("w")), CODE_POINT)
    search: list[ir.Node] = [ir.Stmt("S", at(lo), ir.Const(0, I64))]
    half = len(dfa.bounds) // 2
    while half:
        further = ld(lo) + ir.Const(half, I64)
        below = ir.Binary("le", table("bounds", further, CODE_POINT), cp)
        search.append(ir.Stmt("S", at(lo), ir.Select(below, further, ld(lo))))
        half //= 2
    klass = ir.Cast(table("klass", ld(lo), "int32"), I64)
    step = ir.Load(tables["delta"], (ld(state), klass), "int32")
    body = (
        ir.Stmt("S", at(state), ir.Const(0, I64)),
        ir.Loop("w", 0, width, (*search, ir.Stmt("S", at(state), ir.Cast(step, I64)))),
        ir.Stmt("S", ir.Access(y, elem), table("accept", ld(state), "bool")),
    )
    constants = (
        (tables["bounds"], dfa.bounds),
        (tables["klass"], dfa.klass),
        (tables["delta"], dfa.delta),
        (tables["accept"], dfa.accept),
    )
    if not all(shape):  # (no strings, no loops: the scheduler is given no empty nests)
        return Lowered(())
    return Lowered(nest(iters, body), (state, lo), constants=constants)
