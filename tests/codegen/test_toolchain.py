"""The C compiler that links a target's libraries: the host's, or Debian's cross compiler,
and a CodegenError naming the package to install when it is missing."""

from __future__ import annotations

import shutil

import pytest

from polyonnx.cli import main
from polyonnx.codegen import toolchain
from polyonnx.codegen.target import host_cpu
from polyonnx.codegen.toolchain import CROSS, c_compiler, host_compiler
from polyonnx.errors import CodegenError
from tests.models.builders import mnist_model

#: ELF ``e_machine`` of each cross architecture.
ELF_MACHINE = {"aarch64": 183, "powerpc64le": 21, "riscv64": 243}


def test_the_host_links_with_its_own_compiler() -> None:
    assert c_compiler(host_cpu()[0]) == host_compiler()


def test_a_missing_cross_compiler_names_its_package(monkeypatch) -> None:
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(CodegenError, match="apt-get install gcc-aarch64-linux-gnu"):
        c_compiler("aarch64-unknown-linux-gnu")


def test_an_architecture_without_a_toolchain_is_refused() -> None:
    with pytest.raises(CodegenError, match="'mips64'.*aarch64, powerpc64le"):
        c_compiler("mips64-linux-gnu")


@pytest.mark.parametrize("arch", sorted(CROSS))
def test_compile_writes_a_library_for_the_target(arch: str, tmp_path, capsys) -> None:
    if shutil.which(CROSS[arch].compiler) is None:
        pytest.skip(f"{CROSS[arch].compiler} not installed (Debian package {CROSS[arch].package})")
    model = tmp_path / "mnist.onnx"
    model.write_bytes(mnist_model().SerializeToString())
    out = tmp_path / "mnist.so"
    assert main(["compile", str(model), "--target", f"{arch}-linux-gnu", "-o", str(out)]) == 0
    header = out.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[5] == 1  # little-endian
    assert int.from_bytes(header[18:20], "little") == ELF_MACHINE[arch]
    assert "polyonnx_run" in out.with_suffix(".h").read_text()
