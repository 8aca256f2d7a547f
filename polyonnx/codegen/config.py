"""What, besides a kernel and its loops, decides the kernel's machine code: the codegen
configuration every emitter takes whole. What the options ask for on their target is
:func:`polyonnx.codegen.target.codegen_config` (the record itself needs no LLVM).

Example:
    >>> CodegenConfig(vector_bits=512, threads=2).key()
    'checked=False,vector_bits=512,threads=2,prefetch_above=0'
"""

from __future__ import annotations

from dataclasses import dataclass

from polyonnx.codegen.isa import x86_vector_registers


@dataclass(frozen=True, slots=True)
class CodegenConfig:
    """What, besides the kernel and its loops, decides a kernel's machine code."""

    checked: bool = False
    """Range-check every access (not only the computed indices)."""
    vector_bits: int = 256
    """The width of the target's vector registers (``vector`` loops use all of it)."""
    threads: int = 1
    """Threads ``parallel`` loops run on (1: they run sequentially, not outlined)."""
    prefetch_above: int = 0
    """Register tiles prefetch the operands larger than this they stream through (a quarter
    of the target's L2: :func:`~polyonnx.codegen.target.prefetch_above`; 0: never)."""
    vector_registers: int = 0
    """Vector registers a register tile may budget for; 0: an x86-64 CPU's for
    ``vector_bits`` (:func:`~polyonnx.codegen.isa.x86_vector_registers`)."""
    dot4_bits: int = 0
    """The widest vector the target's byte dot-product instruction takes (x86's VNNI
    ``vpdpbusd``: 512 with AVX512-VNNI, 256 with AVX-VNNI), which krnl's ``dot4`` becomes;
    0: none (``dot4`` is computed from its bytes: :func:`~polyonnx.codegen.target.dot4_bits`)."""

    def __post_init__(self) -> None:
        if not self.vector_registers:
            object.__setattr__(self, "vector_registers", x86_vector_registers(self.vector_bits))

    def key(self) -> str:
        """The configuration as text, part of every kernel's symbol
        (:func:`polyonnx.codegen.module.kernel_symbol`)."""
        # (The register count only where it is not x86-64's for the width: kernels compiled
        # for x86 keep their symbols, and with them the compile cache.)
        registers = self.vector_registers
        return (
            f"checked={self.checked},vector_bits={self.vector_bits},threads={self.threads}"
            f",prefetch_above={self.prefetch_above}"
            + (
                f",vector_registers={registers}"
                if registers != x86_vector_registers(self.vector_bits)
                else ""
            )
            + (f",dot4_bits={self.dot4_bits}" if self.dot4_bits else "")
        )
