"""polyonnx: compile ONNX models to native code through a polyhedral optimizer.

The public names load their modules on first use, so that importing one part of polyonnx
(``polyonnx.krnl.ir``, ``polyonnx.graph``) does not load the whole pipeline with islpy and
llvmlite.

Example:
    >>> import numpy as np, polyonnx
    >>> from polyonnx.testing.examples import conv_model  # a model path, bytes or ModelProto
    >>> sess = polyonnx.InferenceSession(conv_model())
    >>> [y] = sess.run(None, {"x": np.ones((1, 8, 8, 8), np.float32)})
    >>> y.shape
    (1, 8, 8, 8)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from polyonnx._version import __version__

if TYPE_CHECKING:
    from polyonnx.compiled import Compiled
    from polyonnx.errors import (
        CodegenError,
        InputError,
        ModelError,
        PolyonnxError,
        ScheduleError,
        ShapeError,
        TuningError,
        UnsupportedOpError,
    )
    from polyonnx.kernels import KernelInfo, get_kernel, list_kernels, op_kernel
    from polyonnx.options import Options
    from polyonnx.pipeline import compile, emit
    from polyonnx.runtime.session import InferenceSession, NodeArg
    from polyonnx.schedule.schedule import Schedule
    from polyonnx.schedule.signature import kernel_flops, kernel_signature
    from polyonnx.schedule.trace import Trace, load_schedules
    from polyonnx.tune.measure import Measurement, build, measure, random_arrays, run

#: Each public name and the module defining it.
_MODULES: dict[str, str] = {
    **dict.fromkeys(
        [
            "CodegenError",
            "InputError",
            "ModelError",
            "PolyonnxError",
            "ScheduleError",
            "ShapeError",
            "TuningError",
            "UnsupportedOpError",
        ],
        "polyonnx.errors",
    ),
    "Compiled": "polyonnx.compiled",
    **dict.fromkeys(["KernelInfo", "get_kernel", "list_kernels", "op_kernel"], "polyonnx.kernels"),
    "Options": "polyonnx.options",
    **dict.fromkeys(["compile", "emit"], "polyonnx.pipeline"),
    **dict.fromkeys(["InferenceSession", "NodeArg"], "polyonnx.runtime.session"),
    **dict.fromkeys(
        ["Measurement", "build", "measure", "random_arrays", "run"], "polyonnx.tune.measure"
    ),
    "Schedule": "polyonnx.schedule.schedule",
    **dict.fromkeys(["kernel_flops", "kernel_signature"], "polyonnx.schedule.signature"),
    **dict.fromkeys(["Trace", "load_schedules"], "polyonnx.schedule.trace"),
}

__all__ = [
    "CodegenError",
    "Compiled",
    "InferenceSession",
    "InputError",
    "KernelInfo",
    "Measurement",
    "ModelError",
    "NodeArg",
    "Options",
    "PolyonnxError",
    "Schedule",
    "ScheduleError",
    "ShapeError",
    "Trace",
    "TuningError",
    "UnsupportedOpError",
    "build",
    "compile",
    "emit",
    "get_kernel",
    "kernel_flops",
    "kernel_signature",
    "list_kernels",
    "load_schedules",
    "measure",
    "op_kernel",
    "random_arrays",
    "run",
    "tune",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "tune":  # the callable tuning package: polyonnx.tune(model, budget="20m")
        return importlib.import_module("polyonnx.tune")
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'polyonnx' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # (the next lookup finds it without calling here)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
