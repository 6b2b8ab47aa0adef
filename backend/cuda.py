"""Device arrays without torch: allocate, copy to and from numpy, hand to a kernel by CUDA Array Interface.

    x = tkir.backend.cuda.to_device(np.ones((128, 64), ml_dtypes.bfloat16))         # on GPU 0
    y = tkir.backend.cuda.empty((128, 64), "bf16", device=1)                         # on GPU 1
    kernel(x, y); y.numpy()

Also the one place that starts CUDA. The driver is initialised lazily on first use; each device's
primary context (the context torch and the CUDA runtime use too) is retained once and cached:
`context(device)` makes it current on this thread, `on_device(device)` makes it current for a
`with` block and then restores whatever was current before (so tkir does not move torch's current
device), and `check()` turns a CUresult into CudaError. Nothing here runs at import time, so
importing works on machines without a GPU.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from tkir.diagnostics import TkirError
from tkir.types import NUMPY_DTYPES

CAI_VERSION = 3  # CUDA Array Interface version this module exports
DEFAULT_DEVICE = 0  # where arrays go and launches run when nothing says otherwise (torch's default too)
DEVICE = DEFAULT_DEVICE  # the name it had when tkir used one device (code written then still reads it)
DLPACK_CUDA = 2  # DLDeviceType kDLCUDA (dlpack.h): what __dlpack_device__ reports for device memory


class CudaError(TkirError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUresult."""


# The bounded synchronise: TKIR_SYNC_TIMEOUT=SECONDS makes every wait of tkir's (synchronize,
# DeviceArray.numpy) poll the launches it has made instead of blocking in cuCtxSynchronize, and raise
# SyncTimeout naming the first kernel still running after that long. Unset, empty or 0: wait without a
# limit, as cuCtxSynchronize does (a hung kernel hangs the caller). docs/runtime.md, "Bounded waits".
SYNC_TIMEOUT_ENV = "TKIR_SYNC_TIMEOUT"
SYNC_POLL_FIRST_S = 50e-6  # the first sleep between queries, doubled up to SYNC_POLL_MAX_S: a short
SYNC_POLL_MAX_S = 1e-3     # kernel is seen done within ~2x its time, a long one costs <= 1 ms a query


class SyncTimeout(TkirError, TimeoutError):
    """A bounded synchronise (TKIR_SYNC_TIMEOUT) ran out of time; the message names the kernel still running."""


def check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings result tuple `(CUresult, *values)`; raise CudaError unless CUDA_SUCCESS."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def device_count() -> int:
    """How many CUDA devices the driver sees (initialising it on first use); CudaError without a
    driver or without a device."""
    return _driver()


@functools.cache
def _driver() -> int:
    try:
        result = cu.cuInit(0)
    except Exception as e:  # the bindings raise (not return) when there is no driver library at all
        raise CudaError(f"the CUDA driver is not available: {e}") from None
    check(result, "cuInit")
    count = int(check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))
    if count < 1:
        raise CudaError("no CUDA device found")
    return count


def check_device(device: Any) -> int:
    """`device` as a device ordinal that exists on this machine; CudaError naming the range if not."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise CudaError(f"a device is an int ordinal (0 for the first GPU), not {type(device).__name__}")
    count = _driver()
    if not 0 <= device < count:
        raise CudaError(f"GPU {device} does not exist: this machine has {count} CUDA device"
                        f"{'s' if count > 1 else ''} (0..{count - 1})")
    return device


def _cu_device(device: int) -> Any:
    return check(cu.cuDeviceGet(check_device(device)), "cuDeviceGet")


def primary_context(device: int = DEFAULT_DEVICE) -> Any:
    """The primary context of `device`, retained on first use and kept for the process."""
    return _primary_context(device)


@functools.cache
def _primary_context(device: int) -> Any:
    return check(cu.cuDevicePrimaryCtxRetain(_cu_device(device)), "cuDevicePrimaryCtxRetain")


def context(device: int = DEFAULT_DEVICE) -> Any:
    """Make `device`'s primary context current on this thread (contexts are per thread) and leave it
    current; returns the CUcontext. `on_device` restores the previous one instead."""
    ctx = primary_context(device)
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@contextlib.contextmanager
def on_device(device: int = DEFAULT_DEVICE) -> Iterator[Any]:
    """`with on_device(1): ...` runs the block with device 1's primary context current, then makes the
    thread's previous context current again (when it was another one), so the CUDA runtime's and
    torch's current device stay what the caller set."""
    ctx = primary_context(device)
    previous = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    switch = int(previous) != int(ctx)
    if switch:
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    try:
        yield ctx
    finally:
        if switch:
            check(cu.cuCtxSetCurrent(previous), "cuCtxSetCurrent")


def device_attribute(name: str, device: int = DEFAULT_DEVICE) -> int:
    """A CUdevice_attribute of `device` by its short name, e.g. 'MAX_SHARED_MEMORY_PER_BLOCK_OPTIN'
    (needs the driver, not a current context)."""
    attr = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    return int(check(cu.cuDeviceGetAttribute(attr, _cu_device(device)), f"cuDeviceGetAttribute({name})"))


def pointer_device(ptr: int) -> int:
    """The ordinal of the GPU whose memory `ptr` points into (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).

    Asked of libcuda through ctypes, not through cuda.bindings: on the two-GPU H200 machine
    (2026-12-01, cuda-bindings 13.3 there, 13.4 here) the binding's cuPointerGetAttribute and
    cuPointerGetAttributes both returned 0 for memory allocated in GPU 1's context, while the C
    call returned 1 and CU_POINTER_ATTRIBUTE_CONTEXT named GPU 1's context (docs/runtime.md)."""
    value = ctypes.c_int(-1)
    attr = int(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
    err = _c_pointer_get_attribute()(ctypes.byref(value), attr, int(ptr))
    check(cu.CUresult(err), f"cuPointerGetAttribute(DEVICE_ORDINAL, {int(ptr):#x})")
    return int(value.value)


@functools.cache
def libcuda() -> ctypes.CDLL:
    """The driver library itself, initialised, for the calls made through ctypes rather than
    cuda.bindings (cuTensorMapEncodeTiled into an aligned buffer, cuPointerGetAttribute)."""
    _driver()
    return ctypes.CDLL("libcuda.so.1")


@functools.cache
def _c_pointer_get_attribute() -> Any:
    """CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)."""
    fn = libcuda().cuPointerGetAttribute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    fn.restype = ctypes.c_int
    return fn


def numpy_dtype(dtype: str | np.dtype | type) -> np.dtype:
    """A tkir dtype name ('bf16') or anything numpy accepts (np.float32, ml_dtypes.bfloat16) -> np.dtype."""
    if isinstance(dtype, str) and dtype in NUMPY_DTYPES:
        return NUMPY_DTYPES[dtype]
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}; use one of {', '.join(NUMPY_DTYPES)}") from None


class DeviceArray:
    """A C-contiguous array in the memory of one device (`.device`, an ordinal), freed when the object
    is collected. It exports `__cuda_array_interface__` (v3, which has no device field) and
    `__dlpack_device__` (kDLCUDA, device), which is how tkir's runtime, like other CAI consumers
    that read it (CuPy arrays export both), learns the device without asking the driver."""

    def __init__(self, shape: Sequence[int], dtype: str | np.dtype | type, device: int = DEFAULT_DEVICE):
        self.shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise ValueError(f"device must be a device ordinal (an int >= 0), not {device!r}")
        self.dtype = numpy_dtype(dtype)
        self.device = device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = 0
        if self.nbytes:
            with on_device(device):
                self.ptr = int(check(cu.cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes} bytes on GPU {device})"))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.ptr, False), "strides": None, "version": CAI_VERSION}

    def __dlpack_device__(self) -> tuple[int, int]:
        """(kDLCUDA, device ordinal), as the DLPack protocol says a device; tkir arrays do not export
        `__dlpack__` itself (hand them over by CUDA Array Interface)."""
        return DLPACK_CUDA, self.device

    @property
    def size(self) -> int:
        return self.nbytes // self.dtype.itemsize

    def copy_from(self, host: np.ndarray) -> DeviceArray:
        """Copy a host array of the same shape and dtype into this one (synchronously)."""
        src = np.ascontiguousarray(host)
        if src.shape != self.shape or src.dtype != self.dtype:
            raise ValueError(f"copy_from: host array is {src.dtype}{list(src.shape)}, "
                             f"device array is {self.dtype}{list(self.shape)}")
        if self.nbytes:
            with on_device(self.device):
                check(cu.cuMemcpyHtoD(self.ptr, src.ctypes.data, self.nbytes), "cuMemcpyHtoD")
        return self

    def numpy(self) -> np.ndarray:
        """A host copy; waits for all work in the device's context first so a kernel's output is complete
        (a bounded wait under TKIR_SYNC_TIMEOUT: SyncTimeout names a kernel still running)."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            with on_device(self.device):
                synchronize_current(self.device)
                check(cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, device={self.device}, ptr={self.ptr:#x})"

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if not ptr:
            return
        try:
            with on_device(self.device):
                cu.cuMemFree(ptr)
        except Exception:  # interpreter shutdown or a dead context: nothing left to free into
            pass


def empty(shape: Sequence[int], dtype: str | np.dtype | type, device: int = DEFAULT_DEVICE) -> DeviceArray:
    """An uninitialised array on `device`."""
    return DeviceArray(shape, dtype, device)


def to_device(host: np.ndarray, device: int = DEFAULT_DEVICE) -> DeviceArray:
    """A copy of a numpy array (made C-contiguous) on `device`."""
    src = np.ascontiguousarray(host)
    return DeviceArray(src.shape, src.dtype, device).copy_from(src)


# --- the bounded synchronise ------------------------------------------------------------------------


def sync_timeout() -> float | None:
    """TKIR_SYNC_TIMEOUT in seconds, or None (unset, empty or 0: no limit); CudaError for anything but a
    finite number >= 0, so a typo does not quietly leave the waits unbounded."""
    text = os.environ.get(SYNC_TIMEOUT_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise CudaError(f"{SYNC_TIMEOUT_ENV}={text!r}: expected a number of seconds >= 0 (0 or unset: no limit)")
    return value or None


def wait_until_done(running: Callable[[], str | None], timeout: float, what: str, *,
                    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll `running()` -- the name of the first thing still running, or None once all is done -- until it
    says None; SyncTimeout naming it if it still runs `timeout` seconds after the first query. Sleeps
    between queries, from SYNC_POLL_FIRST_S doubling to SYNC_POLL_MAX_S (never past the deadline)."""
    start = clock()
    pause = SYNC_POLL_FIRST_S
    while True:
        name = running()
        if name is None:
            return
        left = start + timeout - clock()
        if left <= 0:
            raise SyncTimeout(f"{what}: kernel '{name}' is still running after {timeout:g} s "
                              f"({SYNC_TIMEOUT_ENV}={os.environ.get(SYNC_TIMEOUT_ENV, timeout)}); it may be hung")
        sleep(min(pause, left))
        pause = min(2 * pause, SYNC_POLL_MAX_S)


class _Launches:
    """The launches tkir made per device while TKIR_SYNC_TIMEOUT is set: (kernel name, CUevent recorded
    after it on its stream), oldest first. Completed ones are dropped as new ones come, so the list holds
    at most the launches still in flight plus one."""

    def __init__(self) -> None:
        self.pending: dict[int, collections.deque[tuple[str, Any]]] = collections.defaultdict(collections.deque)
        self.lock = threading.Lock()

    def note(self, device: int, name: str, stream: int) -> None:
        """Record an event after `name`'s launch on `stream` (`device`'s context current)."""
        flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        event = check(cu.cuEventCreate(flags), f"cuEventCreate (after {name})")
        check(cu.cuEventRecord(event, stream), f"cuEventRecord (after {name})")
        with self.lock:
            self._first_running(device)
            self.pending[device].append((name, event))

    def first_running(self, device: int) -> str | None:
        with self.lock:
            return self._first_running(device)

    def _first_running(self, device: int) -> str | None:
        """The name of the oldest launch on `device` whose event has not completed (dropping the completed
        ones before it), or None. A failed launch raises CudaError naming its kernel."""
        queue = self.pending[device]
        while queue:
            name, event = queue[0]
            (err,) = cu.cuEventQuery(event)
            if err == cu.CUresult.CUDA_ERROR_NOT_READY:
                return name
            queue.popleft()
            cu.cuEventDestroy(event)
            check((err,), f"{name} on GPU {device} (cuEventQuery)")
        return None


_LAUNCHES = _Launches()


def note_launch(device: int, name: str, stream: int) -> None:
    """Called by the runtime after each cuLaunchKernel (`device`'s context current) on a stream that is not
    being captured into a CUDA graph: under TKIR_SYNC_TIMEOUT, remember it so a bounded synchronise can name
    it; otherwise nothing."""
    if sync_timeout() is not None:
        _LAUNCHES.note(device, name, stream)


def pending_launches(device: int = DEFAULT_DEVICE) -> list[str]:
    """The kernels tkir launched on `device` under TKIR_SYNC_TIMEOUT that no wait has yet seen complete,
    oldest first (the first one still running and everything after it)."""
    with on_device(device), _LAUNCHES.lock:
        _LAUNCHES._first_running(device)
        return [name for name, _ in _LAUNCHES.pending[device]]


def synchronize(device: int = DEFAULT_DEVICE) -> None:
    """Wait for all work in `device`'s context (cuCtxSynchronize). Under TKIR_SYNC_TIMEOUT=S, first poll
    the kernels tkir launched there and raise SyncTimeout naming the first one still running after S
    seconds; work tkir did not launch (torch's) is waited for without a limit."""
    with on_device(device):
        synchronize_current(device)


def synchronize_current(device: int) -> None:
    """`synchronize` with `device`'s context already current."""
    timeout = sync_timeout()
    if timeout is not None:
        wait_until_done(lambda: _LAUNCHES.first_running(device), timeout, f"synchronize GPU {device}")
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
