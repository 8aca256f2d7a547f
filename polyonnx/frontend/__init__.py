"""The frontend: ONNX file → checked, upgraded, shape-inferred model → static ``graph.Graph``."""

from polyonnx.frontend.importer import import_model
from polyonnx.frontend.load import load_model

__all__ = ["import_model", "load_model"]
