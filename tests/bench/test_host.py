"""The host fingerprint of a benchmark report."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyonnx.bench.host import caches, cores, fingerprint, last_level_cache_bytes, versions


def test_fingerprint_names_the_cpu_and_its_features():
    info = fingerprint()
    assert info["cpu"]["name"]
    assert info["llvm"]["vector_bits"] in (128, 256, 512)
    assert info["llvm"]["features"] == sorted(info["llvm"]["features"])
    assert len(info["load"]) == 3


@pytest.mark.skipif(
    not Path("/sys/devices/system/cpu/cpu0/cache").exists(), reason="no sysfs cache info"
)
def test_caches_from_sysfs():
    found = caches()
    assert found and all(c["size_bytes"] > 0 and c["line_bytes"] > 0 for c in found)
    assert last_level_cache_bytes() == max(
        c["size_bytes"] for c in found if c["type"] != "Instruction"
    )


def test_cores_and_versions():
    count = cores()
    assert count["logical"] >= count["usable"] >= 1
    libs = versions()
    assert libs["polyonnx"] and libs["numpy"] and libs["llvmlite"] and libs["islpy"]
    assert libs["llvm"].count(".") == 2
    commit = libs["polyonnx_commit"]
    assert commit is None or len(commit.removesuffix("+dirty")) == 12
