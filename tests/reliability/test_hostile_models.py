"""Hostile or broken model files: every one gives a one-line PolyonnxError naming what is wrong."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ModelError, PolyonnxError, ShapeError
from tests.reliability.models import const, conv_net, model, relu, tensor

X4 = tensor("x", [1, 2, 5, 5])
Y4 = tensor("y", [None] * 4)


def _conv(weight_shape=(2, 2, 3, 3), **attrs) -> onnx.ModelProto:
    w = const("w", np.ones(weight_shape, np.float32))
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="c1", **attrs)], [X4], [Y4], [w])


def _pool(op: str = "MaxPool", **attrs) -> onnx.ModelProto:
    return model([helper.make_node(op, ["x"], ["y"], name="p1", **attrs)], [X4], [Y4])


def _one(op: str, **attrs) -> onnx.ModelProto:
    return model([helper.make_node(op, ["x"], ["y"], name="n1", **attrs)], [X4], [Y4])


def _with(m: onnx.ModelProto, edit: Callable[[onnx.ModelProto], None]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    edit(out)
    return out


def _set_ir(version: int) -> Callable[[onnx.ModelProto], None]:
    def edit(m: onnx.ModelProto) -> None:
        m.ir_version = version

    return edit


def _cycle() -> onnx.ModelProto:
    return model(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="add"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            helper.make_node("Relu", ["a"], ["y"], name="out"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )


def _undefined() -> onnx.ModelProto:
    return model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )


def _duplicate() -> onnx.ModelProto:
    return model(
        [
            helper.make_node("Relu", ["x"], ["y"], name="a"),
            helper.make_node("Neg", ["x"], ["y"], name="b"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )


def _missing_initializer() -> onnx.ModelProto:
    # An IR-3 style model lists its weights as graph inputs too; here one initializer is gone
    # and the checker's topological-order check is the one that notices.
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 4])],
        [const("w", np.ones((3, 4), np.float32))],
    )
    del m.graph.initializer[:]
    return m


def _huge_constant() -> onnx.ModelProto:
    shape = const("s", np.array([100_000, 100_000, 100], np.int64))
    return model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
        [],
        [tensor("y", [None] * 3)],
        [shape],
    )


def _string_input() -> onnx.ModelProto:
    return model(
        [helper.make_node("Identity", ["x"], ["y"], name="id")],
        [tensor("x", [2], TensorProto.STRING)],
        [tensor("y", [2], TensorProto.STRING)],
    )


def _mixed_types() -> onnx.ModelProto:
    return model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", [2]), tensor("w", [2], TensorProto.DOUBLE)],
        [tensor("y", [2])],
    )


def _bad_utf8() -> bytes:
    data = relu().SerializeToString()
    return data.replace(b"Relu", b"R\x87lu", 1)  # the op type


def _raw_data_short() -> onnx.ModelProto:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", [2])],
        [tensor("y", [2])],
        [const("w", np.ones(5, np.float32))],
    )
    m.graph.initializer[0].dims[:] = [2]  # 5 floats of raw data for 2 declared
    return m


def _unknown_element_type(node: bool) -> onnx.ModelProto:
    # ONNX's checker lets an initializer (or a Constant's value) of element type 113 through.
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    if node:
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=w))
    m = model(nodes, [tensor("x", [2])], [tensor("y", [2])], [] if node else [w])
    (m.graph.node[0].attribute[0].t if node else m.graph.initializer[0]).data_type = 113
    return m


CASES: dict[str, tuple[Callable[[], object], type[PolyonnxError], tuple[str, ...]]] = {
    # unreadable bytes
    "truncated": (lambda: conv_net().SerializeToString()[:200], ModelError, ("truncated",)),
    "random bytes": (lambda: np.random.default_rng(0).bytes(300), ModelError, ("protobuf",)),
    "empty": (lambda: b"", ModelError, ("no graph",)),
    "not a model": (lambda: 42, ModelError, ("int",)),
    # IR version
    "ir_version too new": (lambda: _with(relu(), _set_ir(99)), ModelError, ("ir_version 99",)),
    "ir_version unset": (lambda: _with(relu(), _set_ir(0)), ModelError, ("ir_version",)),
    # graph structure
    "cycle": (_cycle, ModelError, ("topologically sorted", "'b'")),
    "undefined value": (_undefined, ModelError, ("'ghost'",)),
    "duplicate value": (_duplicate, ModelError, ("'y'", "output names")),
    "missing initializer": (_missing_initializer, ModelError, ("'w'",)),
    "invalid UTF-8 in a name": (_bad_utf8, ModelError, ("checker",)),
    "mixed element types": (_mixed_types, ModelError, ("'add' (Add)", "same element type")),
    "declared output type wrong": (
        lambda: model(
            [helper.make_node("Relu", ["x"], ["y"], name="relu")],
            [tensor("x", [2])],
            [tensor("y", [2], TensorProto.BOOL)],
        ),
        ModelError,
        ("'relu' (Relu)", "declared bool"),
    ),
    "initializer data and dims disagree": (_raw_data_short, ModelError, ("'w'", "dims [2]")),
    "initializer of an unknown element type": (
        lambda: _unknown_element_type(node=False),
        ModelError,
        ("'w'", "unknown element type 113"),
    ),
    "constant of an unknown element type": (
        lambda: _unknown_element_type(node=True),
        ModelError,
        ("'w'", "unknown element type 113"),
    ),
    "no default opset": (
        lambda: _with(relu(), lambda m: m.ClearField("opset_import")),
        ModelError,
        ("opset_import",),
    ),
    # attributes
    "zero strides": (
        lambda: _conv(strides=[0, 1]),
        ModelError,
        ("'c1' (Conv)", "'strides'", "positive"),
    ),
    "zero dilations": (lambda: _conv(dilations=[1, 0]), ModelError, ("'c1' (Conv)", "'dilations'")),
    "negative pads": (
        lambda: _conv(pads=[-1, 0, 0, 0]),
        ModelError,
        ("'c1' (Conv)", "'pads'", "non-negative"),
    ),
    "pads length": (lambda: _conv(pads=[1, 1]), ModelError, ("'c1' (Conv)", "'pads'", "4")),
    "strides length": (
        lambda: _pool(kernel_shape=[2, 2], strides=[1, 1, 1]),
        ModelError,
        ("'p1' (MaxPool)", "'strides'", "2"),
    ),
    "kernel larger than input": (
        lambda: _conv(weight_shape=(2, 2, 7, 7)),
        ModelError,
        ("'c1' (Conv)", "'kernel_shape'", "padded input (5)"),
    ),
    "pool kernel larger than padded input": (
        lambda: _pool(kernel_shape=[8, 2], pads=[1, 0, 1, 0]),
        ModelError,
        ("'p1' (MaxPool)", "'kernel_shape'", "padded input (7)"),
    ),
    "zero kernel": (
        lambda: _pool("AveragePool", kernel_shape=[0, 2]),
        ModelError,
        ("'p1' (AveragePool)", "'kernel_shape'"),
    ),
    "unknown auto_pad": (
        lambda: _pool(kernel_shape=[2, 2], auto_pad="SIDEWAYS"),
        ModelError,
        ("'p1' (MaxPool)", "'auto_pad'", "SIDEWAYS"),
    ),
    "group does not divide": (
        lambda: _conv(weight_shape=(3, 1, 3, 3), group=3),
        ModelError,
        ("'c1' (Conv)", "'group'"),
    ),
    "softmax axis": (
        lambda: _one("Softmax", axis=4),
        ModelError,
        ("'n1' (Softmax)", "'axis'", "rank 4"),
    ),
    "concat axis": (
        lambda: model(
            [helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis=-5)], [X4], [Y4]
        ),
        ModelError,
        ("'cat' (Concat)", "'axis' = -5"),
    ),
    "flatten axis": (lambda: _one("Flatten", axis=6), ModelError, ("'n1' (Flatten)", "'axis'")),
    "transpose perm": (
        lambda: _one("Transpose", perm=[0, 1, 1, 2]),
        ModelError,
        ("'n1' (Transpose)", "'perm'"),
    ),
    "LRN size": (lambda: _one("LRN", size=0), ModelError, ("'n1' (LRN)", "'size'")),
    "gemm shapes": (
        lambda: model(
            [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")],
            [tensor("x", [2, 3])],
            [tensor("y", [None, None])],
            [const("w", np.ones((4, 5), np.float32))],
        ),
        ShapeError,
        ("'fc' (Gemm)", "inner dimension"),
    ),
    "reshape to another size": (
        lambda: model(
            [
                helper.make_node("Reshape", ["x", "s"], ["y"], name="r"),
                helper.make_node("ReduceSum", ["y"], ["z"], name="sum", keepdims=0),
            ],
            [tensor("x", [1, 256])],
            [tensor("z", [])],
            [const("s", np.array([8192, 8192], np.int64))],
        ),  # fmt: skip
        ShapeError,
        ("'r' (Reshape)", "[1, 256] (256 elements)", "[8192, 8192]"),
    ),
    # shapes and types
    # (A negative dimension is a dynamic one, as older exporters write it: tests/frontend.)
    "huge input": (lambda: relu((100_000, 100_000, 10)), ModelError, ("'x'", "max_tensor_bytes")),
    "huge constant": (_huge_constant, ModelError, ("'fill' (ConstantOfShape)", "max_tensor_bytes")),
    # (Strings compile once their width is known: InferenceSession reads it off the feeds.)
    "string input without a width": (_string_input, ShapeError, ("'x'", "string", "width")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_model_gives_one_line_polyonnx_error(case):
    make, error, needles = CASES[case]
    with pytest.raises(PolyonnxError) as info:
        polyonnx.compile(make())
    assert type(info.value) is error or isinstance(info.value, error), info.value
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_the_same_errors_come_from_a_session():
    with pytest.raises(ModelError, match="'strides'"):
        polyonnx.InferenceSession(_conv(strides=[0, 1]))
    with pytest.raises(ModelError, match="truncated"):
        polyonnx.InferenceSession(conv_net().SerializeToString()[:100])


def test_model_file_errors_name_the_file(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(conv_net().SerializeToString()[:150])
    with pytest.raises(ModelError, match="broken.onnx"):
        polyonnx.compile(str(path))
    with pytest.raises(ModelError, match="does not exist"):
        polyonnx.compile(str(tmp_path / "absent.onnx"))
    with pytest.raises(ModelError, match="does not exist"):
        polyonnx.compile(str(tmp_path))  # a folder is not a model file


def test_a_reshape_fixed_at_export_is_refused_at_other_sizes():
    """An exporter wrote the sequence length (64) into a Reshape's target; a symbolic
    sequence axis run at 37 must be refused, not read past the input."""
    m = model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="heads")],
        [tensor("x", ["S", 256])],
        [tensor("y", [None, None, None])],
        [const("s", np.array([64, 4, 64], np.int64))],
    )
    session = polyonnx.InferenceSession(m)
    x = np.ones((64, 256), np.float32)
    assert session.run(None, {"x": x})[0].shape == (64, 4, 64)
    with pytest.raises(PolyonnxError, match=r"'heads' \(Reshape\).*\[37, 256\]"):
        session.run(None, {"x": x[:37]})


def test_memory_limit_is_an_option():
    small = polyonnx.Options(max_tensor_bytes=1000)
    polyonnx.compile(conv_net(size=4))  # fits the default limit
    with pytest.raises(ModelError, match=r"more than the limit of 1000 "):
        polyonnx.compile(conv_net(size=16), small)


def test_memory_limit_applies_to_shapes_given_at_run_time():
    sess = polyonnx.InferenceSession(
        relu(("n", 3)), options=polyonnx.Options(max_tensor_bytes=4096)
    )
    assert sess.run(None, {"x": np.ones((4, 3), np.float32)})[0].shape == (4, 3)
    with pytest.raises(PolyonnxError, match="max_tensor_bytes"):
        sess.run(None, {"x": np.ones((1000, 3), np.float32)})


def test_huge_input_shapes_are_refused_before_allocation():
    with pytest.raises(ModelError, match="max_tensor_bytes"):
        polyonnx.compile(relu(("n", 3)), input_shapes={"x": (10**12, 3)})


def _external(
    tmp_path, location: str, offset: int = 0, length: int | None = None
) -> onnx.ModelProto:
    m = model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", [4])],
        [tensor("y", [4])],
        [const("w", np.arange(4, dtype=np.float32))],
    )
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return m


@pytest.mark.parametrize(
    "location, offset, length, message",
    [
        ("../outside.bin", 0, 16, "inside the model's folder"),
        ("sub/../../outside.bin", 0, 16, "inside the model's folder"),
        ("/etc/passwd", 0, 16, "inside the model's folder"),
        ("link.bin", 0, 16, "outside the model's folder"),
        ("weights.bin", 8, 16, "past the end"),
        ("weights.bin", -4, 4, "past the end"),
        ("weights.bin", 0, 10**15, "past the end"),
        ("missing.bin", 0, 16, "does not exist"),
        ("sub", 0, 16, "does not exist"),
    ],
)
def test_external_data_is_confined_to_the_model_folder(tmp_path, location, offset, length, message):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "outside.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    path = folder / "m.onnx"
    path.write_bytes(_external(tmp_path, location, offset, length).SerializeToString())
    with pytest.raises(ModelError, match=message) as info:
        polyonnx.compile(str(path))
    assert "'w'" in str(info.value)


def test_external_data_inside_the_folder_runs(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8 + np.arange(4, dtype=np.float32).tobytes())
    path = tmp_path / "m.onnx"
    path.write_bytes(_external(tmp_path, "weights.bin", 8, 16).SerializeToString())
    out = polyonnx.InferenceSession(str(path)).run(None, {"x": np.ones(4, np.float32)})[0]
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32) + 1)


def test_validation_does_not_refuse_valid_edge_cases():
    """Kernel exactly the padded input, SAME padding with a large kernel, negative axes."""
    for m in (
        _conv(weight_shape=(2, 2, 5, 5)),
        _conv(weight_shape=(2, 2, 7, 7), pads=[1] * 4),
        _pool(kernel_shape=[9, 9], auto_pad="SAME_UPPER"),
        _one("Softmax", axis=-4),
        _one("Flatten", axis=4),
    ):
        polyonnx.compile(m)
