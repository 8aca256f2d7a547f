"""Recurrent layers: RNN, GRU, LSTM.

Each direction is a time loop ``t`` whose body computes the gate pre-activations of every
batch row (a small matmul of ``X[t]`` with ``W`` and of the previous hidden state with ``R``,
into the temp ``<node>__gates``), then updates the state buffers ``<node>__h`` (and
``<node>__c``) in place and writes ``Y[t]``. The state written at step ``t`` is read at step
``t + 1``: a real loop-carried dependence, visible to isl through the accesses. For an RNN::

    for b, h:
      S: H[0, b, h] = initial_h[0, b, h]
    for t:
      for b, j:
        S: G[b, j] = (B[0, j] + B[0, H + j])
        for k:
          S: G[b, j] = (G[b, j] + (X[t, b, k] * W[0, j, k]))
        for k:
          S: G[b, j] = (G[b, j] + (H[0, b, k] * R[0, j, k]))
      for b, h:
        S: H[0, b, h] = tanh(G[b, h])
        S: Y[t, 0, b, h] = H[0, b, h]
    for b, h:
      S: Y_h[0, b, h] = H[0, b, h]

The reverse direction reads ``X[T-1-t]`` and writes ``Y[T-1-t]``. ``sequence_lens`` masks the
forward direction (state kept, ``Y`` zero past a row's length); a reverse pass over rows of
different lengths would need a data-dependent write position and is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from polyonnx.errors import ShapeError
from polyonnx.graph.ir import Node
from polyonnx.krnl import ir
from polyonnx.krnl.lower.common import (
    Aff,
    bad_attr,
    nest,
    require_float,
    str_attr,
    unsupported,
    var,
    zero,
)
from polyonnx.krnl.lower.gather import as_int64
from polyonnx.krnl.lower.registry import LowerContext, Lowered, register

Act = Callable[[ir.Expr], ir.Expr]

_ALPHA = {
    "Affine": 1.0,
    "LeakyRelu": 0.01,
    "ThresholdedRelu": 1.0,
    "ScaledTanh": 1.0,
    "HardSigmoid": 0.2,
    "Elu": 1.0,
}
_BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}


def _activation(
    node: Node, ctx: LowerContext, name: str, alpha: float | None, beta: float | None
) -> Act:
    a = _ALPHA.get(name, 0.0) if alpha is None else alpha
    b = _BETA.get(name, 0.0) if beta is None else beta
    if name == "Sigmoid":
        return lambda x: ir.unary("sigmoid", x)
    if name == "Tanh":
        return lambda x: ir.unary("tanh", x)
    if name == "Relu":
        return lambda x: ir.maximum(x, 0.0)
    if name == "Affine":
        return lambda x: x * a + b
    if name == "LeakyRelu":
        return lambda x: ir.Select(ir.binary("lt", x, 0.0), x * a, x)
    if name == "ThresholdedRelu":
        return lambda x: ir.Select(ir.binary("gt", x, a), x, zero(x.dtype))
    if name == "ScaledTanh":
        return lambda x: ir.unary("tanh", x * b) * a
    if name == "HardSigmoid":
        return lambda x: ir.maximum(ir.minimum(x * a + b, 1.0), 0.0)
    if name == "Elu":
        return lambda x: ir.Select(ir.binary("lt", x, 0.0), (ir.unary("exp", x) - 1.0) * a, x)
    if name == "Softsign":
        return lambda x: x / (ir.unary("abs", x) + 1.0)
    if name == "Softplus":
        return lambda x: ir.unary("log", ir.unary("exp", x) + 1.0)
    raise unsupported(node, ctx, f"activation {name!r}")


def _activations(
    node: Node, ctx: LowerContext, defaults: Sequence[str], directions: int
) -> list[list[Act]]:
    """Per direction, the activation functions (f, g[, h]) with their alpha/beta."""
    names = [
        str(n.decode() if isinstance(n, bytes) else n) for n in node.attr("activations", ())
    ] or list(defaults) * directions
    per = len(defaults)
    if len(names) == per and directions == 2:
        names = names * 2
    if len(names) != per * directions:
        raise bad_attr(node, "activations", f"must list {per * directions} functions, got {names}")
    # The alpha and beta lists are consumed in order by the functions that take them.
    alphas = list(node.attr("activation_alpha", ()))[::-1]
    betas = list(node.attr("activation_beta", ()))[::-1]
    acts: list[Act] = []
    for name in names:
        # Canonical names are case-sensitive in the spec; accept any case like onnxruntime.
        canonical = {
            n.lower(): n
            for n in (
                "Sigmoid",
                "Tanh",
                "Relu",
                "Affine",
                "LeakyRelu",
                "ThresholdedRelu",
                "ScaledTanh",
                "HardSigmoid",
                "Elu",
                "Softsign",
                "Softplus",
            )
        }.get(name.lower(), name)
        alpha = float(alphas.pop()) if canonical in _ALPHA and alphas else None
        beta = float(betas.pop()) if canonical in _BETA and betas else None
        acts.append(_activation(node, ctx, canonical, alpha, beta))
    return [acts[d * per : (d + 1) * per] for d in range(directions)]


class _Rnn:
    """Shapes, layouts and the shared pieces of the three recurrent lowerings."""

    def __init__(
        self, node: Node, ctx: LowerContext, gates: int, default_acts: Sequence[str]
    ) -> None:
        self.node, self.ctx = node, ctx
        self.x, self.w, self.r = node.input(0), node.input(1), node.input(2)
        self.b, self.lens, self.h0 = node.input(3), node.input(4), node.input(5)
        self.dtype = require_float(node, ctx, self.x)
        self.layout = int(node.attr("layout", 0))
        if self.layout not in (0, 1):
            raise bad_attr(node, "layout", f"must be 0 or 1, got {self.layout}")
        xs = ctx.shape(self.x)
        if len(xs) != 3:
            raise ShapeError(f"node {node.name!r} ({node.op_type}): X must be 3-D, got {xs}")
        self.seq, self.batch = (xs[0], xs[1]) if self.layout == 0 else (xs[1], xs[0])
        self.inp = xs[2]
        direction = str_attr(node, "direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise bad_attr(node, "direction", f"has unknown value {direction!r}")
        self.directions = 2 if direction == "bidirectional" else 1
        self.reverse = (
            [direction == "reverse", True][: self.directions]
            if direction != "bidirectional"
            else [False, True]
        )
        ws = ctx.shape(self.w)
        self.gates = gates
        self.hidden = ws[1] // gates
        hs = node.attr("hidden_size")
        if hs is not None and int(hs) != self.hidden:
            raise bad_attr(node, "hidden_size", f"= {hs} disagrees with W {ws}")
        if ws[0] != self.directions or ws[2] != self.inp:
            raise ShapeError(
                f"node {node.name!r} ({node.op_type}): W {ws} does not match "
                f"{self.directions} direction(s) and input size {self.inp}"
            )
        clip = node.attr("clip")
        self.clip = float(clip) if clip is not None else None
        self.acts = _activations(node, ctx, default_acts, self.directions)
        self.temps: list[ir.Buffer] = []
        self.h = self.temp("h", (self.directions, self.batch, self.hidden))
        self.g = self.temp("gates", (self.batch, gates * self.hidden))
        self.mask_lens = self._sequence_lens()

    def temp(self, what: str, shape: tuple[int, ...]) -> str:
        buf = ir.Buffer(f"{self.node.name}__{what}", self.dtype, shape)
        self.temps.append(buf)
        return buf.name

    def _sequence_lens(self) -> bool:
        if not self.lens:
            return False
        value = self.ctx.constant(self.lens)
        if value is not None and bool(np.all(np.asarray(value) == self.seq)):
            return False  # every row runs the full length: nothing to mask
        if any(self.reverse):
            raise unsupported(
                self.node,
                self.ctx,
                "sequence_lens with a reverse direction (rows of different lengths)",
            )
        return True

    # ---- indices for the two layouts
    def x_at(self, t: Aff, b: Aff, k: Aff) -> ir.Load:
        index = (t, b, k) if self.layout == 0 else (b, t, k)
        return ir.Load(self.x, index, self.dtype)

    def y_index(self, t: Aff, d: int, b: Aff, h: Aff) -> tuple[Aff, ...]:
        return (t, Aff.lift(d), b, h) if self.layout == 0 else (b, t, Aff.lift(d), h)

    def state_index(self, d: int, b: Aff, h: Aff) -> tuple[Aff, ...]:
        """Index of initial_h / Y_h / initial_c / Y_c."""
        return (Aff.lift(d), b, h) if self.layout == 0 else (b, Aff.lift(d), h)

    def bias(self, d: int, j: Aff, recurrent: bool) -> ir.Expr | None:
        if not self.b:
            return None
        offset = self.gates * self.hidden if recurrent else 0
        return ir.Load(self.b, (Aff.lift(d), j + offset), self.dtype)

    def clipped(self, e: ir.Expr) -> ir.Expr:
        if self.clip is None:
            return e
        return ir.minimum(ir.maximum(e, -self.clip), self.clip)

    def time(self, d: int) -> Aff:
        return Aff.lift(self.seq - 1) - var("t") if self.reverse[d] else var("t")

    def active(self) -> ir.Expr:
        """``t < sequence_lens[b]`` (only used when masking)."""
        length = as_int64(ir.Load(self.lens, (var("b"),), self.ctx.dtype(self.lens)))
        return ir.Binary("lt", ir.Iter("t"), length)

    def masked(self, new: ir.Expr, old: ir.Expr) -> ir.Expr:
        return ir.Select(self.active(), new, old) if self.mask_lens else new

    def init_state(self, buf: str, d: int, initial: str) -> tuple[ir.Node, ...]:
        b, h = var("b"), var("h")
        value: ir.Expr = (
            ir.Load(initial, self.state_index(d, b, h), self.dtype) if initial else zero(self.dtype)
        )
        return nest(
            [("b", self.batch), ("h", self.hidden)],
            (ir.Stmt("S", ir.Access(buf, (Aff.lift(d), b, h)), value),),
        )

    def preact(
        self, d: int, lo: int, n: int, *, hidden_term: bool = True, recurrent_bias: bool = True
    ) -> tuple[ir.Node, ...]:
        """``G[b, lo + j] = Wb + Rb + X[t] . W[lo + j] + H . R[lo + j]`` for ``j < n``."""
        b, j, k = var("b"), var("j"), var("k")
        gj = j + lo
        at = ir.Access(self.g, (b, gj))
        cur = ir.Load(self.g, at.index, self.dtype)
        init: ir.Expr = zero(self.dtype)
        for bias in (self.bias(d, gj, False), self.bias(d, gj, True) if recurrent_bias else None):
            if bias is not None:
                init = bias if isinstance(init, ir.Const) else init + bias
        body: list[ir.Node] = [ir.Stmt("S", at, init)]
        body += nest(
            [("k", self.inp)],
            (
                ir.Stmt(
                    "S",
                    at,
                    cur
                    + self.x_at(self.time(d), b, k)
                    * ir.Load(self.w, (Aff.lift(d), gj, k), self.dtype),
                ),
            ),
        )
        if hidden_term:
            body += nest(
                [("k", self.hidden)],
                (
                    ir.Stmt(
                        "S",
                        at,
                        cur
                        + ir.Load(self.h, (Aff.lift(d), b, k), self.dtype)
                        * ir.Load(self.r, (Aff.lift(d), gj, k), self.dtype),
                    ),
                ),
            )
        return nest([("b", self.batch), ("j", n)], body)

    def gate(self, offset: int) -> ir.Load:
        """The gate value ``G[b, offset*H + h]`` inside a ``b, h`` nest."""
        return ir.Load(self.g, (var("b"), var("h") + offset * self.hidden), self.dtype)

    def outputs(self, d: int, states: Sequence[tuple[str, str]]) -> tuple[ir.Node, ...]:
        """After the time loop: Y_h (and Y_c) from the state buffers."""
        b, h = var("b"), var("h")
        stmts = [
            ir.Stmt(
                "S",
                ir.Access(out, self.state_index(d, b, h)),
                ir.Load(buf, (Aff.lift(d), b, h), self.dtype),
            )
            for out, buf in states
            if out
        ]
        return nest([("b", self.batch), ("h", self.hidden)], stmts) if stmts else ()

    def write_y(self, d: int) -> list[ir.Stmt]:
        y = self.node.outputs[0] if self.node.outputs else ""
        if not y:
            return []
        b, h = var("b"), var("h")
        value: ir.Expr = ir.Load(self.h, (Aff.lift(d), b, h), self.dtype)
        if self.mask_lens:
            value = ir.Select(self.active(), value, zero(self.dtype))
        return [ir.Stmt("S", ir.Access(y, self.y_index(self.time(d), d, b, h)), value)]

    def output(self, k: int) -> str:
        return self.node.outputs[k] if len(self.node.outputs) > k else ""


@register("RNN")
def lower_rnn(node: Node, ctx: LowerContext) -> Lowered:
    """Simple RNN: ``H = f(X W^T + H R^T + Wb + Rb)``."""
    s = _Rnn(node, ctx, 1, ("Tanh",))
    nests: list[ir.Node] = []
    b, h = var("b"), var("h")
    for d in range(s.directions):
        f = s.acts[d][0]
        h_at = ir.Access(s.h, (Aff.lift(d), b, h))
        update = ir.Stmt(
            "S", h_at, s.masked(f(s.clipped(s.gate(0))), ir.Load(s.h, h_at.index, s.dtype))
        )
        step = (
            *s.preact(d, 0, s.hidden),
            *nest([("b", s.batch), ("h", s.hidden)], (update, *s.write_y(d))),
        )
        nests += [
            *s.init_state(s.h, d, s.h0),
            ir.Loop("t", 0, s.seq, step),
            *s.outputs(d, [(s.output(1), s.h)]),
        ]
    return Lowered(tuple(nests), tuple(s.temps))


@register("GRU")
def lower_gru(node: Node, ctx: LowerContext) -> Lowered:
    """GRU (gates z, r, h): ``H = (1 - z) * h~ + z * H``, ``linear_before_reset`` either way."""
    s = _Rnn(node, ctx, 3, ("Sigmoid", "Tanh"))
    hidden, dtype = s.hidden, s.dtype
    linear_before_reset = int(node.attr("linear_before_reset", 0))
    rh = s.temp("rh", (s.batch, hidden)) if linear_before_reset else ""
    nests: list[ir.Node] = []
    b, h, j, k = var("b"), var("h"), var("j"), var("k")
    for d in range(s.directions):
        f, g = s.acts[d]
        # z and r: pre-activations, then f in place.
        zr_at = ir.Access(s.g, (b, j))
        zr = nest(
            [("b", s.batch), ("j", 2 * hidden)],
            (ir.Stmt("S", zr_at, f(s.clipped(ir.Load(s.g, zr_at.index, dtype)))),),
        )
        # h~: the input part, then the reset-gated recurrent part.
        hh_at = ir.Access(s.g, (b, j + 2 * hidden))
        hh = ir.Load(s.g, hh_at.index, dtype)
        r_gate = ir.Load(s.g, (b, j + hidden), dtype)
        rw = ir.Load(s.r, (Aff.lift(d), j + 2 * hidden, k), dtype)
        if linear_before_reset:
            rh_at = ir.Access(rh, (b, j))
            rh_load = ir.Load(rh, (b, j), dtype)
            rb = s.bias(d, j + 2 * hidden, True)
            recurrent: tuple[ir.Node, ...] = (
                ir.Stmt("S", rh_at, rb if rb is not None else zero(dtype)),
                *nest(
                    [("k", hidden)],
                    (ir.Stmt("S", rh_at, rh_load + ir.Load(s.h, (Aff.lift(d), b, k), dtype) * rw),),
                ),
                ir.Stmt("S", hh_at, hh + r_gate * rh_load),
            )
        else:
            rb = s.bias(d, j + 2 * hidden, True)
            r_k = ir.Load(s.g, (b, k + hidden), dtype)
            recurrent = (
                *((ir.Stmt("S", hh_at, hh + rb),) if rb is not None else ()),
                *nest(
                    [("k", hidden)],
                    (
                        ir.Stmt(
                            "S", hh_at, hh + r_k * ir.Load(s.h, (Aff.lift(d), b, k), dtype) * rw
                        ),
                    ),
                ),
            )
        hh_input = s.preact(d, 2 * hidden, hidden, hidden_term=False, recurrent_bias=False)
        # preact() gives one b, j nest; append the recurrent part and g into it.
        (b_loop,) = cast(tuple[ir.Loop], hh_input)
        (j_loop,) = cast(tuple[ir.Loop], b_loop.body)
        j_loop = ir.Loop(
            j_loop.iterator,
            j_loop.lower,
            j_loop.upper,
            (*j_loop.body, *recurrent, ir.Stmt("S", hh_at, g(s.clipped(hh)))),
        )
        hh_nest = ir.Loop(b_loop.iterator, b_loop.lower, b_loop.upper, (j_loop,))
        h_at = ir.Access(s.h, (Aff.lift(d), b, h))
        h_old = ir.Load(s.h, h_at.index, dtype)
        z = s.gate(0)
        new_h = (ir.Const(1.0, dtype) - z) * s.gate(2) + z * h_old
        update = nest(
            [("b", s.batch), ("h", hidden)],
            (ir.Stmt("S", h_at, s.masked(new_h, h_old)), *s.write_y(d)),
        )
        step = (*s.preact(d, 0, 2 * hidden), *zr, hh_nest, *update)
        nests += [
            *s.init_state(s.h, d, s.h0),
            ir.Loop("t", 0, s.seq, step),
            *s.outputs(d, [(s.output(1), s.h)]),
        ]
    return Lowered(tuple(nests), tuple(s.temps))


@register("LSTM")
def lower_lstm(node: Node, ctx: LowerContext) -> Lowered:
    """LSTM (gates i, o, f, c; optional peepholes ``P = [Pi, Po, Pf]``, ``input_forget``)."""
    s = _Rnn(node, ctx, 4, ("Sigmoid", "Tanh", "Tanh"))
    hidden, dtype = s.hidden, s.dtype
    c0, peep = node.input(6), node.input(7)
    input_forget = int(node.attr("input_forget", 0))
    c = s.temp("c", (s.directions, s.batch, hidden))
    nests: list[ir.Node] = []
    b, h = var("b"), var("h")
    for d in range(s.directions):
        f, g, hf = s.acts[d]
        c_at = ir.Access(c, (Aff.lift(d), b, h))
        c_old = ir.Load(c, c_at.index, dtype)
        h_at = ir.Access(s.h, (Aff.lift(d), b, h))
        h_old = ir.Load(s.h, h_at.index, dtype)

        def peephole(which: int, cell: ir.Expr, d: int = d) -> ir.Expr | None:
            if not peep:
                return None
            return ir.Load(peep, (Aff.lift(d), h + which * hidden), dtype) * cell

        def gate(offset: int, which: int, cell: ir.Expr, act: Act) -> ir.Expr:
            pre: ir.Expr = s.gate(offset)
            p = peephole(which, cell)
            return act(s.clipped(pre + p if p is not None else pre))

        i_gate = gate(0, 0, c_old, f)
        f_gate = (ir.Const(1.0, dtype) - i_gate) if input_forget else gate(2, 2, c_old, f)
        new_c = f_gate * c_old + i_gate * g(s.clipped(s.gate(3)))
        o_gate = gate(1, 1, ir.Load(c, c_at.index, dtype), f)  # uses the new cell state
        new_h = o_gate * hf(ir.Load(c, c_at.index, dtype))
        update = nest(
            [("b", s.batch), ("h", hidden)],
            (
                ir.Stmt("S", c_at, s.masked(new_c, c_old)),
                ir.Stmt("S", h_at, s.masked(new_h, h_old)),
                *s.write_y(d),
            ),
        )
        step = (*s.preact(d, 0, 4 * hidden), *update)
        nests += [
            *s.init_state(s.h, d, s.h0),
            *s.init_state(c, d, c0),
            ir.Loop("t", 0, s.seq, step),
            *s.outputs(d, [(s.output(1), s.h), (s.output(2), c)]),
        ]
    return Lowered(tuple(nests), tuple(s.temps))
