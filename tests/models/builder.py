"""What the whole-model test modules share to build small ONNX models with ``onnx.helper``:
nodes and initializers under fresh names, and typed graph inputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Nodes and initializers of a model under construction (``rng``: the weights' source)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def init(self, array: object, dtype: object = np.float32) -> str:
        """An initializer holding ``array`` as ``dtype``; its name."""
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def op(
        self, op_type: str, *inputs: str, outputs: int = 1, domain: str = "", **attrs: object
    ) -> Any:
        """A node; its output's name, or the list of its ``outputs`` names."""
        names = [self._name(op_type.lower() + "_") for _ in range(outputs)]
        self.nodes.append(
            helper.make_node(
                op_type, list(inputs), names, name=self._name(op_type), domain=domain, **attrs
            )
        )
        return names[0] if outputs == 1 else names


def graph_input(
    name: str, shape: Sequence[int | str | None], elem: int = TensorProto.FLOAT
) -> onnx.ValueInfoProto:
    """A graph input of element type ``elem`` (symbolic dimensions by name)."""
    return helper.make_tensor_value_info(name, elem, list(shape))
