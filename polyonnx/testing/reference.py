"""Reference outputs: onnxruntime (the oracle polyonnx must match) and ``onnx.reference``.

onnxruntime is a test and benchmark extra (``pip install polyonnx[test]``), not a dependency
of the compiler: it is imported when first needed, and its absence is an ``ImportError`` that
says how to install it. Prefer it to ``onnx.reference``, which is wrong for opset < 14
BatchNormalization; use ``onnx.reference`` for the opsets onnxruntime does not implement yet.

Example:
    >>> import numpy as np
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    >>> model = helper.make_model(helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]),
    ...     opset_imports=[helper.make_opsetid("", 17)])
    >>> feeds = {"x": np.array([-1.0, 0.0, 2.0], np.float32)}
    >>> onnxruntime_outputs(model, feeds)
    [array([0., 0., 2.], dtype=float32)]
    >>> onnx_reference_outputs(model, feeds)
    [array([0., 0., 2.], dtype=float32)]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np
import onnx

#: What a reference runs: a model, its serialized bytes, or the path of an .onnx file.
ModelLike = onnx.ModelProto | bytes | str | os.PathLike[str]


def import_onnxruntime() -> ModuleType:
    """The ``onnxruntime`` module, or an ``ImportError`` naming the extra that installs it."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ImportError(
            "onnxruntime is not installed; it is the reference polyonnx is "
            "tested against: pip install polyonnx[test]"
        ) from e
    return onnxruntime


def onnxruntime_session(
    model: ModelLike,
    *,
    threads: int | None = 1,
    optimize: bool = True,
    inter_op_threads: int | None = None,
) -> Any:
    """An onnxruntime ``InferenceSession`` on the CPU provider.

    ``threads`` intra-op threads (default 1, so references do not depend on the machine and
    tests running side by side do not fight over cores; ``None`` lets onnxruntime choose);
    ``inter_op_threads`` the threads running independent nodes side by side (None:
    onnxruntime's choice; benchmarks set 1, as polyonnx runs its kernels one after the other).
    ``optimize=False`` turns onnxruntime's graph optimizations off, to run a graph exactly as
    written. Only fatal messages are logged: every failure is raised as an exception.
    """
    ort = import_onnxruntime()
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    if inter_op_threads:
        so.inter_op_num_threads = inter_op_threads
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    return ort.InferenceSession(_serialized(model), so, providers=["CPUExecutionProvider"])


def onnxruntime_outputs(
    model: ModelLike, feeds: Mapping[str, Any], *, threads: int | None = 1, optimize: bool = True
) -> list[np.ndarray]:
    """``model``'s outputs for ``feeds`` as onnxruntime computes them (in graph output order;
    options as :func:`onnxruntime_session`)."""
    session = onnxruntime_session(model, threads=threads, optimize=optimize)
    return session.run(None, dict(feeds))


def onnxruntime_int8_exact() -> bool:
    """Whether onnxruntime's integer kernels (QLinearConv, QLinearMatMul, MatMulInteger,
    ConvInteger and the fused kernels its optimizer makes of DequantizeLinear -> op ->
    QuantizeLinear) give the spec's exact sums on this CPU.

    On x86 without VNNI (AVX2, AVX-512 without VNNI: e.g. AMD Zen 3) onnxruntime multiplies
    uint8 by int8 with ``vpmaddubsw``, which saturates each pair of products at int16, its
    documented "saturation issue" (weights of 7 bits, ``reduce_range``, avoid it); its answer
    is then not the spec's, which polyonnx computes. Other architectures' dot-product
    instructions are exact.
    """
    from polyonnx.codegen.isa import is_x86
    from polyonnx.codegen.target import host_cpu

    triple, _, features = host_cpu()
    return not is_x86(triple) or bool({"+avx512vnni", "+avxvnni"} & set(features.split(",")))


def onnx_reference_outputs(model: ModelLike, feeds: Mapping[str, Any]) -> list[np.ndarray]:
    """``model``'s outputs for ``feeds`` from ``onnx.reference`` (the ONNX spec's Python
    implementation: slow, but it knows the newest opsets)."""
    from onnx.reference import ReferenceEvaluator

    if isinstance(model, bytes):
        model = onnx.load_from_string(model)
    elif not isinstance(model, onnx.ModelProto):
        model = os.fspath(model)
    return list(ReferenceEvaluator(model).run(None, dict(feeds)))


def _serialized(model: ModelLike) -> bytes | str:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    if isinstance(model, bytes):
        return model
    return os.fspath(model)
