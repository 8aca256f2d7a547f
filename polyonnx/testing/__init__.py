"""Helpers for polyonnx's own tests, benchmarks and tools.

- :mod:`~polyonnx.testing.reference`: reference outputs from onnxruntime (imported only when
  used: ``pip install polyonnx[test]``) and from ``onnx.reference``.
- :mod:`~polyonnx.testing.compare`: assertions with the ONNX backend suite's tolerances, and
  max absolute / relative error reports.
- :mod:`~polyonnx.testing.feeds`: random feeds for a model's inputs.
- :mod:`~polyonnx.testing.emulated`: shared libraries for other architectures run under
  qemu-user (imported only when used).
- :mod:`~polyonnx.testing.digest`: IR digests of the benchmark models, the proof that a
  refactoring changed no behaviour (``python -m polyonnx.testing.digest``).

Example:
    >>> import polyonnx
    >>> from polyonnx.testing import assert_close, onnxruntime_outputs, random_feeds
    >>> from polyonnx.testing.examples import conv_model
    >>> sess = polyonnx.InferenceSession(conv_model())
    >>> feeds = random_feeds(sess.get_inputs())
    >>> want = onnxruntime_outputs(conv_model(), feeds)
    >>> assert_close(sess.run(None, feeds), want)
"""

from polyonnx.testing.compare import (
    ATOL,
    RTOL,
    Errors,
    assert_close,
    assert_relative_error,
    max_errors,
)
from polyonnx.testing.feeds import random_feeds
from polyonnx.testing.reference import (
    import_onnxruntime,
    onnx_reference_outputs,
    onnxruntime_int8_exact,
    onnxruntime_outputs,
    onnxruntime_session,
)

__all__ = [
    "ATOL",
    "RTOL",
    "Errors",
    "assert_close",
    "assert_relative_error",
    "import_onnxruntime",
    "max_errors",
    "onnx_reference_outputs",
    "onnxruntime_int8_exact",
    "onnxruntime_outputs",
    "onnxruntime_session",
    "random_feeds",
]
