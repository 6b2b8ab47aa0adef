"""The bounded synchronise on the GPU: under TKIR_SYNC_TIMEOUT a kernel that does not finish makes
`tkcuda.synchronize()` and `DeviceArray.numpy()` raise SyncTimeout naming it, instead of hanging the caller
(backend/cuda.py; docs/runtime.md, "Bounded waits"). The kernel spins on a flag in device memory, so the
test can end it afterwards (a memset on a second non-blocking stream) and leave the GPU clean."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
from test_runtime_gpu import VADD_LAUNCH  # the spin kernel keeps vadd's signature

from tkir.backend import cuda as tkcuda
from tkir.backend.runtime import Kernel

pytestmark = pytest.mark.gpu

# vadd's signature (so vadd's launch description fits); it spins while a[0] == 0, reading it volatile
SPIN_IR = """target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-p3:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
define ptx_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %n) {
entry:
  br label %spin
spin:
  %x = load volatile float, ptr addrspace(1) %a
  %zero = fcmp oeq float %x, 0.0
  br i1 %zero, label %spin, label %done
done:
  ret void
}
"""
ONE_F32_BITS = 0x3F800000  # 1.0f: the flag value that ends the spin
TIMEOUT_S = "0.5"
CLEANUP_TIMEOUT_S = "60"  # the released kernel ends at once; bounded, so a broken release fails, not hangs
TEST_LIMIT_S = 120  # pytest-timeout's limit, should the bounded wait itself be broken


@pytest.mark.timeout(TEST_LIMIT_S, method="thread")
def test_a_bounded_synchronise_names_the_kernel_that_does_not_finish(
        ptx_of: Callable[[str, str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    from cuda.bindings import driver as cu

    kernel = Kernel(ptx_of(SPIN_IR, "sm_90a"), copy.deepcopy(VADD_LAUNCH))
    flag, out = tkcuda.to_device(np.zeros(128, np.float32)), tkcuda.empty((128,), "f32")
    non_blocking = cu.CUstream_flags.CU_STREAM_NON_BLOCKING  # neither waits for the other, nor for stream 0
    with tkcuda.on_device(0):
        spin = tkcuda.check(cu.cuStreamCreate(non_blocking), "cuStreamCreate")
        release = tkcuda.check(cu.cuStreamCreate(non_blocking), "cuStreamCreate")
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, TIMEOUT_S)
    try:
        kernel(flag, flag, out, stream=int(spin))
        with pytest.raises(tkcuda.SyncTimeout, match=rf"kernel 'vadd' is still running after {TIMEOUT_S} s"):
            tkcuda.synchronize()
        with pytest.raises(TimeoutError, match="kernel 'vadd'"):
            out.numpy()
    finally:
        with tkcuda.on_device(0):
            tkcuda.check(cu.cuMemsetD32Async(flag.ptr, ONE_F32_BITS, 1, release), "cuMemsetD32Async")
        monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, CLEANUP_TIMEOUT_S)
        tkcuda.synchronize()
        with tkcuda.on_device(0):
            tkcuda.check(cu.cuStreamDestroy(spin), "cuStreamDestroy")
            tkcuda.check(cu.cuStreamDestroy(release), "cuStreamDestroy")
    assert tkcuda.pending_launches(0) == []  # the released kernel's event was seen complete and dropped


def test_a_bounded_synchronise_returns_when_the_kernels_finish(
        vadd_ptx: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tkcuda.SYNC_TIMEOUT_ENV, CLEANUP_TIMEOUT_S)
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    a = np.arange(4096, dtype=np.float32)
    da, dc = tkcuda.to_device(a), tkcuda.empty((4096,), "f32")
    for _ in range(3):
        kernel(da, da, dc)
    np.testing.assert_array_equal(dc.numpy(), 2 * a)
    assert tkcuda.pending_launches(0) == []
