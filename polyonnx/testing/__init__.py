"""Helpers for polyonnx's own tests and tools: IR digests (:mod:`polyonnx.testing.digest`)."""
