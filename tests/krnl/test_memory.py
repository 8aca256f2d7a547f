"""Workspace and weights memory: zeroed, aligned, huge-page backed when large."""

from __future__ import annotations

import mmap
import re
from pathlib import Path

import numpy as np
import pytest

from polyonnx.krnl.memory import ALIGN, HUGE_PAGE, aligned_empty, transpose_into


@pytest.mark.parametrize("nbytes", [1, 100, 3 * HUGE_PAGE + 5])
def test_aligned_empty_is_zeroed_aligned_and_writable(nbytes: int) -> None:
    a = aligned_empty(nbytes)
    assert a.nbytes == nbytes and a.dtype == np.uint8 and a.flags.writeable
    assert a.ctypes.data % (HUGE_PAGE if nbytes >= 2 * HUGE_PAGE else ALIGN) == 0
    assert not a.any()
    a[:] = 7
    assert int(a[-1]) == 7


@pytest.mark.skipif(
    not (Path("/proc/self/smaps").exists() and hasattr(mmap, "MADV_HUGEPAGE")),
    reason="Linux smaps and MADV_HUGEPAGE",
)
def test_large_arrays_are_advised_for_huge_pages() -> None:
    a = aligned_empty(3 * HUGE_PAGE)
    flags = re.search(r"VmFlags:(.*)", _mapping(a.ctypes.data))
    assert flags is not None and " hg" in flags.group(1)
    assert " sh" not in flags.group(1)  # private: forked workers do not share it


def _mapping(address: int) -> str:
    """The /proc/self/smaps entry of the mapping holding ``address``."""
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", Path("/proc/self/smaps").read_text()):
        lo, hi = (int(v, 16) for v in block.split()[0].split("-"))
        if lo <= address < hi:
            return block
    pytest.fail("the array's mapping is not in /proc/self/smaps")


def test_the_weights_blob_can_stay_in_small_pages() -> None:
    a = aligned_empty(3 * HUGE_PAGE + 5, huge_pages=False)
    assert a.ctypes.data % ALIGN == 0 and a.size == 3 * HUGE_PAGE + 5 and not a.any()
    a[-1] = 7  # (writable)
    if Path("/proc/self/smaps").exists():
        assert " hg" not in _mapping(a.ctypes.data)  # not advised for huge pages


@pytest.mark.skipif(
    not (Path("/proc/self/smaps").exists() and hasattr(mmap, "MAP_POPULATE")),
    reason="Linux smaps and MAP_POPULATE",
)
def test_a_large_small_page_array_is_mapped_up_front() -> None:
    # every page resident before it is written: no fault per page as it is filled
    a = aligned_empty(4 * HUGE_PAGE, huge_pages=False)
    rss = re.search(r"\nRss:\s+(\d+) kB", _mapping(a.ctypes.data))
    assert rss is not None and int(rss.group(1)) * 1024 >= 4 * HUGE_PAGE


@pytest.mark.parametrize("shape", [(1, 1), (3, 700), (600, 257), (513, 512)])
def test_transpose_into_copies_every_block(shape: tuple[int, int]) -> None:
    # shapes around the block size: partial blocks at both edges
    m = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    out = np.full(shape[::-1], -1.0, np.float32)
    transpose_into(out, m)
    np.testing.assert_array_equal(out, m.T)
