"""The type fields a model declares for its inputs, outputs and intermediate values.

A graph input's declared type is a fact: feeds are checked against it. A malformed one (no
tensor type, element type 0 or an unknown enum value, a negative dimension) is refused with a
:class:`~polyonnx.errors.ModelError` naming the input. The types declared for node outputs
(graph outputs, ``value_info``) are only claims: ONNX shape inference in its lenient mode keeps a
declaration that contradicts what the node computes, and the output buffer would then be sized
from the claim while the node's loops follow its inputs (a GlobalMaxPool declared
``[2, 5, 1, 1]`` that computes ``[4, 5, 1, 1]`` writes past its output). So declarations are set
aside while ONNX infers, checked against the result, and kept only where inference leaves a
value unknown, and there without static extents: polyonnx's own rules type those values.

Example:
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> x.type.tensor_type.elem_type = 0
    >>> try:
    ...     check_inputs(helper.make_graph([], "g", [x], []), "model 'g'")
    ... except ModelError as e:
    ...     print(e)
    model 'g': input 'x' has element type 0 (UNDEFINED); a graph input needs a concrete type
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from polyonnx.errors import ModelError

_KNOWN_ELEMENT_TYPES = frozenset(onnx.TensorProto.DataType.values())


def check_inputs(graph: onnx.GraphProto, where: str) -> None:
    """Refuse a graph input, output or ``value_info`` entry whose type fields are malformed
    (inputs must also be tensors of a concrete element type)."""
    inits = {t.name for t in graph.initializer}
    for vi in graph.input:
        if vi.name not in inits:
            _check(vi, f"{where}: input {vi.name!r}", required=True)
    for vi in graph.output:
        _check(vi, f"{where}: graph output {vi.name!r}", required=False)
    for vi in graph.value_info:
        _check(vi, f"{where}: value {vi.name!r}", required=False)


def _check(vi: onnx.ValueInfoProto, what: str, *, required: bool) -> None:
    kind = vi.type.WhichOneof("value")
    if kind is None:
        if required:
            raise ModelError(f"{what} has no type")
        return
    if kind != "tensor_type":
        if required:
            raise ModelError(
                f"{what} is declared {_kind_text(kind)}; polyonnx runs tensor inputs only"
            )
        return
    tt = vi.type.tensor_type
    if tt.elem_type not in _KNOWN_ELEMENT_TYPES:
        raise ModelError(f"{what} has an unknown element type {tt.elem_type}")
    if required and tt.elem_type == onnx.TensorProto.UNDEFINED:
        raise ModelError(
            f"{what} has element type 0 (UNDEFINED); a graph input needs a concrete type"
        )
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value < 0:
            raise ModelError(
                f"{what} has a negative dimension {d.dim_value} (dim {k} of {_dims_text(tt)})"
            )


def infer_checked(
    model: onnx.ModelProto, infer: Callable[[onnx.ModelProto], onnx.ModelProto], where: str
) -> onnx.ModelProto:
    """``infer(model)`` (ONNX shape inference) with the declared types of node outputs set
    aside, then checked against what was inferred: ModelError naming the node and both types
    when they disagree."""
    graph = model.graph
    info = [(vi.name, _copy(vi.type)) for vi in graph.value_info]
    outputs = {vi.name: _copy(vi.type) for vi in graph.output}
    del graph.value_info[:]
    for vi in graph.output:
        vi.ClearField("type")
    model = infer(model)
    graph = model.graph

    computed: dict[str, onnx.TypeProto] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        if vi.type.WhichOneof("value") is not None:
            computed.setdefault(vi.name, vi.type)
    for t in graph.initializer:
        computed[t.name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
    producer = {o: n for n in graph.node for o in n.output if o}
    for name, want in (*info, *outputs.items()):
        got = computed.get(name)
        if got is None or not _disagree(want, got):
            continue
        n = producer.get(name)
        if n is None:  # an output that is a graph input or an initializer
            raise ModelError(
                f"{where}: graph output {name!r} is declared {_type_text(want)} "
                f"but is {_type_text(got)}"
            )
        raise ModelError(
            f"{where}: node {n.name!r} ({n.op_type}): output {name!r} is declared "
            f"{_type_text(want)} but the op computes {_type_text(got)}"
        )
    for vi in graph.output:
        got = computed.get(vi.name)
        want = outputs[vi.name]
        if got is not None:
            vi.type.CopyFrom(got)
            _keep_symbolic_names(vi.type, want)
        else:  # inference left it open: the declaration without extents
            vi.type.CopyFrom(want)
            if want.HasField("tensor_type"):
                for d in vi.type.tensor_type.shape.dim:
                    d.ClearField("dim_value")
    return model


def _copy(t: onnx.TypeProto) -> onnx.TypeProto:
    out = onnx.TypeProto()
    out.CopyFrom(t)
    return out


def _disagree(want: onnx.TypeProto, got: onnx.TypeProto) -> bool:
    kinds = want.WhichOneof("value"), got.WhichOneof("value")
    if None in kinds:
        return False
    if kinds[0] != kinds[1]:
        return True
    if kinds[0] != "tensor_type":
        return False
    a, b = want.tensor_type, got.tensor_type
    if a.elem_type and b.elem_type and a.elem_type != b.elem_type:
        return True
    if not (a.HasField("shape") and b.HasField("shape")):
        return False
    if len(a.shape.dim) != len(b.shape.dim):
        # (A rank of unknown dims, as exporters write for "any shape", fixes nothing.)
        return any(d.HasField("dim_value") for d in a.shape.dim)
    # (A declared 0 is how several converters (Keras, MXNet, CoreML) wrote "unknown", and
    # onnxruntime runs such outputs: it claims nothing against a computed extent.)
    return any(
        x.HasField("dim_value") and y.HasField("dim_value") and x.dim_value not in (0, y.dim_value)
        for x, y in zip(a.shape.dim, b.shape.dim, strict=True)
    )


def _keep_symbolic_names(got: onnx.TypeProto, want: onnx.TypeProto) -> None:
    """Dims inference left unnamed take the declared symbolic name (``N``, ``batch``)."""
    if not (got.HasField("tensor_type") and want.HasField("tensor_type")):
        return
    a, b = got.tensor_type.shape.dim, want.tensor_type.shape.dim
    if len(a) == len(b):
        for x, y in zip(a, b, strict=True):
            if not x.HasField("dim_value") and not x.dim_param and y.dim_param:
                x.dim_param = y.dim_param


def elem_type_text(elem_type: int) -> str:
    """An ONNX element type as polyonnx names dtypes (``float32``, ``int64``), or a
    description of a number that names none (a corrupt model's: naming it must not fail).

    Example:
        >>> elem_type_text(onnx.TensorProto.FLOAT), elem_type_text(68)
        ('float32', '<unknown element type 68>')
    """
    if elem_type not in onnx.TensorProto.DataType.values():
        return f"<unknown element type {elem_type}>"
    name = onnx.helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
    return {"float": "float32", "double": "float64"}.get(name, name)


def _type_text(t: onnx.TypeProto) -> str:
    kind = t.WhichOneof("value")
    if kind != "tensor_type":
        return _kind_text(kind) if kind else "untyped"
    tt = t.tensor_type
    elem = elem_type_text(tt.elem_type) if tt.elem_type else "?"
    return elem + (_dims_text(tt) if tt.HasField("shape") else "")


def _kind_text(kind: str) -> str:
    name = kind.removesuffix("_type")
    return ("an " if name[0] in "aeiou" else "a ") + name.replace("_", " ")


def _dims_text(tt: onnx.TypeProto.Tensor) -> str:
    return (
        "["
        + ", ".join(
            str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
            for d in tt.shape.dim
        )
        + "]"
    )
