"""polyonnx: compile ONNX models to native code through a polyhedral optimizer.

Example:
    >>> import polyonnx                                            # doctest: +SKIP
    >>> sess = polyonnx.InferenceSession("model.onnx")             # doctest: +SKIP
    >>> outputs = sess.run(None, {"x": x})                          # doctest: +SKIP
"""

from polyonnx._version import __version__
from polyonnx.errors import (
    CodegenError,
    InputError,
    ModelError,
    PolyonnxError,
    ScheduleError,
    ShapeError,
    UnsupportedOpError,
)
from polyonnx.kernels import KernelInfo, get_kernel, list_kernels, op_kernel
from polyonnx.options import Options
from polyonnx.pipeline import Compiled, compile, emit
from polyonnx.runtime.session import InferenceSession, NodeArg
from polyonnx.schedule.schedule import Schedule
from polyonnx.schedule.signature import kernel_flops, kernel_signature
from polyonnx.schedule.trace import Trace, load_schedules
from polyonnx.tune.measure import Measurement, build, measure, random_arrays, run

__all__ = [
    "CodegenError", "Compiled", "InferenceSession", "InputError", "KernelInfo", "Measurement",
    "ModelError", "NodeArg", "Options", "PolyonnxError", "Schedule", "ScheduleError",
    "ShapeError", "Trace", "UnsupportedOpError", "build", "compile", "emit", "get_kernel",
    "kernel_flops", "kernel_signature", "list_kernels", "load_schedules", "measure",
    "op_kernel", "random_arrays", "run", "__version__",
]
