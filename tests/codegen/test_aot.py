"""Shared libraries of models they cannot serve: string tensors are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.codegen.aot import write_library
from polyonnx.errors import CodegenError, ShapeError
from tests.reliability.models import model, tensor

S = TensorProto.STRING


def test_a_string_output_is_refused(tmp_path: Path) -> None:
    strings = helper.make_tensor("v", S, [2], [b"a", b"b"])
    const = helper.make_node("Constant", [], ["c"], value=strings)
    upper = helper.make_node("StringNormalizer", ["c"], ["y"], case_change_action="UPPER")
    compiled = polyonnx.compile(model([const, upper], [], [tensor("y", [2], S)], opset=13))
    with pytest.raises(CodegenError, match=r"\['y'\] are string tensors"):
        write_library(compiled, tmp_path / "m.so")
    assert not (tmp_path / "m.so").exists()


def test_a_string_input_is_refused() -> None:
    node = helper.make_node("StringNormalizer", ["x"], ["y"])
    m = model([node], [tensor("x", [2], S)], [tensor("y", [2], S)], opset=13)
    with pytest.raises(ShapeError, match="shared libraries take no string inputs"):
        polyonnx.compile(m)
