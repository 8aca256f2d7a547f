"""Kernels from models, build & measure, and compiling a model with schedule traces."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import ScheduleError
from polyonnx.runtime.session import Executable


def _model():
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "W"
    )
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node(
                "MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_list_and_get_kernels():
    infos = polyonnx.list_kernels(_model())
    assert [i.op_types for i in infos] == [("Conv", "Relu"), ("MaxPool",)]
    conv = infos[0]
    assert conv.nodes == ("conv", "relu") and conv.flops >= 2 * 4 * 3 * 9 * 64
    assert conv.signature == polyonnx.kernel_signature(conv.kernel) and len(conv.signature) == 16
    assert "Conv+Relu" in str(conv)
    assert polyonnx.get_kernel(_model(), "pool").name == infos[1].name
    assert polyonnx.get_kernel(_model(), infos[0].name) == conv.kernel
    with pytest.raises(polyonnx.PolyonnxError, match="no kernel or node"):
        polyonnx.get_kernel(_model(), "nope")


def test_op_kernel_without_a_file():
    k = polyonnx.op_kernel("MaxPool", [(1, 2, 6, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert [b.shape for b in k.buffers if b.kind == "output"] == [(1, 2, 3, 3)]
    s = polyonnx.Schedule.from_kernel(k)
    assert "kh" in s.loops


def test_measure_checks_against_the_default_order():
    k = polyonnx.op_kernel("Relu", [(64, 64)])
    s = polyonnx.Schedule.from_kernel(k)
    m = polyonnx.measure(s.vectorize(s.loops[-1]), min_runs=2, min_time=0.0)
    assert m.median_s > 0 and m.gflops > 0 and m.max_error == 0.0 and m.flops == 64 * 64


def test_compile_with_schedules_by_name_and_signature():
    model = _model()
    infos = polyonnx.list_kernels(model)
    pool = polyonnx.Schedule.from_kernel(infos[1].kernel)
    trace = pool.split("ow", 3).trace
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = polyonnx.InferenceSession(model).run(None, {"x": x})[0]
    for key in (infos[1].name, infos[1].signature):
        compiled = polyonnx.compile(model, schedules={key: trace.to_json()})
        text = str(compiled.scheduled[1].schedule)
        assert "mod 3" in text
        got = Executable.from_compiled(compiled).run([x])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ScheduleError, match="no kernel named or with signature"):
        polyonnx.compile(model, schedules={"k9_Nope": trace})
    with pytest.raises(ScheduleError, match="does not fit"):
        polyonnx.compile(model, schedules={infos[0].name: trace})


def test_load_schedules(tmp_path):
    k = polyonnx.op_kernel("Relu", [(4, 4)])
    trace = polyonnx.Schedule.from_kernel(k).split("i1", 2).trace
    path = tmp_path / "s.json"
    path.write_text('{"k0_Relu": ' + trace.to_json() + "}")
    assert polyonnx.load_schedules(str(path)) == {"k0_Relu": trace}
    path.write_text("[1]")
    with pytest.raises(ScheduleError, match="JSON object"):
        polyonnx.load_schedules(str(path))
