"""backend/runtime.py on a GPU: llvmlite PTX (and its ptxas cubin) loaded and launched through Kernel,
with tkir.backend.cuda DeviceArrays and torch tensors; a TMA round trip through a launch-description tma entry;
launches on the device the arguments live on (GPU 1 where there are two) and the caller's context kept.

Tests about torch take the `torch_module` fixture (tests/conftest.py): they fail, not skip, where a GPU
exists and torch does not. The two-GPU tests skip, saying so, on a machine with one."""

from __future__ import annotations

import copy
import ctypes
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tkir.backend import cuda as tkcuda
from tkir.backend import runtime, toolchain
from tkir.backend.runtime import Kernel, LaunchError

pytestmark = pytest.mark.gpu

VADD_LAUNCH: dict[str, Any] = {
    "kernel": "vadd", "target": "sm_90a",
    "tensors": [{"name": "a", "dtype": "f32", "dims": ["N"]}, {"name": "b", "dtype": "f32", "dims": ["N"]},
                {"name": "c", "dtype": "f32", "dims": ["N"]}],
    "params": [{"name": "a", "kind": "pointer", "dtype": "f32", "tensor": "a"},
               {"name": "b", "kind": "pointer", "dtype": "f32", "tensor": "b"},
               {"name": "c", "kind": "pointer", "dtype": "f32", "tensor": "c"},
               {"name": "n", "kind": "scalar", "dtype": "i32", "size": "N"}],
    "grid": ["cdiv(N, 128)"], "block": [128], "dynamic_smem": 0,
}

# The probe's TMA copy (HOPPER.md, probes/hopper_probe.py): one TMA box into shared memory on an
# mbarrier, then 128 threads copy the 8 KB of shared memory verbatim to `out`.
TMA_COPY_IR = r"""target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-p3:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
@smem = external addrspace(3) global [0 x i8], align 1024
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare void @llvm.nvvm.barrier0()
define ptx_kernel void @tma_copy(ptr byval([128 x i8]) align 64 "nvvm.grid_constant" %tmap, ptr addrspace(1) %out, i32 %bytes, i32 %boxw, i32 %boxh) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %s = ptrtoint ptr addrspace(3) @smem to i32
  %bar = add i32 %s, 16384
  %leader = icmp eq i32 %t, 0
  br i1 %leader, label %init, label %synced0
init:
  call void asm sideeffect "mbarrier.init.shared::cta.b64 [$0], 1;", "r,~{memory}"(i32 %bar)
  call void asm sideeffect "fence.mbarrier_init.release.cluster;", "~{memory}"()
  call void asm sideeffect "fence.proxy.async.shared::cta;", "~{memory}"()
  br label %synced0
synced0:
  call void @llvm.nvvm.barrier0()
  br i1 %leader, label %issue, label %waitpre
issue:
  call void asm sideeffect "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}"(i32 %bar, i32 %bytes)
  call void asm sideeffect "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];", "r,l,r,r,r,~{memory}"(i32 %s, ptr %tmap, i32 0, i32 0, i32 %bar)
  br label %waitpre
waitpre:
  br label %wait
wait:
  %done = call i32 asm sideeffect "{\0A.reg .pred p;\0Ambarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\0Aselp.u32 $0, 1, 0, p;\0A}", "=r,r,r,~{memory}"(i32 %bar, i32 0)
  %notyet = icmp eq i32 %done, 0
  br i1 %notyet, label %wait, label %ready
ready:
  br label %loop
loop:
  %i = phi i32 [0, %ready], [%inext, %loop]
  %w = mul i32 %t, 16
  %wi = add i32 %w, %i
  %off = mul i32 %wi, 4
  %sp = getelementptr i8, ptr addrspace(3) @smem, i32 %off
  %v = load i32, ptr addrspace(3) %sp, align 4
  %gp = getelementptr i32, ptr addrspace(1) %out, i32 %wi
  store i32 %v, ptr addrspace(1) %gp, align 4
  %inext = add i32 %i, 1
  %more = icmp ult i32 %inext, 16
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""  # noqa: E501
BOX_BYTES = 8192
SWIZZLE_MASKS = {128: 0x70, 64: 0x30, 32: 0x10, 0: 0}  # byte a lands at a ^ ((a >> 3) & mask) (HOPPER.md §3)


def tma_launch(box_w: int, box_h: int, swizzle: int, dynamic_smem: int) -> dict[str, Any]:
    return {
        "kernel": "tma_copy", "target": "sm_90a",
        "tensors": [{"name": "src", "dtype": "bf16", "dims": ["H", "W"]},
                    {"name": "out", "dtype": "bf16", "dims": [BOX_BYTES // 2]}],
        "scalars": [{"name": "nbytes", "dtype": "i32"}, {"name": "box_w", "dtype": "i32"},
                    {"name": "box_h", "dtype": "i32"}],
        "params": [{"name": "tmap", "kind": "tensor_map", "tma": 0},
                   {"name": "out", "kind": "pointer", "dtype": "bf16", "tensor": "out"},
                   {"name": "nbytes", "kind": "scalar", "dtype": "i32", "scalar": "nbytes"},
                   {"name": "box_w", "kind": "scalar", "dtype": "i32", "scalar": "box_w"},
                   {"name": "box_h", "kind": "scalar", "dtype": "i32", "scalar": "box_h"}],
        "grid": [1], "block": [128], "dynamic_smem": dynamic_smem,
        "tma": [{"param": "tmap", "tensor": "src", "dtype": "bf16", "rank": 2, "dims": ["W", "H"],
                 "strides": ["W * 2"], "box": [box_w, box_h], "elem_strides": [1, 1], "swizzle": swizzle,
                 "l2_promotion": 128, "oob_fill": "zero"}],
    }


def random_bf16(shape: tuple[int, ...], seed: int) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(-30000, 30000, size=shape, dtype=np.int16)
    return bits.view(ml_dtypes.bfloat16)


def test_device_array_round_trip() -> None:
    host = random_bf16((33, 17), seed=0)
    dev = tkcuda.to_device(host)
    assert dev.ptr % 256 == 0 and dev.shape == (33, 17)
    assert np.array_equal(dev.numpy().view(np.int16), host.view(np.int16))


@pytest.mark.parametrize("image_kind", ["ptx", "cubin"])
def test_vadd_with_device_arrays(image_kind: str, vadd_ptx: Callable[[str], str]) -> None:
    ptx = vadd_ptx("sm_90a")
    image: str | bytes = ptx if image_kind == "ptx" else toolchain.assemble(ptx, "sm_90a").cubin
    kernel = Kernel(image, copy.deepcopy(VADD_LAUNCH))
    n = 1000  # not a multiple of the block: the kernel's bound check matters
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db, dc = tkcuda.to_device(a), tkcuda.to_device(b), tkcuda.empty((n,), "f32")
    kernel(da, db, dc)
    np.testing.assert_array_equal(dc.numpy(), a + b)
    assert kernel.validate(da, db, dc).grid == (8, 1, 1)


def test_vadd_on_a_stream(vadd_ptx: Callable[[str], str]) -> None:
    from cuda.bindings import driver as cu

    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    tkcuda.context()
    stream = tkcuda.check(cu.cuStreamCreate(0), "cuStreamCreate")
    try:
        a = np.arange(4096, dtype=np.float32)
        da, dc = tkcuda.to_device(a), tkcuda.empty((4096,), np.float32)
        kernel(da, da, dc, stream=int(stream))
        tkcuda.check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
        np.testing.assert_array_equal(dc.numpy(), 2 * a)
    finally:
        tkcuda.check(cu.cuStreamDestroy(stream), "cuStreamDestroy")


def test_vadd_with_torch(vadd_ptx: Callable[[str], str], torch_module: Any) -> None:
    torch = torch_module
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    a = torch.randn(5000, device="cuda")
    b = torch.randn(5000, device="cuda")
    c = torch.empty_like(a)
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
    with pytest.raises(LaunchError, match="argument 'a' has dtype bf16, expected f32"):
        kernel(a.bfloat16(), b, c)
    with pytest.raises(LaunchError, match="argument 'a' is in host memory"):
        kernel(a.cpu(), b, c)
    with pytest.raises(LaunchError, match="argument 'a' is not C-contiguous"):
        kernel(torch.randn(10000, device="cuda")[::2], b, c)


class HostCAI:
    """A CUDA Array Interface that (wrongly) points at host memory."""

    def __init__(self, host: np.ndarray):
        self.host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str,
                                         "data": (host.ctypes.data, False), "strides": None, "version": 3}


def test_host_pointer_behind_cai_is_caught_at_launch(vadd_ptx: Callable[[str], str]) -> None:
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    good = tkcuda.to_device(np.zeros(256, np.float32))
    kernel.validate(HostCAI(np.zeros(256, np.float32)), good, good)  # validate cannot know; launch must
    message = "argument 'a': address 0x[0-9a-f]+ is (not memory CUDA knows|host memory)"
    with pytest.raises(LaunchError, match=message):
        kernel(HostCAI(np.zeros(256, np.float32)), good, good)


@pytest.mark.parametrize(("swizzle", "dynamic_smem"),
                         [(128, 16384 + 64), (64, 64 * 1024), (32, 16384 + 64), (0, 16384 + 64)])
def test_tma_round_trip(swizzle: int, dynamic_smem: int, ptx_of: Callable[[str, str], str]) -> None:
    box_w = {128: 64, 64: 32, 32: 16, 0: 64}[swizzle]  # the widest box the swizzle span allows
    box_h = BOX_BYTES // (box_w * 2)
    kernel = Kernel(ptx_of(TMA_COPY_IR, "sm_90a"), tma_launch(box_w, box_h, swizzle, dynamic_smem))
    src = random_bf16((box_h, box_w), seed=swizzle)
    dsrc, dout = tkcuda.to_device(src), tkcuda.to_device(np.zeros(BOX_BYTES // 2, ml_dtypes.bfloat16))
    bound = kernel.validate(dsrc, dout, BOX_BYTES, box_w, box_h)
    assert bound.tma[0].dims == [box_w, box_h] and bound.tma[0].strides == [box_w * 2]
    kernel(dsrc, dout, BOX_BYTES, box_w, box_h)
    got = dout.numpy().view(np.uint8)
    want = src.view(np.uint8).reshape(-1)
    a = np.arange(BOX_BYTES)
    np.testing.assert_array_equal(got[a ^ ((a >> 3) & SWIZZLE_MASKS[swizzle])], want)


def test_too_much_shared_memory_is_a_clear_error(ptx_of: Callable[[str, str], str]) -> None:
    # refused when the launch description is read (more than any block may have, tkir/target.py),
    # before any driver call
    with pytest.raises(LaunchError, match=r"dynamic_smem 409600 is not 0\.\.232448 bytes"):
        Kernel(ptx_of(TMA_COPY_IR, "sm_90a"), tma_launch(64, 64, 128, 400 * 1024))


def test_tensor_map_buffer_is_aligned_and_filled() -> None:
    from tkir.backend import runtime

    src = tkcuda.to_device(random_bf16((64, 64), seed=4))
    out = tkcuda.empty((BOX_BYTES // 2,), "bf16")
    bound = Kernel("", tma_launch(64, 64, 128, 0)).validate(src, out, BOX_BYTES, 64, 64)
    tmap = runtime.encode_tensor_map(bound.tma[0])
    assert ctypes.addressof(tmap) % 64 == 0
    assert any(tmap.opaque)  # the driver wrote the descriptor


def test_a_launch_is_ordered_with_torch_work_on_the_current_stream(torch_module: Any) -> None:
    """With torch tensors and no `stream=`, k(...) launches on torch's current stream (as Triton does):
    inside `with torch.cuda.stream(s)` it runs after the work queued on s before it. s is created
    non-blocking, so a launch on the legacy default stream would not wait for it and would read x
    while it is still zero (torch's own streams are blocking here: they cannot tell the two apart)."""
    torch = torch_module
    from cuda.bindings import driver as cu

    import tkir

    k = tkir.compile("examples/softmax.tk")
    src = torch.randn(4096, 1024, device="cuda").bfloat16()
    x, y = torch.zeros_like(src), torch.empty_like(src)
    k(x, y)  # the first launch loads the module, which waits for the device: warm it up before
    torch.cuda.synchronize()
    tkcuda.context()
    raw = tkcuda.check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    s = torch.cuda.ExternalStream(int(raw) if hasattr(raw, "__int__") else raw.getPtr())
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time on s before x gets its values
        x.copy_(src)
        k(x, y)
    s.synchronize()
    torch.cuda.synchronize()
    tkcuda.check(cu.cuStreamDestroy(raw), "cuStreamDestroy")
    ref = torch.softmax(src.float(), dim=-1)
    err = float((y.float() - ref).norm() / ref.norm())
    assert err < 2e-2, f"rel_err {err:.3e}: the kernel did not wait for the work on the current stream"


# --- the device of a launch ---------------------------------------------------------------------------


class LaunchSpy:
    """Wraps cuLaunchKernel to record, at each launch, the device of the current context, the current
    context and the stream handle: what the launch really ran on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        from cuda.bindings import driver as cu

        self.cu, self.real = cu, cu.cuLaunchKernel
        self.seen: list[tuple[int, int, int]] = []  # (device, context, stream)
        monkeypatch.setattr(runtime.cu, "cuLaunchKernel", self)

    def __call__(self, function: Any, *rest: Any) -> Any:
        device = int(tkcuda.check(self.cu.cuCtxGetDevice(), "cuCtxGetDevice"))
        ctx = int(tkcuda.check(self.cu.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        self.seen.append((device, ctx, int(rest[7])))  # gx gy gz bx by bz smem stream ...
        return self.real(function, *rest)


def pointer_device(ptr: int) -> int:
    """The GPU of `ptr`'s memory, from the context it was allocated in (CU_POINTER_ATTRIBUTE_CONTEXT,
    which the binding answers correctly): independent of tkcuda.pointer_device, which it checks."""
    from cuda.bindings import driver as cu

    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_CONTEXT
    ctx = int(tkcuda.check(cu.cuPointerGetAttribute(attr, ptr), "cuPointerGetAttribute"))
    owners = [d for d in range(tkcuda.device_count()) if int(tkcuda.primary_context(d)) == ctx]
    assert len(owners) == 1, f"{ptr:#x} belongs to no primary context"
    return owners[0]


def test_pointer_device_names_the_gpu_of_the_memory(two_gpus: None) -> None:
    """Regression (found on a two-H200 machine): cuda-bindings' cuPointerGetAttribute answered 0
    for DEVICE_ORDINAL of GPU 1's memory, so arrays on GPU 1 given by CUDA Array Interface were
    launched on GPU 0 (an illegal address). tkcuda.pointer_device must agree with the allocation's
    context on every GPU."""
    for device in range(tkcuda.device_count()):
        arr = tkcuda.empty((1024,), "f32", device=device)
        assert tkcuda.pointer_device(arr.ptr) == device == pointer_device(arr.ptr)


def current_context() -> int:
    from cuda.bindings import driver as cu

    return int(tkcuda.check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent"))


def vadd_on(kernel: Kernel, device: int, n: int = 3000, seed: int = 0) -> None:
    """c = a + b with DeviceArrays on `device`; checks the sum and where c lives."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    da, db = tkcuda.to_device(a, device=device), tkcuda.to_device(b, device=device)
    dc = tkcuda.to_device(np.full(n, np.nan, np.float32), device=device)
    assert pointer_device(dc.ptr) == device and dc.__dlpack_device__() == (tkcuda.DLPACK_CUDA, device)
    kernel(da, db, dc)
    np.testing.assert_array_equal(dc.numpy(), a + b)


def test_a_launch_keeps_the_callers_context(vadd_ptx: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread whose current context is not the device's primary one (here a context created on GPU
    0) gets its launch in the primary context -- where the module was loaded and the arrays live --
    and has its own context current again afterwards."""
    from cuda.bindings import driver as cu

    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    spy = LaunchSpy(monkeypatch)
    vadd_on(kernel, 0)
    created = tkcuda.check(cu.cuCtxCreate(None, 0, tkcuda.check(cu.cuDeviceGet(0), "cuDeviceGet")), "cuCtxCreate")
    try:
        assert current_context() == int(created)
        vadd_on(kernel, 0, seed=1)
        assert current_context() == int(created)
    finally:
        tkcuda.check(cu.cuCtxDestroy(created), "cuCtxDestroy")
    primary = int(tkcuda.primary_context(0))
    assert [(d, c) for d, c, _ in spy.seen] == [(0, primary), (0, primary)]


def test_launch_on_device_1_runs_on_gpu_1(vadd_ptx: Callable[[str], str], monkeypatch: pytest.MonkeyPatch,
                                          two_gpus: None) -> None:
    """Issue 14: tensors on GPU 1 launch on GPU 1 -- the same Kernel on GPU 0, then GPU 1, then GPU 0
    (its module loaded once per device), each launch in that device's primary context, and the
    caller's current context (GPU 0's) unchanged by a launch on GPU 1."""
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    spy = LaunchSpy(monkeypatch)
    tkcuda.context(0)
    vadd_on(kernel, 0)
    vadd_on(kernel, 1, seed=1)
    assert current_context() == int(tkcuda.primary_context(0))
    vadd_on(kernel, 0, seed=2)
    assert [(d, c) for d, c, _ in spy.seen] == [(0, int(tkcuda.primary_context(0))),
                                                 (1, int(tkcuda.primary_context(1))),
                                                 (0, int(tkcuda.primary_context(0)))]
    assert sorted(kernel._functions) == [0, 1]


def test_mixed_devices_are_refused_on_two_gpus(vadd_ptx: Callable[[str], str], monkeypatch: pytest.MonkeyPatch,
                                               two_gpus: None) -> None:
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    spy = LaunchSpy(monkeypatch)
    on0 = tkcuda.to_device(np.ones(256, np.float32), device=0)
    on1 = tkcuda.to_device(np.ones(256, np.float32), device=1)
    with pytest.raises(LaunchError, match=r"vadd: arguments are on different GPUs \('a' on GPU 0, 'b' on GPU 1, "
                                          r"'c' on GPU 0\)"):
        kernel(on0, on1, on0)

    class Unsaid:  # a CUDA Array Interface without a device: the driver tells at launch
        def __init__(self, arr: tkcuda.DeviceArray):
            self.arr, self.__cuda_array_interface__ = arr, arr.__cuda_array_interface__

    with pytest.raises(LaunchError, match=r"arguments are on different GPUs \('a' on GPU 0, 'b' on GPU 1, "
                                          r"'c' on GPU 0\)"):
        kernel(Unsaid(on0), Unsaid(on1), Unsaid(on0))
    out1 = tkcuda.empty((256,), "f32", device=1)
    kernel(Unsaid(on1), Unsaid(on1), Unsaid(out1))  # the driver places all three on GPU 1
    np.testing.assert_array_equal(out1.numpy(), np.full(256, 2, np.float32))
    assert [d for d, _, _ in spy.seen] == [1]


def test_gemm_and_stream_k_on_device_1_match_numpy(monkeypatch: pytest.MonkeyPatch, two_gpus: None) -> None:
    """The compiled gemm on GPU 1 through DeviceArrays: TMA descriptors, dynamic shared memory over
    48 KB (the opt-in attribute is set per loaded function), a persistent grid of GPU 1's SM count;
    and stream-K gemm alternating GPU 0 / 1 / 0 (a workspace per device, one launch counter)."""
    import tkir
    from tkir.tools.examples import load_companion

    comp = load_companion("examples/gemm.tk")
    spy = LaunchSpy(monkeypatch)
    pipeline = tkir.api.default_pipeline()
    at = pipeline.index("persistent") + 1
    plain = tkir.compile("examples/gemm.tk")
    split = tkir.compile("examples/gemm.tk", passes=[*pipeline[:at], "stream-k{max_tail=100 min_iters=1}",
                                                     *pipeline[at:]])
    rng = np.random.default_rng(3)
    for k, sizes, devices in ((plain, dict(M=1000, N=744, K=520), (1,)),
                              (split, dict(M=2944, N=1792, K=1024), (0, 1, 0))):
        for device in devices:
            host = comp.make_inputs(rng, sizes, {})
            args = [tkcuda.to_device(a, device=device) for a in host]
            k(*args)
            got = args[2].numpy().astype(np.float64)
            want = comp.reference(host, sizes, {})["C"]
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            assert err <= comp.TOLERANCE, f"{sizes} on GPU {device}: rel err {err:.3e}"
    assert [d for d, _, _ in spy.seen] == [1, 0, 1, 0]


def test_torch_tensors_on_cuda_1_launch_on_gpu_1(vadd_ptx: Callable[[str], str], torch_module: Any,
                                                 monkeypatch: pytest.MonkeyPatch, two_gpus: None) -> None:
    """torch tensors on cuda:1: the launch runs on GPU 1, on torch's current stream of cuda:1, and
    torch's current device stays cuda:0."""
    torch = torch_module
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(VADD_LAUNCH))
    spy = LaunchSpy(monkeypatch)
    torch.cuda.set_device(0)
    a, b = torch.randn(5000, device="cuda:1"), torch.randn(5000, device="cuda:1")
    c = torch.full_like(a, float("nan"))
    side = torch.cuda.Stream(device=1)
    with torch.cuda.stream(side):  # the current stream of cuda:1 (current streams are per device)
        kernel(a, b, c)
    side.synchronize()
    assert torch.equal(c, a + b)
    assert torch.cuda.current_device() == 0
    ((device, ctx, stream),) = spy.seen
    assert device == 1 and ctx == int(tkcuda.primary_context(1)) and stream == side.cuda_stream
