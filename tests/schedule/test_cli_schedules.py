"""``polyonnx compile/run --schedules FILE``."""

import numpy as np
import onnx
from onnx import TensorProto, helper

import polyonnx
from polyonnx.cli import main


def _model_file(tmp_path):
    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Mul", ["r", "r"], ["y"], name="square"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 20])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _schedules_file(tmp_path, model):
    (info,) = polyonnx.list_kernels(model)
    s = polyonnx.Schedule.from_kernel(info.kernel)
    trace = s.split(s.loops[-1], 3).trace
    path = tmp_path / "s.json"
    path.write_text('{"' + info.name + '": ' + trace.to_json() + "}")
    return str(path)


def test_run_and_compile_with_schedules(tmp_path, capsys):
    model = _model_file(tmp_path)
    sched = _schedules_file(tmp_path, model)
    assert main(["run", model, "--schedules", sched, "--repeat", "1"]) == 0
    assert "kernels" in capsys.readouterr().out
    lib = tmp_path / "m.so"
    assert main(["compile", model, "-o", str(lib), "--schedules", sched]) == 0
    assert lib.exists()
    x = np.linspace(-1, 1, 80, dtype=np.float32).reshape(4, 20)
    y = polyonnx.InferenceSession(str(lib)).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, np.maximum(x, 0) ** 2, rtol=1e-6)


def test_bad_schedules_are_errors(tmp_path, capsys):
    model = _model_file(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"k7_Nope": {"signature": "0", "steps": []}}')
    assert main(["run", model, "--schedules", str(bad), "--repeat", "1"]) == 2
    assert "no kernel named or with signature 'k7_Nope'" in capsys.readouterr().err
    sched = _schedules_file(tmp_path, model)
    assert main(["compile", model, "--emit", "ast", "--schedules", sched]) == 2
