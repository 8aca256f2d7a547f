"""A whole model in krnl: the kernels of its fusion groups, in execution order.

:func:`build_program` tells the story: which values are stored zero-bordered
(:mod:`polyonnx.krnl.borders`), which group reads each value last, each group's kernel
(:func:`build_kernel`: its nodes lowered by :mod:`polyonnx.krnl.lower`, then the krnl passes
of :mod:`polyonnx.krnl.passes`), and copies for graph outputs that would not own their memory.

View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) produce no kernel: their
output shares its input's storage, recorded in ``Program.storage``. Every buffer a kernel
touches is named after an ONNX value (or a lowering's temp); ``storage`` maps it to the root
value whose memory it occupies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace

import numpy as np

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.graph.loops import Guard, RunTimeLoop, enclosing, is_loop_op, run_time_loops
from polyonnx.graph.strings import storage
from polyonnx.krnl import ir
from polyonnx.krnl.borders import zero_borders
from polyonnx.krnl.copy import copy_kernel
from polyonnx.krnl.flatten import flat_view
from polyonnx.krnl.loops import loop_boundary, loop_kernels, read_across_loops
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, Lowered, lower_nodes
from polyonnx.krnl.passes import KernelContext, run_passes
from polyonnx.krnl.placement import concat_placements
from polyonnx.krnl.verify import check_lowered

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


def _views_only(group: Sequence[Node]) -> bool:
    """Whether a fusion group makes no kernel: its outputs share their inputs' storage."""
    return all(n.op_type in VIEW_OPS for n in group)


@dataclass(frozen=True)
class Program:
    """The kernels of a model plus what the runtime needs to call them."""

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    kernels: tuple[ir.Kernel, ...]
    constants: Mapping[str, np.ndarray]
    storage: Mapping[str, str]
    """buffer name -> root value name whose memory it uses (itself when not a view)."""
    dynamic: Mapping[str, DynamicOutput] = field(default_factory=dict)
    """Graph outputs with data-dependent extents: their maximal buffer and count buffers."""
    counts: tuple[str, ...] = ()
    """The count buffers of ``dynamic``: extra entry-point outputs after the graph outputs
    (output slot ``len(outputs) + k``), each one int64 holding an extent after the run."""
    borders: Mapping[str, ir.Border] = field(default_factory=dict)
    """Zero-bordered buffers by name (see :mod:`polyonnx.krnl.borders`): their borders must
    be zero when a run starts, and no kernel writes them."""
    output_buffers: tuple[str, ...] = ()
    """The buffer each output slot is bound to, in order: the output's own name, unless the
    name is also an input's or an earlier output's (ONNX allows both; buffers are bound to
    slots by name, so such an output gets a copy under a name of its own)."""
    guards: Mapping[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    """Kernel name -> its guard (the nodes' :attr:`~polyonnx.graph.ir.Node.guard`, an If's
    branch): the entry point calls the kernel only when each bool value equals its flag."""

    loops: tuple[RunTimeLoop, ...] = ()
    """The loops the entry point runs (:mod:`polyonnx.graph.loops`): a kernel whose guard
    holds a loop's ``(running, True)`` is in its body."""

    def root(self, name: str) -> str:
        return self.storage.get(name, name)

    def __str__(self) -> str:
        return "\n\n".join(str(k) for k in self.kernels)


def _identifier(text: str) -> str:
    out = re.sub(r"\W", "_", text).strip("_") or "k"
    return out if not out[0].isdigit() else "k" + out


def _buffer_names(nodes: Iterable[ir.Node]) -> tuple[list[str], list[str]]:
    """(read, written) buffer names in first-use order."""
    read: list[str] = []
    written: list[str] = []

    def visit(ns: Iterable[ir.Node]) -> None:
        for n in ns:
            if isinstance(n, ir.Loop):
                visit(n.body)
                continue
            for ld in ir.loads(n.body):
                if ld.buffer not in read:
                    read.append(ld.buffer)
            if n.write.buffer not in written:
                written.append(n.write.buffer)

    visit(nodes)
    return read, written


@dataclass(frozen=True, slots=True)
class BuiltKernel:
    """A fusion group's kernel, after the krnl passes, and what the program records of it."""

    kernel: ir.Kernel
    constants: Mapping[str, np.ndarray]
    """Constants its lowerings derived from constant inputs (repacked weights), by name."""
    views: Mapping[str, str]
    """Its read-only views: view buffer -> the value whose memory the view reads."""
    dynamic: Mapping[str, DynamicOutput]
    """Its outputs with data-dependent extents (stored in buffers of the maximal shape; their
    count buffers are kernel outputs), by value."""
    shared: Mapping[str, str]
    """Its outputs that take a dying residual's memory (:mod:`polyonnx.krnl.residual`):
    output -> residual."""


def build_kernel(
    name: str,
    graph: Graph,
    nodes: Sequence[Node],
    context: KernelContext,
    *,
    after: str | None = None,
) -> BuiltKernel:
    """Lower the nodes of one fusion group into one kernel and run the krnl passes on it
    (:data:`polyonnx.krnl.passes.PASSES`, up to the one named ``after`` when given).

    ``context`` says what the program decides around the kernel: which values are used after
    it (``live_out``: its outputs), which die with it (a residual among them that an epilogue
    adds may be updated in place), which keep their own memory, which are stored
    zero-bordered.
    """
    lowered = lower_nodes(nodes, LowerContext(graph, context.borders, context.tile_bytes))
    viewed = {value for _, value in lowered.views}
    if viewed & context.borders.keys():  # (zero_borders leaves out values that views read)
        raise ValueError(
            f"kernel {name}: views of zero-bordered values "
            f"{sorted(viewed & context.borders.keys())}"
        )
    dynamic = {d.value: d for d in lowered.dynamic}
    kernel = ir.Kernel(
        _identifier(name),
        _buffers(name, graph, lowered, context),
        lowered.nests,
        tuple(n.name for n in nodes),
    )
    check_lowered(kernel)
    # A residual read through a view of it too is not updated in place, and an output with a
    # data-dependent extent keeps its maximal buffer.
    result = run_passes(
        kernel,
        replace(context, dying=context.dying - viewed, fixed=context.fixed.union(dynamic)),
        after,
    )
    return BuiltKernel(
        result.kernel,
        dict(lowered.constants),
        {buffer.name: value for buffer, value in lowered.views},
        dynamic,
        result.shared,
    )


def _buffers(
    name: str, graph: Graph, lowered: Lowered, context: KernelContext
) -> tuple[ir.Buffer, ...]:
    """The buffers the nests of ``lowered`` touch, read ones first, each in first-use order and
    declared by what it is: a lowering's temp, a derived constant, a bordered value a
    convolution reads, a view, or an ONNX value."""
    temps = {t.name: t for t in lowered.temps}
    derived = dict(lowered.constants)
    bordered = {b.buffer: b for b in context.borders.values()}
    views = {buffer.name: (buffer, value) for buffer, value in lowered.views}
    maximal = {d.value: d for d in lowered.dynamic}
    counts = {c for d in maximal.values() for c in d.counts if c}
    read, written = _buffer_names(lowered.nests)
    buffers = []
    for b in read + [w for w in written if w not in read]:
        if b in temps:
            t = temps[b]
            # A count outlives the kernel: the runtime reads it to size the output.
            buffers.append(ir.Buffer(t.name, t.dtype, t.shape, "output" if b in counts else "temp"))
        elif b in derived:
            buffers.append(ir.Buffer(b, derived[b].dtype.name, derived[b].shape, "input"))
        elif b in bordered:  # read by a convolution, around the value
            value = graph.value(bordered[b].value)
            buffers.append(
                ir.Buffer(
                    b, value.dtype, bordered[b].shape(tuple(int(d) for d in value.shape)), "input"
                )
            )
        elif b in views:
            # A view is a second name for memory: isl would not see a dependence through it.
            view, viewed = views[b]
            if b in written or viewed in written:
                raise ValueError(
                    f"kernel {name}: view {b} or its value is written in the "
                    "kernel (views are read-only inputs)"
                )
            buffers.append(view)
        else:
            v = graph.value(b)
            kind = ("output" if b in context.live_out else "temp") if b in written else "input"
            # (A maximal shape is the storage's: a string's has its code-point axis.)
            dtype, shape = storage(v.dtype, () if b in maximal else v.dims)
            buffers.append(ir.Buffer(b, dtype, maximal[b].shape if b in maximal else shape, kind))
    return tuple(buffers)


def _last_readers(graph: Graph, groups: Sequence[Sequence[Node]], kept: Set[str]) -> dict[str, int]:
    """The last group reading each value whose memory is the workspace's alone: not a graph
    input, output or constant, no view's input or output, not in ``kept`` (zero-bordered or
    placed in a concatenation's memory). (A value an
    output took the memory of, :mod:`polyonnx.krnl.residual`, was read by no later group:
    its memory's other values are dead when the last one dies.)"""
    views = {v for g in groups if _views_only(g) for n in g for v in (*n.inputs, *n.outputs)}
    outside = {v.name for v in (*graph.inputs, *graph.outputs)} | set(graph.constants)
    last: dict[str, int] = {}
    for gi, group in enumerate(groups):
        for n in group:
            for v in n.inputs:
                if v and v not in outside and v not in views and v not in kept:
                    last[v] = gi
    return last


def _live_out(
    group: Sequence[Node], graph_outputs: Set[str], consumers: Mapping[str, Sequence[Node]]
) -> frozenset[str]:
    """The outputs of ``group`` used after it: graph outputs, and values read outside it."""
    inside = {n.name for n in group}
    return frozenset(
        o
        for n in group
        for o in n.outputs
        if o and (o in graph_outputs or any(c.name not in inside for c in consumers.get(o, [])))
    )


def _share_storage(views: Sequence[Node], storage: dict[str, str]) -> None:
    """Each output of a group of view nodes shares its input's storage (into ``storage``)."""
    for n in views:
        for o in n.outputs:
            if o:
                storage[o] = storage.get(n.inputs[0], n.inputs[0])


def build_program(
    graph: Graph,
    groups: Sequence[Sequence[Node]],
    *,
    after: str | None = None,
    tile_bytes: int = 0,
) -> Program:
    """Lower fusion groups (in execution order) into a :class:`Program`.

    Decided once up front: which values are stored zero-bordered and which group reads each
    value last. Then each group in turn: a group of views only gives its outputs its input's
    storage, any other becomes a kernel (:func:`build_kernel`, its passes up to ``after``).
    Last, each graph output gets memory of its own (a copy kernel where it has none).
    ``tile_bytes``: the target's register-tile width
    (:attr:`~polyonnx.krnl.passes.KernelContext.tile_bytes`).
    """
    computed = {o for group in groups if not _views_only(group) for n in group for o in n.outputs}
    computed -= {"", *loop_boundary(graph)}
    borders = zero_borders(graph, computed)
    placements, in_place = concat_placements(graph, computed, set(borders))
    # Placed values and their roots keep their own memory: no output takes theirs.
    placed = {*placements, *(p.root for p in placements.values())}
    last = _last_readers(graph, groups, {*borders, *placed, *read_across_loops(graph)})
    graph_outputs = frozenset(v.name for v in graph.outputs)
    consumers = graph.consumers()
    storage: dict[str, str] = {}
    kernels: list[ir.Kernel] = []
    constants = dict(graph.constants)
    dynamic: dict[str, DynamicOutput] = {}
    guards: dict[str, tuple[tuple[str, bool], ...]] = {}
    # Values no element-wise kernel views flat (krnl/flatten.py): graph outputs (the run
    # returns the kernel's buffer), and values stored bordered or placed in a Concat.
    keep_shapes = graph_outputs | placed | set(borders)
    for gi, group in enumerate(groups):
        if _views_only(group):
            _share_storage(group, storage)
            continue
        if len(group) == 1 and group[0].name in in_place:
            continue  # its inputs were written into their slices of its output
        if is_loop_op(group[0]):
            made = loop_kernels(f"k{gi}_{group[0].op_type}", group[0], graph, storage)
            storage.update(made.storage)
            kernels += made.kernels
            guards.update(made.guards)
            continue
        context = KernelContext(
            live_out=_live_out(group, graph_outputs, consumers),
            dying=frozenset(v for n in group for v in n.inputs if last.get(v) == gi),
            fixed=graph_outputs | placed,
            borders=borders,
            placements=placements,
            tile_bytes=tile_bytes,
        )
        seen = flat_view(graph, group, keep_shapes) or graph
        built = build_kernel(f"k{gi}_{group[0].op_type}", seen, group, context, after=after)
        if group[0].guard:
            guards[built.kernel.name] = group[0].guard
        for out, residual in built.shared.items():
            storage[out] = storage.get(residual, residual)
        for view, value in built.views.items():
            storage.setdefault(view, storage.get(value, value))
        constants.update(built.constants)
        dynamic.update(built.dynamic)
        if built.kernel.statements():  # zero-size outputs lower to nothing
            kernels.append(built.kernel)
    kernels, storage, constants, output_buffers = _own_output_memory(
        graph, kernels, storage, constants, dynamic, guards
    )

    loops = tuple(run_time_loops(graph.nodes).values())
    used = _used(kernels, storage, loops)
    # An output with no elements needs no kernel.
    missing = [
        o.name
        for o in graph.outputs
        if storage.get(o.name, o.name) not in used
        and o.name not in used
        and not (o.is_static and int(np.prod(o.dims, dtype=np.int64)) == 0)
    ]
    if missing:
        raise ModelError(f"graph outputs {missing} are not computed by any node")
    out_dynamic = {o.name: dynamic[o.name] for o in graph.outputs if not o.is_static}
    counts = tuple(dict.fromkeys(c for d in out_dynamic.values() for c in d.counts if c))
    return Program(
        graph.name,
        tuple(graph.inputs),
        tuple(graph.outputs),
        tuple(kernels),
        {n: c for n, c in constants.items() if n in used},
        storage,
        out_dynamic,
        counts,
        borders={b.buffer: b for b in borders.values()},
        output_buffers=output_buffers,
        guards=guards,
        loops=loops,
    )


def _used(
    kernels: Sequence[ir.Kernel], storage: Mapping[str, str], loops: Sequence[RunTimeLoop]
) -> set[str]:
    """The root values the kernels access or the entry point's loops read (a constant trip
    count too)."""
    used = {storage.get(b.name, b.name) for k in kernels for b in k.buffers}
    return used | {storage.get(v, v) for loop in loops for v in loop.reads}


def _own_output_memory(
    graph: Graph,
    kernels: Sequence[ir.Kernel],
    storage: Mapping[str, str],
    constants: Mapping[str, np.ndarray],
    dynamic: Mapping[str, DynamicOutput],
    guards: Mapping[str, Guard],
) -> tuple[list[ir.Kernel], dict[str, str], dict[str, np.ndarray], tuple[str, ...]]:
    """``kernels``, ``storage`` and ``constants`` with a copy kernel for each graph output that
    would share an input's, a constant's or another output's storage: a graph output must own
    its memory (the caller's buffer). Last, the buffer bound to each output slot (see
    :attr:`Program.output_buffers`). ``guards``: the kernels' (a copy goes after the run-time
    loop whose kernels it would split)."""
    kernels, storage, constants = list(kernels), dict(storage), dict(constants)
    input_names = {v.name for v in graph.inputs}
    buffers = [v.name for v in graph.outputs]
    roots_taken: set[str] = set()
    # An output computed under its own name owns its memory before a view of it claims it.
    for j in sorted(
        range(len(buffers)), key=lambda j: storage.get(buffers[j], buffers[j]) != buffers[j]
    ):
        out = graph.outputs[j]
        root = storage.get(out.name, out.name)
        if not out.is_static:
            # Data-dependent extents exist only as outputs of the op that sizes them (the
            # graph refuses them as inputs of other nodes, so no view or copy reaches them).
            if out.name not in dynamic or root != out.name or root in roots_taken:
                raise UnsupportedOpError(
                    "graph output",
                    graph.opset,
                    out.name,
                    f"shape {list(out.shape)} is data-dependent and the "
                    "output is not the sole result of the op computing it",
                )
            roots_taken.add(root)
            continue
        if root in input_names or root in graph.constants or root in roots_taken:
            src = graph.value(out.name) if out.name not in storage else graph.value(root)
            if root == out.name and root in constants:
                # The output itself folded to a constant (e.g. Shape): its value moves to a
                # name of its own, since the output's slot is the caller's buffer.
                root = f"{out.name}__const"
                constants[root] = constants.pop(out.name)
            if out.name in input_names or out.name in roots_taken:
                buffers[j] = _fresh_name(f"{out.name}__output{j}", graph.values)
            dst = Value(buffers[j], out.dtype, out.shape)
            k = copy_kernel(
                _identifier(f"k_copy_{buffers[j]}"), Value(root, src.dtype, src.shape), dst
            )
            # Kernels already built may read the output under its own name: the copy runs as
            # soon as its source exists (from the start for inputs and constants), before them.
            at = 1 + max(
                (
                    i
                    for i, kern in enumerate(kernels)
                    for b in kern.buffers
                    if b.kind != "input" and storage.get(b.name, b.name) == root
                ),
                default=-1,
            )
            kernels.insert(_after_loops(at, kernels, guards, graph), k)
            storage[buffers[j]] = buffers[j]
            storage[k.buffers[0].name] = root
            roots_taken.add(buffers[j])
        else:
            roots_taken.add(root)
    return kernels, storage, constants, tuple(buffers)


def _after_loops(
    at: int, kernels: Sequence[ir.Kernel], guards: Mapping[str, Guard], graph: Graph
) -> int:
    """Position ``at``, or past the end of the run-time loops the kernel before it runs in:
    a kernel inserted there must not split a loop's kernels."""
    loops = run_time_loops(graph.nodes)
    around = set(enclosing(guards.get(kernels[at - 1].name, ()), loops)) if at else set()
    while at < len(kernels) and around & set(enclosing(guards.get(kernels[at].name, ()), loops)):
        at += 1
    return at


def _fresh_name(name: str, taken: Mapping[str, object]) -> str:
    """``name``, suffixed until no value of the graph has it."""
    while name in taken:
        name += "_"
    return name
