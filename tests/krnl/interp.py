"""A slow reference interpreter for krnl kernels — for tests only, never imported by polyonnx.

It walks the loop tree in program order and executes every statement instance scalar by scalar,
with numpy scalars of the buffers' dtypes so arithmetic rounds like C (float32 stays float32).
Out-of-bounds accesses raise ``IndexError`` instead of wrapping around like numpy indexing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from polyonnx.krnl import ir

Env = dict[str, int]
Scalar = np.generic


def interpret(kernel: ir.Kernel, arrays: dict[str, np.ndarray]) -> None:
    """Run ``kernel`` on ``arrays`` (buffer name -> array), writing outputs and temps in place.

    Missing non-input buffers are allocated (temps zero-filled); inputs must be given.
    """
    for b in kernel.buffers:
        if b.name not in arrays:
            if b.kind == "input":
                raise KeyError(f"input buffer {b.name} not given")
            arrays[b.name] = np.zeros(b.shape, b.dtype)
        a = arrays[b.name]
        if a.shape != b.shape or a.dtype != np.dtype(b.dtype):
            raise ValueError(
                f"buffer {b.name}: array is {a.dtype}{list(a.shape)}, kernel "
                f"expects {b.dtype}{list(b.shape)}"
            )
    run = _compile_nodes(kernel.body, arrays)
    with np.errstate(all="ignore"):
        run({})


def _compile_nodes(
    nodes: tuple[ir.Node, ...], arrays: dict[str, np.ndarray]
) -> Callable[[Env], None]:
    parts = [
        _compile_loop(n, arrays) if isinstance(n, ir.Loop) else _compile_stmt(n, arrays)
        for n in nodes
    ]

    def run(env: Env) -> None:
        for p in parts:
            p(env)

    return run


def _compile_loop(loop: ir.Loop, arrays: dict[str, np.ndarray]) -> Callable[[Env], None]:
    lower, upper = _aff(loop.lower), _aff(loop.upper)
    body = _compile_nodes(loop.body, arrays)
    name = loop.iterator

    def run(env: Env) -> None:
        for v in range(lower(env), upper(env)):
            env[name] = v
            body(env)
        env.pop(name, None)

    return run


def _compile_stmt(stmt: ir.Stmt, arrays: dict[str, np.ndarray]) -> Callable[[Env], None]:
    target = arrays[stmt.write.buffer]
    index = _index(stmt.write.buffer, stmt.write.index, arrays)
    body = _expr(stmt.body, arrays)
    guards = [(_aff(g.aff), g.eq) for g in stmt.guards]
    scalar = target.dtype.type

    def run(env: Env) -> None:
        for g, eq in guards:
            v = g(env)
            if (v != 0) if eq else (v < 0):
                return
        target[index(env)] = scalar(body(env))

    return run


def _aff(a: ir.Aff) -> Callable[[Env], int]:
    terms, const = a.terms, a.const
    return lambda env: const + sum(c * env[n] for n, c in terms)


def _index(
    buffer: str, index: tuple[ir.Index, ...], arrays: dict[str, np.ndarray]
) -> Callable[[Env], tuple[int, ...]]:
    shape = arrays[buffer].shape
    parts: list[Callable[[Env], int]] = []
    for i in index:
        if isinstance(i, ir.Aff):
            parts.append(_aff(i))
        else:
            f = _expr(i, arrays)
            parts.append(lambda env, f=f: int(f(env)))

    def at(env: Env) -> tuple[int, ...]:
        idx = tuple(p(env) for p in parts)
        for k, (i, n) in enumerate(zip(idx, shape, strict=True)):
            if not 0 <= i < n:
                raise IndexError(
                    f"{buffer}{list(idx)}: index {i} out of [0, {n}) on axis {k} at {env}"
                )
        return idx

    return at


def _sigmoid(x: Scalar) -> Scalar:
    one = type(x)(1)
    return one / (one + np.exp(-x))


def _c_div(a: Scalar, b: Scalar) -> Scalar:
    if isinstance(a, np.floating):
        return a / b
    q = abs(int(a)) // abs(int(b))  # C integer division truncates toward zero
    return type(a)(q if (a < 0) == (b < 0) else -q)


_UNARY: dict[str, Callable[[Scalar], object]] = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,
    "not": np.logical_not,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isposinf": np.isposinf,
    "isneginf": np.isneginf,
    "sign": np.sign,
    "bitnot": np.invert,
    "sigmoid": _sigmoid,
    "erf": lambda x: type(x)(math.erf(float(x))),
}


def _dot4(a: Scalar, b: Scalar) -> np.int32:
    """krnl's ``dot4``: ``a``'s four bytes (unsigned) times ``b``'s (signed), summed."""
    ua = np.asarray(a, np.int32).reshape(1).view(np.uint8).astype(np.int64)
    sb = np.asarray(b, np.int32).reshape(1).view(np.int8).astype(np.int64)
    return np.int32(ua @ sb)


_BINARY: dict[str, Callable[[Scalar, Scalar], object]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _c_div,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "mod": np.mod,
    "fmod": np.fmod,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
    "shl": np.left_shift,
    "shr": np.right_shift,
    "bitand": np.bitwise_and,
    "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor,
    "dot4": _dot4,
}


def _expr(e: ir.Expr, arrays: dict[str, np.ndarray]) -> Callable[[Env], Scalar]:
    out = np.dtype(e.dtype).type
    if isinstance(e, ir.Const):
        value = out(e.value)
        return lambda env: value
    if isinstance(e, ir.Iter):
        name = e.name
        return lambda env: out(env[name])
    if isinstance(e, ir.Load):
        arr = arrays[e.buffer]
        index = _index(e.buffer, e.index, arrays)
        return lambda env: arr[index(env)]
    if isinstance(e, ir.Unary):
        fn, x = _UNARY[e.op], _expr(e.x, arrays)
        return lambda env: out(fn(x(env)))
    if isinstance(e, ir.Binary):
        fn, a, b = _BINARY[e.op], _expr(e.a, arrays), _expr(e.b, arrays)
        return lambda env: out(fn(a(env), b(env)))
    if isinstance(e, ir.Select):
        c, a, b = _expr(e.cond, arrays), _expr(e.a, arrays), _expr(e.b, arrays)
        return lambda env: a(env) if c(env) else b(env)
    if isinstance(e, ir.Cast):
        x = _expr(e.x, arrays)
        return lambda env: out(x(env))
    if isinstance(e, ir.Bitcast):
        x, to = _expr(e.x, arrays), np.dtype(e.dtype)
        return lambda env: np.asarray(x(env)).view(to)[()]
    if isinstance(e, ir.LaneFold):
        arr, fn, lanes = arrays[e.x.buffer], _BINARY[e.op], e.lanes
        first = _index(e.x.buffer, e.x.index, arrays)

        def fold(env: Env) -> Scalar:
            *outer, at = first(env)
            value = arr[(*outer, at)]
            for k in range(1, lanes):
                value = out(fn(value, arr[(*outer, at + k)]))
            return value

        return fold
    raise TypeError(f"unknown expression {e!r}")
