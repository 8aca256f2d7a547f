"""The symbols an ELF object file leaves undefined: what it calls that something else defines.

Generated code may call functions nobody wrote down (LLVM lowers some operations to runtime
calls); before object code is loaded into the process, every such name must resolve, or the
call jumps to address 0. This reads the object's symbol table, for 32- and 64-bit ELF of either
byte order (every target polyonnx compiles for on Linux).

Example:
    >>> undefined_symbols(b"not an object") is None
    True
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_SHN_UNDEF = 0


def undefined_symbols(obj: bytes) -> frozenset[str] | None:
    """Names of the global and weak symbols ``obj`` references but does not define; None
    when ``obj`` is not ELF (Mach-O, COFF: not checked)."""
    if obj[:4] != b"\x7fELF" or len(obj) < 64:
        return None
    wide, order = obj[4] == 2, "<" if obj[5] == 1 else ">"
    if wide:
        (shoff,) = struct.unpack_from(order + "Q", obj, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", obj, 0x3A)
    else:
        (shoff,) = struct.unpack_from(order + "I", obj, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", obj, 0x2E)
    sections = [_section(obj, shoff + k * shentsize, wide, order) for k in range(shnum)]
    names: set[str] = set()
    for kind, offset, size, link, entsize in sections:
        if kind != _SHT_SYMTAB or not entsize:
            continue
        _, strings, _, _, _ = sections[link]
        for at in range(offset + entsize, offset + size, entsize):  # (entry 0 is null)
            name, info, shndx = _symbol(obj, at, wide, order)
            binding = info >> 4
            if shndx == _SHN_UNDEF and binding in (1, 2) and name:  # GLOBAL, WEAK
                end = obj.index(b"\0", strings + name)
                names.add(obj[strings + name : end].decode())
    return frozenset(names)


def _section(obj: bytes, at: int, wide: bool, order: str) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, entry size) of the section header at ``at``."""
    if wide:
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            order + "IIQQQQIIQQ", obj, at
        )
    else:
        _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
            order + "IIIIIIIIII", obj, at
        )
    return kind, offset, size, link, entsize


def _symbol(obj: bytes, at: int, wide: bool, order: str) -> tuple[int, int, int]:
    """(name offset, info, section index) of the symbol table entry at ``at``."""
    if wide:
        name, info, _, shndx = struct.unpack_from(order + "IBBH", obj, at)
    else:
        name, _, _, info, _, shndx = struct.unpack_from(order + "IIIBBH", obj, at)
    return name, info, shndx
