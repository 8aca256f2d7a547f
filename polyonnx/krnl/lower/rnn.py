"""Recurrent layers: RNN, GRU, LSTM.

A layer is lowered as the two products a fast implementation computes, each a loop nest the
scheduler tiles:

1. the **input projection** of every time step at once: per direction one GEMM into the temp
   ``<node>__xw`` ``[D, T, B, gates, H]`` in step order (the reverse direction's step ``s``
   reads ``X[T-1-s]``), starting from the biases;
2. a **step loop** ``s``, which carries the recurrence: the recurrent product
   ``G[d, b, q, v] = sum_h hs[d, s, b, h] * RT[d, q, h, v]`` (a GEMV for a batch of one, its
   vector loop ``v`` along the rows of the packed weights), then the gate non-linearities and
   the state update, element-wise along ``v``.

The directions of a bidirectional layer share one step loop under a loop ``d`` over them
when their activations agree: nothing flows between directions, so ``d`` is a parallel loop.

``W`` and ``R`` are repacked gate by gate to ``[D, gates, k, H]`` (a gate's output column
``v`` contiguous): at compile time when they are constant, else by a transpose nest. The
hidden state of every step is kept, ``<node>__hs[d, s]`` (``[D, T+1, B, H]``, ``hs[d, 0]``
the initial state): a step's product reads one slice and its update writes the next, and
``Y`` is copied from it in time order at the end. An LSTM's cell state is updated in place.

``sequence_lens`` masks each row: a step at a time ``>= sequence_lens[b]`` keeps the state
(so the reverse direction starts from the initial state at the row's last time) and ``Y`` is
zero there. A bidirectional RNN (``T = 3, B = 1, I = 2, H = 4``)::

    for d in [0, 1):
      for s in [0, 3):
        for b in [0, 1):
          for q in [0, 1):
            for v in [0, 4):
              S0: rnn__xw[d, s, b, q, v] = rnn__bias[d, q, v]
              for k in [0, 2):
                S1: rnn__xw[d, s, b, q, v] = (rnn__xw[d, s, b, q, v] + (X[s, b, k] * rnn__wt[d, q, k, v]))
    for d in [1, 2):
      ... the same, reading X[-s + 2, b, k]
    for d in [0, 2):
      for b in [0, 1):
        for h in [0, 4):
          S4: rnn__hs[d, 0, b, h] = 0.0
    for d in [0, 2):
      for s in [0, 3):
        for b in [0, 1):
          for q in [0, 1):
            for v in [0, 4):
              S5: rnn__gates[d, b, q, v] = 0.0
              for h in [0, 4):
                S6: rnn__gates[d, b, q, v] = (rnn__gates[d, b, q, v] + (rnn__hs[d, s, b, h] * rnn__rt[d, q, h, v]))
        for b in [0, 1):
          for v in [0, 4):
            S7: rnn__hs[d, s + 1, b, v] = tanh((rnn__xw[d, s, b, 0, v] + rnn__gates[d, b, 0, v]))
    for d in [0, 1):
      for t in [0, 3):
        for b in [0, 1):
          for h in [0, 4):
            S8: Y[t, d, b, h] = rnn__hs[d, t + 1, b, h]
    for d in [1, 2):
      ... the same from rnn__hs[d, -t + 3, b, h]
    for d in [0, 2):
      for b in [0, 1):
        for h in [0, 4):
          S10: Y_h[d, b, h] = rnn__hs[d, 3, b, h]
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable, Sequence

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
ActSpec = tuple[str, float | None, float | None]
"""An activation function's canonical name with its alpha and beta (None: the default)."""

_ALPHA = {
    "Affine": 1.0,
    "LeakyRelu": 0.01,
    "ThresholdedRelu": 1.0,
    "ScaledTanh": 1.0,
    "HardSigmoid": 0.2,
    "Elu": 1.0,
}
_BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}
_ACTIVATIONS = (
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


def _activation(node: Node, ctx: LowerContext, spec: ActSpec) -> Act:
    name, alpha, beta = spec
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


def _activation_specs(
    node: Node, defaults: Sequence[str], directions: int
) -> list[tuple[ActSpec, ...]]:
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
    # Canonical names are case-sensitive in the spec; accept any case like onnxruntime.
    canonical = {n.lower(): n for n in _ACTIVATIONS}
    specs: list[ActSpec] = []
    for name in names:
        known = canonical.get(name.lower(), name)
        alpha = float(alphas.pop()) if known in _ALPHA and alphas else None
        beta = float(betas.pop()) if known in _BETA and betas else None
        specs.append((known, alpha, beta))
    return [tuple(specs[d * per : (d + 1) * per]) for d in range(directions)]


class _Rnn:
    """Shapes, layouts and the nests the three recurrent lowerings share.

    ``fold`` is how many leading gates take the recurrent bias into the input projection
    (all but a GRU's ``h`` gate with ``linear_before_reset``, where it sits inside the reset).
    """

    def __init__(
        self,
        node: Node,
        ctx: LowerContext,
        gates: int,
        default_acts: Sequence[str],
        fold: int | None = None,
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
        self.reverse = [False, True] if self.directions == 2 else [direction == "reverse"]
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
        self.specs = _activation_specs(node, default_acts, self.directions)
        self.fold = gates if fold is None else fold
        self.temps: list[ir.Buffer] = []
        self.constants: list[tuple[str, np.ndarray]] = []
        self.nests: list[ir.Node] = []
        self.mask_lens = self._sequence_lens()
        shape = (self.directions, self.seq, self.batch, gates, self.hidden)
        self.xw = self.temp("xw", shape)
        self.hs = self.temp("hs", (self.directions, self.seq + 1, self.batch, self.hidden))
        self.g = self.temp("gates", (self.directions, self.batch, gates, self.hidden))
        self.wt = self.rt = ""

    def prologue(self) -> None:
        """The nests before the step loops: packed weights, biases, the input projection and
        the initial hidden state."""
        self.wt = self._packed(self.w, "wt", self.inp)
        self.rt = self._packed(self.r, "rt", self.hidden)
        bias = self._bias()
        for d in range(self.directions):
            self.nests += self._projection(d, bias)
        self.nests += self.init_state(self.hs, (var("d"), 0, var("b"), var("h")), self.h0)

    def temp(self, what: str, shape: tuple[int, ...]) -> str:
        buf = ir.Buffer(f"{self.node.name}__{what}", self.dtype, shape)
        self.temps.append(buf)
        return buf.name

    def lowered(self) -> Lowered:
        return Lowered(tuple(self.nests), tuple(self.temps), tuple(self.constants))

    def _sequence_lens(self) -> bool:
        if not self.lens:
            return False
        value = self.ctx.constant(self.lens)
        return value is None or not bool(np.all(np.asarray(value) == self.seq))

    # ---- the packed weights and the input projection
    def _packed(self, weights: str, what: str, inner: int) -> str:
        """``weights`` ``[D, gates*H, inner]`` as ``[D, gates, inner, H]``: repacked at
        compile time when constant, else by a transpose nest."""
        shape = (self.directions, self.gates, inner, self.hidden)
        value = self.ctx.constant(weights)
        name = f"{self.node.name}__{what}"
        if value is not None:
            packed = np.asarray(value).reshape(self.directions, self.gates, self.hidden, inner)
            self.constants.append((name, np.ascontiguousarray(packed.transpose(0, 1, 3, 2))))
            return name
        name = self.temp(what, shape)
        d, k, q, v = var("d"), var("k"), var("q"), var("v")
        source = ir.Load(weights, (d, q * self.hidden + v, k), self.dtype)
        self.nests += nest(
            [("d", shape[0]), ("q", self.gates), ("k", inner), ("v", self.hidden)],
            (ir.Stmt("S", ir.Access(name, (d, q, k, v)), source),),
        )
        return name

    def _bias(self) -> str:
        """The biases the input projection starts from, ``[D, gates, H]`` (``W_b + R_b`` for
        the first ``fold`` gates, ``W_b`` for the others); "" without ``B``."""
        if not self.b:
            return ""
        gates, hidden = self.gates, self.hidden
        name = f"{self.node.name}__bias"
        value = self.ctx.constant(self.b)
        if value is not None:
            both = np.asarray(value).reshape(self.directions, 2, gates, hidden)
            folded = both[:, 0].copy()
            folded[:, : self.fold] += both[:, 1, : self.fold]
            self.constants.append((name, folded))
            return name
        name = self.temp("bias", (self.directions, gates, hidden))
        d, q, v = var("d"), var("q"), var("v")
        at = ir.Access(name, (d, q, v))
        w_b = ir.Load(self.b, (d, q * hidden + v), self.dtype)
        r_b = ir.Load(self.b, (d, q * hidden + v + gates * hidden), self.dtype)
        for lo, hi, value_expr in ((0, self.fold, w_b + r_b), (self.fold, gates, w_b)):
            if hi > lo:
                gate = ir.Loop("q", lo, hi, nest([("v", hidden)], (ir.Stmt("S", at, value_expr),)))
                self.nests.append(ir.Loop("d", 0, self.directions, (gate,)))
        return name

    def _projection(self, d: int, bias: str) -> tuple[ir.Node, ...]:
        """``xw[d, s] = X[time] . W[d]^T + biases`` for every step ``s`` of direction ``d``
        (a loop ``d`` of one iteration, so the nest's write is a translate of its loops)."""
        s, b, q, v, k = var("s"), var("b"), var("q"), var("v"), var("k")
        at = ir.Access(self.xw, (var("d"), s, b, q, v))
        init: ir.Expr = ir.Load(bias, (var("d"), q, v), self.dtype) if bias else zero(self.dtype)
        time = Aff.lift(self.seq - 1) - s if self.reverse[d] else s
        product = self.x_at(time, b, k) * ir.Load(self.wt, (var("d"), q, k, v), self.dtype)
        update = ir.Stmt("S", at, ir.Load(self.xw, at.index, self.dtype) + product)
        inner = nest(
            [("s", self.seq), ("b", self.batch), ("q", self.gates), ("v", self.hidden)],
            (ir.Stmt("S", at, init), *nest([("k", self.inp)], (update,))),
        )
        return (ir.Loop("d", d, d + 1, inner),)

    def init_state(
        self, buf: str, index: tuple[ir.AffLike, ...], initial: str
    ) -> tuple[ir.Node, ...]:
        d, b, h = var("d"), var("b"), var("h")
        value: ir.Expr = (
            ir.Load(initial, self.state_index(d, b, h), self.dtype) if initial else zero(self.dtype)
        )
        return nest(
            [("d", self.directions), ("b", self.batch), ("h", self.hidden)],
            (ir.Stmt("S", ir.Access(buf, index), value),),
        )

    # ---- indices for the two layouts
    def x_at(self, t: Aff, b: Aff, k: Aff) -> ir.Load:
        index = (t, b, k) if self.layout == 0 else (b, t, k)
        return ir.Load(self.x, index, self.dtype)

    def y_index(self, t: Aff, d: Aff, b: Aff, h: Aff) -> tuple[Aff, ...]:
        return (t, d, b, h) if self.layout == 0 else (b, t, d, h)

    def state_index(self, d: Aff, b: Aff, h: Aff) -> tuple[Aff, ...]:
        """Index of initial_h / Y_h / initial_c / Y_c."""
        return (d, b, h) if self.layout == 0 else (b, d, h)

    # ---- the step loops
    def groups(self) -> list[tuple[int, int]]:
        """The directions ``[lo, hi)`` that share one step loop: both of a bidirectional
        layer when their activations agree."""
        if self.directions == 2 and self.specs[0] == self.specs[1]:
            return [(0, 2)]
        return [(d, d + 1) for d in range(self.directions)]

    def acts(self, lo: int) -> list[Act]:
        return [_activation(self.node, self.ctx, spec) for spec in self.specs[lo]]

    def step_loop(self, lo: int, hi: int, body: Sequence[ir.Node]) -> None:
        self.nests.append(ir.Loop("d", lo, hi, (ir.Loop("s", 0, self.seq, tuple(body)),)))

    def recurrent_product(self, state: ir.Load, lo: int, hi: int) -> ir.Node:
        """``G[d, b, q, v] = sum_h state(h) . R^T[d, h, q, v]`` for the gates ``[lo, hi)``;
        ``state`` reads the hidden state at ``h`` (as a loop ``h``)."""
        d, b, q, v = var("d"), var("b"), var("q"), var("v")
        at = ir.Access(self.g, (d, b, q, v))
        rt = ir.Load(self.rt, (d, q, var("h"), v), self.dtype)
        update = ir.Stmt("S", at, ir.Load(self.g, at.index, self.dtype) + state * rt)
        body = (ir.Stmt("S", at, zero(self.dtype)), *nest([("h", self.hidden)], (update,)))
        (loop,) = nest(
            [("b", self.batch)], (ir.Loop("q", lo, hi, nest([("v", self.hidden)], body)),)
        )
        return loop

    def hidden_at(self, h: Aff, step: int = 0) -> ir.Load:
        """``hs[d, s + step, b, h]``: the state the step starts from (``step`` 0) or makes."""
        return ir.Load(self.hs, (var("d"), var("s") + step, var("b"), h), self.dtype)

    def xw_at(self, q: int) -> ir.Load:
        return ir.Load(self.xw, (var("d"), var("s"), var("b"), Aff.lift(q), var("v")), self.dtype)

    def sum_at(self, q: int) -> ir.Load:
        """The recurrent product of gate ``q`` at ``b, v``."""
        return ir.Load(self.g, (var("d"), var("b"), Aff.lift(q), var("v")), self.dtype)

    def clipped(self, e: ir.Expr) -> ir.Expr:
        if self.clip is None:
            return e
        return ir.minimum(ir.maximum(e, -self.clip), self.clip)

    def _time(self, lo: int, hi: int) -> ir.Expr:
        """The time of step ``s`` of direction ``d`` (int64): ``s``, ``T-1-s``, or for the two
        directions of one step loop ``s + d * (T-1-2s)``."""
        s = ir.Iter("s")
        last = ir.Const(self.seq - 1, "int64")
        flags = self.reverse[lo:hi]
        if not any(flags):
            return s
        if all(flags):
            return last - s
        return s + (ir.Iter("d") - ir.Const(lo, "int64")) * (last - s * ir.Const(2, "int64"))

    def active(self, time: ir.Expr) -> ir.Expr:
        """``time < sequence_lens[b]`` (only used when masking)."""
        length = as_int64(ir.Load(self.lens, (var("b"),), self.ctx.dtype(self.lens)))
        return ir.Binary("lt", time, length)

    def masked(self, lo: int, hi: int, new: ir.Expr, old: ir.Expr) -> ir.Expr:
        return ir.Select(self.active(self._time(lo, hi)), new, old) if self.mask_lens else new

    def update(self, stmts: Sequence[ir.Stmt]) -> ir.Node:
        """The element-wise state update of a step, over ``b, v``."""
        (loop,) = nest([("b", self.batch), ("v", self.hidden)], stmts)
        return loop

    def new_hidden(self, lo: int, hi: int, value: ir.Expr) -> ir.Stmt:
        at = ir.Access(self.hs, (var("d"), var("s") + 1, var("b"), var("v")))
        return ir.Stmt("S", at, self.masked(lo, hi, value, self.hidden_at(var("v"))))

    # ---- outputs
    def outputs(self, states: Sequence[tuple[int, str, tuple[Aff, ...]]]) -> None:
        """Y in time order from the step-ordered states, then ``Y_h`` (and ``Y_c``): for each
        ``(output, buffer, index)`` of ``states``, ``output[d, b, h] = buffer[index]``."""
        y = self.output(0)
        t, b, h = var("t"), var("b"), var("h")
        for d in range(self.directions) if y else ():
            step = Aff.lift(self.seq - 1) - t if self.reverse[d] else t
            value: ir.Expr = ir.Load(self.hs, (var("d"), step + 1, b, h), self.dtype)
            if self.mask_lens:
                value = ir.Select(self.active(ir.Iter("t")), value, zero(self.dtype))
            at = ir.Access(y, self.y_index(t, var("d"), b, h))
            inner = nest(
                [("t", self.seq), ("b", self.batch), ("h", self.hidden)],
                (ir.Stmt("S", at, value),),
            )
            self.nests.append(ir.Loop("d", d, d + 1, inner))
        stmts = [
            ir.Stmt(
                "S",
                ir.Access(self.output(k), self.state_index(var("d"), b, h)),
                ir.Load(buf, index, self.dtype),
            )
            for k, buf, index in states
            if self.output(k)
        ]
        if stmts:
            self.nests += nest(
                [("d", self.directions), ("b", self.batch), ("h", self.hidden)], stmts
            )

    def final_hidden(self) -> tuple[int, str, tuple[Aff, ...]]:
        return 1, self.hs, (var("d"), Aff.lift(self.seq), var("b"), var("h"))

    def output(self, k: int) -> str:
        return self.node.outputs[k] if len(self.node.outputs) > k else ""


@register("RNN")
def lower_rnn(node: Node, ctx: LowerContext) -> Lowered:
    """Simple RNN: ``H = f(X W^T + H R^T + Wb + Rb)``."""
    s = _Rnn(node, ctx, 1, ("Tanh",))
    s.prologue()
    for lo, hi in s.groups():
        (f,) = s.acts(lo)
        pre = s.clipped(s.xw_at(0) + s.sum_at(0))
        s.step_loop(
            lo,
            hi,
            (
                s.recurrent_product(s.hidden_at(var("h")), 0, 1),
                s.update([s.new_hidden(lo, hi, f(pre))]),
            ),
        )
    s.outputs([s.final_hidden()])
    return s.lowered()


@register("GRU")
def lower_gru(node: Node, ctx: LowerContext) -> Lowered:
    """GRU (gates z, r, h): ``H = (1 - z) * h~ + z * H``, ``linear_before_reset`` either way.

    With ``linear_before_reset`` one recurrent product covers the three gates and
    ``h~ = g(xw_h + r * (G_h + Rb_h))``; without, the product of ``z, r``, then the reset
    state ``r * H`` (``<node>__rh``), then its product with ``R_h``: ``h~ = g(xw_h + G_h)``.
    """
    linear_before_reset = int(node.attr("linear_before_reset", 0))
    s = _Rnn(node, ctx, 3, ("Sigmoid", "Tanh"), fold=2 if linear_before_reset else 3)
    s.prologue()
    hidden, dtype = s.hidden, s.dtype
    rh = "" if linear_before_reset else s.temp("rh", (s.directions, s.batch, hidden))
    d, b, v = var("d"), var("b"), var("v")
    for lo, hi in s.groups():
        f, g = s.acts(lo)
        z = f(s.clipped(s.xw_at(0) + s.sum_at(0)))
        r = f(s.clipped(s.xw_at(1) + s.sum_at(1)))
        h_old = s.hidden_at(v)
        if linear_before_reset:
            recurrent: ir.Expr = s.sum_at(2)
            if s.b:
                recurrent = recurrent + ir.Load(s.b, (d, v + 5 * hidden), dtype)
            candidate = g(s.clipped(s.xw_at(2) + r * recurrent))
            products: tuple[ir.Node, ...] = (s.recurrent_product(s.hidden_at(var("h")), 0, 3),)
        else:
            reset = s.update([ir.Stmt("S", ir.Access(rh, (d, b, v)), r * h_old)])
            gated = ir.Load(rh, (d, b, var("h")), dtype)
            candidate = g(s.clipped(s.xw_at(2) + s.sum_at(2)))
            products = (
                s.recurrent_product(s.hidden_at(var("h")), 0, 2),
                reset,
                s.recurrent_product(gated, 2, 3),
            )
        new_h = (ir.Const(1.0, dtype) - z) * candidate + z * h_old
        s.step_loop(lo, hi, (*products, s.update([s.new_hidden(lo, hi, new_h)])))
    s.outputs([s.final_hidden()])
    return s.lowered()


@register("LSTM")
def lower_lstm(node: Node, ctx: LowerContext) -> Lowered:
    """LSTM (gates i, o, f, c; optional peepholes ``P = [Pi, Po, Pf]``, ``input_forget``)."""
    s = _Rnn(node, ctx, 4, ("Sigmoid", "Tanh", "Tanh"))
    s.prologue()
    hidden, dtype = s.hidden, s.dtype
    c0, peep = node.input(6), node.input(7)
    input_forget = int(node.attr("input_forget", 0))
    d, b, v = var("d"), var("b"), var("v")
    c = s.temp("c", (s.directions, s.batch, hidden))
    s.nests += s.init_state(c, (d, b, var("h")), c0)
    c_at = ir.Access(c, (d, b, v))
    c_now = ir.Load(c, c_at.index, dtype)  # before its statement: the old cell, after: the new
    for lo, hi in s.groups():
        f, g, hf = s.acts(lo)

        def gate(q: int, which: int, cell: ir.Expr, act: Act) -> ir.Expr:
            pre: ir.Expr = s.xw_at(q) + s.sum_at(q)
            if peep:
                pre = pre + ir.Load(peep, (d, v + which * hidden), dtype) * cell
            return act(s.clipped(pre))

        i_gate = gate(0, 0, c_now, f)
        f_gate = (ir.Const(1.0, dtype) - i_gate) if input_forget else gate(2, 2, c_now, f)
        new_c = f_gate * c_now + i_gate * g(s.clipped(s.xw_at(3) + s.sum_at(3)))
        new_h = gate(1, 1, c_now, f) * hf(c_now)  # (the output gate sees the new cell)
        step = (
            s.recurrent_product(s.hidden_at(var("h")), 0, 4),
            s.update(
                [ir.Stmt("S", c_at, s.masked(lo, hi, new_c, c_now)), s.new_hidden(lo, hi, new_h)]
            ),
        )
        s.step_loop(lo, hi, step)
    s.outputs([s.final_hidden(), (2, c, (d, b, var("h")))])
    return s.lowered()
