"""Frontend: load_model and import_model on tiny models, bad input, and a light-zoo ResNet50."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ModelError, ShapeError, UnsupportedOpError
from polyonnx.frontend import import_model, load_model
from polyonnx.graph.passes import optimize, verify

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _relu_model(opset: int = 13, shape: list | None = None) -> onnx.ModelProto:
    shape = [2, 3] if shape is None else shape
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "tiny", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


# --------------------------------------------------------------------------- load_model


def test_load_from_proto_bytes_and_path(tmp_path):
    m = _relu_model()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    for src in (m, m.SerializeToString(), str(path), path):
        loaded = load_model(src)
        assert loaded.graph.node[0].op_type == "Relu"
        dims = loaded.graph.output[0].type.tensor_type.shape.dim
        assert [d.dim_value for d in dims] == [2, 3]


def test_load_does_not_modify_the_callers_proto():
    m = _relu_model(opset=9)
    load_model(m)
    assert m.opset_import[0].version == 9


def test_old_opset_is_upgraded_to_13_and_explicit_target_is_honoured():
    assert load_model(_relu_model(opset=9)).opset_import[0].version == 13
    assert load_model(_relu_model(opset=9), target_opset=14).opset_import[0].version == 14
    assert load_model(_relu_model(opset=17)).opset_import[0].version == 17


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="nope.onnx.*does not exist"):
        load_model(tmp_path / "nope.onnx")


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_file_names_the_file(tmp_path, cut):
    data = Path(LIGHT, "light_squeezenet.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(ModelError, match="cut.onnx"):
        load_model(path)


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(seed):
    data = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    with pytest.raises(ModelError):
        load_model(data)


def test_not_a_model_type():
    with pytest.raises(ModelError, match="int"):
        load_model(42)  # type: ignore[arg-type]


def test_checker_failure_is_reported():
    m = _relu_model()
    m.graph.node[0].input[0] = "undefined_value"
    with pytest.raises(ModelError, match="checker.*undefined_value"):
        load_model(m)


@pytest.mark.parametrize("declared_input", [False, True])
def test_large_weights_come_back_unchanged(declared_input):
    # Set aside while the model is checked and inferred (polyonnx.frontend.load._large),
    # then back: the same tensors, no graph input added for them, the caller's proto intact.
    big = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    small = numpy_helper.from_array(np.ones(64, np.float32), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    inputs = [x, helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 64])]
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        "fc",
        inputs if declared_input else inputs[:1],
        [y],
        [small, big],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])  # upgraded to 13
    before = m.SerializeToString()
    loaded = load_model(m)
    assert m.SerializeToString() == before
    assert loaded.opset_import[0].version == 13
    assert [i.name for i in loaded.graph.input] == [i.name for i in g.input]
    by_name = {t.name: t for t in loaded.graph.initializer}
    assert sorted(by_name) == ["b", "w"]
    assert by_name["w"] == big and by_name["b"] == small
    assert loaded.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 64


def test_bad_utf8_in_a_name_is_a_model_error():
    m = _relu_model()
    m.graph.initializer.append(numpy_helper.from_array(np.zeros(2048, np.float32), "w"))
    m.doc_string = "QQQQ"
    data = m.SerializeToString().replace(b"QQQQ", b"\xaf\xaf\xaf\xaf")
    with pytest.raises(ModelError, match="checker"):
        load_model(data)


def _external_model(tmp_path, location: str, offset: int = 0, length: int = 24):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = w.external_data.add()
        e.key, e.value = k, v
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "ext", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def test_external_data_inside_folder_loads(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    (path.parent / "w.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    g = import_model(path)
    np.testing.assert_array_equal(g.constants["w"], np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin"])
def test_external_data_escaping_with_dotdot_is_refused(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(bytes(24))
    with pytest.raises(ModelError, match="refused"):
        load_model(_external_model(tmp_path, location))


def test_external_data_absolute_path_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(24))
    with pytest.raises(ModelError, match="refused"):
        load_model(_external_model(tmp_path, str(secret)))


def test_external_data_symlink_escaping_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(24))
    path = _external_model(tmp_path, "link.bin")
    os.symlink(secret, path.parent / "link.bin")
    with pytest.raises(ModelError, match="outside"):
        load_model(path)


def test_external_data_past_end_of_file_is_refused(tmp_path):
    path = _external_model(tmp_path, "w.bin", offset=8, length=24)
    (path.parent / "w.bin").write_bytes(bytes(24))
    with pytest.raises(ModelError, match="past the end"):
        load_model(path)


def test_external_data_from_bytes_needs_a_folder(tmp_path):
    path = _external_model(tmp_path, "w.bin")
    (path.parent / "w.bin").write_bytes(bytes(24))
    with pytest.raises(ModelError, match="base_dir"):
        load_model(path.read_bytes())
    assert load_model(path.read_bytes(), base_dir=path.parent).graph.initializer[0].raw_data


# --------------------------------------------------------------------------- import_model


def test_a_loaded_model_is_not_copied_again_nor_modified_by_import():
    loaded = load_model(_relu_model(shape=["N", 3]))
    assert load_model(loaded) is loaded  # (VGG19: 1.4 s per copy of its 575 MB)
    for n in (5, 7):  # a session compiles a dynamic model once per input shape
        assert import_model(loaded, {"x": (n, 3)}).value("y").shape == (n, 3)
    assert loaded.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


def test_symbolic_dims_need_input_shapes():
    m = _relu_model(shape=["N", 3])
    with pytest.raises(ShapeError, match=r"'x'.*dim 0 \(N\).*input_shapes"):
        import_model(m)
    g = import_model(m, {"x": (5, 3)})
    assert g.value("x").shape == (5, 3) and g.value("y").shape == (5, 3)
    verify(g)


@pytest.mark.parametrize("written", [-1, 0])
def test_a_dim_written_as_minus_one_or_zero_is_dynamic(written):
    # Older exporters write dim_value -1 (or 0) for a dynamic dimension, as onnxruntime reads it.
    m = _relu_model(shape=[written, 3])
    for vi in (*m.graph.input, *m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = written
    g = import_model(m, {"x": (4, 3)})
    assert g.value("x").shape == (4, 3) and g.value("y").shape == (4, 3)
    if written < 0:
        with pytest.raises(ShapeError, match=r"'x'.*dim 0.*input_shapes"):
            import_model(m)
    else:
        assert import_model(m).value("y").shape == (0, 3)  # no shape given: an empty tensor


def test_a_session_runs_a_dim_written_as_minus_one_at_any_extent():
    import polyonnx

    m = _relu_model(shape=[-1, 3])
    for vi in (*m.graph.input, *m.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = -1
    sess = polyonnx.InferenceSession(m)
    assert sess.get_inputs()[0].shape == ["?", 3]
    for n in (1, 5):
        x = np.linspace(-1, 1, 3 * n, dtype=np.float32).reshape(n, 3)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_bad_input_shapes():
    m = _relu_model(shape=["N", 3])
    with pytest.raises(ShapeError, match="not inputs"):
        import_model(m, {"z": (1,)})
    with pytest.raises(ShapeError, match="rank"):
        import_model(m, {"x": (1, 3, 1)})
    with pytest.raises(ShapeError, match="fixed to 3"):
        import_model(m, {"x": (1, 4)})


def test_constants_attributes_and_names():
    c = helper.make_node(
        "Constant", [], ["c"], value=numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32))
    )
    t = helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0])
    a = helper.make_node("Add", ["t", "c"], ["a"])
    cl = helper.make_node("Cast", ["a"], ["y"], to=TensorProto.INT64)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2, 3])
    m = helper.make_model(
        helper.make_graph([c, t, a, cl], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)]
    )
    g = import_model(m)
    assert [n.op_type for n in g.nodes] == ["Transpose", "Add", "Cast"]
    assert [n.name for n in g.nodes] == ["Transpose_1", "Add_2", "Cast_3"]
    assert g.nodes[0].attr("perm") == (1, 0)
    np.testing.assert_array_equal(g.constants["c"], [1.0, 2.0, 3.0])
    assert g.value("y").dtype == "int64" and g.value("a").shape == (2, 3)
    assert g.opset == 13
    verify(g)


def test_duplicate_node_names_are_made_unique():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n"),
        helper.make_node("Neg", ["a"], ["y"], name="n"),
    ]
    g = import_model(helper.make_model(helper.make_graph(nodes, "g", [x], [y])))
    assert len({n.name for n in g.nodes}) == 2


def test_nodes_out_of_order_are_sorted_or_rejected():
    from polyonnx.frontend.importer import _toposort
    from polyonnx.graph.ir import Node

    a = Node("a", "Relu", ("x",), ("t",))
    b = Node("b", "Neg", ("t",), ("y",))
    assert [n.name for n in _toposort([b, a], {"x"})] == ["a", "b"]
    with pytest.raises(ModelError, match="cycle"):
        _toposort([Node("a", "Add", ("x", "u"), ("t",)), Node("b", "Neg", ("t",), ("u",))], {"x"})
    with pytest.raises(ModelError, match="'b'.*'q'"):
        _toposort([a, Node("b", "Neg", ("q",), ("y",))], {"x"})
    with pytest.raises(ModelError, match="defined twice"):
        _toposort([a, Node("b", "Neg", ("x",), ("t",))], {"x"})


def test_fallback_shape_rule_for_untyped_values():
    # A custom-domain op has no ONNX inference; the broadcast rule does not apply to it (and
    # nothing lowers it: it is refused as unsupported).
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Mystery", ["x"], ["t"], domain="my.ops"),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("my.ops", 1)],
    )
    with pytest.raises(UnsupportedOpError, match="my.ops.Mystery"):
        import_model(m)


def test_light_resnet50_imports_and_optimizes():
    g = import_model(os.path.join(LIGHT, "light_resnet50.onnx"))
    assert [(v.name, v.shape) for v in g.inputs] == [("gpu_0/data_0", (1, 3, 224, 224))]
    assert all(v.is_static for v in g.values.values())
    verify(g)
    opt = optimize(g)
    verify(opt)
    ops = {n.op_type for n in opt.nodes}
    assert not ops & {"ConstantOfShape", "BatchNormalization", "Dropout", "Identity"}
    assert [v.name for v in opt.inputs] == ["gpu_0/data_0"]
    assert [v.shape for v in opt.outputs] == [(1, 1000)]
    assert all(v.is_static for v in opt.values.values())


def test_model_local_functions_are_inlined():
    add = helper.make_node("Add", ["a", "a"], ["b"])
    f = helper.make_function("my", "Twice", ["a"], ["b"], [add], [helper.make_opsetid("", 13)])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="my")], "g", [x], [y])
    m = helper.make_model(
        g, functions=[f], opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("my", 1)]
    )
    assert [n.op_type for n in import_model(m).nodes] == ["Add"]


def test_an_output_written_without_a_shape_gets_the_inferred_one():
    # make_tensor_value_info(name, FLOAT, None): onnxruntime runs it; ONNX's checker alone
    # wants the shape field.
    model = _relu_model()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(model)
    out = load_model(model).graph.output[0].type.tensor_type
    assert [d.dim_value for d in out.shape.dim] == [2, 3]
    assert not model.graph.output[0].type.tensor_type.HasField("shape")  # (a copy was loaded)


def test_an_output_written_without_a_type_gets_the_inferred_one():
    # make_empty_tensor_value_info(name) (some converters' outputs): onnxruntime runs it.
    model = _relu_model()
    model.graph.output[0].ClearField("type")
    out = load_model(model).graph.output[0].type.tensor_type
    assert out.elem_type == onnx.TensorProto.FLOAT
    assert [d.dim_value for d in out.shape.dim] == [2, 3]


def test_prelu_before_opset_7_takes_a_slope_per_channel():
    # PyTorch exported a multi-parameter PReLU as a [C] slope of an [N, C, L] input at opset 6.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    g = helper.make_graph(
        [helper.make_node("PRelu", ["x", "s"], ["y"])],
        "g",
        [x],
        [y],
        [numpy_helper.from_array(slope, "s")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    feed = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": feed})
    np.testing.assert_allclose(got, np.where(feed < 0, feed * slope[:, None], feed), rtol=1e-6)


def test_an_upgrade_that_changes_the_inputs_is_not_taken():
    # ONNX's version converter turns a batched Scan-8 into a Scan-9 over inputs without the
    # batch axis: the model polyonnx would compile would no longer take the user's feeds.
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
        "body",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("s", "x")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("s2", "o")],
    )
    scan = helper.make_node("Scan", ["", "init", "xs"], ["y", "z"], body=body, num_scan_inputs=1)
    graph = helper.make_graph(
        [scan],
        "scan8",
        [
            helper.make_tensor_value_info("init", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("xs", TensorProto.FLOAT, [1, 3, 2]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    init = np.array([[1, 2]], np.float32)
    xs = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    y, z = polyonnx.InferenceSession(model).run(None, {"init": init, "xs": xs})
    np.testing.assert_array_equal(z, init[:, None] + np.cumsum(xs, axis=1))  # (batched feeds)
    np.testing.assert_array_equal(y, z[:, -1])


def test_an_op_without_lowering_or_static_shape_is_unsupported():
    # ImageDecoder's output extent depends on the data: ONNX gives it no static shape, but
    # what the user needs to hear is that polyonnx does not lower the op.
    inputs = [helper.make_tensor_value_info("stream", TensorProto.UINT8, [64])]
    out = helper.make_tensor_value_info("image", TensorProto.UINT8, None)
    node = helper.make_node("ImageDecoder", ["stream"], ["image"], name="decode")
    graph = helper.make_graph([node], "decode", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(UnsupportedOpError, match="ImageDecoder.*'decode'.*no lowering"):
        polyonnx.compile(model)


def test_hardmax_before_opset_13_works_on_the_input_flattened_at_axis():
    # ONNX's version converter upgrades Hardmax 11 -> 13 unchanged, so the maximum was taken
    # along axis 1 alone instead of over the axes from 1 on (a wrong answer).
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
    g = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    feed = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": feed})
    flat = feed.reshape(2, 12)
    want = (np.arange(12) == flat.argmax(axis=1)[:, None]).astype(np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(got, want)


def test_a_local_functions_attribute_defaults_reach_its_body():
    # ONNX's inliner drops FunctionProto.attribute_proto defaults: the body's LeakyRelu then
    # took its own default alpha (0.01) instead of the function's (0.25).
    leaky = helper.make_node("LeakyRelu", ["a"], ["b"])
    leaky.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
    f = helper.make_function("my", "Leaky", ["a"], ["b"], [leaky], [helper.make_opsetid("", 18)])
    f.attribute_proto.append(helper.make_attribute("alpha", 0.25))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [helper.make_node("Leaky", ["x"], ["t"], domain="my")]
    nodes.append(helper.make_node("Leaky", ["t"], ["y"], domain="my", alpha=0.5))
    g = helper.make_graph(nodes, "g", [x], [y])
    m = helper.make_model(
        g, functions=[f], opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("my", 1)]
    )
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": np.array([-4, 0, 2], np.float32)})
    np.testing.assert_allclose(got, [-0.5, 0, 2])


def test_the_default_domain_written_ai_onnx_is_the_default_domain():
    # The spec's alias of "": onnxruntime runs it, ONNX's checker knew no Relu there.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx", 13)])
    (got,) = polyonnx.InferenceSession(m).run(None, {"x": np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(got, [0, 0, 2])


@pytest.mark.parametrize(
    "domain, op", [("com.microsoft", "FastGelu"), ("ai.onnx.ml", "DictVectorizer")]
)
def test_an_op_of_another_domain_is_unsupported_by_name(domain, op):
    # onnxruntime's contrib ops (optimum's optimised exports) and ONNX-ML ops: refused as the
    # op they are, not for the shape ONNX cannot give them.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], "n1", domain=domain)], "g", [x], [y])
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    )
    with pytest.raises(UnsupportedOpError, match=rf"{domain}\.{op} \(node 'n1'\)"):
        import_model(m)


def _group_norm_18(inputs: list[str]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("GroupNormalization", inputs, ["y"], "gn", num_groups=2)
    inits = [
        numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "s"),
        numpy_helper.from_array(np.array([1.0, -1.0], np.float32), "b"),
    ]
    g = helper.make_graph([node], "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_deprecated_group_normalization_18_runs():
    # ONNX deprecated GroupNormalization-18 (per-group scale and bias) when opset 21 made them
    # per channel, and its checker refuses a deprecated schema; exporters wrote it and
    # onnxruntime runs it. It was a ModelError from the checker.
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    (got,) = polyonnx.InferenceSession(_group_norm_18(["x", "s", "b"])).run(None, {"x": x})
    g = x.reshape(2, 2, 6)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(
        2, 2, 2, 3
    )
    want = norm * np.array([0.5, 2.0])[:, None, None] + np.array([1.0, -1.0])[:, None, None]
    np.testing.assert_allclose(got, want.reshape(2, 4, 3), rtol=1e-5, atol=1e-5)


def test_deprecated_group_normalization_18_without_bias_is_refused_by_node():
    with pytest.raises(ModelError, match=r"'gn' \(GroupNormalization\): scale and bias"):
        polyonnx.InferenceSession(_group_norm_18(["x", "s"]))


@pytest.mark.parametrize("op, x_shape", [("Reshape", [2, 3]), ("Expand", [1, 3]), ("Tile", [2, 3])])
def test_a_shape_fed_at_run_time_is_refused_by_input_name(op, x_shape):
    # onnxruntime runs these with a shape tensor fed at run time; polyonnx compiles static
    # shapes. It was a ShapeError saying polyonnx had no shape rule for the op.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node(op, ["x", "s"], ["y"], "n1")], "g", [x, s], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOpError, match=rf"{op} .*'n1'.*value of input 's'"):
        import_model(m)


def test_constant_of_a_shape_fed_at_run_time_is_refused_by_input_name():
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("ConstantOfShape", ["s"], ["y"], "c")], "g", [s], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOpError, match=r"'c'.*value of input 's'"):
        import_model(m)
