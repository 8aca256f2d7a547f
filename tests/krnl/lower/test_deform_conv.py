"""DeformConv, compiled, against the ONNX reference and onnxruntime (2-D: strides, pads,
dilations, groups, offset groups, mask and bias, offsets far outside the image, batches,
float64 and float16) and against a direct numpy computation (1-D and 3-D, which neither of
them implements, and offsets that are NaN, infinite or huge, on which the reference raises):
bounds-checked, no read may leave the input."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import polyonnx
from polyonnx.testing import onnx_reference_outputs, onnxruntime_outputs
from tests.reliability.models import model, tensor

CHECKED = polyonnx.Options(checked=True)
_ELEM = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
}


def _out_size(size: int, k: int, stride: int, dil: int, lo: int, hi: int) -> int:
    return (size + lo + hi - (k - 1) * dil - 1) // stride + 1


class _Case:
    """A DeformConv model and random feeds for it."""

    def __init__(
        self,
        x: Sequence[int],
        w: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        dilations: Sequence[int] | None = None,
        group: int = 1,
        offset_group: int = 1,
        bias: bool = False,
        mask: bool = False,
        dtype: str = "float32",
        spread: float = 2.0,
        seed: int = 0,
    ) -> None:
        rank = len(x) - 2
        self.strides = list(strides or [1] * rank)
        self.pads = list(pads or [0] * 2 * rank)
        self.dilations = list(dilations or [1] * rank)
        self.group, self.offset_group = group, offset_group
        kernel = list(w[2:])
        out = [
            _out_size(x[2 + d], kernel[d], self.strides[d], self.dilations[d], *self.pads[d::rank])
            for d in range(rank)
        ]
        taps = math.prod(kernel)
        rng = np.random.default_rng(seed)
        self.feeds = {
            "x": rng.standard_normal(x).astype(dtype),
            "w": rng.standard_normal(w).astype(dtype),
            # fractional offsets, some reaching well outside the image
            "off": rng.uniform(-spread, spread, (x[0], offset_group * rank * taps, *out)).astype(
                dtype
            ),
        }
        inputs = ["x", "w", "off"]
        if bias:
            self.feeds["b"] = rng.standard_normal(w[0]).astype(dtype)
        if mask:
            self.feeds["m"] = rng.uniform(-0.5, 1.5, (x[0], offset_group * taps, *out)).astype(
                dtype
            )
        if bias or mask:
            inputs.append("b" if bias else "")
        if mask:
            inputs.append("m")
        attrs = {
            "kernel_shape": kernel,
            "strides": self.strides,
            "pads": self.pads,
            "dilations": self.dilations,
            "group": group,
            "offset_group": offset_group,
        }
        elem = _ELEM[dtype]
        self.model = model(
            [helper.make_node("DeformConv", inputs, ["y"], **attrs)],
            [tensor(n, list(v.shape), elem) for n, v in self.feeds.items()],
            [tensor("y", [x[0], w[0], *out], elem)],
            opset=22 if dtype == "float16" else 19,
        )

    def run(self, options: polyonnx.Options | None = None) -> np.ndarray:
        (got,) = polyonnx.InferenceSession(self.model, options=options).run(None, self.feeds)
        return got

    def numpy(self) -> np.ndarray:
        """The direct computation, in float64 (a tap at a non-finite position reads 0)."""
        f = {k: v.astype(np.float64) for k, v in self.feeds.items()}
        x, w, off = f["x"], f["w"], f["off"]
        n_batch, channels, *spatial = x.shape
        rank, kernel, out = len(spatial), w.shape[2:], off.shape[2:]
        taps = math.prod(kernel)
        off = off.reshape(n_batch, self.offset_group, taps, rank, *out)
        mask = f.get("m", np.ones((n_batch, self.offset_group * taps, *out)))
        mask = mask.reshape(n_batch, self.offset_group, taps, *out)
        per_group = channels // self.offset_group
        cols = np.zeros((n_batch, channels, taps, *out))
        for n, c, (t, k), o in itertools.product(
            range(n_batch),
            range(channels),
            enumerate(np.ndindex(*kernel)),
            np.ndindex(*out),
        ):
            g = c // per_group
            pos = [
                o[d] * self.strides[d]
                - self.pads[d]
                + k[d] * self.dilations[d]
                + off[(n, g, t, d, *o)]
                for d in range(rank)
            ]
            if not all(np.isfinite(pos)):
                continue
            value = 0.0
            for corner in itertools.product((0, 1), repeat=rank):
                at = [math.floor(p) + b for p, b in zip(pos, corner, strict=True)]
                if all(0 <= a < s for a, s in zip(at, spatial, strict=True)):
                    weight = math.prod(
                        p - math.floor(p) if b else 1 - (p - math.floor(p))
                        for p, b in zip(pos, corner, strict=True)
                    )
                    value += weight * x[(n, c, *at)]
            cols[(n, c, t, *o)] = value * mask[(n, g, t, *o)]
        cg, mg = channels // self.group, w.shape[0] // self.group
        y = np.zeros((n_batch, w.shape[0], *out))
        for oc in range(w.shape[0]):
            g = oc // mg
            block = cols[:, g * cg : (g + 1) * cg].reshape(n_batch, cg * taps, *out)
            y[:, oc] = np.tensordot(w[oc].reshape(-1), block, axes=(0, 1))
        if "b" in f:
            y += f["b"].reshape(1, -1, *([1] * rank))
        return y


_CASES_2D = {
    "padded": {"x": [1, 2, 5, 6], "w": [3, 2, 3, 3], "pads": [1, 1, 1, 1], "bias": True},
    "strided_dilated": {
        "x": [1, 3, 7, 8],
        "w": [2, 3, 2, 3],
        "strides": [2, 1],
        "dilations": [1, 2],
        "pads": [0, 2, 1, 0],
        "mask": True,
    },
    "groups_and_offset_groups": {
        "x": [1, 4, 5, 5],
        "w": [6, 2, 3, 2],
        "pads": [1, 0, 1, 1],
        "group": 2,
        "offset_group": 2,
        "bias": True,
        "mask": True,
    },
    "offset_groups_across_groups": {
        "x": [1, 6, 4, 5],
        "w": [4, 3, 2, 2],
        "group": 2,
        "offset_group": 3,
        "mask": True,
    },
    "depthwise": {
        "x": [1, 3, 5, 4],
        "w": [3, 1, 3, 3],
        "pads": [1, 1, 1, 1],
        "group": 3,
        "bias": True,
    },
    "batch": {
        "x": [2, 4, 4, 5],
        "w": [2, 2, 2, 2],
        "strides": [1, 2],
        "pads": [1, 1, 0, 1],
        "group": 2,
        "offset_group": 4,
        "bias": True,
        "mask": True,
    },
    "far_outside": {"x": [1, 2, 4, 4], "w": [2, 2, 2, 2], "mask": True, "spread": 9.0},
}


@pytest.mark.parametrize("name", sorted(_CASES_2D))
def test_deform_conv_2d(name: str) -> None:
    case = _Case(**_CASES_2D[name])
    got = case.run(CHECKED)
    (ref,) = onnx_reference_outputs(case.model, case.feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    (ort,) = onnxruntime_outputs(case.model, case.feeds)
    np.testing.assert_allclose(got, ort, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, case.numpy(), rtol=1e-4, atol=1e-5)


def test_integer_offsets_sample_exact_pixels() -> None:
    """Whole-pixel offsets (taps just inside and just outside every edge, no interpolation)."""
    case = _Case([1, 2, 4, 5], [2, 2, 2, 2], pads=[1, 1, 1, 1], bias=True)
    rng = np.random.default_rng(3)
    case.feeds["off"] = rng.integers(-3, 4, case.feeds["off"].shape).astype(np.float32)
    got = case.run(CHECKED)
    (ref,) = onnx_reference_outputs(case.model, case.feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, case.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_deform_conv_dtypes(dtype: str) -> None:
    """float64 computed in float64; float16 summed in float32 and rounded once."""
    case = _Case(
        [1, 4, 5, 5], [2, 2, 3, 3], pads=[1, 1, 1, 1], group=2, bias=True, mask=True, dtype=dtype
    )
    got = case.run(CHECKED)
    assert got.dtype == np.dtype(dtype)
    tol = 1e-2 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(got, case.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "spec",
    [
        {"x": [2, 2, 7], "w": [3, 2, 3], "strides": [2], "pads": [1, 2], "bias": True},
        {
            "x": [1, 4, 3, 4, 5],
            "w": [2, 2, 2, 2, 3],
            "pads": [1, 0, 1, 0, 1, 1],
            "dilations": [1, 2, 1],
            "group": 2,
            "offset_group": 2,
            "mask": True,
        },
    ],
    ids=["1d", "3d"],
)
def test_deform_conv_other_ranks(spec: dict) -> None:
    case = _Case(**spec)
    np.testing.assert_allclose(case.run(CHECKED), case.numpy(), rtol=1e-4, atol=1e-5)


_HOSTILE = [np.nan, np.inf, -np.inf, 1e30, -1e30, 3e9, -3e9, 2.0**62, -(2.0**63), 1e-30]


def test_hostile_offsets_read_inside() -> None:
    """NaN, infinite and huge offsets (beyond int64 too): bounds-checked code reads nothing
    outside the input; a tap at a non-finite position reads 0 (as onnxruntime), at a huge
    finite one 0 (as the reference)."""
    case = _Case([2, 2, 4, 5], [3, 2, 2, 2], pads=[1, 1, 1, 1], offset_group=2, mask=True)
    off = case.feeds["off"]
    rng = np.random.default_rng(11)
    chosen = rng.random(off.shape) < 0.4
    off[chosen] = rng.choice(np.array(_HOSTILE, np.float32), int(chosen.sum()))
    got = case.run(CHECKED)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, case.numpy(), rtol=1e-5, atol=1e-5)
    (ort,) = onnxruntime_outputs(case.model, case.feeds)
    np.testing.assert_allclose(got, ort, rtol=1e-5, atol=1e-5)
    finite = np.where(np.isfinite(off), off, np.float32(1e30))
    case.feeds["off"] = finite
    (ref,) = onnx_reference_outputs(case.model, case.feeds)
    np.testing.assert_allclose(case.run(CHECKED), ref, rtol=1e-5, atol=1e-5)


def _with_attr(m: onnx.ModelProto, name: str, value: int) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(m)
    (attr,) = (a for a in out.graph.node[0].attribute if a.name == name)
    attr.CopyFrom(helper.make_attribute(name, value))
    return out


def test_bad_offset_group_is_refused() -> None:
    m = _with_attr(_Case([1, 3, 4, 4], [1, 3, 2, 2]).model, "offset_group", 2)
    with pytest.raises(polyonnx.ModelError, match="offset_group"):
        polyonnx.InferenceSession(m)


def test_offset_shape_must_match() -> None:
    """Offsets for one offset group where the attribute says two."""
    m = _with_attr(_Case([1, 2, 4, 4], [1, 2, 2, 2]).model, "offset_group", 2)
    with pytest.raises(polyonnx.ShapeError, match="offset"):
        polyonnx.InferenceSession(m)
