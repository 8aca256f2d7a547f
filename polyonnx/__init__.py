"""polyonnx: compile ONNX models to native code through a polyhedral optimizer.

Example:
    >>> import polyonnx                                            # doctest: +SKIP
    >>> sess = polyonnx.InferenceSession("model.onnx")             # doctest: +SKIP
    >>> outputs = sess.run(None, {"x": x})                          # doctest: +SKIP
"""

from polyonnx.errors import (
    CodegenError,
    InputError,
    ModelError,
    PolyonnxError,
    ScheduleError,
    ShapeError,
    UnsupportedOpError,
)
from polyonnx.options import Options
from polyonnx.pipeline import Compiled, compile, emit
from polyonnx.runtime.session import InferenceSession, NodeArg

__version__ = "0.1.0"

__all__ = [
    "CodegenError", "Compiled", "InferenceSession", "InputError", "ModelError", "NodeArg",
    "Options", "PolyonnxError", "ScheduleError", "ShapeError", "UnsupportedOpError", "compile",
    "emit", "__version__",
]
