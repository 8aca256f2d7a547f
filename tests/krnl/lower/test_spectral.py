"""DFT against NumPy's FFT in float64: forward and inverse, real and complex signals,
one-sided, cut and zero-padded lengths; STFT against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import polyonnx
from polyonnx.testing import onnxruntime_outputs
from tests.krnl.harness import check_op, rand
from tests.reliability.models import model, tensor


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
