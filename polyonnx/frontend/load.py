"""Load an ONNX model: parse, load external data safely, check, upgrade the opset, infer shapes.

Example:
    >>> from polyonnx.testing.examples import conv_model  # a path, bytes or ModelProto
    >>> m = load_model(conv_model())
    >>> m.opset_import[0].version >= 13
    True
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from typing import Any

import onnx
from google.protobuf.message import DecodeError, Message
from onnx import inliner, shape_inference, version_converter

from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.frontend.legacy import (
    drop_windows_in_padding,
    explicit_broadcasts,
    flatten_hardmax,
    keep_resize_semantics,
    replace_experimental,
    resize_outputs,
    subgraphs,
)
from polyonnx.frontend.value_types import check_inputs, infer_checked
from polyonnx.graph.ir import ML_DOMAIN, TRAINING_DOMAIN

#: Opset that models older than it are upgraded to by default: opset 13 moved axes of
#: Squeeze/Unsqueeze/ReduceSum and the split sizes of Split to inputs, so lowerings only handle
#: the modern forms.
DEFAULT_MIN_OPSET = 13

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def load_model(
    model: ModelSource,
    *,
    target_opset: int | None = None,
    base_dir: str | os.PathLike | None = None,
) -> onnx.ModelProto:
    """Parse, check, upgrade and shape-infer an ONNX model.

    ``model`` is a file path, the serialised bytes, or a ``ModelProto`` (which is copied, never
    modified; one this function returned is returned as it is, not copied again: callers do not
    modify what it returns). External data is read only from files inside the model's folder
    (``base_dir`` for bytes and protos). With ``target_opset=None`` a model older than opset 13
    is upgraded to 13 when the version converter manages it, and kept as it is otherwise; an
    explicit ``target_opset`` must convert or a :class:`ModelError` is raised.

    Example:
        >>> from onnx import helper, TensorProto
        >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
        >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
        >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
        >>> m = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]))
        >>> m.opset_import[0].version, m.graph.output[0].type.tensor_type.shape.dim[0].dim_value
        (13, 2)
    """
    if target_opset is None and isinstance(model, onnx.ModelProto) and _loaded(model):
        return model  # this function's own copy, checked, upgraded and inferred already
    where, proto, folder = _parse(model, base_dir)
    if target_opset is None and _loaded(proto):
        return proto
    _load_external_data(proto, folder, where)
    _negative_dims_are_dynamic(proto.graph)
    check_inputs(proto.graph, where)
    # (Read before the checker refuses a model without the default domain, so not through
    # default_opset.)
    if any(op.domain in ("", "ai.onnx") and op.version < 7 for op in proto.opset_import):
        _channel_slopes(proto.graph)
    # The checker, converter and shape inference copy the whole proto several times; they
    # get a copy without the large weights, which stay where they are in ``proto``.
    try:
        slim, added = _without_weights(proto)  # (reads the model's names: bad UTF-8 raises)
        _default_domain_named_empty(slim)
        _check(slim)
    except (onnx.checker.ValidationError, UnicodeDecodeError) as e:  # bad UTF-8 in a name
        raise ModelError(f"{where}: the ONNX checker rejected the model: {_one_line(e)}") from None
    if slim.functions:
        # Model-local functions are inlined so that every later stage sees plain ONNX ops.
        _explicit_defaults(slim)
        slim = inliner.inline_local_functions(slim)
    slim = _upgrade(slim, target_opset, where)
    _stft_onesided(slim.graph.node)
    try:
        slim = infer_checked(slim, infer_shapes, where)
    except (onnx.shape_inference.InferenceError, RuntimeError, MemoryError) as e:
        raise ShapeError(f"{where}: ONNX shape inference failed: {_one_line(e)}") from None
    _with_weights(proto, slim, added)
    proto.metadata_props.add(key=LOADED_MARK, value="1")
    return proto


def _check(model: onnx.ModelProto) -> None:
    """ONNX's checker on ``model``. It wants a type on every graph output and a shape field
    on every tensor type; onnxruntime runs models without them (inference types the
    outputs), so they are stood in for while the checker runs."""
    untyped = [vi for vi in model.graph.output if not vi.type.WhichOneof("value")]
    for vi in untyped:
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    unshaped = _without_shape(model.graph)
    for t in unshaped:
        t.shape.SetInParent()
    try:
        onnx.checker.check_model(_checkable(model))
    finally:
        for t in unshaped:
            t.ClearField("shape")
        for vi in untyped:
            vi.ClearField("type")


def _upgrade(model: onnx.ModelProto, target_opset: int | None, where: str) -> onnx.ModelProto:
    """``model`` converted to ``target_opset`` (or the default), its old node forms that the
    version converter loses rewritten before and after (:mod:`polyonnx.frontend.legacy`)."""
    opset = default_opset(model)
    if 5 <= opset < 13:
        flatten_hardmax(model.graph)
    replace_experimental(model.graph, opset)
    if opset < 7:
        explicit_broadcasts(model)
    resized = resize_outputs(model.graph, opset)
    declared = [(vi.name, vi.type.SerializeToString()) for vi in model.graph.output]
    model = _convert(model, target_opset, where)
    # (The converter types the outputs by its own inference: those types are no claim of the
    # model's, to be checked against polyonnx's.)
    for vi, (name, t) in zip(model.graph.output, declared, strict=True):
        if vi.name == name:
            vi.type.ParseFromString(t)
    keep_resize_semantics(model.graph, resized if default_opset(model) >= 11 else frozenset())
    drop_windows_in_padding(model)
    return model


#: 1-D values larger than this make ONNX's data propagation (which polyonnx wants for shape
#: arithmetic on small integer vectors) allocate about 70 bytes per element of an Add or Mul
#: with a constant: a [2**40] input was an out-of-memory kill.
DATA_PROP_MAX_ELEMENTS = 1 << 16


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference (lenient), with data propagation unless a 1-D value is too large
    for it (see :data:`DATA_PROP_MAX_ELEMENTS`; polyonnx's own rules type what it leaves)."""
    plain = shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
    if _longest_vector(plain.graph) > DATA_PROP_MAX_ELEMENTS:
        return plain
    return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)


def _longest_vector(graph: onnx.GraphProto) -> int:
    lengths = [t.dims[0] for t in graph.initializer if len(t.dims) == 1]
    for vi in (*graph.input, *graph.value_info, *graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == 1 and dims[0].HasField("dim_value"):
            lengths.append(dims[0].dim_value)
    return max(lengths, default=0)


def _negative_dims_are_dynamic(graph: onnx.GraphProto) -> None:
    """Older exporters write ``dim_value: -1`` for a dynamic dimension, and onnxruntime reads it
    so: such a dimension (of an input, output or ``value_info``) becomes an unnamed one, which
    ``input_shapes`` or the fed arrays then set."""
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value < 0:
                    d.ClearField("dim_value")


def _without_shape(graph: onnx.GraphProto) -> list[onnx.TypeProto.Tensor]:
    """The tensor types of the graph inputs and outputs written with an element type but no
    shape field (``make_tensor_value_info(name, FLOAT, None)``): onnxruntime runs such models,
    taking an input's shape from its feed and an output's from inference, and ONNX's checker
    refuses them ("Field 'shape' of 'type' is required")."""
    return [
        v.type.tensor_type
        for v in (*graph.input, *graph.output)
        if v.type.HasField("tensor_type") and not v.type.tensor_type.HasField("shape")
    ]


#: Metadata key marking a model :func:`load_model` returned, which loading again returns as it is.
LOADED_MARK = "polyonnx.loaded"


def _loaded(proto: onnx.ModelProto) -> bool:
    """Whether :func:`load_model` made ``proto``."""
    return any(p.key == LOADED_MARK for p in proto.metadata_props)


#: Initializers larger than this are set aside while the graph is checked and transformed;
#: smaller ones (shapes, axes) stay, since shape inference and the converter read them.
DETACH_BYTES = 4096


def _large(t: onnx.TensorProto) -> bool:
    """Whether initializer ``t`` is set aside (larger than :data:`DETACH_BYTES`). Its size
    from its dims first: ``ByteSize`` reads all of a tensor's data (VGG19's 550 MB: 0.8-1.4 s).
    (A tensor whose data disagrees with its dims is refused by the importer.)"""
    if t.data_type == onnx.TensorProto.STRING:
        return False
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError, TypeError):  # an unknown data type: measured below
        itemsize = 0
    return math.prod(t.dims) * itemsize > DETACH_BYTES or t.ByteSize() > DETACH_BYTES


def _copy_fields(dst: Message, src: Message, skip: str) -> None:
    """Every field of ``src`` but ``skip`` copied into ``dst``, replacing ``dst``'s own."""
    for fd in dst.DESCRIPTOR.fields:
        if fd.name != skip:
            dst.ClearField(fd.name)
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def _without_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str]]:
    """A copy of ``model`` without its large initializers (each replaced by a graph input of
    the same type and shape, so checking and shape inference see the same types), made
    without copying them; and the names of the inputs added for them."""
    slim = onnx.ModelProto()
    _copy_fields(slim, model, "graph")
    _copy_fields(slim.graph, model.graph, "initializer")
    inputs = {i.name for i in model.graph.input}
    added = set()
    for t in model.graph.initializer:
        if not _large(t):
            slim.graph.initializer.append(t)
        elif t.name not in inputs:
            slim.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims))
            added.add(t.name)
    return slim, added


def _with_weights(model: onnx.ModelProto, slim: onnx.ModelProto, added: set[str]) -> None:
    """``model`` made ``slim`` (checked, upgraded, inferred) plus ``model``'s own large
    initializers, which stay in place: the inputs added for them go."""
    large = {t.name for t in model.graph.initializer if _large(t)}
    if not large:
        model.CopyFrom(slim)
        return
    _copy_fields(model, slim, "graph")
    _copy_fields(model.graph, slim.graph, "initializer")
    keep = [i for i in model.graph.input if i.name not in added]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for k in reversed(range(len(model.graph.initializer))):
        if model.graph.initializer[k].name not in large:
            del model.graph.initializer[k]
    model.graph.initializer.extend(slim.graph.initializer)


def _one_line(e: BaseException) -> str:
    """ONNX's C++ errors span several lines; messages polyonnx raises are one line."""
    return " ".join(str(e).split())


#: The domains other than the default one whose ops polyonnx lowers whatever the default
#: domain's version: a model may import them alone.
OWN_VERSIONED_DOMAINS = (ML_DOMAIN, TRAINING_DOMAIN)


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the default ONNX domain a model imports. A model that imports only
    ONNX-ML (``ai.onnx.ml``: a scikit-learn pipeline converted by skl2onnx) or the training
    domain (``ai.onnx.preview.training``: one optimizer step, Adagrad, Adam or Momentum) has
    no node of the default domain, so it gets the newest version (those ops are lowered
    whatever it is; an op of theirs without a lowering is refused when it is lowered).
    UnsupportedOpError when it imports only other domains."""
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return int(op.version)
    if any(op.domain in OWN_VERSIONED_DOMAINS for op in model.opset_import):
        return int(onnx.defs.onnx_opset_version())
    domains = sorted(op.domain for op in model.opset_import)
    raise UnsupportedOpError(
        "model",
        node=model.graph.name,
        detail=f"it imports only the domains {domains}, not the default ONNX domain",
    )


def _parse(
    model: ModelSource, base_dir: str | os.PathLike | None
) -> tuple[str, onnx.ModelProto, str | None]:
    """Returns (name for messages, a private copy of the proto, folder for external data)."""
    folder = os.fspath(base_dir) if base_dir is not None else None
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        return f"model {model.graph.name or '<ModelProto>'!r}", proto, folder
    if isinstance(model, (bytes, bytearray, memoryview)):
        where, data = "model <bytes>", bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        where = f"model file {path!r}"
        if not os.path.isfile(path):
            raise ModelError(f"{where} does not exist")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelError(f"{where} cannot be read: {e.strerror}") from None
        folder = folder if folder is not None else os.path.dirname(os.path.abspath(path))
    else:
        raise ModelError(
            f"cannot load a model from a {type(model).__name__}; "
            "pass a path, bytes or an onnx.ModelProto"
        )
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelError(
            f"{where} is not a valid ONNX protobuf (truncated or corrupt?): {e}"
        ) from None
    if not proto.HasField("graph"):
        raise ModelError(f"{where} is not a valid ONNX model: it has no graph")
    return where, proto, folder


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of a graph: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _tensors(a.g)
            for g in a.graphs:
                yield from _tensors(g)


def _load_external_data(model: onnx.ModelProto, folder: str | None, where: str) -> None:
    """Reads external tensor data into the proto, only from files inside ``folder``."""
    for t in _tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        what = f"{where}: external data {loc!r} of tensor {t.name!r}"
        if folder is None:
            raise ModelError(
                f"{what} needs the model's folder; load the model from its path or pass base_dir"
            )
        parts = loc.replace("\\", "/").split("/")
        if not loc or os.path.isabs(loc) or loc.startswith(("/", "\\")) or ".." in parts:
            raise ModelError(
                f"{what} is refused: external data must be a relative path inside "
                "the model's folder"
            )
        root = os.path.realpath(folder)
        path = os.path.realpath(os.path.join(root, loc))
        # realpath resolves symlinks, so a link that points outside the folder is caught here.
        if os.path.commonpath([root, path]) != root:
            raise ModelError(f"{what} is refused: it resolves outside the model's folder")
        if not os.path.isfile(path):
            raise ModelError(f"{what} does not exist")
        try:
            offset = int(info.get("offset", 0))
            size = os.path.getsize(path)
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            raise ModelError(f"{what} has a malformed offset or length") from None
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelError(
                f"{what}: offset {offset} + length {length} is past the end of the {size}-byte file"
            )
        with open(path, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _channel_slopes(graph: onnx.GraphProto) -> None:
    """PRelu before opset 7 takes a slope per channel: a 1-D ``[C]`` slope initializer of an
    input ``[N, C, ...]`` becomes ``[C, 1, ...]``, which broadcasts as later opsets (and the
    version converter) read it. (PyTorch exported its multi-parameter PReLU this way.)"""
    ranks = {
        vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in (*graph.input, *graph.value_info)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
    }
    inits = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type != "PRelu" or len(n.input) < 2 or n.input[1] not in inits:
            continue
        slope, dims = inits[n.input[1]], ranks.get(n.input[0], [])
        if len(slope.dims) == 1 and len(dims) >= 3 and slope.dims[0] == dims[1] > 1:
            slope.dims.extend([1] * (len(dims) - 2))
            for vi in graph.input:  # (an IR version 3 model lists its initializers as inputs)
                if vi.name == slope.name and vi.type.HasField("tensor_type"):
                    for _ in range(len(dims) - 2):
                        vi.type.tensor_type.shape.dim.add().dim_value = 1


def _default_domain_named_empty(model: onnx.ModelProto) -> None:
    """The default domain written ``ai.onnx`` (which the spec allows and onnxruntime runs)
    becomes ``""``: ONNX's checker, converter and inliner only know the empty name."""
    for imports in (model.opset_import, *(f.opset_import for f in model.functions)):
        alias = [op for op in imports if op.domain == "ai.onnx"]
        for op in alias:
            if any(o.domain == "" for o in imports):
                imports.remove(op)
            else:
                op.domain = ""

    def rename(nodes: Iterable[onnx.NodeProto]) -> None:
        for n in nodes:
            if n.domain == "ai.onnx":
                n.domain = ""
            for g in subgraphs(n):
                rename(g.node)

    rename(model.graph.node)
    for f in model.functions:
        rename(f.node)


#: Ops whose version ONNX deprecated but onnxruntime still runs and polyonnx lowers.
#: GroupNormalization-18 (opsets 18 to 20) took one scale and bias per group; opset 21 made
#: them per channel and deprecated it, but exporters wrote it and onnxruntime runs it.
DEPRECATED_BUT_RUN = frozenset({"GroupNormalization"})


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy for ONNX's checker in which each node of an op in
    :data:`DEPRECATED_BUT_RUN` whose schema is deprecated at the model's opset is an Identity
    of its first input: the checker refuses every deprecated schema outright. Such a node's
    attributes and inputs are checked by its shape rule and lowering instead."""
    version = next((int(op.version) for op in model.opset_import if op.domain == ""), None)
    if version is None:
        return model

    def deprecated(n: onnx.NodeProto) -> bool:
        if n.domain != "" or n.op_type not in DEPRECATED_BUT_RUN or not n.input:
            return False
        try:
            return bool(onnx.defs.get_schema(n.op_type, version).deprecated)
        except onnx.defs.SchemaError:  # (not defined yet at this opset: the checker says so)
            return False

    def found(nodes: Iterable[onnx.NodeProto]) -> bool:
        return any(deprecated(n) or any(found(g.node) for g in subgraphs(n)) for n in nodes)

    def replace(nodes: Iterable[onnx.NodeProto]) -> None:
        for n in nodes:
            if deprecated(n):
                n.CopyFrom(onnx.helper.make_node("Identity", n.input[:1], n.output[:1], n.name))
            for g in subgraphs(n):
                replace(g.node)

    if not found(model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    replace(copy.graph.node)
    return copy


def _explicit_defaults(model: onnx.ModelProto) -> None:
    """Each call of a model-local function gets the attributes it leaves to the function's
    defaults (``FunctionProto.attribute_proto``) written out: ONNX's inliner drops defaults,
    and the body's references to them would fall back to the called ops' own defaults."""
    defaults = {
        (f.domain, f.name, f.overload): f.attribute_proto
        for f in model.functions
        if f.attribute_proto
    }
    if not defaults:
        return

    def fill(nodes: Iterable[onnx.NodeProto]) -> None:
        for n in nodes:
            for g in subgraphs(n):
                fill(g.node)
            given = {a.name for a in n.attribute}
            for d in defaults.get((n.domain, n.op_type, n.overload), ()):
                if d.name not in given:
                    n.attribute.append(d)

    fill(model.graph.node)
    for f in model.functions:
        fill(f.node)


def _stft_onesided(nodes: Iterable[onnx.NodeProto]) -> None:
    """STFT nodes (also in subgraphs) that leave ``onesided`` to its default get it written
    out: its default is 1 (half the spectrum, as the reference and onnxruntime compute it), but
    ONNX's shape inference takes a missing one as 0 and types the full spectrum."""
    for n in nodes:
        for g in subgraphs(n):
            _stft_onesided(g.node)
        stft = n.op_type == "STFT" and n.domain in ("", "ai.onnx")
        if stft and all(a.name != "onesided" for a in n.attribute):
            n.attribute.append(onnx.helper.make_attribute("onesided", 1))


def _convert(model: onnx.ModelProto, target: int | None, where: str) -> onnx.ModelProto:
    opset = default_opset(model)
    if target is None:
        if opset >= DEFAULT_MIN_OPSET:
            return model
        try:
            converted = _stepwise(model, opset, DEFAULT_MIN_OPSET)
        except Exception:  # the converter raises assorted C++ errors
            # Old ops that the converter cannot upgrade may still have a lowering at their own
            # opset; the lowering registry decides later.
            return model
        # (Its Scan 8 -> 9 adapter drops the batch axis from the graph's inputs: a model whose
        # interface changed is not the user's model. The registry then decides, as above.)
        return converted if _keeps_interface(model, converted) else model
    if target == opset:
        return model
    try:
        converted = version_converter.convert_version(model, target)
    except Exception as e:  # the converter raises assorted C++ errors
        raise ModelError(
            f"{where}: cannot convert from opset {opset} to {target}: {_one_line(e)}"
        ) from None
    if not _keeps_interface(model, converted):
        raise ModelError(
            f"{where}: converting from opset {opset} to {target} changes the graph's inputs or "
            "outputs (ONNX's version converter cannot upgrade some op faithfully)"
        )
    return converted


def _stepwise(model: onnx.ModelProto, opset: int, target: int) -> onnx.ModelProto:
    """``model`` converted to ``target`` in one go or, when that fails, one opset at a time
    with shape inference between: the converter's broadcasting adapters (6 -> 7) need the
    shapes of their inputs, which ops it upgraded on the way (BatchNormalization-1) leave
    unknown until inference runs again at the newer opset."""
    try:
        return version_converter.convert_version(model, target)
    except Exception:  # the converter raises assorted C++ errors
        if target - opset < 2:
            raise
    for step in range(opset + 1, target + 1):
        model = shape_inference.infer_shapes(version_converter.convert_version(model, step))
    return model


def _keeps_interface(model: onnx.ModelProto, converted: onnx.ModelProto) -> bool:
    """Whether ``converted`` takes and gives what ``model`` does: the same inputs and outputs,
    element types and ranks, and every dim ``model`` fixes fixed alike (a dim it leaves open
    may have been inferred)."""
    a, b = _interface(model), _interface(converted)
    if [n for n, _ in a] != [n for n, _ in b]:
        return False
    for (_, t), (_, u) in zip(a, b, strict=True):
        if t == u:
            continue
        if isinstance(t, bytes) or isinstance(u, bytes) or t[0] != u[0]:
            return False  # another type (or a sequence's, serialised, changed)
        (_, dims), (_, new_dims) = t, u
        if dims is None:
            continue  # no shape given: any inferred one is a refinement
        if new_dims is None or len(dims) != len(new_dims):
            return False
        if any(d is not None and d != e for d, e in zip(dims, new_dims, strict=True)):
            return False
    return True


def _interface(model: onnx.ModelProto) -> list[tuple[str, Any]]:
    """The graph's inputs and outputs: names, and for a tensor its element type and fixed
    dims (a symbolic or unnamed dim is None: the converter names the unnamed ones), for
    another type its serialised form."""
    out: list[tuple[str, Any]] = []
    for v in (*model.graph.input, *model.graph.output):
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if t is None:
            out.append((v.name, v.type.SerializeToString()))
            continue
        dims = (
            tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
            if t.HasField("shape")
            else None
        )
        out.append((v.name, (t.elem_type, dims)))
    return out
