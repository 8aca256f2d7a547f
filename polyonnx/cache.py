"""The on-disk cache of compiled artifacts (kernel object code, kernel loop ASTs).

Entries are content-addressed: a key is a hash of everything that decides the artifact (the
kernel's IR or signature, the target, the options, the versions of polyonnx and llvmlite), so an
entry never goes stale; it can only be unused. The cache lives in ``$POLYONNX_CACHE_DIR``, else
``$XDG_CACHE_HOME/polyonnx``, else ``~/.cache/polyonnx``; ``Options(cache=False)`` or
``POLYONNX_CACHE=0`` turns it off. Writes are atomic (rename), so concurrent compiles are safe.

Example:
    >>> import tempfile
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"POLYONNX_CACHE_DIR": tempfile.mkdtemp()}):
    ...     put("demo", key("an artifact's inputs"), b"bytes")
    ...     get("demo", key("an artifact's inputs"))
    b'bytes'
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import llvmlite

from polyonnx._version import __version__


def _source_digest() -> str:
    """A hash of polyonnx's own source: an edited compiler never reuses old artifacts."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


_SALT = f"polyonnx={__version__};source={_source_digest()};llvmlite={llvmlite.__version__}"


def key(*parts: str | bytes) -> str:
    """A cache key from the parts that decide an artifact (and the tool versions)."""
    h = hashlib.sha256(_SALT.encode())
    for p in parts:
        h.update(b"\0")
        h.update(p.encode() if isinstance(p, str) else p)
    return h.hexdigest()[:40]


def directory() -> Path:
    explicit = os.environ.get("POLYONNX_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "polyonnx"


def get(kind: str, name: str) -> bytes | None:
    try:
        return (directory() / kind / name).read_bytes()
    except OSError:
        return None


def put(kind: str, name: str, data: bytes) -> None:
    """Store an entry; a cache that cannot be written is skipped silently (it is a cache)."""
    folder = directory() / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, folder / name)
    except OSError:
        return
