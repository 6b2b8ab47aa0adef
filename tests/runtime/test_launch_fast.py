"""The launch path's caches (backend/runtime.py, tkir/tools/tune.py) on the CPU, against a stand-in driver.

A Kernel validates an argument signature (shapes, strides, dtypes, devices, scalar types) once and keeps
a prepared launch per signature and device; a call with new pointers only reads them, checks what
depends on them (alignment, read-only overlap, scalar ranges, the driver's word on pointers of unknown
device), patches the parameter array and re-encodes the tensor maps whose base address is new. These
tests count `bind` calls and encodings, read the parameter array back at each launch (`Driver`), and
check that whatever a call gets wrong is refused with validate()'s own error before anything reaches
the stand-in GPU. Then tkir.autotune's cache of the chosen kernel per argument shapes, and the
benchmark tool's report (scripts/bench/launch_overhead.py) without a GPU.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tkir.backend import cuda as tkcuda
from tkir.backend import runtime
from tkir.backend.runtime import Kernel, LaunchError

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())  # at any depth of tests/
cu = tkcuda.cu
OK = cu.CUresult.CUDA_SUCCESS
CTX_BASE = 0x1000  # fake CUcontext handles: CTX_BASE + device
BASE = 0x7F00_0000_0000  # made-up device addresses (GPU 0), never dereferenced
MB = 1 << 20
SMS = 132

# A GEMM-shaped launch with every kind of slot a call patches: three tensor maps, three pointers, sizes,
# two user scalars; A and B are read only (through ld.global.nc), C is stored with 16-byte vectors.
LAUNCH: dict[str, Any] = {
    "kernel": "g", "target": "sm_90a",
    "tensors": [{"name": "A", "dtype": "bf16", "dims": ["M", "K"]},
                {"name": "B", "dtype": "bf16", "dims": ["K", "N"]},
                {"name": "C", "dtype": "bf16", "dims": ["M", "N"]}],
    "scalars": [{"name": "alpha", "dtype": "f32"}, {"name": "steps", "dtype": "i32"}],
    "params": [{"name": "A_tma", "kind": "tensor_map", "tma": 0},
               {"name": "B_tma", "kind": "tensor_map", "tma": 1},
               {"name": "C_tma", "kind": "tensor_map", "tma": 2},
               {"name": "A", "kind": "pointer", "dtype": "bf16", "tensor": "A"},
               {"name": "B", "kind": "pointer", "dtype": "bf16", "tensor": "B"},
               {"name": "C", "kind": "pointer", "dtype": "bf16", "tensor": "C"},
               {"name": "M", "kind": "scalar", "dtype": "i32", "size": "M"},
               {"name": "N", "kind": "scalar", "dtype": "i32", "size": "N"},
               {"name": "alpha", "kind": "scalar", "dtype": "f32", "scalar": "alpha"},
               {"name": "steps", "kind": "scalar", "dtype": "i32", "scalar": "steps"}],
    "grid": ["cdiv(M, 128)", "cdiv(N, 256)", "1"], "block": [384, 1, 1], "dynamic_smem": 1024,
    "requires": [{"expr": "K % 64", "equals": 0, "why": "K must be a multiple of BK=64"}],
    "readonly": ["A", "B"],
    "tma": [{"param": "A_tma", "tensor": "A", "rank": 2, "dims": ["K", "M"], "strides": ["K * 2"], "box": [64, 128],
             "swizzle": 128},
            {"param": "B_tma", "tensor": "B", "rank": 2, "dims": ["N", "K"], "strides": ["N * 2"], "box": [64, 64],
             "swizzle": 128},
            {"param": "C_tma", "tensor": "C", "rank": 2, "dims": ["N", "M"], "strides": ["N * 2"], "box": [64, 64],
             "swizzle": 128}],
}


class Driver:
    """The cuda.bindings calls of the runtime on one GPU (a current context per thread, as the driver
    keeps it), the tensor-map encoder, and a record of each launch: the context it ran in, its stream,
    and what its parameter array held (pointers and scalars by value, each tensor map by the base
    address the stand-in encoder wrote into it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, params: list[dict[str, Any]]):
        self.params = params  # the launch description's, to read the parameter array back
        self.current = 0
        self.launches: list[dict[str, Any]] = []
        self.encoded: list[int] = []  # base addresses, one per encoding
        self.set_current = 0  # cuCtxSetCurrent calls
        self.pointer_queries = 0
        self.host = set()  # addresses the driver calls host memory
        self.capturing: set[int] = set()  # streams being captured into a CUDA graph
        self.loads = 0  # cuModuleLoadData calls
        for name in ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
                     "cuCtxSetCurrent", "cuDeviceGetAttribute", "cuModuleLoadData", "cuModuleGetFunction",
                     "cuFuncGetAttribute", "cuFuncSetAttribute", "cuLaunchKernel", "cuPointerGetAttribute",
                     "cuStreamIsCapturing"):
            monkeypatch.setattr(cu, name, getattr(self, name))
        monkeypatch.setattr(runtime, "_driver_encode_tiled", lambda: self.encode)
        monkeypatch.setattr(tkcuda, "pointer_device", lambda ptr: 0)
        tkcuda._driver.cache_clear()
        tkcuda._primary_context.cache_clear()

    def cuInit(self, flags: int) -> tuple:
        return (OK,)

    def cuDeviceGetCount(self) -> tuple:
        return OK, 1

    def cuDeviceGet(self, ordinal: int) -> tuple:
        return OK, ordinal

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple:
        return OK, CTX_BASE + device

    def cuCtxGetCurrent(self) -> tuple:
        return OK, self.current

    def cuCtxSetCurrent(self, ctx: int) -> tuple:
        self.set_current += 1
        self.current = int(ctx)
        return (OK,)

    def cuDeviceGetAttribute(self, attr: Any, device: int) -> tuple:
        return OK, SMS if attr == cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT else 232_448

    def cuModuleLoadData(self, image: bytes) -> tuple:
        self.loads += 1
        return OK, "module"

    def cuStreamIsCapturing(self, stream: int) -> tuple:
        status = cu.CUstreamCaptureStatus
        return OK, status.CU_STREAM_CAPTURE_STATUS_ACTIVE if stream in self.capturing else status.CU_STREAM_CAPTURE_STATUS_NONE

    def cuModuleGetFunction(self, module: Any, name: bytes) -> tuple:
        return OK, "function"

    def cuFuncGetAttribute(self, attr: Any, function: Any) -> tuple:
        return OK, 1024

    def cuFuncSetAttribute(self, function: Any, attr: Any, value: int) -> tuple:
        return (OK,)

    def cuPointerGetAttribute(self, attr: Any, ptr: int) -> tuple:
        self.pointer_queries += 1
        kind = cu.CUmemorytype.CU_MEMORYTYPE_HOST if ptr in self.host else cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
        return OK, kind

    def encode(self, out: int, dtype: int, rank: int, address: int, *rest: Any) -> int:
        """The stand-in encoder writes the base address into the map's first 8 bytes (the driver's bytes
        are opaque: only the driver writes them, here as in the runtime)."""
        assert out % runtime.TENSOR_MAP_ALIGN == 0
        ctypes.c_uint64.from_address(out).value = address
        self.encoded.append(address)
        return 0

    def cuLaunchKernel(self, function: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
                       stream: int, params: int, extra: int) -> tuple:
        entries = (ctypes.c_void_p * len(self.params)).from_address(params)
        held: dict[str, Any] = {}
        for p, where in zip(self.params, entries, strict=True):
            if p["kind"] in ("tensor_map", "pointer"):
                held[p["name"]] = ctypes.c_uint64.from_address(where).value
            elif p["dtype"] == "f32":
                held[p["name"]] = ctypes.c_float.from_address(where).value
            else:
                held[p["name"]] = ctypes.c_int32.from_address(where).value
        self.launches.append({"context": self.current, "stream": stream, "grid": (gx, gy, gz), "params": held})
        return (OK,)


@pytest.fixture
def make_driver(monkeypatch: pytest.MonkeyPatch) -> Any:
    yield lambda params: Driver(monkeypatch, params)
    tkcuda._driver.cache_clear()  # the fake's contexts must not outlive it
    tkcuda._primary_context.cache_clear()


@pytest.fixture
def driver(make_driver: Any) -> Driver:
    return make_driver(LAUNCH["params"])


@pytest.fixture
def binds(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Every bind() call (what validation runs), by its argument count."""
    calls: list[tuple] = []
    real = runtime.bind

    def counting(launch: Any, args: tuple, *rest: Any) -> Any:
        calls.append(args)
        return real(launch, args, *rest)

    monkeypatch.setattr(runtime, "bind", counting)
    return calls


class FakeDevice:
    def __init__(self, index: int = 0):
        self.type, self.index = "cuda", index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.index == self.index

    def __hash__(self) -> int:
        return hash(self.index)


class FakeTensor:
    """What the runtime reads of a torch CUDA tensor (it knows torch by the type's module)."""

    def __init__(self, shape: tuple[int, ...], ptr: int, dtype: str = "torch.bfloat16",
                 strides: tuple[int, ...] | None = None):
        self.shape, self.dtype, self.is_cuda, self.device, self._ptr = tuple(shape), dtype, True, FakeDevice(0), ptr
        if strides is None:
            strides, step = [], 1
            for d in reversed(shape):
                strides.insert(0, step)
                step *= d
        self._strides = tuple(strides)

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return 4 if "float32" in self.dtype else 2


FakeTensor.__module__ = "torch.fake"


def gemm_args(base: int = BASE, M: int = 256, N: int = 512, K: int = 128, alpha: float = 1.5,
              steps: int = 3) -> list[Any]:
    """A, B, C apart in memory from `base`, and the scalars."""
    return [FakeTensor((M, K), base), FakeTensor((K, N), base + 16 * MB), FakeTensor((M, N), base + 32 * MB),
            alpha, steps]


def kernel() -> Kernel:
    return Kernel(".version 8.0\n// the stand-in driver loads anything", copy.deepcopy(LAUNCH))


def error_of(k: Kernel, args: list[Any]) -> str:
    with pytest.raises(LaunchError) as e:
        k.validate(*args)
    return str(e.value)


# --- the signature cache ---------------------------------------------------------------------------


def test_a_new_pointer_does_not_validate_again(driver: Driver, binds: list) -> None:
    k = kernel()
    k(*gemm_args())
    assert len(binds) == 2  # the checks without a driver, then the sizes with the device's SM count
    for i in range(1, 5):
        k(*gemm_args(BASE + i * 64 * MB, alpha=0.5 * i, steps=i))
    assert len(binds) == 2 and len(driver.launches) == 5
    k(*gemm_args(M=384))  # another shape: another signature, validated once
    k(*gemm_args(BASE + 200 * MB, M=384))
    assert len(binds) == 4 and driver.launches[-1]["grid"] == (3, 2, 1)


def test_the_parameter_array_holds_each_calls_pointers_sizes_and_scalars(driver: Driver) -> None:
    k = kernel()
    for i, (alpha, steps) in enumerate([(1.5, 3), (-2.25, 7), (0.125, -1)]):
        base = BASE + i * 64 * MB
        k(*gemm_args(base, alpha=alpha, steps=steps))
        want = {"A": base, "B": base + 16 * MB, "C": base + 32 * MB, "A_tma": base, "B_tma": base + 16 * MB,
                "C_tma": base + 32 * MB, "M": 256, "N": 512, "alpha": alpha, "steps": steps}
        assert driver.launches[-1]["params"] == want
    k(*gemm_args(alpha=2))  # an int for the f32 scalar, as validate() takes it
    assert driver.launches[-1]["params"]["alpha"] == 2.0


def test_only_the_tensor_maps_whose_address_is_new_are_encoded(driver: Driver) -> None:
    k = kernel()
    a, b, c, alpha, steps = gemm_args()
    k(a, b, c, alpha, steps)
    assert driver.encoded == [BASE, BASE + 16 * MB, BASE + 32 * MB]
    k(a, b, c, alpha, steps)
    assert len(driver.encoded) == 3
    fresh = [FakeTensor(c.shape, BASE + (100 + i) * MB) for i in range(3)]
    for out in fresh:  # a fresh output each call: C's map alone is encoded
        k(a, b, out, alpha, steps)
    assert driver.encoded[3:] == [out.data_ptr() for out in fresh]
    for out in [fresh[0], c, fresh[2]]:  # an address the map has seen again (the allocator's reuse)
        k(a, b, out, alpha, steps)
        assert driver.launches[-1]["params"]["C_tma"] == out.data_ptr() == driver.launches[-1]["params"]["C"]
    assert len(driver.encoded) == 6
    many = [FakeTensor(c.shape, BASE + (200 + i) * MB) for i in range(runtime.TENSOR_MAPS_KEPT + 1)]
    for out in many:
        k(a, b, out, alpha, steps)
    k(a, b, c, alpha, steps)  # pushed out of the kept maps by the last ones: encoded again
    assert driver.encoded[-1] == c.data_ptr() and driver.launches[-1]["params"]["C_tma"] == c.data_ptr()


def test_a_failed_encoding_leaves_no_stale_map(driver: Driver) -> None:
    """The map of the call's address is in place before a launch, or the call raises: a failed encoding
    (whose buffer may have been the current map's) is never launched, and the next call encodes again."""
    k = kernel()
    a, b, c, alpha, steps = gemm_args()
    others = [FakeTensor(c.shape, BASE + (100 + i) * MB) for i in range(runtime.TENSOR_MAPS_KEPT - 1)]
    for out in [c, *others, c]:  # C's maps all kept, the current one (c's) the oldest
        k(a, b, out, alpha, steps)
    refuse = BASE + 300 * MB

    def encode(out: int, dtype: int, rank: int, address: int, *rest: Any) -> int:
        if address == refuse:
            ctypes.c_uint64.from_address(out).value = 0xDEAD  # what a failed encoding left there
            return 1
        return driver.encode(out, dtype, rank, address, *rest)

    (sig,) = k._signatures.values()  # the slots hold the encoder they were built with
    for _, tmap in sig.prepared[0].maps:
        tmap._encoder._encode = encode
    launches, encoded = len(driver.launches), len(driver.encoded)
    with pytest.raises(LaunchError, match="cuTensorMapEncodeTiled failed for 'C_tma'"):
        k(a, b, FakeTensor(c.shape, refuse), alpha, steps)
    assert len(driver.launches) == launches
    k(a, b, c, alpha, steps)  # c's map was the buffer the failed encoding took: encoded again
    assert driver.encoded[encoded:] == [c.data_ptr()] and driver.launches[-1]["params"]["C_tma"] == c.data_ptr()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda args: args.__setitem__(1, FakeTensor((128, 512), BASE + 16 * MB, "torch.float32")),
     r"argument 'B' has dtype f32, expected bf16"),
    (lambda args: args.__setitem__(slice(0, 2), [FakeTensor((256, 96), BASE), FakeTensor((96, 512), BASE + 16 * MB)]),
     r"K must be a multiple of BK=64 \(K % 64 is 32"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 512), BASE + 32 * MB, strides=(1, 256))),
     r"argument 'C' is not C-contiguous"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 500), BASE + 32 * MB)),
     r"argument 'C' dim 1 \(N\) is 500, but argument 'B' dim 1 gave N = 512"),
    (lambda args: args.__setitem__(3, "1.5"), "scalar 'alpha' must be a Python float, not str"),
    (lambda args: args.__setitem__(4, 2.0), r"scalar 'steps' must be an int \(i32\), not float"),
    (lambda args: args.pop(), r"g takes 5 arguments \(A, B, C, alpha, steps\), got 4"),
    (lambda args: args.__setitem__(0, [[1.0]]), "argument 'A' must be a GPU tensor"),
], ids=["dtype", "requirement", "strides", "shape", "scalar-type", "int-scalar-type", "count", "not-a-tensor"])
def test_another_signature_is_validated_with_validates_errors(driver: Driver, binds: list, edit: Any,
                                                              message: str) -> None:
    k = kernel()
    k(*gemm_args())
    args = gemm_args(BASE + 64 * MB)
    edit(args)
    want = error_of(k, args)
    assert re.search(message, want), want
    before = len(binds)
    with pytest.raises(LaunchError) as e:
        k(*args)
    assert str(e.value) == want and len(binds) > before
    assert len(driver.launches) == 1


@pytest.mark.parametrize(("edit", "message"), [
    (lambda args: args.__setitem__(0, FakeTensor((256, 128), BASE + 8)),
     "'A' is read by TMA, which needs a 16-byte aligned address"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 512), BASE + 32 * MB + 1)),
     "argument 'C' address .* is not aligned to its 2-byte elements"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 512), BASE + 32 * MB + 2)),
     "'C' is read by TMA, which needs a 16-byte aligned address"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 512), BASE + 16 * MB + 4096)),
     "argument 'C' overlaps 'B', which the kernel only reads"),
    (lambda args: args.__setitem__(2, FakeTensor((256, 512), BASE - 256 * 512 * 2 + 2 * 128)),
     "argument 'C' overlaps 'A'"),
    (lambda args: args.__setitem__(4, 2**31), "scalar 'steps' = 2147483648 does not fit i32"),
], ids=["tma-base", "element", "tma-output", "overlap", "overlap-below", "scalar-range"])
def test_what_depends_on_a_pointer_or_value_is_checked_every_call(driver: Driver, binds: list, edit: Any,
                                                                  message: str) -> None:
    """The signature is known (validated by the first call); the new pointer or value is refused before
    the launch, with validate()'s error, and without encoding anything."""
    k = kernel()
    k(*gemm_args())
    args = gemm_args()
    edit(args)
    want = error_of(k, args)
    assert re.search(message, want), want
    encoded = len(driver.encoded)
    with pytest.raises(LaunchError) as e:
        k(*args)
    assert str(e.value) == want
    assert len(driver.launches) == 1 and len(driver.encoded) == encoded
    k(*gemm_args())  # and the kernel launches the good arguments again
    assert len(driver.launches) == 2


def test_a_pointer_that_does_not_say_its_device_is_asked_of_the_driver_every_call(driver: Driver) -> None:
    """A CUDA Array Interface pointer: host memory behind a signature seen before is still refused."""

    class Cai:
        def __init__(self, shape: tuple[int, ...], ptr: int):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<V2", "data": (ptr, False),
                                             "strides": None, "version": 3}

    k = kernel()
    args = [Cai((256, 128), BASE), Cai((128, 512), BASE + 16 * MB), Cai((256, 512), BASE + 32 * MB), 1.0, 1]
    k(*args)
    k(*args)
    assert driver.pointer_queries == 6 and len(driver.launches) == 2
    driver.host.add(BASE + 64 * MB)
    args[2] = Cai((256, 512), BASE + 64 * MB)
    with pytest.raises(LaunchError, match=r"argument 'C': address 0x7f0004000000 is host memory"):
        k(*args)
    assert len(driver.launches) == 2


def test_the_launch_runs_in_the_devices_context_and_switches_only_when_needed(driver: Driver) -> None:
    k = kernel()
    k(*gemm_args())  # no current context: the device's is made current and left so
    assert driver.launches[-1]["context"] == CTX_BASE and driver.current == CTX_BASE
    switches = driver.set_current
    k(*gemm_args(BASE + 64 * MB))
    assert driver.set_current == switches  # already current: not set again
    driver.current = 0xBEEF  # a context of the caller's
    k(*gemm_args())
    assert driver.launches[-1]["context"] == CTX_BASE and driver.current == 0xBEEF
    assert driver.set_current == switches + 2


def test_torch_tensors_launch_on_torchs_current_stream_read_every_call(driver: Driver,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """With torch tensors and no stream=, each launch goes to torch's current stream of the device at that
    moment (a prepared launch must not keep the stream of its first call); stream= wins."""
    current = {0: 0x51}
    torch = types.ModuleType("torch")
    torch.Tensor = FakeTensor  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: current[device])  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    k = kernel()
    k(*gemm_args())
    current[0] = 0x52
    k(*gemm_args(BASE + 64 * MB))
    k(*gemm_args(), stream=0x99)
    assert [launch["stream"] for launch in driver.launches] == [0x51, 0x52, 0x99]


CAPTURED = 0x77  # a stream handle the fake driver says is being captured into a CUDA graph


def test_a_first_launch_during_capture_is_refused_before_any_driver_setup(driver: Driver) -> None:
    """Loading the module cannot be captured: the first launch on a capturing stream is refused, naming the
    fix, before cuModuleLoadData or cuLaunchKernel; after a warm-up launch the capture takes launches,
    new pointers and a new shape (host work only) included, and the counters of the launches are right."""
    driver.capturing.add(CAPTURED)
    k = kernel()
    with pytest.raises(LaunchError, match="during CUDA graph capture.*once before the capture"):
        k(*gemm_args(), stream=CAPTURED)
    assert driver.loads == 0 and driver.launches == []
    k(*gemm_args(), stream=0x5)  # the warm-up, outside the capture
    k(*gemm_args(BASE + 64 * MB), stream=CAPTURED)
    k(*gemm_args(BASE + 128 * MB, M=384), stream=CAPTURED)  # another signature: prepared during the capture
    assert driver.loads == 1 and [launch["stream"] for launch in driver.launches] == [0x5, CAPTURED, CAPTURED]
    assert driver.launches[-1]["params"]["A"] == BASE + 128 * MB and driver.launches[-1]["grid"] == (3, 2, 1)


def test_a_launch_count_kernel_is_refused_in_a_capture(driver: Driver) -> None:
    """A stream-K kernel's launch count would be frozen into the graph: refused in a capture, launched
    outside one."""
    launch = copy.deepcopy(LAUNCH)
    launch["params"].append({"name": "count", "kind": "launch_count", "dtype": "i32"})
    driver.params = launch["params"]
    k = Kernel(".version 8.0\n// the stand-in driver loads anything", launch)
    k(*gemm_args())
    driver.capturing.add(CAPTURED)
    with pytest.raises(LaunchError, match="launch-count parameter .* cannot be captured"):
        k(*gemm_args(), stream=CAPTURED)
    k(*gemm_args(), stream=0x5)
    assert [launch["params"]["count"] for launch in driver.launches] == [1, 2]


def test_the_cache_keeps_no_argument_alive(driver: Driver) -> None:
    import gc
    import weakref

    k = kernel()
    args = gemm_args()
    ref = weakref.ref(args[2])
    k(*args)
    del args
    gc.collect()
    assert ref() is None


# --- tkir.autotune -------------------------------------------------------------------------------


def test_autotune_keeps_the_kernel_chosen_per_argument_shapes(make_driver: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import tkir
    from tkir.tools import tune

    k = tkir.autotune(str(ROOT / "tests/data/rows/rmsnorm.tk"))
    fake = make_driver(k.compiled({}).launch.to_json()["params"])
    lookups: list[dict] = []
    sizes_of: list[tuple] = []
    real_sizes_of = tune.TunedKernel.sizes_of

    def lookup(path: str, sizes: dict, **kw: Any) -> dict | None:
        lookups.append(dict(sizes))
        return {"ROWS": 8} if sizes["N"] > 256 else None  # a tuned point for the larger bucket

    monkeypatch.setattr(tune, "lookup", lookup)
    monkeypatch.setattr(tune.TunedKernel, "sizes_of", lambda self, args: sizes_of.append(args) or
                        real_sizes_of(self, args))
    mem = iter(range(BASE, BASE + 2**40, 64 * MB))

    def call(n: int) -> None:
        k(FakeTensor((n, 1024), next(mem)), FakeTensor((1024,), next(mem)), FakeTensor((n, 1024), next(mem)))

    call(256)
    call(256)  # new tensors, the same shapes: nothing recomputed
    assert len(sizes_of) == 1 and lookups == [{"N": 256}] and k.last_consts == {}
    call(300)
    assert len(sizes_of) == 2 and lookups[-1] == {"N": 300} and k.last_consts == {"ROWS": 8}
    call(400)  # a new shape in the same bucket (512): its sizes are read, the bucket's choice is not looked up
    assert len(sizes_of) == 3 and len(lookups) == 2 and k.last_consts == {"ROWS": 8}
    call(300)
    call(256)
    assert len(sizes_of) == 3 and k.last_consts == {}
    assert [launch["params"]["N"] for launch in fake.launches] == [256, 256, 300, 400, 300, 256]
    with pytest.raises(LaunchError, match=r"rmsnorm takes 3 arguments \(X, W, Y\), got 2"):
        k(FakeTensor((256, 1024), BASE), FakeTensor((1024,), BASE + 64 * MB))
    with pytest.raises(LaunchError, match="argument 'X' must be a GPU tensor"):
        k([[1.0]], FakeTensor((1024,), BASE + 64 * MB), FakeTensor((256, 1024), BASE + 128 * MB))


def test_autotune_reads_only_the_tensors_that_bind_the_sizes(make_driver: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import tkir
    from tkir.tools import tune

    launch = tkir.compile(str(ROOT / "tests/data/rows/layernorm.tk")).launch
    assert [t.name for t in launch.tensors][:1] == ["X"]
    assert tune._size_readers(launch.tensors) == (0,)  # X gives N and D; W, B and Y add no name

    @dataclasses.dataclass(frozen=True)
    class T:
        name: str
        dims: tuple

    assert tune._size_readers((T("A", ("M", "K")), T("B", ("K", "N")), T("C", ("M", "N")))) == (0, 1)
    # a name inside an expression only: every tensor is read
    assert tune._size_readers((T("X", ("N", 64)), T("Y", ("N", "D / 2")))) == (0, 1)

    monkeypatch.setattr(tune, "lookup", lambda path, sizes, **kw: None)  # no tuned point: the defaults
    k = tkir.autotune(str(ROOT / "tests/data/rows/rmsnorm.tk"))
    make_driver(k.compiled({}).launch.to_json()["params"])
    k(FakeTensor((256, 1024), BASE), FakeTensor((1024,), BASE + 64 * MB), FakeTensor((256, 1024), BASE + 128 * MB))
    # the same X, a Y of another shape: the choice is cached by X's shape, and the launch still refuses Y
    with pytest.raises(LaunchError, match="argument 'Y' dim 0"):
        k(FakeTensor((256, 1024), BASE), FakeTensor((1024,), BASE + 64 * MB), FakeTensor((255, 1024), BASE + 128 * MB))


# --- scripts/bench/launch_overhead.py ------------------------------------------------------------


def _bench() -> Any:
    if "launch_overhead" not in sys.modules:  # registered before it runs: its dataclasses look it up
        spec = importlib.util.spec_from_file_location("launch_overhead", ROOT / "scripts/bench/launch_overhead.py")
        assert spec is not None and spec.loader is not None
        sys.modules["launch_overhead"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["launch_overhead"])
    return sys.modules["launch_overhead"]


def test_bench_table_and_verdicts() -> None:
    lo = _bench()
    rows = [lo.Row("softmax_same", "softmax same", {"tkir": 9.0, "triton": 19.4, "torch": 10.8}),
            lo.Row("softmax_fresh", "softmax fresh", {"tkir": 25.0, "triton": 20.0, "torch": None}, note="n"),
            lo.Row("gemm_fresh", "gemm fresh", {"tkir": 31.0})]
    tuned = [lo.Row("layernorm_autotune", "layernorm", {"autotune": 7.0, "plain": 6.5}),
             lo.Row("rmsnorm_autotune", "rmsnorm", {"autotune": 8.0, "plain": 6.5})]
    report = lo.Report("NVIDIA H100", 2000, 5, rows, tuned, {"tkir softmax": 3e-3})
    table = lo.format_table(rows)
    assert table.splitlines()[0] == "| call | tkir | triton | torch |"
    assert "| softmax fresh (n) | 25.0 us | 20.0 us | - |" in table
    got = {v["what"]: (v["value_us"], v["limit_us"], v["ok"]) for v in lo.verdicts(report)}
    assert got == {"softmax fresh output: tkir <= 1.2x Triton": (25.0, 24.0, False),
                   "gemm fresh output: tkir <= 30 us": (31.0, 30.0, False),
                   "softmax same tensors: tkir <= Triton": (9.0, 19.4, True),
                   "layernorm: autotune <= 1.1x plain": (7.0, 7.15, True),
                   "rmsnorm: autotune <= 1.1x plain": (8.0, 7.15, False)}
    text = lo.format_report(report)
    assert "MISS gemm fresh output" in text and "ok   softmax same tensors" in text and "NVIDIA H100" in text
    assert json.loads(json.dumps(report.as_dict()))["verdicts"][2]["ok"] is True


def test_bench_per_call_time_is_the_median_of_the_rounds() -> None:
    lo = _bench()
    # rounds of 2, 4 and 3 ms over 1000 calls, each timed in chunks of 400, 400 and 200 calls
    ticks = iter([0.0, 0.001, 0.5, 0.5005, 0.7, 0.7005, 1.0, 1.001, 1.5, 1.502, 1.7, 1.701,
                  2.0, 2.001, 2.5, 2.501, 2.7, 2.701])
    calls: list[int] = []
    syncs: list[int] = []
    us = lo.per_call_us(lambda: calls.append(1), 1000, 3, sync=lambda: syncs.append(len(calls)), warmup=10,
                        clock=lambda: next(ticks), chunk=400)
    assert us == pytest.approx(3.0) and len(calls) == 3010
    assert syncs[:4] == [10, 410, 810, 1010]  # no chunk of more than 400 calls between two synchronizations


def test_bench_runs_without_a_gpu(tmp_path: Path) -> None:
    """--fake-driver: the whole tkir side of the table against the stand-in driver (tkir's Python alone);
    the real driver calls are back afterwards."""
    lo = _bench()
    real = cu.cuLaunchKernel
    out = tmp_path / "fake.json"
    assert lo.main(["--fake-driver", "--calls", "3", "--rounds", "1", "--json", str(out)]) == 0
    assert cu.cuLaunchKernel is real
    data = json.loads(out.read_text())
    assert data["fake_driver"] and data["verdicts"] == []
    keys = [r["key"] for r in data["rows"]]
    assert keys == ["softmax_validate", "softmax_same", "softmax_rotated", "softmax_fresh", "gemm_same", "gemm_fresh"]
    assert all(r["us"]["tkir"] > 0 for r in data["rows"])
    assert [r["key"] for r in data["autotune"]] == ["layernorm_autotune", "rmsnorm_autotune"]
