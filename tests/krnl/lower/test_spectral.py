"""DFT against NumPy's FFT in float64: forward and inverse, real and complex signals,
one-sided, cut and zero-padded lengths; STFT against onnxruntime; MelWeightMatrix against
onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import polyonnx
from polyonnx.errors import UnsupportedOpError
from polyonnx.pipeline import emit
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs
from tests.krnl.harness import check_op, rand
from tests.reliability.models import const, model, tensor


def _dft(x: np.ndarray, length: int | None, **attrs: int) -> np.ndarray:
    inits = [numpy_helper.from_array(np.array(1, np.int64), "axis")]
    inputs = ["x", "", "axis"]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "n"))
        inputs[1] = "n"
    m = model(
        [helper.make_node("DFT", inputs, ["y"], **attrs)],
        [tensor("x", list(x.shape))],
        [tensor("y", [None] * x.ndim)],
        inits,
        opset=20,
    )
    (y,) = polyonnx.InferenceSession(m).run(None, {"x": x})
    return y


def _complex(y: np.ndarray) -> np.ndarray:
    return y[..., 0] + 1j * y[..., 1]


@pytest.mark.parametrize("length", [None, 5, 12])
def test_forward_real_and_complex(length: int | None):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    z = x[..., 0].astype(np.float64) + 1j * x[..., 1]
    np.testing.assert_allclose(_complex(_dft(x, length)), np.fft.fft(z, length, axis=1), atol=1e-5)
    real = x[..., :1]
    got = _complex(_dft(real, length, onesided=1))
    np.testing.assert_allclose(got, np.fft.rfft(real[..., 0], length, axis=1), atol=1e-5)


def test_inverse_and_inverse_one_sided():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    z = x[..., 0].astype(np.float64) + 1j * x[..., 1]
    np.testing.assert_allclose(
        _complex(_dft(x, None, inverse=1)), np.fft.ifft(z, axis=1), atol=1e-6
    )
    for n in (14, 15):  # even and odd lengths from 8 bins
        got = _dft(x, n, inverse=1, onesided=1)[..., 0]
        np.testing.assert_allclose(got, np.fft.irfft(z, n, axis=1), atol=1e-6)


@pytest.mark.parametrize(
    ("signal", "window", "frame_length", "onesided"),
    [
        ((2, 40, 1), 16, None, 1),  # a Hann-like window, one-sided bins
        ((2, 41, 2), None, 10, 0),  # complex signal, no window: frame_length
        ((1, 37), 12, None, 1),  # [batch, length] (onnxruntime takes it)
    ],
)
def test_stft(
    signal: tuple[int, ...], window: int | None, frame_length: int | None, onesided: int
) -> None:
    # STFT had no lowering: audio frontends (torch.stft at opset 17) were refused.
    inputs: list[tuple[str, np.ndarray | None]] = [
        ("x", rand(*signal)),
        ("step", np.array(3, np.int64)),
        ("w", np.hanning(window).astype(np.float32) if window else None),
    ]
    if frame_length:
        inputs[2] = ("", None)
        inputs.append(("n", np.array(frame_length, np.int64)))
    check_op(
        "STFT",
        inputs,
        {"onesided": onesided},
        opset=17,
        constants=("step", "n"),
        rtol=1e-4,
        atol=1e-4,
    )


def test_stft_takes_half_the_spectrum_by_default() -> None:
    # ONNX's shape inference types a missing `onesided` as 0 (all 16 bins); its default is 1,
    # as the reference and onnxruntime compute it: 9 bins.
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", 8), ("n", 16))]
    m = model(
        [helper.make_node("STFT", ["x", "s", "", "n"], ["y"])],
        [tensor("x", [2, 40, 1])],
        [tensor("y", [None] * 4)],
        inits,
        opset=17,
    )
    x = rand(2, 40, 1)
    [got] = polyonnx.InferenceSession(m).run(None, {"x": x})
    [want] = onnxruntime_outputs(m, {"x": x})
    assert got.shape == want.shape == (2, 4, 9, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _mel_model(
    mels: int, dft: int, edges: np.dtype, rate: np.dtype, fed: bool = True, **attrs: int
) -> onnx.ModelProto:
    """MelWeightMatrix with num_mel_bins and dft_length initializers; the sample rate and the
    edges fed (``fed``) or initializers too."""
    inits = [const("m", np.array(mels, np.int64)), const("d", np.array(dft, np.int64))]
    varying = [("sr", rate), ("lo", edges), ("hi", edges)]
    if not fed:
        inits += [const(n, np.array({"sr": 16000, "lo": 20, "hi": 7600}[n], t)) for n, t in varying]
    elems = {n: helper.np_dtype_to_tensor_dtype(np.dtype(t)) for n, t in varying}
    return model(
        [helper.make_node("MelWeightMatrix", ["m", "d", "sr", "lo", "hi"], ["y"], **attrs)],
        [tensor(n, [], elems[n]) for n, _ in varying] if fed else [],
        [tensor("y", [None, None], helper.np_dtype_to_tensor_dtype(np.dtype(np.float32)))]
        if not attrs
        else [tensor("y", [None, None], attrs["output_datatype"])],
        inits,
    )


@pytest.mark.parametrize(
    ("mels", "dft", "edges", "rate", "out"),
    [
        (8, 16, np.float32, np.int32, None),  # onnx's test_melweightmatrix
        (40, 512, np.float32, np.int64, None),
        (13, 255, np.float64, np.int64, TensorProto.DOUBLE),
        (6, 64, np.float16, np.int32, TensorProto.FLOAT16),
    ],
)
def test_mel_weight_matrix(mels: int, dft: int, edges: type, rate: type, out: int | None) -> None:
    # MelWeightMatrix had no lowering: audio frontends were refused. Edges and rates known
    # only at run time, against onnx.reference (which the suite's expected output is).
    attrs = {} if out is None else {"output_datatype": out}
    m = _mel_model(mels, dft, np.dtype(edges), np.dtype(rate), **attrs)
    session = polyonnx.InferenceSession(m)
    feeds_list = [
        (8192, 0.0, 4096.0),
        (16000, 20.0, 7600.0),
        (22050, 125.0, 3800.0),
        (8000, 300.0, 300.0),  # one edge: every filter empty but its center
        (44100, 0.0, 22050.0),
    ]
    for sr, lo, hi in feeds_list:
        feeds = {"sr": np.array(sr, rate), "lo": np.array(lo, edges), "hi": np.array(hi, edges)}
        (got,) = session.run(None, feeds)
        (ref,) = onnx_reference_outputs(m, feeds)
        assert got.dtype == ref.dtype and got.shape == ref.shape == (dft // 2 + 1, mels)
        np.testing.assert_array_equal(got, ref)


def test_mel_weight_matrix_constant_and_run_time_sizes() -> None:
    # Every input a constant: folded at compile time (no kernel computes it).
    m = _mel_model(10, 128, np.dtype(np.float32), np.dtype(np.int64), fed=False)
    assert "MelWeightMatrix" not in str(emit(m, "graph"))
    session = polyonnx.InferenceSession(m)
    (got,) = session.run(None, {})
    np.testing.assert_array_equal(got, onnx_reference_outputs(m, {})[0])
    # A size known only at run time: the output's shape is, so the op is refused by name.
    m = _mel_model(10, 128, np.dtype(np.float32), np.dtype(np.int64))
    del m.graph.initializer[0]
    m.graph.input.append(tensor("m", [], TensorProto.INT64))
    with pytest.raises(UnsupportedOpError, match="'m', known only at run time"):
        polyonnx.InferenceSession(m)
