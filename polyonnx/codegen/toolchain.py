"""The C compiler that builds and links native code for a target: the system's own for the
host's architecture, Debian's cross compiler for another one.

Shared libraries are linked, and the thread pool (``parallel.c``) compiled, with it; the
library then runs on a Linux system of the target's architecture (or under ``qemu-user``).

Example:
    >>> CROSS["aarch64"].package
    'gcc-aarch64-linux-gnu'
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from polyonnx.codegen.isa import architecture, host_architecture
from polyonnx.errors import CodegenError


@dataclass(frozen=True, slots=True)
class CrossToolchain:
    """A cross compiler: its command, the Debian package that installs it, and the folder of
    the target's C library (what ``qemu-<arch> -L`` is given to run a program linked there)."""

    compiler: str
    package: str
    sysroot: str


def _debian(gnu: str) -> CrossToolchain:
    return CrossToolchain(f"{gnu}-gcc", f"gcc-{gnu}", f"/usr/{gnu}")


#: Cross toolchains by architecture (the first component of a target triple).
CROSS: dict[str, CrossToolchain] = {
    "aarch64": _debian("aarch64-linux-gnu"),
    "powerpc64le": _debian("powerpc64le-linux-gnu"),
    "riscv64": _debian("riscv64-linux-gnu"),
}


def host_compiler() -> str | None:
    """The host's C compiler (``$CC``, else ``cc``, else ``gcc``); None when there is none."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def c_compiler(triple: str) -> str:
    """The path of the C compiler for ``triple``: :func:`host_compiler` for the host's
    architecture, else the architecture's :data:`CROSS` compiler. Raises
    :class:`~polyonnx.errors.CodegenError` naming what to install when it is missing."""
    arch = architecture(triple)
    if arch == host_architecture():
        cc = host_compiler()
        if cc is None:
            raise CodegenError("no C compiler found to link the shared library (set CC)")
        return cc
    cross = CROSS.get(arch)
    if cross is None:
        known = ", ".join(sorted(CROSS))
        raise CodegenError(
            f"no cross toolchain known for target {triple!r} (architecture {arch!r}): "
            f"polyonnx links shared libraries for {known} and the host"
        )
    cc = shutil.which(cross.compiler)
    if cc is None:
        raise CodegenError(
            f"linking for target {triple!r} needs the cross compiler {cross.compiler}: "
            f"install the Debian package {cross.package} (apt-get install {cross.package})"
        )
    return cc
