"""The C compiler that links a target's libraries: the host's, or Debian's cross compiler,
and a CodegenError naming the package to install when it is missing."""

from __future__ import annotations

import shutil

import pytest

import polyonnx
from polyonnx.cli import main
from polyonnx.codegen import toolchain
from polyonnx.codegen.isa import architecture, host_architecture
from polyonnx.codegen.target import host_cpu
from polyonnx.codegen.toolchain import CROSS, c_compiler, host_compiler
from polyonnx.errors import CodegenError
from polyonnx.testing.zoo import mnist_model

#: ELF ``e_machine`` of each cross architecture.
ELF_MACHINE = {"aarch64": 183, "powerpc64le": 21, "riscv64": 243}


def test_the_host_links_with_its_own_compiler() -> None:
    assert c_compiler(host_cpu()[0]) == host_compiler()


def test_the_hosts_architecture_is_llvms_without_llvm() -> None:
    assert host_architecture() == architecture(host_cpu()[0])


def test_a_missing_cross_compiler_names_its_package(monkeypatch) -> None:
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(CodegenError, match="apt-get install gcc-aarch64-linux-gnu"):
        c_compiler("aarch64-unknown-linux-gnu")


def test_an_architecture_without_a_toolchain_is_refused() -> None:
    with pytest.raises(CodegenError, match="'mips64'.*aarch64, powerpc64le, riscv64"):
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


def test_a_cross_library_keeps_the_compile_options(tmp_path) -> None:
    """(The options reach the target machine: a riscv64 library uses hardware floats.)"""
    if shutil.which(CROSS["riscv64"].compiler) is None:
        pytest.skip("riscv64-linux-gnu-gcc not installed (Debian package gcc-riscv64-linux-gnu)")
    from polyonnx.codegen.aot import write_library

    options = polyonnx.Options(target="riscv64-linux-gnu", num_threads=2)
    lib = write_library(polyonnx.compile(mnist_model(), options), tmp_path / "m.so").read_bytes()
    flags = int.from_bytes(lib[0x30:0x34], "little")
    assert flags & 0x6 == 0x4  # EF_RISCV_FLOAT_ABI_DOUBLE
