"""polyonnx: compile ONNX models to native code through a polyhedral optimizer."""

__version__ = "0.1.0"
