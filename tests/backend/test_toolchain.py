"""backend/toolchain.py: ptxas assembles llvmlite PTX, the SASS holds what the kernel does, -v is parsed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tkir.backend import toolchain
from tkir.backend.toolchain import ToolchainError, assemble, disassemble, local_memory_ops, sass_has

# A kernel with a dynamically indexed stack array (-> local memory, LDL/STL) and a static shared array.
SCRATCH_IR = """target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-p3:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
@buf = internal addrspace(3) global [256 x float] undef, align 4
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
define ptx_kernel void @scratch(ptr addrspace(1) %out, i32 %k) {
entry:
  %arr = alloca [64 x float], align 4
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %tf = sitofp i32 %t to float
  %p = getelementptr [64 x float], ptr %arr, i32 0, i32 %t
  store volatile float %tf, ptr %p
  %q = getelementptr [64 x float], ptr %arr, i32 0, i32 %k
  %v = load volatile float, ptr %q
  %s = getelementptr [256 x float], ptr addrspace(3) @buf, i32 0, i32 %t
  store volatile float %v, ptr addrspace(3) %s
  %w = load volatile float, ptr addrspace(3) %s
  %o = getelementptr float, ptr addrspace(1) %out, i32 %t
  store float %w, ptr addrspace(1) %o
  ret void
}
"""


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_vadd_assembles_to_an_elf_with_loads_adds_and_stores(arch: str, vadd_ptx: Callable[[str], str]
                                                             ) -> None:
    ptx = vadd_ptx(arch)
    assert f".target {arch}" in ptx
    out = assemble(ptx, arch)
    assert out.cubin[:4] == b"\x7fELF"
    assert 4 <= out.registers <= 32
    assert (out.shared_bytes, out.stack_frame, out.spill_stores, out.spill_loads) == (0, 0, 0, 0)
    assert "vadd" in out.log
    sass = disassemble(out.cubin)
    for opcode in ("LDG", "FADD", "STG", "EXIT"):
        assert sass_has(sass, opcode), opcode
    assert not sass_has(sass, "HGMMA")
    assert local_memory_ops(sass) == []


def test_local_memory_and_shared_bytes_are_reported(ptx_of: Callable[[str, str], str]) -> None:
    out = assemble(ptx_of(SCRATCH_IR, "sm_90a"))
    assert out.stack_frame == 64 * 4
    assert out.shared_bytes == 256 * 4
    ops = local_memory_ops(disassemble(out.cubin))
    assert any(" STL" in f" {op}" for op in ops) and any(" LDL" in f" {op}" for op in ops), ops


def test_ptx_syntax_error_raises_with_ptxas_message(vadd_ptx: Callable[[str], str]) -> None:
    broken = vadd_ptx("sm_90a").replace("ret;", "rett;")
    with pytest.raises(ToolchainError) as err:
        assemble(broken)
    assert "ptxas" in str(err.value) and "error" in str(err.value).lower()
    assert "rett" in str(err.value)


def test_sm90a_ptx_rejected_for_sm80(vadd_ptx: Callable[[str], str]) -> None:
    with pytest.raises(ToolchainError, match="sm_80"):
        assemble(vadd_ptx("sm_90a"), "sm_80")


def test_disassemble_rejects_non_elf() -> None:
    with pytest.raises(ToolchainError, match="cubin"):
        disassemble(b"not a cubin")


def test_resource_parsing_of_a_ptxas_log() -> None:
    log = (
        "ptxas info    : Compiling entry function 'gemm' for 'sm_90a'\n"
        "ptxas info    : Function properties for gemm\n"
        "    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size, 512 bytes smem\n"
        "ptxas warning : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized\n"
        "ptxas /tmp/k.ptx, line 12; warning : Unresolved extern\n"
    )
    out = toolchain._parse_resources(b"\x7fELF", log)
    assert (out.registers, out.shared_bytes, out.stack_frame, out.spill_stores, out.spill_loads) == (
        168, 512, 8, 12, 16)
    assert len(out.warnings) == 2 and "C7515" in out.warnings[0]


def test_sass_line_matching() -> None:
    sass = (
        "        /*0100*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], RZ ;\n"
        "        /*0110*/              @!P0 UTMALDG.2D [UR8], [UR4] ;\n"
        "        /*0120*/                   STL.64 [R1+0x8], R2 ;\n"
        "        // HGMMA in a comment is no instruction\n"
    )
    assert sass_has(sass, "HGMMA") and sass_has(sass, "UTMALDG")
    assert not sass_has(sass, "HGMMA.64x256x16") and not sass_has(sass, "LDL")
    assert toolchain.sass_count(sass, "HGMMA") == 1
    assert local_memory_ops(sass) == ["/*0120*/                   STL.64 [R1+0x8], R2 ;"]


def test_find_tool_prefers_the_pip_wheel() -> None:
    ptxas = Path(toolchain.find_tool("ptxas"))
    assert ptxas.name == "ptxas" and os.access(ptxas, os.X_OK)
    assert "nvidia" in ptxas.parts  # nvidia-cuda-nvcc is a test dependency, so the wheel's copy wins
    assert "release" in toolchain.ptxas_version()


def test_missing_tool_names_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "_wheel_bin_folders", lambda: [])
    monkeypatch.setattr(toolchain, "_CUDA_HOME_BIN", Path("/nonexistent"))
    monkeypatch.setenv("PATH", "/nonexistent")
    toolchain.find_tool.cache_clear()
    try:
        with pytest.raises(ToolchainError, match="pip install nvidia-cuda-nvdisasm"):
            toolchain.find_tool("nvdisasm")
    finally:
        toolchain.find_tool.cache_clear()


@pytest.mark.parametrize("writes_output", [True, False])
def test_a_failing_ptxas_is_an_error_even_if_it_left_a_cubin(writes_output: bool, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit status and output file are both checked: a ptxas that fails after writing (part of) its
    output must not hand that file on as a cubin (a mutant that required both to fail survived)."""
    fake = tmp_path / "ptxas"
    write = 'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done; echo partial > "$out"; '
    fake.write_text("#!/bin/sh\n" + (write if writes_output else "") + "echo 'ptxas fatal : boom' >&2; exit 255\n")
    fake.chmod(0o755)
    monkeypatch.setattr(toolchain, "find_tool", lambda name: str(fake))
    with pytest.raises(toolchain.ToolchainError, match="ptxas failed for sm_90a:\nptxas fatal : boom"):
        toolchain.assemble(".version 8.0\n", "sm_90a")


def test_assemble_keeps_its_results_per_process(vadd_ptx: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same PTX, arch and options assemble once per process (toolchain.ASSEMBLED_KEPT); other options run ptxas
    again; each call gets its own copy of the report."""
    ptx = vadd_ptx("sm_90a")
    first = assemble(ptx)
    runs: list[list[str]] = []
    real = toolchain._run
    monkeypatch.setattr(toolchain, "_run", lambda argv, *a, **kw: runs.append(argv) or real(argv, *a, **kw))
    again = assemble(ptx)
    assert runs == [] and again.cubin == first.cubin and again.registers == first.registers
    again.warnings.append("a note of the caller's")
    assert "a note of the caller's" not in assemble(ptx).warnings
    assemble(ptx, extra=("-lineinfo",))
    assert len(runs) == 1 and "-lineinfo" in runs[0]
