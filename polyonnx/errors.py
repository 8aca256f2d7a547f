"""The polyonnx exception hierarchy.

Every error polyonnx raises on purpose derives from :class:`PolyonnxError`; messages name what
the user wrote (file, node, op, attribute, input, loop).
"""

from __future__ import annotations


class PolyonnxError(Exception):
    """Base class of every error polyonnx raises on purpose."""


class ModelError(PolyonnxError):
    """The model is malformed: unreadable bytes, a failed check, a bad attribute."""


class UnsupportedOpError(PolyonnxError):
    """An op (or an op's dtype or attribute) that polyonnx cannot lower."""

    def __init__(
        self, op: str, opset: int | None = None, node: str | None = None, detail: str = ""
    ) -> None:
        self.op, self.opset, self.node, self.detail = op, opset, node, detail
        where = f" (node {node!r})" if node else ""
        version = f" at opset {opset}" if opset is not None else ""
        why = f": {detail}" if detail else ""
        super().__init__(f"unsupported op {op}{version}{where}{why}")


class ShapeError(PolyonnxError):
    """Shapes that do not fit together, or a shape that cannot be inferred."""


class ScheduleError(PolyonnxError):
    """A schedule transformation that is malformed or that would violate a dependence."""


class CodegenError(PolyonnxError):
    """Native code generation or compilation failed."""


class InputError(PolyonnxError):
    """A bad feed to ``InferenceSession.run``: name, dtype, shape or layout."""


class TuningError(PolyonnxError):
    """A tuning database that cannot be read (corrupt, not a tuning database) or written, or a
    tuning run that cannot start (a bad budget, an unreachable Ray cluster)."""
