"""Declared types: malformed ones refused with ModelError, node outputs typed by inference.

A declaration that contradicts what a node computes used to size the output buffer while the
node's loops followed its inputs: native code wrote past the output (a GlobalMaxPool declared
smaller than it computes: glibc's "corrupted size vs. prev_size" in fuzz workers) or read past
an input (a Flatten declared larger).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import ModelError
from tests.reliability.models import const, model, relu, tensor


def _global_max_pool(declared: list) -> onnx.ModelProto:
    """GlobalMaxPool of Concat(c, x) on axis 0: [4, 5, 2, 1] -> [4, 5, 1, 1]."""
    c = const("c", np.ones((2, 5, 2, 1), np.float32))
    return model(
        [
            helper.make_node("Concat", ["c", "x"], ["v"], name="cat", axis=0),
            helper.make_node("GlobalMaxPool", ["v"], ["y"], name="pool"),
        ],
        [tensor("x", [2, 5, 2, 1])],
        [tensor("y", declared)],
        [c],
    )


def _flatten(declared: list) -> onnx.ModelProto:
    return model(
        [helper.make_node("Flatten", ["x"], ["y"], name="flat", axis=4)],
        [tensor("x", [4, 1, 4, 1], TensorProto.INT32)],
        [tensor("y", declared, TensorProto.INT32)],
    )


def _with_value_info(m: onnx.ModelProto, info: onnx.ValueInfoProto) -> onnx.ModelProto:
    m.graph.value_info.append(info)
    return m


@pytest.mark.parametrize(
    "make, needles",
    [
        # Smaller than computed: the kernel wrote 80 bytes into the 40-byte output.
        (
            lambda: _global_max_pool([2, 5, 1, 1]),
            ("'pool' (GlobalMaxPool)", "'y'", "declared float32[2, 5, 1, 1]", "[4, 5, 1, 1]"),
        ),
        # Larger than computed: the copy read 4 MB from a 64-byte input.
        (
            lambda: _flatten([1000000, 1]),
            ("'flat' (Flatten)", "declared int32[1000000, 1]", "computes int32[16, 1]"),
        ),
        (lambda: _flatten([16, 1, 1]), ("'flat' (Flatten)", "[16, 1, 1]")),
        (
            lambda: _with_value_info(_global_max_pool([4, 5, 1, 1]), tensor("v", [3, 5, 2, 1])),
            ("'cat' (Concat)", "'v'", "declared float32[3, 5, 2, 1]", "[4, 5, 2, 1]"),
        ),
        (
            lambda: model(
                [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                [tensor("x", [2])],
                [tensor("y", [2], TensorProto.INT8)],
            ),
            ("'relu' (Relu)", "declared int8[2]", "computes float32[2]"),
        ),
        (
            lambda: model([], [tensor("x", [2])], [tensor("x", [3])]),
            ("graph output 'x'", "declared float32[3]", "is float32[2]"),
        ),
        # An element type no ONNX type has (corrupt bytes): the message names the number
        # (it raised KeyError from onnx's type table while being written: fuzz seed 90000292).
        (
            lambda: model(
                [helper.make_node("Max", ["c", "x"], ["y"], name="max")],
                [tensor("x", [2])],
                [tensor("y", [2])],
                [onnx.TensorProto(name="c", data_type=68, dims=[2], raw_data=bytes(8))],
            ),
            ("'max' (Max)", "declared float32[2]", "computes <unknown element type 68>[2]"),
        ),
    ],
)
def test_declared_types_that_disagree_with_the_computed_ones_are_refused(make, needles):
    with pytest.raises(ModelError) as info:
        polyonnx.compile(make())
    for needle in needles:
        assert needle in str(info.value), info.value


def test_node_outputs_get_the_computed_type():
    # A rank of unknown dims (as exporters write for "any shape") states nothing to check.
    sess = polyonnx.InferenceSession(_global_max_pool([None] * 2))
    x = np.arange(20, dtype=np.float32).reshape(2, 5, 2, 1)
    [y] = sess.run(None, {"x": x})
    want = np.concatenate([np.ones((2, 5, 2, 1), np.float32), x]).max(axis=2, keepdims=True)
    np.testing.assert_array_equal(y, want)


def test_a_declared_zero_extent_states_nothing():
    # Keras/MXNet/CoreML converters wrote dim_value 0 for "unknown" (onnxruntime runs them).
    sess = polyonnx.InferenceSession(_global_max_pool([0, 0, 0, 0]))
    assert sess.get_outputs()[0].shape == [4, 5, 1, 1]
    [y] = sess.run(None, {"x": np.zeros((2, 5, 2, 1), np.float32)})
    want = np.concatenate([np.ones((2, 5, 1, 1), np.float32), np.zeros((2, 5, 1, 1), np.float32)])
    np.testing.assert_array_equal(y, want)


def test_declared_symbolic_names_are_kept():
    sess = polyonnx.InferenceSession(
        model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [tensor("x", ["n", 3])],
            [tensor("y", ["batch", 3])],
        )
    )
    assert sess.get_outputs()[0].shape in (["n", 3], ["batch", 3])
    assert sess.run(None, {"x": np.ones((4, 3), np.float32)})[0].shape == (4, 3)


def _edited(
    field: str, edit: Callable[[onnx.ValueInfoProto], None]
) -> Callable[[], onnx.ModelProto]:
    """relu() with its input or output (``field``) edited."""

    def make() -> onnx.ModelProto:
        m = relu()
        edit(getattr(m.graph, field)[0])
        return m

    return make


def _input(edit: Callable[[onnx.ValueInfoProto], None]) -> Callable[[], onnx.ModelProto]:
    return _edited("input", edit)


def _output(edit: Callable[[onnx.ValueInfoProto], None]) -> Callable[[], onnx.ModelProto]:
    return _edited("output", edit)


def _elem(value: int) -> Callable[[onnx.ValueInfoProto], None]:
    return lambda vi: setattr(vi.type.tensor_type, "elem_type", value)


def _dim(value: int) -> Callable[[onnx.ValueInfoProto], None]:
    return lambda vi: setattr(vi.type.tensor_type.shape.dim[0], "dim_value", value)


def _type(t: onnx.TypeProto) -> Callable[[onnx.ValueInfoProto], None]:
    return lambda vi: vi.type.CopyFrom(t)


_T = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])


@pytest.mark.parametrize(
    "make, needles",
    [
        (_input(_elem(0)), ("input 'x'", "element type 0 (UNDEFINED)")),
        (_input(_elem(99)), ("input 'x'", "unknown element type 99")),
        (_output(_elem(99)), ("graph output 'y'", "unknown element type 99")),
        (_input(lambda vi: vi.type.tensor_type.Clear()), ("input 'x'", "element type 0")),
        (_input(lambda vi: vi.ClearField("type")), ("input 'x'", "no type")),
        (_input(_type(helper.make_sequence_type_proto(_T))), ("input 'x'", "a sequence")),
        (_input(_type(helper.make_map_type_proto(TensorProto.INT64, _T))), ("input 'x'", "a map")),
        (_input(_type(helper.make_optional_type_proto(_T))), ("input 'x'", "an optional")),
        (
            _input(_type(helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2, 3]))),
            ("input 'x'", "a sparse tensor"),
        ),
        (
            _output(_type(helper.make_sequence_type_proto(_T))),
            ("'relu' (Relu)", "declared a sequence", "computes float32[2, 3]"),
        ),
        (lambda: relu((2**62, 3)), ("'x'", "max_tensor_bytes")),
        (lambda: relu((0, 2**62)), ("'x'", "[0, 4611686018427387904]", "max_tensor_bytes")),
    ],
)
def test_malformed_type_fields_are_model_errors(make, needles):
    for build in (polyonnx.compile, polyonnx.InferenceSession):
        with pytest.raises(ModelError) as info:
            build(make())
        message = str(info.value)
        assert "\n" not in message
        for needle in needles:
            assert needle in message, message


_HUGE_VECTOR = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
import numpy as np
from onnx import helper
import polyonnx
from tests.reliability.models import const, model, tensor
m = model([helper.make_node("Add", ["x", "s"], ["y"], name="add")], [tensor("x", [2**40])],
          [tensor("y", [2**40])], [const("s", np.array(0.5, np.float32))])
try:
    polyonnx.compile(m)
except polyonnx.ModelError as e:
    print(e)
"""


def test_a_huge_vector_is_refused_without_running_out_of_memory():
    # ONNX's data propagation allocated ~70 bytes per element of a 1-D Add with a constant.
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _HUGE_VECTOR], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'x'" in proc.stdout and "max_tensor_bytes" in proc.stdout, proc.stdout
