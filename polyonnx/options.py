"""Compile options: one frozen record that every stage reads."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Options:
    """How to compile a model.

    Example:
        >>> Options(opt_level=2).opt_level
        2
    """

    opt_level: int = 3
    """LLVM optimisation level, 0..3."""
    num_threads: int | None = None
    """Threads the generated code may use; ``None`` means every core."""
    target: str | None = None
    """LLVM target triple; ``None`` means the host."""
    cpu: str | None = None
    """Target CPU name (e.g. ``znver3``); ``None`` means the host CPU."""
    features: str | None = None
    """Target feature string; ``None`` means the host CPU's features (or, when ``cpu`` names
    another CPU, that CPU's own)."""
    checked: bool = field(default_factory=lambda: _env_flag("POLYONNX_CHECKED"))
    """Insert bounds checks on every buffer access (``POLYONNX_CHECKED=1``)."""
    verbose: bool = False
    """Report compile decisions (such as a schedule fallback) on stderr."""
    max_tensor_bytes: int = 4 << 30
    """Largest tensor (input, constant, intermediate or output) a model may have, in bytes;
    a model whose shapes exceed it is refused with :class:`~polyonnx.errors.ModelError` before
    anything is allocated."""
    cache: bool = field(
        default_factory=lambda: (
            os.environ.get("POLYONNX_CACHE", "1").strip().lower() not in {"0", "false", "no", "off"}
        )
    )
    """Reuse compiled kernels (loop ASTs and object code) from the on-disk cache
    (:mod:`polyonnx.cache`); ``POLYONNX_CACHE=0`` turns it off."""
    channel_blocks: bool = True
    """Run eligible convolutions, and the element-wise ops between them, on channel-blocked
    tensors (:mod:`polyonnx.graph.passes.layout`); False keeps every tensor in ONNX's layout."""
    isl_max_operations: int = 20_000_000
    """isl operations one kernel's scheduling (or AST generation) may take, about a microsecond
    each; past it the kernel falls back to its own loop order (see
    :mod:`polyonnx.schedule.budget`)."""
    tuning_db: str | None = None
    """The tuning database whose best record of each kernel (for this target and thread
    count) replaces the default schedule (see :mod:`polyonnx.records.database`): a path; None, the
    default one beside the compile cache (``tuning.sqlite``); ``""``, none."""

    def __post_init__(self) -> None:
        if self.opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0..3, got {self.opt_level}")
        if self.num_threads is not None and (
            isinstance(self.num_threads, bool) or not isinstance(self.num_threads, int)
        ):
            # (InferenceSession(model, Options(...)) lands here: options is its third argument)
            raise TypeError(
                f"num_threads must be an int or None, got {type(self.num_threads).__name__}"
                + (
                    ": pass options as options=Options(...)"
                    if isinstance(self.num_threads, Options)
                    else ""
                )
            )
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.max_tensor_bytes < 1:
            raise ValueError(f"max_tensor_bytes must be >= 1, got {self.max_tensor_bytes}")
        if self.isl_max_operations < 1:
            raise ValueError(f"isl_max_operations must be >= 1, got {self.isl_max_operations}")
