"""Kernels out of models: list a model's kernels, take one, or build one from an op spec.

A kernel is one fusion group lowered to krnl (what :class:`~polyonnx.schedule.schedule.Schedule`
schedules). The listing gives each kernel's name, ONNX nodes and op types, buffer shapes, FLOPs and
the signature that schedule traces are keyed by.

Example:
    >>> import polyonnx
    >>> k = polyonnx.op_kernel("Conv", [(1, 8, 6, 6), (8, 8, 3, 3)], {"pads": [1, 1, 1, 1]})
    >>> k.name, polyonnx.kernel_flops(k)
    ('k0_Conv', 41472)
    >>> from polyonnx.testing.examples import conv_model
    >>> for info in polyonnx.list_kernels(conv_model()):  # a path, bytes or ModelProto
    ...     print(info)
    k0_Conv  Conv+Relu  [1, 8, 8, 8] [8] [8, 8, 3, 3] -> [1, 8, 8, 8]  0.1 MFLOP  ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from polyonnx.errors import ModelError, PolyonnxError
from polyonnx.frontend.load import ModelSource
from polyonnx.krnl.ir import Kernel
from polyonnx.options import Options
from polyonnx.pipeline import lower, to_graph
from polyonnx.schedule.signature import kernel_flops, kernel_signature
from polyonnx.schedule_driver import target_tiling


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of a model."""

    kernel: Kernel
    op_types: tuple[str, ...]
    flops: int
    signature: str

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def nodes(self) -> tuple[str, ...]:
        """The ONNX node names the kernel computes."""
        return self.kernel.ops

    @property
    def inputs(self) -> tuple[tuple[int, ...], ...]:
        return tuple(b.shape for b in self.kernel.buffers if b.kind == "input")

    @property
    def outputs(self) -> tuple[tuple[int, ...], ...]:
        return tuple(b.shape for b in self.kernel.buffers if b.kind == "output")

    def __str__(self) -> str:
        def shapes(ss: tuple[tuple[int, ...], ...]) -> str:
            return " ".join(str(list(s)) for s in ss)

        return (
            f"{self.name}  {'+'.join(self.op_types) or '-'}  {shapes(self.inputs)} -> "
            f"{shapes(self.outputs)}  {self.flops / 1e6:.1f} MFLOP  {self.signature}"
        )


def list_kernels(
    model: ModelSource | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    options: Options | None = None,
) -> tuple[KernelInfo, ...]:
    """The kernels the compiler makes of ``model`` with ``options``, in execution order."""
    graph = to_graph(model, input_shapes, options)
    op_type = {n.name: n.op_type for n in graph.nodes}
    return tuple(
        KernelInfo(
            k, tuple(op_type.get(n, "?") for n in k.ops), kernel_flops(k), kernel_signature(k)
        )
        for k in lower(graph, target_tiling(options or Options())).kernels
    )


def get_kernel(
    model: ModelSource | onnx.ModelProto,
    which: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    options: Options | None = None,
) -> Kernel:
    """The kernel named ``which`` (``k3_Conv``), or the kernel computing ONNX node ``which``,
    as :func:`polyonnx.compile` makes it with ``options``."""
    infos = list_kernels(model, input_shapes, options)
    for info in infos:
        if which == info.name or which in info.nodes:
            return info.kernel
    raise PolyonnxError(
        f"no kernel or node named {which!r}; kernels: {', '.join(i.name for i in infos)}"
    )


def op_kernel(
    op_type: str,
    input_shapes: Sequence[Sequence[int]],
    attributes: Mapping[str, Any] | None = None,
    *,
    dtype: str = "float32",
    opset: int = 17,
    constants: Mapping[int, np.ndarray] | None = None,
    num_outputs: int = 1,
) -> Kernel:
    """The kernel of one ONNX op, built in memory: inputs ``x0, x1, ...`` (shapes given; input
    ``k`` is the constant ``constants[k]`` instead when given), outputs ``y0, ...``.

    Example:
        >>> print(op_kernel("Relu", [(4,)]))
        kernel k0_Relu(in x0: float32[4], out y0: float32[4]) {
          for i0 in [0, 4):
            S0: y0[i0] = max(x0[i0], 0.0)
        }
    """
    constants = dict(constants or {})
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = [f"x{k}" for k in range(len(input_shapes))]
    outs = [f"y{k}" for k in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, name=op_type.lower(), **dict(attributes or {}))
    inits = [onnx.numpy_helper.from_array(np.asarray(v), names[k]) for k, v in constants.items()]
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [
            helper.make_tensor_value_info(n, elem, list(s))
            for k, (n, s) in enumerate(zip(names, input_shapes, strict=True))
            if k not in constants
        ],
        [helper.make_tensor_value_info(o, elem, None) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        raise ModelError(f"op_kernel({op_type}): {e}") from None
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    # In ONNX's own layout: a channel-blocked Conv would be three kernels.
    options = Options(channel_blocks=False)
    kernels = lower(to_graph(model, options=options), target_tiling(options)).kernels
    if len(kernels) != 1:
        raise PolyonnxError(f"op_kernel({op_type}) made {len(kernels)} kernels")
    return kernels[0]
