"""A launch runs on the device its arguments live on (backend/runtime.py, backend/cuda.py), on the CPU.

The device is inferred without a driver where the arguments say it (torch tensors, DLPack devices,
tkir's DeviceArray through `__dlpack_device__`) and mixed devices are refused before any driver
call; the rest runs against `FakeDriver`, a stand-in for the cuda.bindings functions the runtime
calls that keeps a current context per thread the way the driver does and records which device's
context was current at each call. So these tests see, without a GPU, which context a module was
loaded into, which device's SM count sized a grid, where a workspace was allocated, which context a
launch went to, and that the caller's context is current again afterwards. tests/gpu/test_runtime_gpu.py
checks the same on real GPUs (device 1 where there are two).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tkir.backend import cuda as tkcuda
from tkir.backend import runtime
from tkir.backend.runtime import Kernel, LaunchError

cu = tkcuda.cu
OK = cu.CUresult.CUDA_SUCCESS
CTX_BASE = 0x1000  # fake CUcontext handles: CTX_BASE + device
DEVICE_BASE = [0x7F00_0000_0000, 0x7E00_0000_0000]  # fake device addresses of GPU 0 and GPU 1
SMS = [132, 114]  # distinct SM counts, so a grid of NUM_SMS shows whose count was read
SMEM_OPTIN = 232_448

# A launch with everything that is per device: a grid of NUM_SMS blocks, dynamic shared memory over
# the 48 KB default (the opt-in attribute is set per function, so per device), a workspace of
# NUM_SMS entries (allocated in the device's context), a launch counter.
LAUNCH: dict[str, Any] = {
    "kernel": "k", "target": "sm_90a",
    "tensors": [{"name": "X", "dtype": "f32", "dims": ["N"]}, {"name": "Y", "dtype": "f32", "dims": ["N"]}],
    "params": [{"name": "X", "kind": "pointer", "dtype": "f32", "tensor": "X"},
               {"name": "Y", "kind": "pointer", "dtype": "f32", "tensor": "Y"},
               {"name": "n", "kind": "scalar", "dtype": "i32", "size": "N"},
               {"name": "ws", "kind": "workspace", "dtype": "i32", "dims": ["NUM_SMS"]},
               {"name": "count", "kind": "launch_count", "dtype": "i32"}],
    "grid": ["NUM_SMS"], "block": [128], "dynamic_smem": 100_000,
}


class FakeDriver:
    """The cuda.bindings driver calls of backend/cuda.py and backend/runtime.py, on `devices` GPUs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, devices: int = 2):
        self.devices = devices
        self.current = 0  # the thread's current context (0: none), as cuCtxGetCurrent reports it
        self.log: list[tuple[Any, ...]] = []  # (call, device of the current context or None, details)
        self.allocations: dict[int, int] = {}  # pointer -> device
        self.next_ptr = [base + 0x1000_0000 for base in DEVICE_BASE]
        for name in ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
                     "cuCtxSetCurrent", "cuDeviceGetAttribute", "cuModuleLoadData", "cuModuleGetFunction",
                     "cuFuncGetAttribute", "cuFuncSetAttribute", "cuLaunchKernel", "cuPointerGetAttribute",
                     "cuMemAlloc", "cuMemsetD8", "cuMemFree", "cuCtxSynchronize", "cuMemcpyHtoD", "cuMemcpyDtoH",
                     "cuStreamIsCapturing"):
            monkeypatch.setattr(cu, name, getattr(self, name))
        monkeypatch.setattr(runtime, "_driver_encode_tiled", lambda: None)  # no tensor maps here
        # tkcuda.pointer_device asks libcuda through ctypes (the binding's answer is wrong on 2 GPUs)
        monkeypatch.setattr(tkcuda, "pointer_device", lambda ptr: self.pointer_device(ptr))
        tkcuda._driver.cache_clear()
        tkcuda._primary_context.cache_clear()

    def _device(self) -> int | None:
        return None if not self.current else self.current - CTX_BASE

    def calls(self, name: str) -> list[tuple[Any, ...]]:
        return [entry for entry in self.log if entry[0] == name]

    def cuInit(self, flags: int) -> tuple:
        return (OK,)

    def cuDeviceGetCount(self) -> tuple:
        return OK, self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple:
        assert 0 <= ordinal < self.devices, "the runtime asked for a device that does not exist"
        return OK, ordinal

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple:
        self.log.append(("retain", None, device))
        return OK, CTX_BASE + device

    def cuCtxGetCurrent(self) -> tuple:
        return OK, self.current

    def cuCtxSetCurrent(self, ctx: int) -> tuple:
        self.current = int(ctx)
        return (OK,)

    def cuDeviceGetAttribute(self, attr: Any, device: int) -> tuple:
        self.log.append(("attribute", self._device(), attr.name, device))
        if attr == cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
            return OK, SMS[device]
        assert attr == cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        return OK, SMEM_OPTIN

    def cuStreamIsCapturing(self, stream: int) -> tuple:
        assert self.current, "cuStreamIsCapturing needs a current context"
        return OK, cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE  # no CUDA graph here

    def cuModuleLoadData(self, image: bytes) -> tuple:
        assert self.current, "cuModuleLoadData needs a current context"
        self.log.append(("load", self._device()))
        return OK, ("module", self._device())

    def cuModuleGetFunction(self, module: tuple, name: bytes) -> tuple:
        return OK, ("function", module[1])

    def cuFuncGetAttribute(self, attr: Any, function: tuple) -> tuple:
        return OK, 1024

    def cuFuncSetAttribute(self, function: tuple, attr: Any, value: int) -> tuple:
        self.log.append(("set_smem", self._device(), function[1], value))
        return (OK,)

    def cuLaunchKernel(self, function: tuple, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       smem: int, stream: int, params: int, extra: int) -> tuple:
        assert function[1] == self._device(), "a function launched in another device's context"
        self.log.append(("launch", self._device(), (gx, gy, gz), stream))
        return (OK,)

    def cuPointerGetAttribute(self, attr: Any, ptr: int) -> tuple:
        if attr == cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            return OK, cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        raise AssertionError("the device ordinal is asked through tkcuda.pointer_device, not the binding "
                             "(cuda-bindings answered 0 for GPU 1's memory on the H200 x2 machine)")

    def pointer_device(self, ptr: int) -> int:
        self.log.append(("pointer_device", self._device(), ptr))
        return 1 if ptr < DEVICE_BASE[0] else 0  # GPU 1's fake addresses sit below GPU 0's

    def cuMemAlloc(self, nbytes: int) -> tuple:
        device = self._device()
        assert device is not None, "cuMemAlloc needs a current context"
        ptr = self.next_ptr[device]
        self.next_ptr[device] += (nbytes + 255) // 256 * 256
        self.allocations[ptr] = device
        self.log.append(("alloc", device, nbytes))
        return OK, ptr

    def cuMemsetD8(self, ptr: int, value: int, nbytes: int) -> tuple:
        assert self.allocations[ptr] == self._device()
        return (OK,)

    def cuMemFree(self, ptr: int) -> tuple:
        self.log.append(("free", self._device(), self.allocations.pop(ptr)))
        return (OK,)

    def cuCtxSynchronize(self) -> tuple:
        self.log.append(("sync", self._device()))
        return (OK,)

    def cuMemcpyHtoD(self, ptr: int, host: int, nbytes: int) -> tuple:
        self.log.append(("htod", self._device(), self.allocations[ptr]))
        return (OK,)

    def cuMemcpyDtoH(self, host: int, ptr: int, nbytes: int) -> tuple:
        self.log.append(("dtoh", self._device(), self.allocations[ptr]))
        return (OK,)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDriver]:
    fake = FakeDriver(monkeypatch)
    yield fake
    tkcuda._driver.cache_clear()  # the fake's contexts must not outlive it
    tkcuda._primary_context.cache_clear()


class DevCAI:
    """A CUDA Array Interface object at a made-up address, saying its device by `__dlpack_device__`
    when `device` is given (as tkir's DeviceArray and CuPy arrays do) and not saying it otherwise."""

    def __init__(self, n: int, device: int | None, ptr: int | None = None, typestr: str = "<f4"):
        base = DEVICE_BASE[device or 0]
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr, "data": (ptr or base, False),
                                         "strides": None, "version": 3}
        if device is not None:
            self.__dlpack_device__ = lambda: (tkcuda.DLPACK_CUDA, device)


class FakeDevice:
    def __init__(self, index: int):
        self.type, self.index = "cuda", index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.index == self.index

    def __hash__(self) -> int:
        return hash(self.index)


class FakeTensor:
    """What the runtime reads of a torch CUDA tensor (it recognises torch by the type's module)."""

    def __init__(self, n: int, device: int, ptr: int | None = None):
        self.shape, self.dtype, self.is_cuda = (n,), "torch.float32", True
        self.device = FakeDevice(device)
        self._ptr = ptr if ptr is not None else DEVICE_BASE[device]

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self) -> tuple[int, ...]:
        return (1,)

    def element_size(self) -> int:
        return 4


FakeTensor.__module__ = "torch.fake"


def kernel() -> Kernel:
    return Kernel(".version 8.0\n// no real PTX: the fake driver loads anything", copy.deepcopy(LAUNCH))


# --- without a driver --------------------------------------------------------------------------------


def test_validate_infers_the_device_without_a_driver() -> None:
    k = kernel()
    assert k.validate(DevCAI(256, 1), DevCAI(256, 1, ptr=DEVICE_BASE[1] + 4096)).device == 1
    assert k.validate(FakeTensor(256, 1), FakeTensor(256, 1, ptr=DEVICE_BASE[1] + 4096)).device == 1
    assert k.validate(DevCAI(256, 0), DevCAI(256, None)).device == 0  # the other one is asked at launch
    assert k.validate(DevCAI(256, None), DevCAI(256, None)).device is None


@pytest.mark.parametrize("args", [
    lambda: (DevCAI(256, 0), DevCAI(256, 1)),
    lambda: (FakeTensor(256, 0), FakeTensor(256, 1)),
    lambda: (FakeTensor(256, 0), DevCAI(256, 1)),
], ids=["dlpack-device", "torch", "torch-and-dlpack-device"])
def test_mixed_devices_are_refused_naming_each_argument(args: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    message = r"k: arguments are on different GPUs \('X' on GPU 0, 'Y' on GPU 1\); a kernel runs on one device"
    with pytest.raises(LaunchError, match=message):
        kernel().validate(*args())

    def no_driver(flags: int) -> Any:
        raise AssertionError("a driver call before the argument checks")

    monkeypatch.setattr(cu, "cuInit", no_driver)
    tkcuda._driver.cache_clear()
    tkcuda._primary_context.cache_clear()
    try:
        with pytest.raises(LaunchError, match=message):  # __call__ too: before any driver call
            kernel()(*args())
    finally:
        tkcuda._driver.cache_clear()
        tkcuda._primary_context.cache_clear()


def test_device_arrays_say_their_device_without_a_driver() -> None:
    empty = tkcuda.DeviceArray((0, 16), "bf16", device=3)  # zero bytes: nothing allocated, no driver
    assert empty.device == 3 and empty.__dlpack_device__() == (tkcuda.DLPACK_CUDA, 3)
    assert "device=3" in repr(empty)
    assert tkcuda.DeviceArray((0,), "f32").device == tkcuda.DEFAULT_DEVICE == 0
    arg = runtime.describe_array(empty, "argument")
    assert arg.device_index == 3 and arg.kind == "cuda_array_interface"
    with pytest.raises(ValueError, match="device must be a device ordinal"):
        tkcuda.DeviceArray((0,), "f32", device=-1)


# --- with the fake driver ----------------------------------------------------------------------------


def test_a_launch_runs_in_the_context_of_the_arguments_device(driver: FakeDriver) -> None:
    k = kernel()
    driver.current = CTX_BASE + 0  # the caller (torch, say) has GPU 0 current
    k(DevCAI(256, 1), DevCAI(256, 1, ptr=DEVICE_BASE[1] + 4096))
    (load,) = driver.calls("load")
    assert load == ("load", 1)
    assert driver.calls("set_smem") == [("set_smem", 1, 1, 100_000)]
    sms = [e for e in driver.calls("attribute") if e[2].endswith("MULTIPROCESSOR_COUNT")]
    assert [e[3] for e in sms] == [1]  # GPU 1's SM count sized the grid
    assert driver.calls("alloc") == [("alloc", 1, 4 * SMS[1])]  # the workspace: NUM_SMS i32 on GPU 1
    assert driver.calls("launch") == [("launch", 1, (SMS[1], 1, 1), 0)]
    assert driver.current == CTX_BASE + 0  # the caller's context is current again


def test_the_module_is_loaded_once_per_device(driver: FakeDriver) -> None:
    k = kernel()
    on0 = (FakeTensor(256, 0), FakeTensor(256, 0, ptr=DEVICE_BASE[0] + 4096))
    on1 = (FakeTensor(256, 1, ptr=DEVICE_BASE[0]), FakeTensor(256, 1, ptr=DEVICE_BASE[0] + 4096))
    k(*on0)
    k(*on1)  # the same pointers and shapes on another device: the device is part of the launch cache key
    k(*on0)
    k(*on1)
    assert [e[1] for e in driver.calls("load")] == [0, 1]
    assert [e[1] for e in driver.calls("alloc")] == [0, 1]  # one workspace per device
    assert [(e[1], e[2]) for e in driver.calls("launch")] == [(0, (132, 1, 1)), (1, (114, 1, 1)),
                                                              (0, (132, 1, 1)), (1, (114, 1, 1))]
    # the first launch found no current context and left GPU 0's; the launches on GPU 1 put it back
    assert driver.current == CTX_BASE + 0


def test_pointers_that_do_not_say_their_device_are_asked_of_the_driver(driver: FakeDriver) -> None:
    k = kernel()
    k(DevCAI(256, None, ptr=DEVICE_BASE[1]), DevCAI(256, None, ptr=DEVICE_BASE[1] + 4096))
    assert driver.calls("launch")[0][1] == 1
    with pytest.raises(LaunchError, match=r"arguments are on different GPUs \('X' on GPU 0, 'Y' on GPU 1\)"):
        k(DevCAI(256, None, ptr=DEVICE_BASE[0]), DevCAI(256, None, ptr=DEVICE_BASE[1]))
    with pytest.raises(LaunchError, match=r"argument 'Y' says it is on GPU 0 \(__dlpack_device__\), but its "
                                          r"address 0x7e0000001000 is memory of GPU 1"):
        k(DevCAI(256, 0), DevCAI(256, 0, ptr=DEVICE_BASE[1] + 4096))
    assert len(driver.calls("launch")) == 1


def test_device_arrays_live_on_their_device(driver: FakeDriver) -> None:
    driver.current = CTX_BASE + 0
    x = tkcuda.to_device(np.arange(8, dtype=np.float32), device=1)
    assert x.device == 1 and driver.allocations[x.ptr] == 1
    assert driver.calls("alloc") == [("alloc", 1, 32)] and driver.calls("htod") == [("htod", 1, 1)]
    x.numpy()
    assert driver.calls("sync") == [("sync", 1)]  # the wait is for GPU 1's work
    ptr = x.ptr
    del x
    assert driver.calls("free") == [("free", 1, 1)] and ptr not in driver.allocations
    assert driver.current == CTX_BASE + 0  # none of it moved the caller's context
    assert tkcuda.device_attribute("MULTIPROCESSOR_COUNT", device=1) == SMS[1]
    assert tkcuda.device_count() == 2
    with pytest.raises(tkcuda.CudaError, match=r"GPU 2 does not exist: this machine has 2 CUDA devices \(0\.\.1\)"):
        tkcuda.empty((4,), "f32", device=2)
    k = kernel()
    a, b = tkcuda.empty((64,), "f32", device=1), tkcuda.empty((64,), "f32", device=1)
    k(a, b)
    assert driver.calls("launch")[-1][1] == 1
    with pytest.raises(LaunchError, match=r"'X' on GPU 0, 'Y' on GPU 1"):
        k(tkcuda.empty((64,), "f32", device=0), b)


def test_context_switches_and_on_device_restores(driver: FakeDriver) -> None:
    assert tkcuda.context(1) == CTX_BASE + 1 and driver.current == CTX_BASE + 1
    with tkcuda.on_device(0) as ctx:
        assert ctx == CTX_BASE + 0 and driver.current == CTX_BASE + 0
    assert driver.current == CTX_BASE + 1
    tkcuda.primary_context(1)
    tkcuda.primary_context(1)
    assert [e[2] for e in driver.calls("retain")] == [1, 0]  # each device's primary context retained once
