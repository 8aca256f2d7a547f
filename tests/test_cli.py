"""The ``polyonnx`` command: subcommands, stage printing, libraries and one-line errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx import __version__
from polyonnx.cli import main


@pytest.fixture
def model_path(tmp_path):
    """y = Relu(x @ w), x: [2, 3]."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) - 5, "w")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
            helper.make_node("Relu", ["t"], ["y"], name="relu"),
        ],
        "cli_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g), path)
    return path


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"polyonnx {__version__}"


@pytest.mark.parametrize(
    "stage,needle",
    [
        ("onnx", "MatMul"),
        ("graph", "relu"),
        ("krnl", "kernel k0_"),
        ("isl", "domain:"),
        ("ast", "for (int"),
        ("llvm", "define"),
        ("asm", "ret"),
    ],
)
def test_emit_prints_each_text_stage(model_path, capsys, stage, needle):
    assert main(["compile", str(model_path), "--emit", stage]) == 0
    assert needle in capsys.readouterr().out


def test_emit_krnl_after_a_pass(model_path, capsys):
    assert main(["compile", str(model_path), "--emit", "krnl", "--after", "lower"]) == 0
    assert "tmp t: float32[2, 4]" in capsys.readouterr().out


def test_emit_obj_writes_an_object_file(model_path, tmp_path):
    out = tmp_path / "m.o"
    assert main(["compile", str(model_path), "--emit", "obj", "-o", str(out), "-O1"]) == 0
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_library_then_run_it(model_path, tmp_path, capsys):
    lib = tmp_path / "m.so"
    assert main(["compile", str(model_path), "-o", str(lib)]) == 0
    assert lib.exists() and lib.with_suffix(".h").exists()
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 3), np.float32))
    assert main(["run", str(lib), "--input", f"x={x}", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "y  float32[2, 4]" in out and "max 6  mean 2.25" in out


def test_run_compare_with_onnxruntime(model_path, capsys):
    assert main(["run", str(model_path), "--compare", "--repeat", "3", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "kernels" in out and "median" in out and "vs onnxruntime" in out


def test_kernels_lists_nodes_buffers_and_flops(model_path, capsys):
    assert main(["kernels", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "mm (MatMul)" in out and "in x: float32[2, 3]" in out and "GFLOP in total" in out


def _conv_pool_fc_model(path):
    """Conv (pads, bias) + Relu, AveragePool, Flatten + Gemm: kernels of several families."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("w", (4, 3, 3, 3)), ("b", (4,)), ("fw", (36, 5)))
    ]
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node(
                "AveragePool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
            ),
            helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc"),
        ],
        "conv_pool_fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=inits,
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_kernels_counts_flops_as_list_kernels_does(tmp_path, capsys):
    path = _conv_pool_fc_model(tmp_path / "m.onnx")
    assert main(["kernels", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    infos = polyonnx.list_kernels(str(path))
    rows = [line for line in lines if not line.startswith(" ")][:-1]
    assert [r.split("  ")[:2] for r in rows] == [
        [i.name, f"~{i.flops / 1e6:.3f} MFLOP"] for i in infos
    ]
    total = sum(i.flops for i in infos)
    assert lines[-1] == f"{len(infos)} kernels, ~{total / 1e9:.3f} GFLOP in total"
    # The conv's multiply-adds count 2 each: 2 * (4 * 6 * 6 outputs) * (3 * 3 * 3 taps).
    assert 2 * 4 * 36 * 27 <= next(i.flops for i in infos if "conv" in i.nodes) < 2 * 4 * 36 * 28


@pytest.mark.parametrize(
    "argv,message",
    [
        (["compile", "nope.onnx", "--emit", "graph"], "nope.onnx"),
        (["compile", "{model}", "--emit", "lib"], "--emit lib writes a file"),
        (["compile", "{model}", "--after", "lower"], "--after shows a krnl pass's result"),
        (["run", "{model}", "--input", "x=missing.npy"], "missing.npy"),
        (["run", "{model}", "--input", "z={model}"], "unknown input name"),
    ],
)
def test_errors_are_one_line_with_exit_status_2(model_path, capsys, argv, message):
    argv = [a.format(model=model_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("polyonnx: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_verbose_shows_the_traceback(capsys):
    assert main(["--verbose", "compile", "nope.onnx", "--emit", "graph"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_bad_input_shape_is_a_usage_error(model_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", str(model_path), "--input-shape", "x=2xfoo"])
    assert e.value.code == 2
    assert "NAME=D1xD2" in capsys.readouterr().err


def test_python_dash_m_polyonnx():
    proc = subprocess.run(
        [sys.executable, "-m", "polyonnx", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "compile" in proc.stdout and "kernels" in proc.stdout
