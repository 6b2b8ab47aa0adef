"""Shared pytest setup: GPU tests skip only where no CUDA device exists; PTX kernels built with llvmlite.

A test marked `@pytest.mark.gpu` runs when the CUDA driver initialises and reports at least one
device. It is skipped only then -- never because a tool or package is missing (those fail loudly).
With `TKIR_REQUIRE_GPU=1` (set it on a machine that has a GPU) a driver that does not initialise
fails the run instead of skipping the GPU tests. Each GPU test runs under a time limit
(GPU_TEST_TIMEOUT_S, pytest-timeout), so a hung kernel fails that test by name.

Hypothesis runs without its per-example deadline: a wall-clock limit fails on a loaded CI machine
and says nothing about correctness.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import pytest
from hypothesis import settings

settings.register_profile("tkir", deadline=None)
settings.load_profile("tkir")

# A GPU test's time limit: the longest GPU tests (tune, the largest attention sizes) take ~2 minutes.
GPU_TEST_TIMEOUT_S = 600


@functools.cache
def cuda_device_count() -> tuple[int, str]:
    """(number of CUDA devices, why none) -- through cuInit/cuDeviceGetCount, 0 when they fail."""
    try:
        from cuda.bindings import driver as cu

        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return 0, f"cuInit failed: {err.name}"
        err, count = cu.cuDeviceGetCount()
        if err != cu.CUresult.CUDA_SUCCESS:
            return 0, f"cuDeviceGetCount failed: {err.name}"
        return int(count), "no CUDA device"
    except Exception as e:  # no driver library at all raises rather than returning an error code
        return 0, f"no CUDA driver ({type(e).__name__})"


@pytest.fixture
def two_gpus() -> None:
    """Skip where fewer than two CUDA devices exist: the multi-device tests need the hardware (on a
    machine without any GPU the gpu marker has skipped the test already)."""
    count, _ = cuda_device_count()
    if count < 2:
        pytest.skip(f"needs 2 CUDA devices; this machine has {count}")


@pytest.fixture
def torch_module() -> object:
    """torch, for gpu tests that are about torch (its tensors as arguments, its streams). Where a GPU
    exists and torch is missing this fails, naming what to install, rather than skipping: a missing
    package must not hide a test (gpu tests only reach fixtures where a device exists)."""
    try:
        import torch
    except ImportError as e:
        pytest.fail(f"this GPU test is about torch, which is not importable here ({e}); install it "
                    "(python3 -m pip install torch, or the 'bench' extra)", pytrace=False)
    return torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    count, why = cuda_device_count()
    if count > 0:
        # thread method: a kernel that never finishes blocks inside the driver, where a signal is not seen
        for item in gpu_items:
            if not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(GPU_TEST_TIMEOUT_S, method="thread"))
        return
    if os.environ.get("TKIR_REQUIRE_GPU", "").strip() not in ("", "0"):
        raise pytest.UsageError(f"TKIR_REQUIRE_GPU is set but the GPU tests cannot run: {why}")
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
    for item in gpu_items:
        item.add_marker(skip)


# A vector add c[i] = a[i] + b[i] for i < n, in LLVM IR for the NVPTX backend.
VADD_IR = """target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-p3:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
define ptx_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %n) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %nt = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %base = mul i32 %bid, %nt
  %i = add i32 %base, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %exit
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %pc = getelementptr float, ptr addrspace(1) %c, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %s = fadd float %x, %y
  store float %s, ptr addrspace(1) %pc
  br label %exit
exit:
  ret void
}
"""


@pytest.fixture(scope="session")
def ptx_of() -> Callable[[str, str], str]:
    """LLVM IR text -> PTX text for a given sm_XX, through llvmlite's NVPTX backend."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()

    def lower(ir: str, cpu: str = "sm_90a") -> str:
        module = llvm.parse_assembly(ir)
        module.verify()
        target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
        machine = target.create_target_machine(cpu=cpu, features="+ptx80", opt=3)
        return machine.emit_assembly(module)

    return lower


@pytest.fixture(scope="session")
def vadd_ptx(ptx_of: Callable[[str, str], str]) -> Callable[[str], str]:
    """PTX of the vector add `vadd(a, b, c, n)` for a given sm_XX."""
    return lambda cpu="sm_90a": ptx_of(VADD_IR, cpu)


@pytest.fixture(autouse=True, scope="session")
def _private_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read or write the user's ~/.cache/tkir: each session gets its own cache dir."""
    import os

    if "TKIR_CACHE_DIR" not in os.environ:
        os.environ["TKIR_CACHE_DIR"] = str(tmp_path_factory.mktemp("tkir-cache"))
