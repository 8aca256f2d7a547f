"""The polyonnx version (one place, read by the package and the cache keys)."""

__version__ = "0.1.0"
