"""ONNX model → :class:`polyonnx.graph.ir.Graph` with every value statically typed.

Example:
    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    >>> m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])],
    ...                                         "g", [x], [y]))
    >>> print(import_model(m, {"x": (2, 4)}))
    graph g(x: float32[2, 4]) -> (y: float32[2, 4])
      Relu_0: y = Relu(x)
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.frontend.contrib import expand_contrib
from polyonnx.frontend.control import (
    Expansion,
    LoopUnrolling,
    expand_if,
    expand_scan,
    expand_scan8,
    loop_state_types,
    run_time_loop,
    runs_at_run_time,
)
from polyonnx.frontend.functions import expand_functions
from polyonnx.frontend.gradient import expand_gradients, gradient_output_types
from polyonnx.frontend.load import (
    DATA_PROP_MAX_ELEMENTS,
    ModelSource,
    default_opset,
    infer_shapes,
    load_model,
)
from polyonnx.frontend.preview import expand_preview
from polyonnx.frontend.sequences import SEQUENCE_OPS, SequenceLists, element_name, presence_name
from polyonnx.graph.dynamic import (
    DYNAMIC_OPS,
    check_inputs,
    dynamic_outputs,
    is_dynamic,
    refuse_dynamic_inputs,
)
from polyonnx.graph.ir import Graph, Node, Value, topological_order
from polyonnx.graph.loops import Guard, is_loop_op
from polyonnx.graph.passes.fold import evaluate_node, to_attribute
from polyonnx.graph.shapes import infer_outputs, run_time_shape_input
from polyonnx.graph.validate import validate_node

Dim = int | str | None  # None: a dimension ONNX knows nothing about


def import_model(
    model: ModelSource,
    input_shapes: Mapping[str, Iterable[int]] | None = None,
    *,
    target_opset: int | None = None,
    base_dir: str | os.PathLike | None = None,
    expand: Callable[[str, int], bool] | None = None,
) -> Graph:
    """Load ``model`` (see :func:`load_model`) and build a fully static :class:`Graph`.

    ``input_shapes`` gives concrete shapes for inputs with symbolic or unknown dimensions;
    dimensions the model fixes must agree. Initializers (also when listed as graph inputs, as
    in IR version 3 models) and ``Constant`` nodes become ``graph.constants``. Nodes of the ops
    ``expand(op_type, opset)`` selects are replaced by their ONNX function bodies, when they
    have one (:mod:`polyonnx.frontend.functions`).

    Example:
        >>> from polyonnx.testing.examples import conv_model
        >>> g = import_model(conv_model(batch="N"), {"x": (2, 8, 8, 8)})
        >>> g.value("x").shape
        (2, 8, 8, 8)
    """
    proto = load_model(model, target_opset=target_opset, base_dir=base_dir)
    expanded = expand_preview(expand_contrib(proto))
    if expanded is not proto:  # (types for what the expanded ops' outputs feed)
        proto = _infer_again(expanded)
    if expand is not None:
        proto = expand_functions(proto, expand, default_opset(proto))
    init_names = {t.name for t in proto.graph.initializer}
    if input_shapes and proto is model:  # (specialising writes into it: not the caller's)
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        proto = copy
    if _specialise_inputs(proto.graph, init_names, dict(input_shapes or {})):
        proto = _infer_again(proto)
    gp = proto.graph
    for vi in gp.output:
        kind = vi.type.WhichOneof("value")
        if kind not in ("tensor_type", "sequence_type", "optional_type", None):
            raise UnsupportedOpError(
                "value",
                detail=f"graph output {vi.name!r} is a {kind}; polyonnx returns tensors, "
                "sequences of tensors and optionals of either",
            )
    constants: dict[str, np.ndarray] = {t.name: _tensor(t) for t in gp.initializer}
    names: set[str] = set()
    raw_nodes = _convert_nodes(((n, ()) for n in gp.node), names, constants)
    inputs = [vi for vi in gp.input if vi.name not in init_names]
    nodes = _toposort(raw_nodes, {vi.name for vi in inputs} | set(constants))
    values = _declared_values(gp, constants, nodes)
    sequences = SequenceLists()
    if any(o and o not in values for n in nodes for o in n.outputs) or any(
        n.op_type in CONTROL_FLOW | SEQUENCE_OPS and not n.domain for n in nodes
    ):
        nodes = _type_the_rest(
            nodes, values, constants, default_opset(proto), names, sequences, expand
        )
    outputs = _flatten_sequences(gp.output, sequences, Typing(values, constants, nodes, names))
    for o in outputs:
        if o not in values:
            raise ModelError(f"graph output {o!r} is not produced by any node")
    return refuse_dynamic_inputs(
        expand_gradients(
            Graph(
                name=gp.name or "main",
                inputs=tuple(values[vi.name] for vi in inputs),
                outputs=tuple(values[o] for o in outputs),
                nodes=tuple(nodes),
                values=values,
                constants=constants,
                opset=default_opset(proto),
            )
        )
    )


def _infer_again(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference from the (specialised) inputs again: symbolic dims elsewhere in the
    graph follow from them."""
    gp = proto.graph
    del gp.value_info[:]
    for o in gp.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    return infer_shapes(proto)


def _declared_values(
    gp: onnx.GraphProto, constants: Mapping[str, np.ndarray], nodes: list[Node]
) -> dict[str, Value]:
    """The values the model types statically (inputs, value infos, outputs) and the
    constants; the outputs of data-dependent ops are left to polyonnx's own rule (or to their
    value when it is known at compile time), whatever extent the model declares."""
    values: dict[str, Value] = {}
    for vi in (*gp.input, *gp.value_info, *gp.output):
        v = _value(vi)
        if v is not None and v.is_static:
            values[v.name] = v
    for name, arr in constants.items():
        values[name] = Value(name, arr.dtype.name, tuple(int(d) for d in arr.shape))
    for n in nodes:
        if n.op_type in DYNAMIC_OPS and not n.domain:
            for o in n.outputs:
                values.pop(o, None)
    return values


#: Tensors up to this many elements are evaluated while typing the values ONNX inference left
#: open: enough for shape arithmetic, too small to fold weights at import time.
_SMALL = 1 << 16


#: Ops with subgraphs that the frontend expands into plain nodes.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def _convert_nodes(
    protos: Iterable[tuple[onnx.NodeProto, Guard]], names: set[str], constants: dict[str, Any]
) -> list[Node]:
    """Graph nodes for ONNX nodes (each with its guard); ``Constant`` nodes go to
    ``constants``. Node names are made unique (``names`` holds those taken)."""
    out: list[Node] = []
    for i, (n, guard) in enumerate(protos):
        name = n.name if n.name and n.name not in names else _fresh(f"{n.op_type}_{i}", names)
        names.add(name)
        attrs = {a.name: _attr_value(a) for a in n.attribute}
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            constants[n.output[0]] = _constant_value(name, attrs)
            continue
        domain = "" if n.domain == "ai.onnx" else n.domain
        out.append(
            Node(name, n.op_type, tuple(n.input), tuple(n.output), attrs, domain, tuple(guard))
        )
    return out


def _type_the_rest(
    nodes: list[Node],
    values: dict[str, Value],
    constants: dict[str, np.ndarray],
    opset: int,
    names: set[str],
    sequences: SequenceLists,
    unlowered: Callable[[str, int], bool] | None = None,
) -> list[Node]:
    """Types every node output ONNX inference left open, in topological order, expands
    If nodes into their branches (:mod:`polyonnx.frontend.control`) and sequence ops into
    plain nodes, recording the sequences in ``sequences``; returns the nodes. A node that
    cannot be typed whose op ``unlowered(op_type, opset)`` says has no lowering is refused
    as unsupported (the reason that matters), not for its shapes.

    ONNX data propagation misses some shape arithmetic (e.g. a Concat of a computed dim with an
    initializer feeding a Reshape). So small constant-only computations are evaluated here,
    then each open node is inferred alone with its computed inputs as initializers, and last
    our own rules apply (:func:`polyonnx.graph.shapes.infer_outputs`).
    """
    known = {k: v for k, v in constants.items() if v.size <= _SMALL}
    queue: deque[Node | LoopUnrolling] = deque(nodes)
    typed: list[Node] = []
    merges: set[str] = set()

    def add_constants(tensors: Iterable[onnx.TensorProto]) -> None:
        for t in tensors:
            constants[t.name] = _tensor(t)
        for name, arr in constants.items():  # also the subgraphs' Constant nodes
            if name not in values:
                values[name] = Value(name, arr.dtype.name, tuple(int(d) for d in arr.shape))
                if arr.size <= _SMALL:
                    known[name] = arr

    def push(protos: Iterable[tuple[onnx.NodeProto, Guard]], *then: LoopUnrolling) -> None:
        queue.extendleft(reversed([*_convert_nodes(protos, names, constants), *then]))
        add_constants(())

    while queue:
        n = queue.popleft()
        if isinstance(n, LoopUnrolling):
            running = known.get(n.running)
            protos, tensors, done = n.step(None if running is None else bool(running.all()))
            add_constants(tensors)
            push(protos, *(() if done else (n,)))
            continue
        replacement = _replacement(n, values, known, opset, sequences)
        if isinstance(replacement, LoopUnrolling):
            queue.appendleft(replacement)
            continue
        if replacement is not None:
            merges |= replacement.merges
            add_constants(replacement.initializers)
            push(replacement.nodes)
            continue
        typed.append(n)
        with _unsupported_if_unlowered(n, opset, unlowered):
            _type_outputs(n, values, {**constants, **known}, known, opset, n.name in merges)
        _propagate_known(n, values, known, opset)
    return typed


@contextlib.contextmanager
def _unsupported_if_unlowered(
    n: Node, opset: int, unlowered: Callable[[str, int], bool] | None
) -> Iterator[None]:
    """A :class:`ShapeError` typing ``n`` raised as :class:`UnsupportedOpError` when its op
    has no lowering or is outside the ONNX standard: StringNormalizer, NonMaxSuppression,
    onnxruntime's contrib ops or ONNX-ML's are refused for what they are."""
    try:
        yield
    except ShapeError as e:
        if n.domain:  # (model-local functions are inlined by now: nothing knows this op)
            raise UnsupportedOpError(
                f"{n.domain}.{n.op_type}", None, n.name, f"an op outside the ONNX standard ({e})"
            ) from None
        if unlowered is None or not unlowered(n.op_type, opset):
            raise
        raise UnsupportedOpError(
            n.op_type, opset, n.name, f"no lowering registered (and {e})"
        ) from None


@dataclass(frozen=True)
class Typing:
    """The graph being built: its typed values, constants, nodes and node names (all edited
    in place)."""

    values: dict[str, Value]
    constants: dict[str, np.ndarray]
    nodes: list[Node]
    names: set[str]

    def copy(self, source: str, name: str) -> str:
        """Add an Identity node ``name = source``; ``name``."""
        self.nodes.append(Node(_fresh(name, self.names), "Identity", (source,), (name,)))
        self.names.add(self.nodes[-1].name)
        self.values[name] = Value(name, self.values[source].dtype, self.values[source].shape)
        return name


def _flatten_sequences(
    outputs: Iterable[onnx.ValueInfoProto], sequences: SequenceLists, graph: Typing
) -> list[str]:
    """The graph's output names, a sequence output replaced by its elements (Identity nodes
    name them :func:`~polyonnx.frontend.sequences.element_name`) and an optional output by
    a bool constant named :func:`~polyonnx.frontend.sequences.presence_name` and its tensor
    (under the output's name) or its sequence's elements."""
    flat: list[str] = []
    for vi in outputs:
        kind, name = vi.type.WhichOneof("value"), vi.name
        content: str | None = name
        if kind == "optional_type":
            content = sequences.optionals.get(name, name)
            presence = presence_name(name)
            graph.constants[presence] = np.array(content is not None)
            graph.values[presence] = Value(presence, "bool", ())
            flat.append(presence)
        if content is None:
            continue
        if kind == "sequence_type" or content in sequences.lists:
            flat += _elements(name, content, sequences, graph)
        else:
            flat.append(name if content == name else graph.copy(content, name))
    return flat


def _elements(output: str, sequence: str, sequences: SequenceLists, graph: Typing) -> list[str]:
    """The elements of ``sequence``, copied to the outputs named after graph output
    ``output``."""
    if sequence not in sequences.lists:
        raise UnsupportedOpError(
            "value", detail=f"graph output {output!r} is a sequence not known at compile time"
        )
    return [
        graph.copy(element, element_name(output, k))
        for k, element in enumerate(sequences.lists[sequence])
    ]


def _replacement(
    n: Node,
    values: dict[str, Value],
    known: dict[str, np.ndarray],
    opset: int,
    sequences: SequenceLists,
) -> Expansion | LoopUnrolling | None:
    """What replaces ``n``: an If or Scan's expansion, a Loop's unrolling, a sequence op's
    plain nodes; None for a node that stays."""
    if n.op_type in CONTROL_FLOW and not n.domain:
        for o in n.outputs:
            values.pop(o, None)  # typed again from the nodes that replace the node
        if n.op_type == "Loop":
            return _loop(n, known, opset)
        return _expand_control(n, values, known, opset)
    if _is_sequence_op(n, sequences):
        r = sequences.expand(n, values, known)
        for t in r.constants:  # (a SequenceLength ONNX typed already is still worth knowing)
            known[t.name] = numpy_helper.to_array(t)
        return Expansion(tuple((p, n.guard) for p in r.nodes), tuple(r.constants))
    return None


def _is_sequence_op(n: Node, sequences: SequenceLists) -> bool:
    """Whether ``n`` builds or reads a sequence (:mod:`polyonnx.frontend.sequences`); an op
    that reads one and is not among those it replaces is refused."""
    if n.domain:
        return False
    if n.op_type in SEQUENCE_OPS:
        if n.guard:
            raise UnsupportedOpError(
                n.op_type, node=n.name, detail="a sequence edited under a run-time condition"
            )
        return True
    for i in n.inputs:
        if i in sequences.lists or i in sequences.optionals:
            if n.op_type == "Identity":
                return True
            raise UnsupportedOpError(
                n.op_type,
                node=n.name,
                detail=f"input {i!r} is a sequence (polyonnx replaces "
                f"only {', '.join(sorted(SEQUENCE_OPS))} on sequences known at compile time)",
            )
    return False


def _type_outputs(
    n: Node,
    values: dict[str, Value],
    constants: Mapping[str, np.ndarray],
    known: Mapping[str, np.ndarray],
    opset: int,
    merges_branches: bool = False,
) -> None:
    """Types the outputs of ``n`` that ONNX inference left open (see :func:`_type_the_rest`);
    ``merges_branches``: ``n`` merges the branches of an If, which must agree."""
    if merges_branches:
        _check_branches_agree(n, values)
    if is_loop_op(n):
        values.update((v.name, v) for v in loop_state_types(n, values))
        return
    check_inputs(n, values, opset)
    if n.op_type in DYNAMIC_OPS and not n.domain and any(o and o not in values for o in n.outputs):
        _type_dynamic(n, values, constants, opset)
    if any(o and o not in values for o in n.outputs):
        validate_node(n, values)  # a bad attribute is the likely reason inference failed
        typed = (
            _infer_alone(n, values, known, opset)
            or _range_output(n, known)
            or _unpool_output(n, values, known)
            or gradient_output_types(n, values)
        )
        if not typed and (fed := run_time_shape_input(n, known)) is not None:
            raise UnsupportedOpError(
                n.op_type,
                opset,
                n.name,
                f"its output shape depends on the value of input {fed!r}, known only at run "
                "time (polyonnx compiles static shapes: make it a constant)",
            )
        for v in typed or infer_outputs(n, values):
            values.setdefault(v.name, v)
        if typed and n.op_type == "BatchNormalization" and not n.domain:
            # (ONNX before opset 14 types Y alone; the statistics mean training mode.)
            for v in infer_outputs(n, values):
                values.setdefault(v.name, v)
    for o in n.outputs:
        if o and o not in values:
            raise ShapeError(
                f"node {n.name!r} ({n.op_type}): output {o!r} has no static "
                "shape (does it depend on input data?)"
            )


def _propagate_known(
    n: Node, values: Mapping[str, Value], known: dict[str, np.ndarray], opset: int
) -> None:
    """The values of the outputs of ``n`` computable at compile time, into ``known``: shapes,
    and small computations of known values."""
    if n.op_type in ("Shape", "Size") and not n.domain:
        shape = values[n.inputs[0]].shape
        dims = np.array(shape, dtype=np.int64)
        known[n.outputs[0]] = (
            np.array(dims.prod(), dtype=np.int64)
            if n.op_type == "Size"
            else dims[n.attr("start", 0) : n.attr("end", None)]
        )
    elif n.op_type == "CastLike" and not n.domain and n.inputs[0] in known:
        # CastLike reads only the type of its second input.
        known[n.outputs[0]] = known[n.inputs[0]].astype(values[n.inputs[1]].dtype)
    elif (
        all(i in known for i in n.inputs if i)
        and not n.domain
        # (An output whose extent data decides, StringNormalizer's, is computed at run time.)
        and all(values[o].is_static for o in n.outputs if o)
        and all(int(np.prod(values[o].dims)) <= _SMALL for o in n.outputs if o)
        and not any(isinstance(a, onnx.GraphProto) for _, a in n.attrs)
    ):
        known.update(evaluate_node(n, known, opset) or {})


def _expand_control(
    n: Node, values: dict[str, Value], known: dict[str, np.ndarray], opset: int
) -> Expansion:
    """An If or a Scan as the nodes that replace it."""
    return _expand(n, values, known) if n.op_type == "If" else _scan(n, values, opset)


def _loop(n: Node, known: Mapping[str, np.ndarray], opset: int) -> LoopUnrolling | Expansion:
    """Loop node ``n`` unrolled when its trip count is known at compile time and small
    (:func:`~polyonnx.frontend.control.runs_at_run_time`; or absent, when the condition ends
    the loop), else run by the entry point (:func:`~polyonnx.frontend.control.run_time_loop`)."""
    trip_name, cond = n.input(0), n.input(1)
    carried = list(n.inputs[2:])
    trip: int | None = None
    if trip_name in known:
        trip = int(np.asarray(known[trip_name]).reshape(-1)[0])
        trip = None if trip >= 1 << 62 else max(trip, 0)  # INT64_MAX: no trip count
    if cond in known and not bool(np.asarray(known[cond]).all()):
        trip = 0
    elif (trip_name and trip_name not in known) or (
        trip is not None and runs_at_run_time(trip, n.attr("body"))
    ):
        nodes, inits = run_time_loop(
            n.name, n.attr("body"), n.outputs, n.guard, trip_name, cond, carried
        )
        return Expansion(tuple(nodes), tuple(inits))
    running = cond if cond and cond not in known else ""
    return LoopUnrolling(n.name, n.attr("body"), n.outputs, n.guard, trip, carried, running, opset)


def _scan(n: Node, values: Mapping[str, Value], opset: int) -> Expansion:
    """Scan node ``n`` unrolled over its (static) sequence length."""
    m = int(n.attr("num_scan_inputs", 0))
    scanned = n.inputs[len(n.inputs) - m :]
    if not m or any(i not in values for i in scanned):
        raise ModelError(f"Scan node {n.name!r}: its {m} scan inputs must be typed tensors")
    ranks = [len(values[i].shape) for i in scanned]
    if opset < 9:
        return _scan8(n, values, ranks)
    axes = list(n.attr("scan_input_axes") or [0] * m)
    lengths = {int(values[i].shape[a % r]) for i, a, r in zip(scanned, axes, ranks, strict=True)}
    if len(lengths) != 1:
        raise ShapeError(f"Scan node {n.name!r}: its scan inputs differ in length {lengths}")
    attrs = dict(n.attrs)
    return expand_scan(
        n.name, n.attr("body"), n.inputs, n.outputs, attrs, ranks, lengths.pop(), n.guard, opset
    )


def _scan8(n: Node, values: Mapping[str, Value], ranks: Sequence[int]) -> Expansion:
    """Scan-8 node ``n`` (``ranks``: its scan inputs'): each batch row scanned on its own
    (see :func:`expand_scan8`)."""
    lens, *inputs = n.inputs
    if lens:
        raise UnsupportedOpError(
            "Scan", 8, n.name, "sequence_lens (rows of different lengths) is not supported"
        )
    if any(i not in values or not values[i].shape for i in inputs) or min(ranks) < 2:
        raise ModelError(
            f"Scan node {n.name!r}: Scan-8's states and scan inputs must be typed tensors with "
            "a batch axis first (and the scan inputs a sequence axis second)"
        )
    batches = {int(values[i].shape[0]) for i in inputs}
    lengths = {int(values[i].shape[1]) for i in inputs[len(inputs) - len(ranks) :]}
    if len(batches) != 1 or len(lengths) != 1:
        raise ShapeError(
            f"Scan node {n.name!r}: Scan-8's inputs must share their batch size (axis 0) and "
            f"its scan inputs their sequence length (axis 1); their shapes are "
            f"{[values[i].shape for i in inputs]}"
        )
    shape = (batches.pop(), lengths.pop())
    return expand_scan8(
        n.name, n.attr("body"), inputs, n.outputs, dict(n.attrs), ranks, shape, n.guard, 8
    )


def _expand(n: Node, values: dict[str, Value], known: dict[str, np.ndarray]) -> Expansion:
    """The If node ``n`` as the nodes of its branches."""
    cond = n.input(0)
    if not cond or (cond not in values and cond not in known):
        raise ModelError(f"If node {n.name!r}: its condition {cond!r} is not defined")
    if cond not in known and (values[cond].dtype != "bool" or values[cond].shape not in ((), (1,))):
        raise ModelError(
            f"If node {n.name!r}: the condition {cond!r} must be a one-element bool tensor, "
            f"is {values[cond]}"
        )
    return expand_if(
        n.name,
        cond,
        n.outputs,
        n.attr("then_branch"),
        n.attr("else_branch"),
        known.get(cond),
        n.guard,
    )


def _check_branches_agree(merge: Node, values: Mapping[str, Value]) -> None:
    """An If output computed at run time by either branch has one type and static shape."""
    then_v, else_v = values[merge.inputs[1]], values[merge.inputs[2]]
    if (then_v.dtype, then_v.shape) != (else_v.dtype, else_v.shape):
        raise UnsupportedOpError(
            "If",
            node=merge.name.rsplit("/", 1)[0],
            detail=f"its branches give {then_v.dtype}{list(then_v.shape)} and "
            f"{else_v.dtype}{list(else_v.shape)} for one output, and the condition is known "
            "only at run time (polyonnx compiles static shapes)",
        )


def _type_dynamic(
    n: Node, values: dict[str, Value], known: Mapping[str, np.ndarray], opset: int
) -> None:
    """Types the outputs of NonZero, Compress, Unique or TopK: symbolic extents when they
    depend on run-time data (:mod:`polyonnx.graph.dynamic`), else the shapes of their value."""
    if is_dynamic(n, known):
        for v in dynamic_outputs(n, values, opset):
            values[v.name] = v
    elif all(i in known for i in n.inputs if i) and n.op_type != "TopK":
        for name, arr in (evaluate_node(n, known, opset) or {}).items():
            arr = np.asarray(arr)
            values.setdefault(name, Value(name, arr.dtype.name, tuple(int(d) for d in arr.shape)))


def _range_output(n: Node, known: Mapping[str, np.ndarray]) -> tuple[Value, ...]:
    """Range's output from known scalar operands, which ONNX inference types only for some
    element types (not float16). Its extent by the ONNX formula, not by evaluating it: a huge
    range is then refused by the size limit instead of being allocated."""
    if (
        n.op_type != "Range"
        or n.domain
        or len(n.inputs) != 3
        or any(i not in known for i in n.inputs)
    ):
        return ()
    operands = [np.asarray(known[i]) for i in n.inputs]
    if any(a.size != 1 for a in operands):
        return ()
    start, limit, delta = (float(a.reshape(-1)[0]) for a in operands)
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        return ()
    extent = max(math.ceil((limit - start) / delta), 0)
    return (Value(n.outputs[0], operands[0].dtype.name, (extent,)),)


def _unpool_output(
    n: Node, values: Mapping[str, Value], known: Mapping[str, np.ndarray]
) -> tuple[Value, ...]:
    """MaxUnpool's output from a known ``output_shape``, whose value ONNX inference does not
    read (it types the output only without one)."""
    if n.op_type != "MaxUnpool" or n.domain or not n.input(2) or n.input(2) not in known:
        return ()
    x = values.get(n.input(0))
    dims = np.asarray(known[n.input(2)]).reshape(-1)
    if x is None or len(dims) != len(x.shape) or (dims < 0).any():
        return ()
    return (Value(n.outputs[0], x.dtype, tuple(int(d) for d in dims)),)


def _infer_alone(
    n: Node, values: Mapping[str, Value], known: Mapping[str, np.ndarray], opset: int
) -> tuple[Value, ...]:
    """ONNX inference on ``n`` alone, its known inputs given as initializers; () if it fails."""
    ins = [i for i in dict.fromkeys(n.inputs) if i]
    if any(i not in known and i not in values for i in ins):
        return ()
    proto = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), domain=n.domain)
    proto.attribute.extend(to_attribute(k, v) for k, v in n.attrs)
    g = helper.make_graph(
        [proto],
        "one",
        [
            helper.make_tensor_value_info(
                i, helper.np_dtype_to_tensor_dtype(np.dtype(values[i].dtype)), list(values[i].shape)
            )
            for i in ins
            if i not in known
        ],
        [helper.make_empty_tensor_value_info(o) for o in n.outputs if o],
        [numpy_helper.from_array(known[i], i) for i in ins if i in known],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    try:
        # (Data propagation only for small vectors: see DATA_PROP_MAX_ELEMENTS. The inputs are
        # static: check_inputs refused data-dependent ones.)
        small = all(
            len(values[i].dims) != 1 or values[i].dims[0] <= DATA_PROP_MAX_ELEMENTS
            for i in ins
            if i not in known
        )
        inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=small)
    except Exception:  # inference raises assorted C++ errors; other rules get their turn
        return ()
    out = [_value(vi) for vi in inferred.graph.output]
    return tuple(v for v in out if v is not None and v.is_static)


_ELEMENT_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def _tensor(t: onnx.TensorProto) -> np.ndarray:
    """An initializer's (or a tensor attribute's) value; ModelError when its element type is
    unknown (ONNX's checker lets one through) or its data does not fill its declared dims."""
    if t.data_type not in _ELEMENT_TYPES:
        raise ModelError(f"tensor {t.name!r} has an unknown element type {t.data_type}")
    try:
        return numpy_helper.to_array(t)
    except ValueError as e:
        raise ModelError(
            f"initializer {t.name!r} of dims {list(t.dims)}: its data does not "
            f"match its shape ({e})"
        ) from None


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _dims(vi: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    """The dims of a tensor value, or None when its rank is unknown."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
    )


def _specialise_inputs(
    gp: onnx.GraphProto, init_names: set[str], shapes: dict[str, Iterable[int]]
) -> bool:
    """Writes concrete input shapes into ``gp``; returns whether any input changed."""
    real = {vi.name: vi for vi in gp.input if vi.name not in init_names}
    unknown = sorted(set(shapes) - set(real))
    if unknown:
        raise ShapeError(
            f"input_shapes names {unknown}, which are not inputs of the model; "
            f"its inputs are {sorted(real)}"
        )
    changed = False
    for name, vi in real.items():
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError("graph input", detail=f"input {name!r} is not a tensor")
        dims = _dims(vi)
        if name not in shapes:
            _check_static(name, dims)
            continue
        given = tuple(shapes[name])
        _check_given(name, dims, given)
        if dims is not None and all(d == g for d, g in zip(dims, given, strict=True)):
            continue
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for g in given:
            shape.dim.add().dim_value = int(g)
        changed = True
    return changed


def _check_static(name: str, dims: tuple[Dim, ...] | None) -> None:
    """Refuse an input left out of ``input_shapes`` whose shape the model does not fix."""
    if dims is not None and all(isinstance(d, int) for d in dims):
        return
    which = (
        "its rank"
        if dims is None
        else ", ".join(
            f"dim {i} ({d or '?'})" for i, d in enumerate(dims) if not isinstance(d, int)
        )
    )
    raise ShapeError(
        f"input {name!r} has an unknown shape ({which}); pass "
        f"input_shapes={{{name!r}: (...)}} to give it concrete sizes"
    )


def _check_given(name: str, dims: tuple[Dim, ...] | None, given: tuple) -> None:
    """Refuse a shape in ``input_shapes`` that is not one of the model's input's."""
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in given):
        raise ShapeError(f"input_shapes[{name!r}] = {given} must be non-negative ints")
    if dims is None:
        return
    if len(dims) != len(given):
        raise ShapeError(
            f"input_shapes[{name!r}] = {given} has rank {len(given)}, but "
            f"the model declares rank {len(dims)}"
        )
    for i, (d, g) in enumerate(zip(dims, given, strict=True)):
        # Older exporters write 0 (or -1, see load.py) for a dynamic dimension: it may be set.
        if isinstance(d, int) and d > 0 and d != g:
            raise ShapeError(
                f"input_shapes[{name!r}] = {given}: dim {i} is fixed to {d} by the model"
            )


def _value(vi: onnx.ValueInfoProto) -> Value | None:
    """A Value for a typed tensor, or None when ONNX inference left it (partly) unknown or it
    is a sequence or an optional (a list of tensors or one tensor while typing:
    :mod:`polyonnx.frontend.sequences`)."""
    kind = vi.type.WhichOneof("value")
    if kind in (None, "sequence_type", "optional_type"):
        return None
    if kind != "tensor_type":
        raise UnsupportedOpError(
            "value", detail=f"{vi.name!r} is a {kind}; polyonnx handles tensors only"
        )
    elem = vi.type.tensor_type.elem_type
    dims = _dims(vi)
    if elem == onnx.TensorProto.UNDEFINED or dims is None:
        return None
    return Value(
        vi.name, _dtype_name(elem), tuple(d if isinstance(d, int) else (d or "?") for d in dims)
    )


def _dtype_name(elem: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name


def _attr_value(a: onnx.AttributeProto) -> Any:
    """A Python value for an attribute: str, int, float, tuples, ndarray, or GraphProto."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, onnx.TensorProto):
        return _tensor(v)
    if isinstance(v, list):
        return tuple(
            x.decode("utf-8")
            if isinstance(x, bytes)
            else _tensor(x)
            if isinstance(x, onnx.TensorProto)
            else x
            for x in v
        )
    return v


def _constant_value(node: str, attrs: Mapping[str, Any]) -> np.ndarray:
    """The tensor a ``Constant`` node defines."""
    if len(attrs) != 1:
        raise ModelError(
            f"Constant node {node!r} must have exactly one value attribute, has {sorted(attrs)}"
        )
    ((key, v),) = attrs.items()
    if key == "value":
        return v
    if key in ("value_float", "value_floats"):
        return np.asarray(v, dtype=np.float32)
    if key in ("value_int", "value_ints"):
        return np.asarray(v, dtype=np.int64)
    if key in ("value_string", "value_strings"):
        return np.asarray(v, dtype=object)
    raise UnsupportedOpError("Constant", node=node, detail=f"attribute {key!r}")


def _toposort(nodes: list[Node], defined: set[str]) -> list[Node]:
    """Nodes in a topological order (stable), checking undefined inputs and duplicate outputs:
    a model already in topological order (the checker demands it) keeps its order exactly."""
    _check_definitions(nodes, defined)
    return topological_order(nodes, defined)


def _check_definitions(nodes: list[Node], defined: set[str]) -> None:
    """Refuse a value defined twice, and a node input that nothing defines."""
    producer: dict[str, Node] = {}
    for n in nodes:
        for o in n.outputs:
            if not o:
                continue
            if o in producer or o in defined:
                first = producer[o].name if o in producer else "a graph input or initializer"
                raise ModelError(f"value {o!r} is defined twice: by node {n.name!r} and by {first}")
            producer[o] = n
    for n in nodes:
        for i in n.inputs:
            if i and i not in producer and i not in defined:
                raise ModelError(
                    f"node {n.name!r} ({n.op_type}) reads {i!r}, which no node, "
                    "graph input or initializer defines"
                )
