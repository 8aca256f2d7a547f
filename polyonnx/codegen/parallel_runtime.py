"""The thread pool generated code calls for parallel loops (``parallel.c`` beside this file).

Generated code calls ``polyonnx_parallel_for(fn, ctx, n, threads)``; the pool is a few dozen
lines of C built once with the system C compiler into the compile cache (``cc`` is needed for
shared libraries anyway) and loaded into the process for the JIT; shared libraries link the
same source, built by the target's C compiler
(:mod:`polyonnx.codegen.toolchain`). Without a C compiler, models run on one thread.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from polyonnx import cache
from polyonnx.codegen.toolchain import host_compiler
from polyonnx.options import Options

SOURCE = Path(__file__).with_name("parallel.c")
ENTRY = "polyonnx_parallel_for"
CFLAGS = ("-O2", "-pthread")


@functools.cache
def shared_library() -> str | None:
    """Path of the pool built as a shared library, building it on first use; None when no C
    compiler is available."""
    cc = host_compiler()
    if cc is None:
        return None
    source = SOURCE.read_bytes()
    name = f"parallel-{hashlib.sha256(source).hexdigest()[:16]}.so"
    target = cache.directory() / "runtime" / name
    if not target.exists():
        folder = target.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".so")
            os.close(fd)
        except OSError:
            folder = Path(tempfile.mkdtemp(prefix="polyonnx-rt-"))
            target, tmp = folder / name, str(folder / ("tmp-" + name))
        proc = subprocess.run(
            [cc, *CFLAGS, "-shared", "-fPIC", "-o", tmp, str(SOURCE)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            return None
        os.replace(tmp, target)
    return str(target)


def thread_count(options: Options) -> int:
    """Threads parallel loops run on: ``options.num_threads``, else every core; 1 when the
    thread pool cannot be built (no C compiler)."""
    wanted = options.num_threads or os.cpu_count() or 1
    return 1 if wanted > 1 and shared_library() is None else wanted
