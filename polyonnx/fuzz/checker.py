"""Checking a case in this process: compile and run it, compare with onnxruntime or with a
clean copy of its feeds, and say what became of it."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from polyonnx.fuzz.case import Case, Outcome

#: The options cases compile with: a small memory limit keeps hostile shapes cheap to refuse.
MAX_TENSOR_BYTES = 64 << 20


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str:
    """'' when the outputs agree (within float tolerances), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        b = np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {a.dtype}{list(a.shape)}, onnxruntime {b.dtype}{list(b.shape)}"
        if a.dtype.kind == "f":
            rtol, atol = (1e-3, 1e-4) if a.dtype.itemsize < 8 else (1e-9, 1e-12)
            scale = max(1.0, float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0)))
            if not np.allclose(a, b, rtol=rtol, atol=atol * scale, equal_nan=True):
                err = float(np.nanmax(np.abs(a.astype(np.float64) - b), initial=0.0))
                return f"output {k}: max abs error {err:.3g} (scale {scale:.3g})"
        elif not np.array_equal(a, b):
            return f"output {k}: {int(np.sum(a != b))} of {a.size} elements differ"
    return ""


def _session(model: bytes) -> Any:
    from polyonnx import InferenceSession, Options

    return InferenceSession(model, options=Options(max_tensor_bytes=MAX_TENSOR_BYTES))


def check(case: Case) -> Outcome:
    """Run ``case`` in this process (see :class:`Worker` for the isolated version)."""
    from polyonnx.errors import InputError, PolyonnxError, UnsupportedOpError
    from polyonnx.testing import onnxruntime_outputs

    try:
        if case.kind == "graph":
            try:
                want = onnxruntime_outputs(case.model, case.feeds)
            except Exception as e:  # noqa: BLE001 - the generator made something invalid
                return Outcome("invalid", f"onnxruntime refuses it: {e}")
            try:
                got = _session(case.model).run(None, case.feeds)
            except UnsupportedOpError as e:
                return Outcome("unsupported", str(e))
            except PolyonnxError as e:
                return Outcome("fail", f"refused a model onnxruntime runs: {type(e).__name__}: {e}")
            diff = compare(got, want)
            if diff and not compare(
                got, onnxruntime_outputs(case.model, case.feeds, optimize=False)
            ):
                # (onnxruntime's graph optimizer changed the answer: a Transpose fused into a
                # MatMul by a 1-D B, for one; its unoptimized run agrees with polyonnx)
                return Outcome("pass", f"onnxruntime's optimized graph differs: {diff}")
            return Outcome("fail", diff) if diff else Outcome("pass")
        try:
            sess = _session(case.model)
        except PolyonnxError as e:
            if case.kind == "feed":
                return Outcome("fail", f"the base model does not compile: {e}")
            return Outcome("pass", f"refused: {type(e).__name__}")
        if case.kind == "model":
            feeds = {
                a.name: np.zeros([d if isinstance(d, int) else 1 for d in a.shape], a.dtype)
                for a in sess.get_inputs()
            }
            try:
                sess.run(None, feeds)
            except PolyonnxError as e:
                return Outcome("pass", f"compiled, run refused: {type(e).__name__}")
            return Outcome("pass", "compiled and ran")
        try:
            got = sess.run(None, case.feeds)
        except InputError as e:
            return Outcome("pass", f"refused: {e}")
        clean = {k: np.array(v, order="C", copy=True) for k, v in case.feeds.items()}
        diff = compare(got, sess.run(None, clean))
        return (
            Outcome("fail", f"odd layout changed the result: {diff}")
            if diff
            else Outcome("pass", "ran")
        )
    except Exception:  # noqa: BLE001 - anything but a PolyonnxError is the bug being hunted
        lines = traceback.format_exc().strip().splitlines()
        return Outcome("fail", " | ".join(lines[-3:]))
