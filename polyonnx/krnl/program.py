"""A whole model in krnl: the kernels of its fusion groups, in execution order.

View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) produce no kernel: their
output shares its input's storage, recorded in ``Program.storage``. Every buffer a kernel
touches is named after an ONNX value (or a lowering's temp); ``storage`` maps it to the root
value whose memory it occupies.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from polyonnx.errors import ModelError, UnsupportedOpError
from polyonnx.graph.ir import Graph, Node, Value
from polyonnx.krnl import ir
from polyonnx.krnl.borders import store_bordered, zero_borders
from polyonnx.krnl.in_place import accumulate_in_place
from polyonnx.krnl.inline import inline_pointwise
from polyonnx.krnl.lower.registry import DynamicOutput, LowerContext, lower_node
from polyonnx.krnl.residual import residual_in_place

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

    def root(self, name: str) -> str:
        return self.storage.get(name, name)

    def __str__(self) -> str:
        return "\n\n".join(str(k) for k in self.kernels)


def _identifier(text: str) -> str:
    out = re.sub(r"\W", "_", text).strip("_") or "k"
    return out if not out[0].isdigit() else "k" + out


def _renumber(nodes: tuple[ir.Node, ...], counter: list[int]) -> tuple[ir.Node, ...]:
    out: list[ir.Node] = []
    for n in nodes:
        if isinstance(n, ir.Stmt):
            out.append(replace(n, name=f"S{counter[0]}"))
            counter[0] += 1
        else:
            out.append(replace(n, body=_renumber(n.body, counter)))
    return tuple(out)


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


def build_kernel(name: str, graph: Graph, nodes: Sequence[Node], live_out: set[str],
                 constants: dict[str, np.ndarray] | None = None,
                 views: dict[str, str] | None = None,
                 dynamic: dict[str, DynamicOutput] | None = None,
                 borders: Mapping[str, ir.Border] | None = None,
                 dying: Collection[str] = (), fixed: Collection[str] = (),
                 shared: dict[str, str] | None = None) -> ir.Kernel:
    """Lower the nodes of one fusion group into one kernel.

    ``live_out`` holds the values used after this kernel (by later kernels or as graph outputs).
    Constants the lowerings derive (repacked weights) are added to ``constants``, read-only
    views (view name -> value) to ``views``, outputs with data-dependent extents to
    ``dynamic`` (their buffers get the maximal shape; their count buffers are kernel outputs).
    Values in ``borders`` are stored in their zero-bordered buffers. A residual among
    ``dying`` (values no later kernel reads) that an epilogue adds is updated in place
    (:mod:`polyonnx.krnl.residual`): ``shared`` gets ``{output: residual}``, the output taking
    the residual's memory (not an output in ``fixed``, a graph output's or a bordered one's).
    """
    borders = borders or {}
    bordered = {b.buffer: b for b in borders.values()}
    ctx = LowerContext(graph, borders)
    body: list[ir.Node] = []
    temps: dict[str, ir.Buffer] = {}
    derived: dict[str, np.ndarray] = {}
    view_buffers: dict[str, ir.Buffer] = {}
    viewed: set[str] = set()
    maximal: dict[str, DynamicOutput] = {}
    for node in nodes:
        lowered = lower_node(node, ctx)
        maximal.update({d.value: d for d in lowered.dynamic})
        body.extend(lowered.nests)
        temps.update({t.name: t for t in lowered.temps})
        derived.update(lowered.constants)
        for buffer, value in lowered.views:
            if value in borders:  # (zero_borders leaves out values that views read)
                raise ValueError(f"kernel {name}: a view of zero-bordered value {value}")
            view_buffers[buffer.name] = buffer
            viewed.add(value)
            if views is not None:
                views[buffer.name] = value
    if constants is not None:
        constants.update(derived)
    if dynamic is not None:
        dynamic.update(maximal)
    count_names = {c for d in maximal.values() for c in d.counts if c}
    read, written = _buffer_names(body)
    buffers = []
    for b in read + [w for w in written if w not in read]:
        if b in temps:
            t = temps[b]
            # A count outlives the kernel: the runtime reads it to size the output.
            kind = "output" if b in count_names else "temp"
            buffers.append(ir.Buffer(t.name, t.dtype, t.shape, kind))
            continue
        if b in derived:
            c = derived[b]
            buffers.append(ir.Buffer(b, c.dtype.name, c.shape, "input"))
            continue
        if b in bordered:  # read by a convolution, around the value
            border = bordered[b]
            buffers.append(ir.Buffer(b, ctx.dtype(border.value),
                                     border.shape(ctx.shape(border.value)), "input"))
            continue
        if b in view_buffers:
            # A view is a second name for memory: isl would not see a dependence through it.
            if b in written or (views or {}).get(b) in written:
                raise ValueError(f"kernel {name}: view {b} or its value is written in the "
                                 "kernel (views are read-only inputs)")
            buffers.append(view_buffers[b])
            continue
        v = graph.value(b)
        if b in written:
            kind = "output" if b in live_out else "temp"
        else:
            kind = "input"
        shape = maximal[b].shape if b in maximal else tuple(int(d) for d in v.shape)
        buffers.append(ir.Buffer(b, v.dtype, shape, kind))
    kernel = accumulate_in_place(inline_pointwise(ir.Kernel(
        _identifier(name), tuple(buffers), tuple(body), tuple(n.name for n in nodes))))
    # (A residual read through a view of it too is not updated in place.)
    kernel, moved = residual_in_place(kernel, set(dying) - viewed,
                                      {*fixed, *maximal, *borders})
    if shared is not None:
        shared.update(moved)
    # (After the epilogues are in place: they match a temp to the value it becomes by shape.)
    kernel = store_bordered(kernel, borders)
    return replace(kernel, body=_renumber(kernel.body, [0]))


def _last_readers(graph: Graph, groups: Sequence[Sequence[Node]],
                  borders: Mapping[str, ir.Border]) -> dict[str, int]:
    """The last group reading each value whose memory is the workspace's alone: not a graph
    input, output or constant, no view's input or output, not zero-bordered. (A value an
    output took the memory of, :mod:`polyonnx.krnl.residual`, was read by no later group:
    its memory's other values are dead when the last one dies.)"""
    views = {v for g in groups if _views_only(g) for n in g for v in (*n.inputs, *n.outputs)}
    outside = {v.name for v in (*graph.inputs, *graph.outputs)} | set(graph.constants)
    last: dict[str, int] = {}
    for gi, group in enumerate(groups):
        for n in group:
            for v in n.inputs:
                if v and v not in outside and v not in views and v not in borders:
                    last[v] = gi
    return last


def _copy_kernel(name: str, src: Value, dst: Value) -> ir.Kernel:
    """``dst = src`` elementwise (same element count, both row-major)."""
    its = [f"i{d}" for d in range(len(dst.shape))]
    idx = tuple(ir.Aff.var(i) for i in its)
    # Source and destination may differ in shape (a view): index the source by the flat offset.
    src_buf = ir.Buffer(src.name + "__flat", src.dtype, (int(np.prod(dst.shape, dtype=np.int64)),),
                        "input")
    flat = ir.Aff()
    stride = 1
    for i, extent in reversed(list(zip(its, dst.shape, strict=True))):
        flat = flat + ir.Aff.var(i) * stride
        stride *= int(extent)
    nest: ir.Node = ir.Stmt("S0", ir.Access(dst.name, idx),
                            ir.Load(src_buf.name, (flat,), src.dtype))
    for i, extent in reversed(list(zip(its, dst.shape, strict=True))):
        nest = ir.Loop(i, 0, int(extent), (nest,))
    return ir.Kernel(_identifier(name), (src_buf, ir.Buffer(dst.name, dst.dtype,
                                                            tuple(map(int, dst.shape)), "output")),
                     (nest,), ())


def build_program(graph: Graph, groups: Sequence[Sequence[Node]]) -> Program:
    """Lower fusion groups (in execution order) into a :class:`Program`."""
    storage: dict[str, str] = {}
    borders = zero_borders(graph, {o for group in groups
                                   if not _views_only(group)
                                   for n in group for o in n.outputs if o})
    output_names = {v.name for v in graph.outputs}
    consumers = graph.consumers()
    kernels: list[ir.Kernel] = []
    derived: dict[str, np.ndarray] = {}
    views: dict[str, str] = {}
    dynamic: dict[str, DynamicOutput] = {}
    last = _last_readers(graph, groups, borders)
    for gi, group in enumerate(groups):
        group = list(group)
        if _views_only(group):
            for n in group:
                for o in n.outputs:
                    if o:
                        storage[o] = storage.get(n.inputs[0], n.inputs[0])
            continue
        inside = {n.name for n in group}
        live_out = {o for n in group for o in n.outputs if o and (
            o in output_names or any(c.name not in inside for c in consumers.get(o, [])))}
        shared: dict[str, str] = {}  # (the kernel's outputs that take a residual's memory)
        kernel = build_kernel(f"k{gi}_{group[0].op_type}", graph, group, live_out,
                              derived, views, dynamic, borders,
                              dying={v for n in group for v in n.inputs if last.get(v) == gi},
                              fixed=output_names, shared=shared)
        for out, residual in shared.items():
            storage[out] = storage.get(residual, residual)
        for view, value in views.items():
            storage.setdefault(view, storage.get(value, value))
        if kernel.statements():  # zero-size outputs lower to nothing
            kernels.append(kernel)

    # A graph output must own its memory: copy when it would share an input's, a constant's or
    # another output's storage.
    input_names = {v.name for v in graph.inputs}
    all_constants = {**graph.constants, **derived}
    roots_taken: set[str] = set()
    for out in graph.outputs:
        root = storage.get(out.name, out.name)
        if not out.is_static:
            # Data-dependent extents exist only as outputs of the op that sizes them (the
            # graph refuses them as inputs of other nodes, so no view or copy reaches them).
            if out.name not in dynamic or root != out.name or root in roots_taken:
                raise UnsupportedOpError("graph output", graph.opset, out.name,
                                         f"shape {list(out.shape)} is data-dependent and the "
                                         "output is not the sole result of the op computing it")
            roots_taken.add(root)
            continue
        if root in input_names or root in graph.constants or root in roots_taken:
            src = graph.value(out.name) if out.name not in storage else graph.value(root)
            if root == out.name and root in all_constants:
                # The output itself folded to a constant (e.g. Shape): its value moves to a
                # name of its own, since the output's slot is the caller's buffer.
                root = f"{out.name}__const"
                all_constants[root] = all_constants.pop(out.name)
            k = _copy_kernel(f"k_copy_{out.name}", Value(root, src.dtype, src.shape), out)
            # Kernels already built may read the output under its own name: the copy runs as
            # soon as its source exists (from the start for inputs and constants), before them.
            at = 1 + max((i for i, kern in enumerate(kernels) for b in kern.buffers
                          if b.kind != "input" and storage.get(b.name, b.name) == root),
                         default=-1)
            kernels.insert(at, k)
            storage[out.name] = out.name
            storage[k.buffers[0].name] = root
            roots_taken.add(out.name)
        else:
            roots_taken.add(root)

    used = {storage.get(b.name, b.name) for k in kernels for b in k.buffers}
    # An output with no elements needs no kernel.
    missing = [o.name for o in graph.outputs if storage.get(o.name, o.name) not in used
               and o.name not in used and not (o.is_static and
                                               int(np.prod(o.shape, dtype=np.int64)) == 0)]
    if missing:
        raise ModelError(f"graph outputs {missing} are not computed by any node")
    constants = {n: c for n, c in all_constants.items() if n in used}
    out_dynamic = {o.name: dynamic[o.name] for o in graph.outputs if not o.is_static}
    counts = tuple(dict.fromkeys(c for d in out_dynamic.values() for c in d.counts if c))
    return Program(graph.name, tuple(graph.inputs), tuple(graph.outputs), tuple(kernels),
                   constants, storage, out_dynamic, counts,
                   borders={b.buffer: b for b in borders.values()})
