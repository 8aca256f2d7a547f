"""Facts about instruction set architectures that need no LLVM: a triple's architecture and
x86-64's vector registers. :mod:`~polyonnx.codegen.target` (LLVM's target machines),
:mod:`~polyonnx.codegen.config` and :mod:`~polyonnx.codegen.toolchain` read them here, so
none of them imports another for a name.

Example:
    >>> architecture("aarch64-unknown-linux-gnu"), is_x86("x86_64-pc-linux-gnu")
    ('aarch64', True)
    >>> x86_vector_registers(512), x86_vector_registers(256)
    (32, 16)
"""

from __future__ import annotations

import platform


def architecture(triple: str) -> str:
    """The architecture a triple names, as its first component: ``x86_64``, ``aarch64``,
    ``powerpc64le``, ``riscv64``..."""
    return triple.split("-", 1)[0]


def is_x86(triple: str) -> bool:
    return architecture(triple) in ("x86_64", "i386", "i686")


def x86_vector_registers(bits: int) -> int:
    """x86-64's vector registers at ``bits`` (AVX-512 has 32, AVX and SSE 16)."""
    return 32 if bits >= 512 else 16


#: The OS's names of machines (``uname -m``) that LLVM's triples spell otherwise.
_TRIPLE_NAMES = {
    "amd64": "x86_64",
    "arm64": "aarch64",
    "ppc64le": "powerpc64le",
    "ppc64": "powerpc64",
}


def host_architecture() -> str:
    """This machine's architecture as a target triple names it (``uname -m``, with the names
    LLVM spells otherwise translated: ``ppc64le`` is ``powerpc64le``)."""
    machine = platform.machine()
    return _TRIPLE_NAMES.get(machine.lower(), machine)
