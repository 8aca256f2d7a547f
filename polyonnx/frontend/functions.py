"""Ops without a lowering that ONNX defines as a function of other ops: replaced by that body.

Many newer ops (RotaryEmbedding, SwiGLU, CausalConvWithState, DynamicQuantizeLinear ...) have a
function body in their schema. A node of such an op is turned into a call of a model-local
function holding the body (its attributes, with the schema's defaults filled in), and onnx's
inliner replaces the call by the body's nodes, renaming its values and substituting attribute
references. So the op compiles through the lowerings of the ops it is made of.

Example (``model`` with SwiGLU nodes, which ONNX defines by a function)::

    m = expand_functions(model, lambda op, opset: op == "SwiGLU")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from onnx import inliner

#: The domain of the model-local functions made here (inlined before anything else sees them).
_DOMAIN = "polyonnx.expanded"


def expand_functions(
    model: onnx.ModelProto, wanted: Callable[[str, int], bool], opset: int
) -> onnx.ModelProto:
    """``model`` with every default-domain node of the main graph whose op ``wanted`` (op type,
    opset) and has a function body replaced by that body; ``model`` itself when none."""
    graph = model.graph
    types = {vi.name: vi.type for vi in (*graph.input, *graph.value_info, *graph.output)}
    types.update(
        (t.name, onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)))
        for t in graph.initializer
    )
    functions: list[onnx.FunctionProto] = []
    calls: dict[int, onnx.NodeProto] = {}
    for k, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or not wanted(node.op_type, opset):
            continue
        call = onnx.NodeProto()
        call.CopyFrom(node)
        fn = _body(call, opset, types)
        if fn is None:
            continue
        fn.name, fn.domain = f"{node.op_type}_{k}", _DOMAIN
        call.op_type, call.domain = fn.name, _DOMAIN
        functions.append(fn)
        calls[k] = call
    if not calls:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, call in calls.items():
        out.graph.node[k].CopyFrom(call)
    out.functions.extend(functions)
    out.opset_import.add(domain=_DOMAIN, version=1)
    for fn in functions:
        for imp in fn.opset_import:
            if imp.domain not in {o.domain for o in out.opset_import}:
                out.opset_import.add(domain=imp.domain, version=imp.version)
    inlined = inliner.inline_local_functions(out)
    del inlined.opset_import[:]
    inlined.opset_import.extend(o for o in out.opset_import if o.domain != _DOMAIN)
    return inlined


def _body(
    node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]
) -> onnx.FunctionProto | None:
    """The op's function body at ``opset`` for ``node``, or None when the schema has none or
    it cannot be made. The schema's defaults of attributes the node omits are added to it
    (the call passes every attribute the body refers to)."""
    try:
        # (Any: onnx's type stubs lack the schema's function accessors)
        schema: Any = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    attrs = {a.name for a in node.attribute}
    defaults = [
        a.default_value
        for name, a in schema.attributes.items()
        if name not in attrs and a.default_value.type != onnx.AttributeProto.UNDEFINED
    ]
    full = onnx.NodeProto()
    full.CopyFrom(node)
    full.attribute.extend(defaults)
    fn = onnx.FunctionProto()
    try:
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            raw = schema.get_function_with_opset_version(max(versions)) if versions else b""
            if raw:
                fn.ParseFromString(raw)
            else:
                fn.CopyFrom(schema.function_body)
        elif schema.has_context_dependent_function:
            if any(i and i not in types for i in node.input):
                return None
            arg_types = [types[i].SerializeToString() if i else b"" for i in node.input]
            raw = schema.get_context_dependent_function_with_opset_version(
                opset, full.SerializeToString(), arg_types
            )
            fn.ParseFromString(raw)
        else:
            return None
    except Exception:  # onnx raises assorted C++ errors for nodes its builder rejects
        return None
    # The inliner keeps a body written for another version of the default domain as a call.
    if not fn.node or any(
        o.domain in ("", "ai.onnx") and o.version != opset for o in fn.opset_import
    ):
        return None
    node.attribute.extend(defaults)
    return fn
