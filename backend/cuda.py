"""Device arrays without torch: allocate, copy to and from numpy, hand to a kernel by CUDA Array Interface.

    x = tkir.backend.cuda.to_device(np.ones((128, 64), ml_dtypes.bfloat16))
    y = tkir.backend.cuda.empty((128, 64), "bf16")
    kernel(x, y); y.numpy()

Also the one place that starts CUDA: `context()` initialises the driver lazily and makes device 0's
primary context current (the context torch uses too), and `check()` turns a CUresult into CudaError.
Nothing here runs at import time, so importing works on machines without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from tkir.diagnostics import TkirError
from tkir.types import NUMPY_DTYPES

CAI_VERSION = 3  # CUDA Array Interface version this module exports
DEVICE = 0  # tkir runs on the first device; multi-GPU is out of scope


class CudaError(TkirError, RuntimeError):
    """A CUDA driver call failed; the message names the call and the CUresult."""


def check(result: Any, what: str) -> Any:
    """Unpack a cuda.bindings result tuple `(CUresult, *values)`; raise CudaError unless CUDA_SUCCESS."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def context() -> Any:
    """Make device 0's primary context current on this thread (contexts are per thread), initialising
    the driver on first use; returns the CUcontext."""
    ctx = _primary_context()
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@functools.cache
def _primary_context() -> Any:
    try:
        result = cu.cuInit(0)
    except Exception as e:  # the bindings raise (not return) when there is no driver library at all
        raise CudaError(f"the CUDA driver is not available: {e}") from None
    check(result, "cuInit")
    count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if count < 1:
        raise CudaError("no CUDA device found")
    device = check(cu.cuDeviceGet(DEVICE), "cuDeviceGet")
    return check(cu.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")


def device_attribute(name: str) -> int:
    """A CUdevice_attribute of device 0 by its short name, e.g. 'MAX_SHARED_MEMORY_PER_BLOCK_OPTIN'."""
    context()
    attr = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    device = check(cu.cuDeviceGet(DEVICE), "cuDeviceGet")
    return int(check(cu.cuDeviceGetAttribute(attr, device), f"cuDeviceGetAttribute({name})"))


def numpy_dtype(dtype: str | np.dtype | type) -> np.dtype:
    """A tkir dtype name ('bf16') or anything numpy accepts (np.float32, ml_dtypes.bfloat16) -> np.dtype."""
    if isinstance(dtype, str) and dtype in NUMPY_DTYPES:
        return NUMPY_DTYPES[dtype]
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}; use one of {', '.join(NUMPY_DTYPES)}") from None


class DeviceArray:
    """A C-contiguous array in device memory, freed when the object is collected."""

    def __init__(self, shape: Sequence[int], dtype: str | np.dtype | type):
        self.shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        self.dtype = numpy_dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.ptr = 0
        if self.nbytes:
            context()
            self.ptr = int(check(cu.cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes} bytes)"))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.ptr, False), "strides": None, "version": CAI_VERSION}

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
            check(cu.cuMemcpyHtoD(self.ptr, src.ctypes.data, self.nbytes), "cuMemcpyHtoD")
        return self

    def numpy(self) -> np.ndarray:
        """A host copy; waits for all work in the context first so a kernel's output is complete."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
            check(cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, ptr={self.ptr:#x})"

    def __del__(self) -> None:
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if not ptr:
            return
        try:
            cu.cuMemFree(ptr)
        except Exception:  # interpreter shutdown or a dead context: nothing left to free into
            pass


def empty(shape: Sequence[int], dtype: str | np.dtype | type) -> DeviceArray:
    """An uninitialised device array."""
    return DeviceArray(shape, dtype)


def to_device(host: np.ndarray) -> DeviceArray:
    """A device copy of a numpy array (made C-contiguous)."""
    src = np.ascontiguousarray(host)
    return DeviceArray(src.shape, src.dtype).copy_from(src)
