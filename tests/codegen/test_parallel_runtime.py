"""The thread pool itself (``parallel.c``): every iteration runs exactly once, whatever the
thread count, and chunks are contiguous."""

import ctypes
import threading

import pytest

from polyonnx.codegen.parallel_runtime import ENTRY, shared_library

CHUNK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_long, ctypes.c_long)


@pytest.fixture(scope="module")
def parallel_for() -> ctypes._CFuncPtr:
    path = shared_library()
    if path is None:
        pytest.skip("no C compiler to build the thread pool")
    fn = getattr(ctypes.CDLL(path), ENTRY)
    fn.argtypes = [CHUNK, ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
    fn.restype = None
    return fn


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 64, 1000])
@pytest.mark.parametrize("threads", [1, 2, 3, 5, 1000])
def test_every_iteration_runs_once(parallel_for: ctypes._CFuncPtr, n: int, threads: int) -> None:
    runs = [0] * n
    chunks: list[tuple[int, int, int]] = []
    guard = threading.Lock()

    def chunk(_ctx: int, begin: int, end: int) -> None:
        with guard:
            chunks.append((begin, end, threading.get_ident()))
            for i in range(begin, end):
                runs[i] += 1

    callback = CHUNK(chunk)
    for _ in range(3):  # again on the same (now awake) workers
        runs[:] = [0] * n
        chunks.clear()
        parallel_for(callback, None, n, threads)
        assert runs == [1] * n
        assert all(begin < end for begin, end, _ in chunks)
        # Never more chunks than four per thread.
        assert len(chunks) <= max(1, 4 * min(threads, 257))
