"""Static facts of generated code: a shared library's functions, their sizes and their
instruction mix, read from the library with binutils (``objdump``; a cross target's own,
``aarch64-linux-gnu-objdump`` and the like, installed with its cross gcc).

The instruction mix counts a function's instructions as they are laid out (static counts, not
the instructions a run executes) in five classes (:data:`CLASSES`): vector fused multiply-adds,
vector loads and stores, other vector instructions, scalar floating point, and everything else
(integer, addresses, branches). :func:`classify` knows the vector and float instructions of
x86-64 (SSE/AVX/AVX-512), AArch64 (NEON and SVE), POWER (VSX and AltiVec) and RISC-V (F/D
and V).

Example:
    >>> classify("aarch64", "fmla", "v0.4s, v1.4s, v2.s[0]")
    'vector_fma'
    >>> classify("aarch64", "ldp", "q0, q1, [x8]")
    'vector_memory'
    >>> classify("powerpc64le", "xvmaddasp", "vs0,vs1,vs2")
    'vector_fma'
    >>> classify("riscv64", "vle32.v", "v8,(a0)")
    'vector_memory'
    >>> classify("x86_64", "vfmadd231ss", "(%rax),%xmm1,%xmm0")
    'scalar_float'
    >>> mix = Mix.of(["vector_fma", "vector_fma", "other", "vector_memory"])
    >>> mix.total, f"{mix.share('vector_fma'):.2f}", f"{mix.vector_share:.2f}"
    (4, '0.50', '0.75')
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from polyonnx.codegen.toolchain import CROSS

#: The instruction classes, in the order tables and plots show them.
CLASSES = ("vector_fma", "vector_memory", "vector_other", "scalar_float", "other")
#: The vector classes among :data:`CLASSES`.
VECTOR_CLASSES = ("vector_fma", "vector_memory", "vector_other")
#: What each class is called in a report.
LABELS = {
    "vector_fma": "vector FMA",
    "vector_memory": "vector load/store",
    "vector_other": "other vector",
    "scalar_float": "scalar float",
    "other": "integer, address, branch",
}


@dataclass(frozen=True, slots=True)
class Mix:
    """Instructions counted by class (:data:`CLASSES`)."""

    vector_fma: int = 0
    vector_memory: int = 0
    vector_other: int = 0
    scalar_float: int = 0
    other: int = 0

    @staticmethod
    def of(classes: Iterable[str]) -> Mix:
        """The mix of a sequence of classes (what :func:`classify` returns)."""
        return Mix(**Counter(classes))

    @property
    def total(self) -> int:
        return sum(self.counts().values())

    def counts(self) -> dict[str, int]:
        """{class: count}, in :data:`CLASSES` order (the report's JSON)."""
        return {c: getattr(self, c) for c in CLASSES}

    def share(self, cls: str) -> float:
        """The share of ``cls`` among the instructions (0 when there are none)."""
        return getattr(self, cls) / self.total if self.total else 0.0

    @property
    def vector_share(self) -> float:
        """The share of vector instructions of any class."""
        return sum(self.share(c) for c in VECTOR_CLASSES)

    def __add__(self, other: Mix) -> Mix:
        return Mix(**{c: getattr(self, c) + getattr(other, c) for c in CLASSES})


@dataclass(frozen=True, slots=True)
class Function:
    """A function of a library: its symbol, size in bytes and instruction mix."""

    name: str
    size: int
    mix: Mix


@dataclass(frozen=True, slots=True)
class Library:
    """What binutils tells of a shared library: its file size, its sections' sizes and the
    functions of its ``.text``."""

    path: Path
    file_bytes: int
    sections: tuple[tuple[str, int], ...]
    functions: tuple[Function, ...]

    def section(self, name: str) -> int:
        """The size of section ``name`` (0 when the library has none)."""
        return dict(self.sections).get(name, 0)

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)


# --- the classes of instructions, per architecture -------------------------------------------

_A64_VECTOR = re.compile(r"\b[vz]\d+\.|\bq\d+\b|\bp\d+(\.|/[mz])")
_A64_FP = re.compile(r"\b[hsd]\d+\b")
_A64_FMA = re.compile(r"^(bf|f)n?(ml[as]|mad|msb)")


def _aarch64(mnemonic: str, operands: str) -> str:
    if _A64_VECTOR.search(operands):
        if _A64_FMA.match(mnemonic):
            return "vector_fma"
        return "vector_memory" if mnemonic.startswith(("ld", "st")) else "vector_other"
    if _A64_FP.search(operands) and mnemonic.startswith(("f", "ld", "st", "scvtf", "ucvtf")):
        return "scalar_float"
    return "other"


_PPC_FMA = re.compile(r"^(xvn?m(add|sub)[am](sp|dp)|vn?m(add|sub)fp)$")
_PPC_VECTOR_MEMORY = re.compile(r"^(lxv|stxv|lv[xe]|stv[xe])")
_PPC_FP = re.compile(r"^(xs|f|lf|stf|lxs|stxs|mffs|mtfs)")


def _power(mnemonic: str, operands: str) -> str:
    if _PPC_FMA.match(mnemonic):
        return "vector_fma"
    if _PPC_VECTOR_MEMORY.match(mnemonic):
        return "vector_memory"
    if mnemonic.startswith(("xv", "xx", "v")):
        return "vector_other"
    return "scalar_float" if _PPC_FP.match(mnemonic) else "other"


_RV_FMA = re.compile(r"^vfw?n?m(acc|add|sac|sub)\.")
_RV_VECTOR_MEMORY = re.compile(r"^v[ls](e\d|se\d|[uo]xei|\d+re?\d*\.|seg|m\.)")


def _riscv(mnemonic: str, operands: str) -> str:
    if _RV_FMA.match(mnemonic):
        return "vector_fma"
    if _RV_VECTOR_MEMORY.match(mnemonic):
        return "vector_memory"
    if mnemonic.startswith("v"):
        return "vector_other"
    if mnemonic.startswith("f") and not mnemonic.startswith("fence"):
        return "scalar_float"
    return "other"


_X86_VECTOR = re.compile(r"%[xyz]mm\d+")
_X86_FMA = re.compile(r"^vfn?m(add|sub)(add|sub)?\d{3}p[sdh]$")
_X86_MOVES = re.compile(r"mov|broadcast|gather|scatter|extract|insert|expand|compress")


def _x86(mnemonic: str, operands: str) -> str:
    if not _X86_VECTOR.search(operands):
        return "other"
    if _X86_FMA.match(mnemonic):
        return "vector_fma"
    scalar = mnemonic.endswith(("ss", "sd", "sh")) and not mnemonic.startswith(("vp", "p"))
    if scalar and "broadcast" not in mnemonic:
        return "scalar_float"
    if "(" in operands and _X86_MOVES.search(mnemonic):
        return "vector_memory"
    return "vector_other"


_CLASSIFIERS: dict[str, Callable[[str, str], str]] = {
    "x86_64": _x86,
    "aarch64": _aarch64,
    "powerpc64le": _power,
    "riscv64": _riscv,
}


def classify(architecture: str, mnemonic: str, operands: str) -> str:
    """The class (:data:`CLASSES`) of one instruction as objdump prints it (AT&T syntax on
    x86) for ``architecture`` (a triple's first component)."""
    try:
        return _CLASSIFIERS[architecture](mnemonic, operands)
    except KeyError:
        known = ", ".join(_CLASSIFIERS)
        raise ValueError(f"no instruction classes for {architecture!r} (known: {known})") from None


# --- reading a library with binutils -----------------------------------------------------------


def binutil(architecture: str, tool: str) -> str:
    """The path of binutils' ``tool`` (``objdump``...) for ``architecture``: the cross one
    (``aarch64-linux-gnu-objdump``) for a :data:`~polyonnx.codegen.toolchain.CROSS`
    architecture, else the host's. Raises ``FileNotFoundError`` naming the package."""
    cross = CROSS.get(architecture)
    name = cross.compiler.removesuffix("gcc") + tool if cross else tool
    found = shutil.which(name)
    if found is None:
        package = cross.package if cross else "binutils"
        raise FileNotFoundError(f"{name} not found: install the Debian package {package}")
    return found


def _run(command: list[str]) -> str:
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


_SECTION = re.compile(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s")
_SYMBOL = re.compile(r"^[0-9a-f]+ (.{7}) (\S+)\s+([0-9a-f]+)\s+(.*)$")
_LABEL = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_INSTRUCTION = re.compile(r"^\s*[0-9a-f]+:\s+(\S+)\s*(.*)$")


def sections(text: str) -> dict[str, int]:
    """Section sizes from ``objdump -h``."""
    return {m[1]: int(m[2], 16) for m in map(_SECTION.match, text.splitlines()) if m}


def function_sizes(text: str) -> dict[str, int]:
    """The function symbols of ``.text`` and their sizes, from ``objdump -t``."""
    out = {}
    for m in map(_SYMBOL.match, text.splitlines()):
        if m and "F" in m[1] and m[2] == ".text":
            out[m[4].split()[-1]] = int(m[3], 16)
    return out


def instruction_classes(text: str, architecture: str) -> dict[str, list[str]]:
    """Per label of ``.text`` in ``objdump -d --no-show-raw-insn`` output, the classes of its
    instructions."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_text = False
    for line in text.splitlines():
        if line.startswith("Disassembly of section "):
            in_text, current = line.rstrip(":").split()[-1] == ".text", None
        elif in_text and (label := _LABEL.match(line)):
            current = out.setdefault(label[1], [])
        elif current is not None and (insn := _INSTRUCTION.match(line)):
            mnemonic, operands = insn[1], insn[2].split("#")[0].split("<")[0]
            if mnemonic.startswith("."):  # data objdump could not decode (.word, .4byte)
                continue
            current.append(classify(architecture, mnemonic, operands))
    return out


def inspect(path: str | Path, architecture: str) -> Library:
    """Disassemble the shared library ``path`` (code for ``architecture``) with binutils."""
    path = Path(path)
    objdump = binutil(architecture, "objdump")
    with tempfile.TemporaryDirectory(prefix="polyonnx-objdump-") as tmp:
        readable = _decodable(path, architecture, Path(tmp))
        listing = _run([objdump, "-d", "--no-show-raw-insn", str(readable)])
    sizes = function_sizes(_run([objdump, "-t", str(path)]))
    classes = instruction_classes(listing, architecture)
    functions = tuple(
        Function(name, size, Mix.of(classes.get(name, ()))) for name, size in sizes.items()
    )
    return Library(
        path,
        path.stat().st_size,
        tuple(sections(_run([objdump, "-h", str(path)])).items()),
        functions,
    )


def _decodable(path: Path, architecture: str, tmp: Path) -> Path:
    """``path``, or for RISC-V a copy without its mapping symbols: LLVM's name the whole ISA
    string (``$xrv64i2p1_m2p0...``), and binutils 2.40 decodes nothing of V after one naming
    an extension it does not know (every vector instruction becomes ``.4byte``); without
    them objdump reads the ISA from the file's attributes."""
    if architecture != "riscv64":
        return path
    copy = tmp / path.name
    objcopy = binutil(architecture, "objcopy")
    _run([objcopy, "--wildcard", "--strip-symbol=$x*", str(path), str(copy)])
    return copy
