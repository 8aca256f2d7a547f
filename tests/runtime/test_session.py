import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.errors import InputError
from polyonnx.testing import assert_close, onnxruntime_outputs


def _model(shape=(2, 3), dims=None) -> onnx.ModelProto:
    dims = dims or list(shape)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, dims)
    g = helper.make_graph(
        [
            helper.make_node("Add", ["x", "w"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
            helper.make_node("Mul", ["x", "w"], ["z"]),
        ],
        "addrelu",
        [x, w],
        [y, z],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def session():
    return polyonnx.InferenceSession(_model())


def _feed(shape=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(shape).astype(np.float32),
        "w": rng.standard_normal(shape).astype(np.float32),
    }


def test_run_matches_onnxruntime(session):
    feed = _feed()
    got = session.run(None, feed)
    assert len(got) == 2
    assert_close(got, onnxruntime_outputs(_model(), feed), rtol=1e-6, atol=0)


def test_inputs_and_outputs_are_described(session):
    ins, outs = session.get_inputs(), session.get_outputs()
    assert [(a.name, a.shape, a.type) for a in ins] == [
        ("x", [2, 3], "tensor(float)"),
        ("w", [2, 3], "tensor(float)"),
    ]
    assert [a.name for a in outs] == ["y", "z"]


def test_output_names_select_and_order(session):
    feed = _feed()
    z, y = session.run(["z", "y"], feed)
    np.testing.assert_allclose(z, feed["x"] * feed["w"], rtol=1e-6)
    np.testing.assert_allclose(y, np.maximum(feed["x"] + feed["w"], 0), rtol=1e-6)
    with pytest.raises(InputError, match="unknown output"):
        session.run(["nope"], feed)


@pytest.mark.parametrize(
    "feed, message",
    [
        ({"x": np.zeros((2, 3), np.float32)}, "missing input"),
        ({**_feed(), "v": np.zeros(1)}, "unknown input"),
        ({"x": np.zeros((2, 3), np.float64), "w": np.zeros((2, 3), np.float32)}, "'x'.*dtype"),
        ({"x": np.zeros((3, 2), np.float32), "w": np.zeros((2, 3), np.float32)}, "'x'.*shape"),
        ({"x": np.zeros((2, 3, 1), np.float32), "w": np.zeros((2, 3), np.float32)}, "'x'.*shape"),
        ({"x": "hello", "w": np.zeros((2, 3), np.float32)}, "'x'"),
    ],
)
def test_bad_feeds_are_refused_by_name(session, feed, message):
    with pytest.raises(InputError, match=message):
        session.run(None, feed)


def test_non_contiguous_feeds_are_copied(session):
    feed = _feed()
    xt = np.asfortranarray(feed["x"])
    strided = np.zeros((2, 6), np.float32)[:, ::2]
    strided[...] = feed["w"]
    assert not xt.flags.c_contiguous and not strided.flags.c_contiguous
    got = session.run(["z"], {"x": xt, "w": strided})[0]
    np.testing.assert_allclose(got, feed["x"] * feed["w"], rtol=1e-6)


def test_misaligned_feeds_are_copied(session):
    feed = _feed()
    raw = np.zeros(feed["x"].nbytes + 1, np.uint8)
    x = raw[1:].view(np.float32).reshape(feed["x"].shape)  # (one byte off its alignment)
    x[...] = feed["x"]
    assert not x.flags.aligned
    got = session.run(["z"], {"x": x, "w": feed["w"]})[0]
    np.testing.assert_allclose(got, feed["x"] * feed["w"], rtol=1e-6)


def test_read_only_and_empty_feeds(session):
    feed = _feed()
    for a in feed.values():
        a.flags.writeable = False  # (their addresses are taken another way)
    got = session.run(["z"], feed)[0]
    np.testing.assert_allclose(got, feed["x"] * feed["w"], rtol=1e-6)
    empty = polyonnx.InferenceSession(_model(dims=["n", 3]))
    zero = np.zeros((0, 3), np.float32)
    assert [a.shape for a in empty.run(None, {"x": zero, "w": zero})] == [(0, 3), (0, 3)]


def test_nan_and_inf_propagate(session):
    x = np.array([[np.nan, np.inf, -np.inf], [1, 2, 3]], np.float32)
    w = np.ones((2, 3), np.float32)
    y, z = session.run(None, {"x": x, "w": w})
    assert np.isnan(y[0, 0]) and y[0, 1] == np.inf and y[0, 2] == 0
    assert np.isnan(z[0, 0]) and z[0, 1] == np.inf and z[0, 2] == -np.inf


def test_symbolic_dims_compile_per_shape():
    sess = polyonnx.InferenceSession(_model(dims=["batch", 3]))
    assert sess.get_inputs()[0].shape == ["batch", 3]
    for batch in (1, 4, 1):
        feed = _feed((batch, 3), seed=batch)
        y, _ = sess.run(None, feed)
        np.testing.assert_allclose(y, np.maximum(feed["x"] + feed["w"], 0), rtol=1e-6)


def test_one_session_many_threads(session):
    errors = []

    def work(seed):
        try:
            for k in range(50):
                feed = _feed(seed=seed * 100 + k)
                z = session.run(["z"], feed)[0]
                np.testing.assert_allclose(z, feed["x"] * feed["w"], rtol=1e-6)
        except Exception as e:  # noqa: BLE001 - collected and re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_model_from_bytes_and_path(tmp_path):
    m = _model()
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    feed = _feed()
    want = polyonnx.InferenceSession(m).run(None, feed)
    for source in (m.SerializeToString(), str(p), p):
        got = polyonnx.InferenceSession(source).run(None, feed)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_output_that_is_an_input_is_copied():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    sess = polyonnx.InferenceSession(
        helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    )
    a = np.arange(3, dtype=np.float32)
    out = sess.run(None, {"x": a})[0]
    np.testing.assert_array_equal(out, a)
    assert not np.shares_memory(out, a)


def _conv_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])
    w = onnx.numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
    )
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv", [x], [y], [w]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_many_sessions_in_one_process():
    # Regression: position-independent code in the shared JIT engine broke the second module.
    m = _conv_model()
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 5)).astype(np.float32)
    want = onnxruntime_outputs(m, {"x": x})[0]
    sessions = [polyonnx.InferenceSession(m) for _ in range(3)]
    for s in sessions + sessions[::-1]:
        np.testing.assert_allclose(s.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_sessions_take_schedule_traces():
    m = _model()
    [info] = [k for k in polyonnx.list_kernels(m) if "Mul" in k.op_types]
    loops = polyonnx.Schedule.from_kernel(info.kernel).loops
    trace = polyonnx.Schedule.from_kernel(info.kernel).split(loops[-1], 2).trace
    feed = _feed()
    got = polyonnx.InferenceSession(m, schedules={info.name: trace.to_json()}).run(None, feed)
    want = polyonnx.InferenceSession(m).run(None, feed)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(polyonnx.ScheduleError):
        polyonnx.InferenceSession(m, schedules={"no_such_kernel": trace.to_json()})


def _relu() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_input_written_without_a_shape_takes_its_feeds():
    # make_tensor_value_info(name, FLOAT, None) for an input: onnxruntime takes any shape.
    model = _relu()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    model.graph.output[0].type.tensor_type.ClearField("shape")
    sess = polyonnx.InferenceSession(model)
    for shape in [(2, 3), (4,)]:
        feed = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], np.maximum(feed, 0))
    (got,) = polyonnx.InferenceSession(model, input_shapes={"x": (5,)}).run(
        None, {"x": np.ones(5, np.float32)}
    )
    assert got.shape == (5,)
