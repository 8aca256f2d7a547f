"""Control flow: an ``If`` node becomes the nodes of its branches, guarded by its condition;
``Scan`` bodies are unrolled (:func:`expand_scan`); a ``Loop`` is unrolled
(:class:`LoopUnrolling`) or run by the entry point (:func:`run_time_loop`).

The branches' nodes join the graph (their values renamed ``<If node>/then/<name>`` and
``<If node>/else/<name>``, so names stay unique), so every stage after the frontend sees plain
nodes and compiles each branch through the normal pipeline. How the condition decides:

- known at compile time (a constant, or computed from shapes): only the branch it picks is
  inlined, its outputs renamed to the If's by Identity nodes;
- known only at run time: the nodes of the then branch carry the guard ``(cond, True)``, those
  of the else branch ``(cond, False)`` (:attr:`polyonnx.graph.ir.Node.guard`); the entry point
  runs a guarded kernel only when its guard holds. Each If output is then
  ``Where(cond, then_output, else_output)``: it reads the branch that ran (the other branch's
  buffer is never read for the result), so both branches must give the same shape and type.

Values of the enclosing graph that a branch reads (outer-scope values) keep their names.

A Loop is unrolled when its trip count is known at compile time and small (at most
:data:`UNROLL_LIMIT` = 256 iterations and :data:`UNROLL_NODES` = 256 unrolled nodes; see
:func:`runs_at_run_time`): each iteration's nodes join the graph, and a condition known only
at run time guards them. Otherwise the entry point runs it (:func:`run_time_loop`,
:mod:`polyonnx.graph.loops`): a trip count known only at run time or beyond the limits, or a
condition known only at run time without a trip count (a while loop; iterations whose
condition is known at compile time are unrolled first and the loop runs from the first
that is not). The body's nodes join the graph once, guarded by the loop's running condition
(which holds inside the loop), between a ``LoopEnter`` that copies the initial values into
the loop-carried buffers and a ``LoopExit`` that copies each iteration's results back; the
body reads the iteration number and condition from buffers the entry point writes. Its
kernels go through the normal pipeline. Refused: a loop-carried value whose type or static
shape an iteration changes, and scan outputs of a run-time loop (their length would be known
only at run time).

Why a budget of unrolled nodes: iterations unrolled alike share schedules and functions,
but the frontend, the graph passes and the entry point still pay per node (a 4-node body
unrolled 256 times compiled in 11 s, as a loop in 0.35 s, and ran no faster), while a
small loop unrolled loses the loop's copies and may fuse across iterations.

Example:
    >>> from onnx import helper, TensorProto
    >>> then = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "then", [],
    ...     [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    >>> other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "else", [],
    ...     [helper.make_tensor_value_info("n", TensorProto.FLOAT, [2])])
    >>> e = expand_if("if0", "c", ("y",), then, other, None, ())
    >>> [(p.op_type, list(p.output), g) for p, g in e.nodes][:2]
    [('Relu', ['if0/then/r'], (('c', True),)), ('Neg', ['if0/else/n'], (('c', False),))]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.frontend.sequences import SEQUENCE_OPS
from polyonnx.graph.ir import INTERNAL_DOMAIN, Node, Value
from polyonnx.graph.loops import LOOP_ENTER, LOOP_EXIT, Guard, is_loop_op, loop_name


@dataclass(frozen=True)
class Expansion:
    """What replaces an If node: nodes (each with its guard), in order, and the branches'
    initializers; ``merges`` names the Where nodes joining the two branches' outputs."""

    nodes: tuple[tuple[onnx.NodeProto, Guard], ...]
    initializers: tuple[onnx.TensorProto, ...]
    merges: frozenset[str] = frozenset()


def expand_if(
    name: str,
    cond: str,
    outputs: Sequence[str],
    then_branch: onnx.GraphProto,
    else_branch: onnx.GraphProto,
    cond_value: np.ndarray | None,
    guard: Guard,
) -> Expansion:
    """The nodes replacing If node ``name`` (see the module docstring). ``cond_value`` is the
    condition's value when known at compile time; ``guard`` the If's own guard (an If inside
    a branch of another)."""
    for label, branch in (("then_branch", then_branch), ("else_branch", else_branch)):
        if len(branch.output) != len(outputs):
            raise ModelError(
                f"If node {name!r}: {label} has {len(branch.output)} outputs, the node "
                f"{len(outputs)}"
            )
    if cond_value is not None:
        if np.asarray(cond_value).size != 1:
            raise ModelError(f"If node {name!r}: the condition must have one element")
        taken = bool(np.asarray(cond_value).reshape(-1)[0])
        label = "then" if taken else "else"
        nodes, inits, results = inline(then_branch if taken else else_branch, f"{name}/{label}/")
        nodes += [
            helper.make_node("Identity", [r], [o], name=f"{name}/{label}/out{k}")
            for k, (r, o) in enumerate(zip(results, outputs, strict=True))
        ]
        return Expansion(tuple((n, guard) for n in nodes), tuple(inits))
    then_nodes, then_inits, then_results = inline(then_branch, f"{name}/then/")
    else_nodes, else_inits, else_results = inline(else_branch, f"{name}/else/")
    scalar_shape = numpy_helper.from_array(np.zeros(0, np.int64), f"{name}/scalar_shape")
    flag = f"{name}/cond"
    merge = [helper.make_node("Reshape", [cond, scalar_shape.name], [flag], name=flag)]
    merge += [
        helper.make_node("Where", [flag, t, e], [o], name=f"{name}/merge{k}")
        for k, (t, e, o) in enumerate(zip(then_results, else_results, outputs, strict=True))
    ]
    return Expansion(
        (
            *((n, (*guard, (cond, True))) for n in then_nodes),
            *((n, (*guard, (cond, False))) for n in else_nodes),
            *((n, guard) for n in merge),
        ),
        (*then_inits, *else_inits, scalar_shape),
        frozenset(n.name for n in merge[1:]),
    )


def inline(
    branch: onnx.GraphProto, prefix: str, bindings: Sequence[str] | None = None
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]:
    """A subgraph's nodes and initializers with every name it defines prefixed (also where
    subgraphs nested in it read them), and the names of its outputs after renaming.
    ``bindings``: the values its inputs take, in order (a Loop or Scan body's)."""
    bindings = list(bindings or [])
    if len(branch.input) != len(bindings):
        raise ModelError(
            f"subgraph {branch.name!r} has {len(branch.input)} inputs, {len(bindings)} expected"
        )
    local = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    renames = {v: prefix + v for v in local}
    renames.update((i.name, b) for i, b in zip(branch.input, bindings, strict=True))
    nodes = [_renamed(n, renames, prefix, k) for k, n in enumerate(branch.node)]
    inits = []
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = renames[t.name]
        inits.append(copy)
    return nodes, inits, [renames.get(o.name, o.name) for o in branch.output]


def _renamed(
    node: onnx.NodeProto, renames: Mapping[str, str], prefix: str, index: int
) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = prefix + (node.name or f"{node.op_type}_{index}")
    _rename_list(out.input, renames)
    _rename_list(out.output, renames)
    for a in out.attribute:
        if a.HasField("g"):
            _rename_reads(a.g, renames)
        for g in a.graphs:
            _rename_reads(g, renames)
    return out


def _rename_list(names: Iterable[str], renames: Mapping[str, str]) -> None:
    seq = names  # a protobuf repeated field, edited in place
    for k, v in enumerate(list(seq)):
        if v in renames:
            seq[k] = renames[v]  # type: ignore[index]


def _rename_reads(graph: onnx.GraphProto, renames: Mapping[str, str]) -> None:
    """Rename, in a nested subgraph (in place), its reads of values of an enclosing scope."""
    own = (
        {o for n in graph.node for o in n.output if o}
        | {t.name for t in graph.initializer}
        | {i.name for i in graph.input}
    )
    visible = {k: v for k, v in renames.items() if k not in own}
    for n in graph.node:
        _rename_list(n.input, visible)
        for a in n.attribute:
            if a.HasField("g"):
                _rename_reads(a.g, visible)
            for g in a.graphs:
                _rename_reads(g, visible)
    for o in graph.output:
        if o.name in visible:
            o.name = visible[o.name]


#: Loop and Scan bodies are unrolled up to this many iterations; longer Scans are refused,
#: longer Loops run at run time.
UNROLL_LIMIT = 256

#: A Loop with a known trip count unrolls to at most this many nodes (iterations times body
#: nodes); a longer one runs at run time unless it needs every iteration at compile time
#: (:func:`runs_at_run_time`).
UNROLL_NODES = 256


def runs_at_run_time(trip: int, body: onnx.GraphProto) -> bool:
    """Whether a Loop of ``trip`` iterations (known at compile time) runs at run time rather
    than unrolled: beyond :data:`UNROLL_LIMIT` iterations, or :data:`UNROLL_NODES` unrolled
    nodes when its body has no scan outputs and no sequence op (those need every iteration
    at compile time). Unrolling costs compile time per node (a 4-node body unrolled 256
    times: 11 s, as a loop 0.35 s) and bought no speed in what was measured."""
    scans = len(body.output) > len(body.input) - 1
    lists = any(n.op_type in SEQUENCE_OPS for n in body.node)
    too_many = trip * len(body.node) > UNROLL_NODES and not (scans or lists)
    return trip > UNROLL_LIMIT or too_many


def _scalar(name: str, value: object, dtype: type) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _unsqueeze(x: str, axis: int, out: str, opset: int) -> list[onnx.NodeProto | onnx.TensorProto]:
    if opset >= 13:
        axes = numpy_helper.from_array(np.array([axis], np.int64), f"{out}/axes")
        return [axes, helper.make_node("Unsqueeze", [x, axes.name], [out], name=out)]
    return [helper.make_node("Unsqueeze", [x], [out], name=out, axes=[axis])]


def _split(items: Sequence) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    return (
        [i for i in items if isinstance(i, onnx.NodeProto)],
        [i for i in items if isinstance(i, onnx.TensorProto)],
    )


def _stack(
    parts: Sequence[str], axis: int, out: str, opset: int
) -> list[onnx.NodeProto | onnx.TensorProto]:
    """``out``: the ``parts`` stacked along a new ``axis`` (Unsqueeze each, then Concat)."""
    items: list = []
    for k, p in enumerate(parts):
        items += _unsqueeze(p, axis, f"{out}/part{k}", opset)
    names = [f"{out}/part{k}" for k in range(len(parts))]
    return [*items, helper.make_node("Concat", names, [out], name=out, axis=axis)]


@dataclass
class LoopUnrolling:
    """A Loop node being unrolled, one iteration per :meth:`step`, so that a condition the
    body computes from compile-time values ends the unrolling (a while loop). Iterations
    whose condition is known only at run time are guarded by a running condition ``r_t``
    (``r_{t+1} = r_t ? cond_t : false``), and the loop-carried results select the last
    iteration that ran; scan outputs need every iteration's condition at compile time."""

    name: str
    body: onnx.GraphProto
    outputs: tuple[str, ...]
    guard: Guard
    trip: int | None
    carried: list[str]
    running: str  # "" while every iteration so far is known to run
    opset: int
    t: int = 0
    finals: list[str] | None = None
    scans: list[list[str]] | None = None

    def __post_init__(self) -> None:
        n_carried = len(self.carried)
        if len(self.body.input) != 2 + n_carried or len(self.body.output) < 1 + n_carried:
            raise ModelError(
                f"Loop node {self.name!r}: its body must take (iteration, condition, "
                f"{n_carried} loop-carried values) and return the condition and those values"
            )
        self.finals = list(self.carried)
        self.scans = [[] for _ in range(len(self.body.output) - 1 - n_carried)]

    def step(
        self, running_value: bool | None
    ) -> tuple[list[tuple[onnx.NodeProto, Guard]], list[onnx.TensorProto], bool]:
        """The next iteration's nodes, or the nodes giving the Loop's outputs when the loop is
        over (``True`` last). ``running_value``: the running condition when known."""
        assert self.finals is not None and self.scans is not None
        if self.running == "":
            running_value = True
        if self.t == self.trip or running_value is False:
            return (*self._finish(), True)
        if running_value is None and any(self.scans):
            raise UnsupportedOpError(
                "Loop",
                node=self.name,
                detail="its condition is known only at run time and it has scan outputs",
            )
        if (running_value is None and self.trip is None) or self.t >= UNROLL_LIMIT:
            return (*self._run_the_rest(), True)
        prefix = f"{self.name}/{self.t}/"
        items: list = [_scalar(prefix + "iter", self.t, np.int64)]
        cond_in = self.running or prefix + "true"
        if not self.running:
            items.append(_scalar(cond_in, True, np.bool_))
        nodes, inits, results = inline(self.body, prefix, [prefix + "iter", cond_in, *self.carried])
        guard = self.guard if running_value else (*self.guard, (self.running, True))
        out: list[tuple[onnx.NodeProto, Guard]] = [(n, guard) for n in nodes]
        n_carried = len(self.carried)
        cond_out, values, scans = results[0], results[1 : 1 + n_carried], results[1 + n_carried :]
        if running_value:
            self.running, self.finals = cond_out, list(values)
        else:
            flag = prefix + "ran"
            false = _scalar(prefix + "false", False, np.bool_)
            shape = numpy_helper.from_array(np.zeros(0, np.int64), prefix + "scalar_shape")
            merge = [
                helper.make_node("Reshape", [self.running, shape.name], [flag], name=flag),
                helper.make_node(
                    "Where", [flag, cond_out, false.name], [prefix + "running"], name=prefix + "r"
                ),
            ]
            finals = [f"{prefix}final{k}" for k in range(n_carried)]
            merge += [
                helper.make_node("Where", [flag, v, f], [g], name=g)
                for v, f, g in zip(values, self.finals, finals, strict=True)
            ]
            items += [false, shape]
            out += [(n, self.guard) for n in merge]
            self.running, self.finals = prefix + "running", finals
        for acc, s in zip(self.scans, scans, strict=True):
            acc.append(s)
        self.carried = list(values)
        self.t += 1
        more, consts = _split(items)
        return [(n, self.guard) for n in more] + out, [*consts, *inits], False

    def _run_the_rest(self) -> tuple[list[tuple[onnx.NodeProto, Guard]], list[onnx.TensorProto]]:
        """The iterations from this one on, run by the entry point (:func:`run_time_loop`)."""
        assert self.finals is not None
        trip = [] if self.trip is None else [_scalar(f"{self.name}/trip", self.trip, np.int64)]
        nodes, inits = run_time_loop(
            self.name,
            self.body,
            self.outputs,
            self.guard,
            trip[0].name if trip else "",
            self.running,
            self.finals,
            self.t,
        )
        return nodes, [*trip, *inits]

    def _finish(self) -> tuple[list[tuple[onnx.NodeProto, Guard]], list[onnx.TensorProto]]:
        assert self.finals is not None and self.scans is not None
        n_carried = len(self.finals)
        items: list = [
            helper.make_node("Identity", [f], [o], name=f"{self.name}/out{k}")
            for k, (f, o) in enumerate(zip(self.finals, self.outputs[:n_carried], strict=True))
        ]
        for parts, o in zip(self.scans, self.outputs[n_carried:], strict=True):
            if not parts:
                raise UnsupportedOpError(
                    "Loop", node=self.name, detail="scan outputs of a loop that runs 0 times"
                )
            items += _stack(parts, 0, o, self.opset)
        nodes, consts = _split(items)
        return [(n, self.guard) for n in nodes], consts


def run_time_loop(
    name: str,
    body: onnx.GraphProto,
    outputs: Sequence[str],
    guard: Guard,
    trip: str,
    cond: str,
    initial: Sequence[str],
    start: int = 0,
) -> tuple[list[tuple[onnx.NodeProto, Guard]], list[onnx.TensorProto]]:
    """The nodes of Loop node ``name`` run by the entry point (see
    :mod:`polyonnx.graph.loops`): ``trip`` and ``cond`` name its trip count and condition
    ("" : none), ``initial`` the loop-carried values' initial values, ``start`` the first
    iteration's number (iterations before it were unrolled). The body's values are renamed
    ``<name>/loop/<value>``; its loop-carried values must keep one static shape."""
    if len(body.output) != 1 + len(initial):
        raise UnsupportedOpError(
            "Loop",
            node=name,
            detail=f"scan outputs {list(outputs[len(initial) :])} of a loop run at run time "
            f"(its trip count or condition is known only at run time, or it runs more than "
            f"{UNROLL_LIMIT} times): their length would be known only at run time",
        )
    prefix = f"{name}/loop/"
    state = [prefix + i.name for i in body.input]
    nodes, inits, results = inline(body, prefix, state)
    inside = (*guard, (state[1], True))
    enter = helper.make_node(
        LOOP_ENTER,
        [trip, cond, *initial],
        state,
        name=f"{name}/enter",
        domain=INTERNAL_DOMAIN,
        start=start,
    )
    leave = helper.make_node(
        LOOP_EXIT,
        [state[1], *results, *state[2:]],
        list(outputs),
        name=f"{name}/exit",
        domain=INTERNAL_DOMAIN,
    )
    return [(enter, guard), *((n, inside) for n in nodes), (leave, inside)], inits


def loop_state_types(node: Node, values: Mapping[str, Value]) -> list[Value]:
    """The types of the outputs of a LoopEnter or LoopExit ``node``
    (:func:`run_time_loop`): the iteration number (int64) and condition (bool) as scalars,
    the loop-carried values as their initial values. A loop-carried value whose type an
    iteration changes is refused, naming it."""
    loop = loop_name(node)
    if is_loop_op(node, LOOP_ENTER):
        for k, (what, dtype) in enumerate((("trip count", "int64"), ("condition", "bool"))):
            v = values.get(node.input(k))
            if v is not None and (v.dtype != dtype or int(np.prod(v.dims)) != 1):
                raise ModelError(
                    f"Loop node {loop!r}: its {what} {v.name!r} must be a one-element "
                    f"{dtype} tensor, is {v}"
                )
        state = [Value(node.outputs[0], "int64", ()), Value(node.outputs[1], "bool", ())]
        initial = node.inputs[2:]
        return state + [
            Value(o, values[i].dtype, values[i].dims)
            for o, i in zip(node.outputs[2:], initial, strict=True)
        ]
    n = (len(node.inputs) - 2) // 2
    cond_out, results, carried = node.inputs[1], node.inputs[2 : 2 + n], node.inputs[2 + n :]
    if values[cond_out].dtype != "bool" or int(np.prod(values[cond_out].dims)) != 1:
        raise ModelError(
            f"Loop node {loop!r}: its body's condition output must be a one-element bool "
            f"tensor, is {values[cond_out]}"
        )
    for r, c in zip(results, carried, strict=True):
        before, after = values[c], values[r]
        if (before.dtype, before.shape) != (after.dtype, after.shape):
            raise UnsupportedOpError(
                "Loop",
                node=loop,
                detail=f"loop-carried value {c.removeprefix(f'{loop}/loop/')!r} is "
                f"{before.dtype}{list(before.shape)} before an iteration and "
                f"{after.dtype}{list(after.shape)} after it; a loop run at run time needs "
                "one static shape",
            )
    return [
        Value(o, values[c].dtype, values[c].dims)
        for o, c in zip(node.outputs, carried, strict=True)
    ]


def expand_scan(
    name: str,
    body: onnx.GraphProto,
    inputs: Sequence[str],
    outputs: Sequence[str],
    attrs: Mapping[str, object],
    input_ranks: Sequence[int],
    length: int,
    guard: Guard,
    opset: int,
) -> Expansion:
    """A Scan node (opset >= 9) unrolled over its ``length`` steps: step ``t`` runs the body on
    the ``t``-th slices of the scan inputs (Gather at ``t``, or ``length-1-t`` reversed) and
    the states of step ``t-1``; the scan outputs are the steps' outputs stacked along their
    axes."""
    m = int(attrs["num_scan_inputs"])  # type: ignore[call-overload]
    n_states = len(inputs) - m
    k_outs = len(outputs) - n_states
    in_axes = list(attrs.get("scan_input_axes") or [0] * m)  # type: ignore[call-overload]
    in_dirs = list(attrs.get("scan_input_directions") or [0] * m)  # type: ignore[call-overload]
    out_axes = list(attrs.get("scan_output_axes") or [0] * k_outs)  # type: ignore[call-overload]
    out_dirs = list(attrs.get("scan_output_directions") or [0] * k_outs)  # type: ignore[call-overload]
    if length > UNROLL_LIMIT:
        raise UnsupportedOpError(
            "Scan",
            node=name,
            detail=f"{length} steps, more than {UNROLL_LIMIT} (scans are unrolled)",
        )
    if length == 0 and k_outs:
        raise UnsupportedOpError("Scan", node=name, detail="scan outputs of an empty sequence")
    items: list = []
    states = list(inputs[:n_states])
    scans: list[list[str]] = [[] for _ in range(k_outs)]
    for t in range(length):
        prefix = f"{name}/{t}/"
        slices = []
        for j, x in enumerate(inputs[n_states:]):
            axis = in_axes[j] % input_ranks[j]
            index = t if not in_dirs[j] else length - 1 - t
            at = _scalar(f"{prefix}index{j}", index, np.int64)
            items += [at, helper.make_node("Gather", [x, at.name], [f"{prefix}slice{j}"],
                                           name=f"{prefix}slice{j}", axis=axis)]  # fmt: skip
            slices.append(f"{prefix}slice{j}")
        nodes, inits, results = inline(body, prefix, [*states, *slices])
        items += [*inits, *nodes]
        states = results[:n_states]
        for acc, r in zip(scans, results[n_states:], strict=True):
            acc.append(r)
    items += [
        helper.make_node("Identity", [s], [o], name=f"{name}/out{k}")
        for k, (s, o) in enumerate(zip(states, outputs[:n_states], strict=True))
    ]
    for k, (parts, o) in enumerate(zip(scans, outputs[n_states:], strict=True)):
        items += _stack(parts[::-1] if out_dirs[k] else parts, int(out_axes[k]), o, opset)
    nodes, consts = _split(items)
    return Expansion(tuple((n, guard) for n in nodes), tuple(consts))


def expand_scan8(
    name: str,
    body: onnx.GraphProto,
    inputs: Sequence[str],
    outputs: Sequence[str],
    attrs: Mapping[str, object],
    scan_ranks: Sequence[int],
    shape: tuple[int, int],
    guard: Guard,
    opset: int,
) -> Expansion:
    """A Scan-8 node: every input and output has a batch axis first (the scan inputs' sequence
    axis is the second), and each batch row is scanned on its own. It becomes one opset-9 scan
    (:func:`expand_scan`) per row, of the row's states and scan inputs (Gather at the row),
    whose results are stacked along the batch axis again. ``inputs`` leave out the
    ``sequence_lens`` input (which must be absent: every row runs the whole sequence);
    ``scan_ranks`` are the scan inputs' ranks, ``shape`` is (batch, sequence length)."""
    batch, length = shape
    m = int(attrs["num_scan_inputs"])  # type: ignore[call-overload]
    directions = list(attrs.get("directions") or [0] * m)  # type: ignore[call-overload]
    row_attrs = {"num_scan_inputs": m, "scan_input_directions": directions}
    items: list = []
    nodes: list[tuple[onnx.NodeProto, Guard]] = []
    rows: list[list[str]] = [[] for _ in outputs]
    for b in range(batch):
        prefix = f"{name}/b{b}"
        at = _scalar(f"{prefix}/row", b, np.int64)
        sliced = [f"{prefix}/in{j}" for j in range(len(inputs))]
        items.append(at)
        nodes += [
            (helper.make_node("Gather", [x, at.name], [s], name=s, axis=0), guard)
            for x, s in zip(inputs, sliced, strict=True)
        ]
        results = [f"{prefix}/out{k}" for k in range(len(outputs))]
        ranks = [r - 1 for r in scan_ranks]
        row = expand_scan(prefix, body, sliced, results, row_attrs, ranks, length, guard, opset)
        nodes += row.nodes
        items += row.initializers
        for acc, r in zip(rows, results, strict=True):
            acc.append(r)
    for parts, o in zip(rows, outputs, strict=True):
        items += _stack(parts, 0, o, opset)
    stacked, consts = _split(items)
    return Expansion((*nodes, *((n, guard) for n in stacked)), tuple(consts))
