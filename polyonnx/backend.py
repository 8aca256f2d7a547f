"""The ONNX backend API (``onnx.backend.base.Backend``) over :class:`polyonnx.InferenceSession`.

``prepare`` compiles a model through the normal pipeline (the same code path users get); the
returned :class:`BackendRep` runs it. Inputs given as a sequence map, in order, to the model's
inputs that are not initializers; a mapping is taken by name.

Compiled sessions are cached in-process by the hash of the model's bytes, so preparing the same
model twice compiles it once.

polyonnx compiles for static shapes. A graph input that feeds a shape-determining operand (the
``axes`` of a reduction, Reshape's ``shape``, Slice's ``starts``...) therefore makes the model's
shapes depend on input *values*; such inputs are bound at run time: the model is compiled once
per distinct value of them, with the value as an initializer (exactly what a user would do by
hand), and the other inputs are fed as usual.

Example:
    >>> import numpy as np, onnx.helper as oh, onnx
    >>> m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g",
    ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
    ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]))
    >>> run_model(m, [np.array([-1.0, 2.0], np.float32)])[0]
    array([0., 2.], dtype=float32)
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from polyonnx.errors import InputError, UnsupportedOpError
from polyonnx.frontend.sequences import element_name, presence_name
from polyonnx.graph.shapes import SHAPE_FROM_VALUES
from polyonnx.options import Options
from polyonnx.runtime.session import InferenceSession

#: How many prepared sessions the in-process cache keeps (least recently used evicted first).
CACHE_SIZE = 64

_cache: OrderedDict[tuple[str, Options], InferenceSession] = OrderedDict()
_cache_lock = threading.Lock()


#: Operand positions whose values determine output shapes (every op of
#: :data:`~polyonnx.graph.shapes.SHAPE_FROM_VALUES`) or must be known to lower the op. A graph
#: input used at one of them is bound per run (see the module docstring).
VALUE_OPERANDS: dict[str, tuple[int, ...]] = {
    **SHAPE_FROM_VALUES,
    **{op: (1,) for op in ("CumSum", "CumProd", "TopK", "Trilu", "AffineGrid")},
    "Loop": (0, 1),  # the trip count and first condition: a known one may unroll
    "Dropout": (1, 2),  # ratio and training_mode decide whether it is the identity
    "Resize": (1, 2, 3),  # (the region of interest too)
    # Sequences are lists known at compile time (polyonnx.frontend.sequences).
    "SequenceInsert": (2,),
    "SequenceErase": (1,),
    "SequenceAt": (1,),
    "SplitToSequence": (1,),
}


def value_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs (not initializers) that shape-determining operands are computed from
    (also in subgraphs, and through other nodes up to a Shape or Size), in input order."""
    inits = {t.name for t in model.graph.initializer}
    nodes = list(_all_nodes(model.graph))
    needed = {
        name
        for n in nodes
        if n.domain in ("", "ai.onnx")
        for k, name in enumerate(n.input)
        if k in VALUE_OPERANDS.get(n.op_type, ())
    }
    producer = {o: n for n in nodes for o in n.output if o}
    todo = list(needed)
    while todo:
        n = producer.get(todo.pop())
        if n is None or n.op_type in ("Shape", "Size"):  # these read shapes, not values
            continue
        # An If's (or Loop's) outputs are computed from its subgraphs' outputs.
        body_outputs = [
            o.name for a in n.attribute for g in (*a.graphs, *([a.g] if a.HasField("g") else []))
            for o in g.output
        ]  # fmt: skip
        for i in (*n.input, *body_outputs):
            if i and i not in needed:
                needed.add(i)
                todo.append(i)
    return [i.name for i in model.graph.input if i.name in needed and i.name not in inits]


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.HasField("g"):
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _bind(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """``model`` with the inputs in ``values`` turned into initializers."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    keep = [i for i in bound.graph.input if i.name not in values]
    del bound.graph.input[:]
    bound.graph.input.extend(keep)
    bound.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in values.items()
    )
    return bound


class PolyonnxRep(BackendRep):
    """A prepared (compiled) model; :meth:`run` executes it."""

    def __init__(
        self,
        session: InferenceSession | None,
        model: onnx.ModelProto | None = None,
        options: Options | None = None,
    ) -> None:
        self.session = session
        self._model, self._options = model, options or Options()
        graph = model.graph if model is not None else None
        # Sequence inputs and outputs travel as their elements (frontend.sequences).
        self._sequence_inputs = _sequences(graph.input) if graph is not None else []
        self._optional_inputs = _optionals(graph.input) if graph is not None else []
        self._outputs = [o.name for o in graph.output] if graph is not None else []
        self._sequence_outputs = set(_sequences(graph.output)) if graph is not None else set()
        self._optional_outputs = set(_optionals(graph.output)) if graph is not None else set()
        self._grouped = bool(self._sequence_outputs or self._optional_outputs)
        if session is not None:
            self._inputs = [a.name for a in session.get_inputs()]
            self._bound: list[str] = []
        else:
            assert model is not None
            inits = {t.name for t in model.graph.initializer}
            self._inputs = [i.name for i in model.graph.input if i.name not in inits]
            # (A sequence's length, which is what a shape could depend on, is part of the key.)
            self._bound = [
                n
                for n in value_inputs(model)
                if n not in self._sequence_inputs and n not in self._optional_inputs
            ]
        self._by_value: dict[bytes, InferenceSession] = {}

    def _session_for(self, feed: Mapping[str, Any]) -> tuple[InferenceSession, dict[str, Any]]:
        if self.session is not None:
            return self.session, dict(feed)
        missing = [n for n in (*self._bound, *self._sequence_inputs) if n not in feed]
        if missing:
            raise InputError(f"missing input(s) {missing}")
        bound = {n: np.asarray(feed[n]) for n in self._bound}
        lists: dict[str, list[np.ndarray] | None] = {
            n: [np.asarray(a) for a in feed[n]] for n in self._sequence_inputs
        }
        # An optional input is None, or its tensor, or its sequence's elements.
        lists.update((n, _optional_feed(feed.get(n))) for n in self._optional_inputs)
        rest = {n: v for n, v in feed.items() if n not in bound and n not in lists}
        for n, arrays in lists.items():
            rest.update((element_name(n, k), a) for k, a in enumerate(arrays or ()))
        # A model with sequence outputs is compiled for the feeds' shapes: the outputs its
        # elements become are known only then.
        shapes = {n: tuple(np.shape(v)) for n, v in rest.items()} if self._grouped else None
        key = (
            b"|".join(f"{n}:{v.dtype}:{v.shape}:".encode() + v.tobytes() for n, v in bound.items())
            + b"|".join(
                f"{n}:{v if v is None else [(a.dtype, a.shape) for a in v]}".encode()
                for n, v in lists.items()
            )
            + repr(shapes).encode()
        )
        session = self._by_value.get(key)
        if session is None:
            assert self._model is not None
            model = _bind(_sequence_elements(self._model, lists), bound)
            session = _session(model, self._options, shapes)
            self._by_value[key] = session
        return session, rest

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run on ``inputs``: one array, a sequence (in input order) or a name -> array mapping.

        Returns the outputs, in order, as a named tuple (``namedtupledict``).
        """
        names = self._inputs
        if isinstance(inputs, Mapping):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) or np.isscalar(inputs):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(names):
                raise InputError(
                    f"{len(inputs)} inputs given but the model takes {len(names)}: {names}"
                )
            feed = {
                n: v
                if isinstance(v, np.ndarray) or n in self._sequence_inputs + self._optional_inputs
                else np.asarray(v)
                for n, v in zip(names, inputs, strict=False)
            }
        session, feed = self._session_for(feed)
        outputs = session.run(None, feed)
        out_names = [o.name for o in session.get_outputs()]
        if not self._grouped:
            return namedtupledict("Outputs", out_names)(*outputs)
        by_name = dict(zip(out_names, outputs, strict=True))
        grouped = [self._output(by_name, o) for o in self._outputs]
        return namedtupledict("Outputs", self._outputs)(*grouped)

    def _output(self, by_name: Mapping[str, np.ndarray], name: str) -> Any:
        """Graph output ``name`` from the compiled model's outputs: a sequence as a list of
        its elements, an optional as None or its tensor or list."""
        if name in self._optional_outputs and not bool(by_name[presence_name(name)]):
            return None
        if name in by_name:
            return by_name[name]
        return _elements(by_name, name)


def _sequences(values: Iterable[onnx.ValueInfoProto]) -> list[str]:
    """The names of the sequence-typed ``values``."""
    return [v.name for v in values if v.type.WhichOneof("value") == "sequence_type"]


def _optionals(values: Iterable[onnx.ValueInfoProto]) -> list[str]:
    """The names of the ``values`` typed optional tensors or optional sequences of tensors."""
    return [
        v.name
        for v in values
        if v.type.WhichOneof("value") == "optional_type"
        and (
            v.type.optional_type.elem_type.WhichOneof("value") == "tensor_type"
            or _sequences([helper.make_value_info(v.name, v.type.optional_type.elem_type)])
        )
    ]


def _optional_feed(value: Any) -> list[np.ndarray] | None:
    """An optional input's feed as the elements it is fed as: None for an empty optional, a
    tensor as one element, a sequence (a list or tuple) as its elements."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [np.asarray(a) for a in value]
    return [np.asarray(value)]


def _elements(outputs: Mapping[str, np.ndarray], sequence: str) -> list[np.ndarray]:
    """The elements of sequence output ``sequence``, from the compiled model's outputs."""
    out: list[np.ndarray] = []
    while element_name(sequence, len(out)) in outputs:
        out.append(outputs[element_name(sequence, len(out))])
    return out


def _sequence_elements(
    model: onnx.ModelProto, lists: Mapping[str, Sequence[np.ndarray] | None]
) -> onnx.ModelProto:
    """``model`` with each sequence or optional input in ``lists`` taken as its elements
    (None: an empty optional): tensor inputs of their dtypes and shapes, gathered by the nodes
    that make the input of its name (see :func:`_gathered`)."""
    if not lists:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    declared = {vi.name: vi for vi in g.input}
    keep = [vi for vi in g.input if vi.name not in lists]
    del g.input[:]
    g.input.extend(keep)
    front = []
    for name, arrays in lists.items():
        inputs, nodes = _gathered(name, declared[name].type, arrays)
        g.input.extend(inputs)
        front += nodes
    nodes = [*front, *g.node]
    del g.node[:]
    g.node.extend(nodes)
    return out


def _gathered(
    name: str, t: onnx.TypeProto, arrays: Sequence[np.ndarray] | None
) -> tuple[list[onnx.ValueInfoProto], list[onnx.NodeProto]]:
    """The element inputs of sequence or optional input ``name`` (of type ``t``) fed
    ``arrays``, and the nodes making ``name`` from them: a SequenceConstruct (SequenceEmpty
    when there are none), an Optional of the tensor or of that sequence, or an empty
    Optional for None."""
    optional = t.WhichOneof("value") == "optional_type"
    inner = t.optional_type.elem_type if optional else t
    if arrays is None:
        empty = helper.make_node("Optional", [], [name])
        empty.attribute.append(helper.make_attribute("type", inner))
        return [], [empty]
    of_tensor = inner.WhichOneof("value") == "tensor_type"
    elem = (inner if of_tensor else inner.sequence_type.elem_type).tensor_type.elem_type
    parts = [element_name(name, k) for k in range(len(arrays))]
    inputs = [
        helper.make_tensor_value_info(p, elem, list(a.shape))
        for p, a in zip(parts, arrays, strict=True)
    ]
    if optional and of_tensor:
        return inputs, [helper.make_node("Optional", parts, [name])]
    sequence = f"{name}__sequence" if optional else name
    nodes = [
        helper.make_node("SequenceConstruct", parts, [sequence])
        if parts
        else helper.make_node("SequenceEmpty", [], [sequence], dtype=elem)
    ]
    if optional:
        nodes.append(helper.make_node("Optional", [sequence], [name]))
    return inputs, nodes


def _session(
    model: onnx.ModelProto | bytes,
    options: Options,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> InferenceSession:
    """A compiled session for ``model`` (for ``input_shapes``), from the in-process cache when
    possible."""
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else bytes(model)
    key = (hashlib.sha256(data).hexdigest() + repr(input_shapes), options)
    with _cache_lock:
        session = _cache.get(key)
        if session is not None:
            _cache.move_to_end(key)
            return session
    session = InferenceSession(data, options=options, input_shapes=input_shapes)
    with _cache_lock:
        _cache[key] = session
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return session


class PolyonnxBackend(Backend):
    """polyonnx as an ONNX backend: CPU only."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto | bytes | str, device: str = "CPU", **kwargs: Any
    ) -> PolyonnxRep:
        """Compile ``model``; ``kwargs`` may carry ``options`` (:class:`polyonnx.Options`) and
        ``num_threads``. Raises :class:`~polyonnx.errors.UnsupportedOpError` for what cannot be
        compiled."""
        if not cls.supports_device(device):
            raise ValueError(f"polyonnx runs on CPU only, not {device!r}")
        options = kwargs.get("options") or Options()
        if kwargs.get("num_threads") is not None:
            from dataclasses import replace

            options = replace(options, num_threads=kwargs["num_threads"])
        if isinstance(model, bytes | bytearray):
            proto = onnx.ModelProto()
            proto.ParseFromString(bytes(model))
            model = proto
        elif not isinstance(model, onnx.ModelProto):
            return PolyonnxRep(InferenceSession(model, options=options))
        optionals = _optionals(model.graph.input)
        for vi in (*model.graph.input, *model.graph.output):
            kind = vi.type.WhichOneof("value")
            if kind not in ("tensor_type", "sequence_type", None) and not _optionals([vi]):
                raise UnsupportedOpError(
                    "value",
                    detail=f"{vi.name!r} is a {kind}; polyonnx handles tensors, sequences of "
                    "tensors and optionals of either",
                )
        if (
            value_inputs(model)
            or optionals
            or _sequences(model.graph.input)
            or _sequences(model.graph.output)
            or _optionals(model.graph.output)
        ):
            # Compiled on first run, once per value of the shape-determining inputs (and per
            # length, dtypes and shapes of the sequence inputs).
            return PolyonnxRep(None, model, options)
        return PolyonnxRep(_session(model, options), model, options)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Run a single node on ``inputs`` (a sequence in the node's input order, or a mapping).

        The node is wrapped in a one-node model typed from the inputs; ``opset_version`` in
        ``kwargs`` picks the default-domain opset (the newest by default).
        """
        names = [n for n in node.input]
        if isinstance(inputs, Mapping):
            arrays = {n: np.asarray(inputs[n]) for n in names if n}
        else:
            arrays = {
                n: np.asarray(v) for n, v in zip([n for n in names if n], inputs, strict=False)
            }
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in arrays.items()
        ]
        graph_outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid(node.domain or "", opset)]
        )
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output)}
        del model.graph.output[:]
        model.graph.output.extend(types[o] for o in node.output if o)
        return cls.prepare(model, device, **kwargs).run([arrays[n] for n in arrays])

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = PolyonnxBackend.prepare
run_model = PolyonnxBackend.run_model
run_node = PolyonnxBackend.run_node
supports_device = PolyonnxBackend.supports_device
