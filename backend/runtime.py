"""Load a compiled kernel and launch it through the CUDA driver (cuda-python), checking every argument first.

    kernel = Kernel(ptx_or_cubin, launch)      # a LaunchDescription, or its `--emit launch` JSON (dict or text)
    kernel(A, B, C)                            # torch tensors, __cuda_array_interface__ or DLPack objects
    kernel.validate(A, B, C)                   # the checks alone -> Bound; touches no GPU

The launch description (tkir.backend.launch.LaunchDescription, checked once when the Kernel is built)
says which user arguments the kernel takes (tensors with symbolic dims, then scalars), how they map to
PTX parameters (tensor maps, pointers, scalars, sizes), the grid as size expressions (tkir.symexpr),
the block, the dynamic shared memory, the shape requirements, and one TMA descriptor spec per tensor
map. `validate` binds the size names from the argument shapes and
rejects, with a LaunchError naming the argument, anything that would crash or compute garbage:
wrong count, dtype, rank, shape, unmet requirements, host memory, non-contiguous strides, TMA
alignment, arguments on different GPUs, wrong scalar types. `__call__` then runs on the device the
tensors live on: it makes that device's primary context current for the launch (restoring the
thread's previous one), loads the module once per device, encodes the tensor maps from the real
pointers (cuTensorMapEncodeTiled into a 128-byte-aligned buffer, HOPPER.md §4.5) and calls
cuLaunchKernel on torch's current stream of that device (or the given one).

A call costs a few microseconds of Python because the work is cached in two levels. Per argument
signature (every tensor's shape, strides, dtype and device, every scalar's type: all that `bind` reads
but the pointers and the scalars' values), `bind` runs once and its findings are kept (`_Signature`),
and per signature and device a prepared launch (`_Prepared`): the function, grid, block, shared memory
and a parameter array with every value filled in but the pointers and scalars, and the tensor-map
encoder's arguments built but for the base address. A call reads the tensors (torch tensors through
`data_ptr()`, `shape`, `stride()`, `dtype`, `device`; other objects through describe_array), checks what
depends on the pointers and values (alignment, read-only overlap, scalar ranges, the driver's word on
pointers that do not say their device), writes the pointers and scalars into the parameter array,
points each tensor map at the map of its base address (encoded when that address is new to it), and
launches. A check that fails hands the arguments to `bind`, so the error is the one `validate` gives.

Unaligned rows: a kernel given `variant` (tkir.compile's, through CompiledKernel.launcher) launches a call
whose rows or base addresses of the description's `unaligned` tensors do not fit its vector pieces (a
refusal of this kernel's `requires` or `aligned` checks) through its variant with the widest pieces they
fit, compiled on first use and kept (an UnalignedRowsWarning says so once); a signature whose row pitches
need it goes there straight from then on. Aligned calls never reach that code: the fast path is the one
above, and the variant's PTX is only ever built for a call that needs it.

CUDA graphs: a launch on a stream that torch.cuda.graph (or cuStreamBeginCapture) is capturing becomes
a kernel node. cuLaunchKernel copies the parameter values (each pointed-to by the parameter array,
the 128-byte tensor maps included) into the node when it is called, as it copies them for a plain
launch, so the next call may patch the same array and re-encode a map's buffer without touching the
captured node. Module loading and workspace allocation (cuMemAlloc, cuMemsetD8, cuCtxSynchronize) are
not legal during a capture: a launch that would need them (the first on a device) is refused with a
LaunchError asking for a warm-up launch before the capture; a kernel with a launch-count parameter
(stream-K) is refused too, since every replay would see the count of the capture (docs/torch.md).
"""

from __future__ import annotations

import ctypes
import functools
import math
import numbers
import re
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cuda.bindings import driver as cu

from tkir import symexpr
from tkir.backend import cuda as tkcuda
from tkir.backend.cuda import CudaError, check
from tkir.backend.launch import (
    Alignment,
    LaunchCountParam,
    LaunchDescription,
    LaunchError,
    PointerParam,
    ScalarArg,
    ScalarParam,
    SizeParam,
    TensorArg,
    TensorMapParam,
    TmaSpec,
    WorkspaceParam,
    read_launch,
)
from tkir.diagnostics import TkirWarning
from tkir.requires import requirement_failure, unaligned_piece
from tkir.target import MAX_GRID, NUM_SMS, TMA_MAX_DIM, TMA_MAX_STRIDE
from tkir.target import TMA_STRIDE_ALIGN as TMA_ALIGN
from tkir.types import DTYPE_BYTES

# --- limits (CUDA driver API / HOPPER.md §0, §4.1, §7.3) ------------------------------------------
STATIC_SMEM_LIMIT = 48 * 1024  # bytes of dynamic smem a kernel may use without the opt-in attribute
TENSOR_MAP_BYTES = 128  # CU_TENSOR_MAP_NUM_QWORDS * 8
TENSOR_MAP_ALIGN = 128  # the driver asks 64; CUDA 13 headers declare alignas(128), so satisfy both
I32_RANGE = (-(2**31), 2**31 - 1)
U32_RANGE = (0, 2**32 - 1)
I64_RANGE = (-(2**63), 2**63 - 1)
SCALAR_RANGES = {"i32": I32_RANGE, "u32": U32_RANGE, "i64": I64_RANGE}  # of the integer scalar dtypes
CUDA_SUCCESS = cu.CUresult.CUDA_SUCCESS

# --- enum values of the cuTensorMapEncodeTiled arguments (cuda.h / HOPPER.md §4.1) -----------------
# (keyed by the values tkir.backend.launch accepts: TMA_DTYPES, TMA_SWIZZLES, ...)
TMA_DTYPES = {  # CUtensorMapDataType; fp8 has no enum, CUTLASS encodes it as UINT8
    "bf16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    "f16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    "f32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    "i32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT32,
    "u32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT32,
    "e4m3": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
    "e5m2": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
}
TMA_SWIZZLES = {
    0: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
    32: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
    64: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
    128: cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
}
TMA_L2_PROMOTIONS = {
    0: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
    64: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
    128: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    256: cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
}
TMA_OOB_FILLS = {
    "zero": cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    "nan": cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
}
TMA_INTERLEAVE_NONE = cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE

# Kernel-parameter ctypes of scalar dtypes.
SCALAR_CTYPES: dict[str, Any] = {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64,
                                 "f32": ctypes.c_float}

# Names of dtypes in numpy / ml_dtypes / torch -> tkir dtype names.
FOREIGN_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "int32": "i32", "uint32": "u32",
                  "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
# CUDA Array Interface typestr (byte order stripped) -> tkir dtype. bf16 and fp8 have no standard
# typestr; these are what numpy reports for ml_dtypes' bfloat16 ('V2'), float8_e4m3fn ('V1') and
# float8_e5m2 ('f1'), which tkir.backend.cuda.DeviceArray exports.
CAI_TYPESTRS = {"f4": "f32", "f2": "f16", "i4": "i32", "u4": "u32", "V2": "bf16", "V1": "e4m3", "f1": "e5m2"}
DLPACK_CUDA, DLPACK_CUDA_MANAGED = 2, 13  # DLDeviceType values that are GPU memory
DEVICE_MEMORY_TYPES = (int(cu.CUmemorytype.CU_MEMORYTYPE_DEVICE), int(cu.CUmemorytype.CU_MEMORYTYPE_UNIFIED))


@dataclass
class ArrayArg:
    """What the runtime needs to know about one tensor argument, whatever object it came as."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    dtype: str  # a tkir dtype name, or the foreign name when it has none
    on_device: bool | None  # None: a CUDA Array Interface pointer, checked with the driver at launch
    device_index: int | None  # the GPU it lives on; None: not said (CAI), asked of the driver at launch
    kind: str  # "torch", "cuda_array_interface", "dlpack"
    obj: Any = field(repr=False, default=None)  # keeps the memory alive until the launch

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES.get(self.dtype, 1)


@dataclass
class TmaArgs:
    """The arguments of one cuTensorMapEncodeTiled call, evaluated for the bound sizes."""

    param: str
    tensor: str
    dtype: str
    address: int
    dims: list[int]  # innermost first
    strides: list[int]  # bytes, rank-1 entries, innermost first
    box: list[int]
    elem_strides: list[int]
    swizzle: int
    l2_promotion: int
    oob_fill: str

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass
class Bound:
    """A validated call: sizes bound from shapes, launch geometry, and one value per PTX parameter."""

    sizes: dict[str, int]
    tensors: dict[str, ArrayArg]
    scalars: dict[str, int | float]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_smem: int
    tma: list[TmaArgs]
    params: list[tuple[str, Any]]  # (kind, value): ("tensor_map", TmaArgs), ("pointer", int), (dtype, number)
    device: int | None = None  # the GPU every tensor argument that says its device is on (None: none says)


class UnalignedRowsWarning(TkirWarning):
    """A call whose rows (or base addresses) do not fit a kernel's vector pieces is launched by the kernel's
    variant with narrower pieces (said once per variant, when it is compiled)."""


class Kernel:
    """A compiled kernel: PTX text or cubin bytes plus its launch description.

    `variant(piece)`, where given, makes the same kernel with its register rows copied in pieces of at most
    `piece` bytes (tkir.compile's kernels give CompiledKernel.variant's launcher): a call whose rows or
    bases of the description's `unaligned` tensors do not fit this kernel's pieces is launched by that
    variant (compiled on first use, then kept) instead of refused; `choose` says which kernel a call takes."""

    def __init__(self, image: str | bytes, launch: LaunchDescription | dict | str,
                 variant: Callable[[int], Kernel] | None = None):
        self.launch = read_launch(launch)  # checked here, once: a LaunchError names the bad field
        self.name: str = self.launch.kernel
        self.image = image
        # Module and function handles belong to a context, so the module is loaded once per device.
        self._functions: dict[int, Any] = {}  # device -> CUfunction
        self._modules: dict[int, Any] = {}  # device -> CUmodule (kept loaded)
        self._signatures: dict[tuple, _Signature] = {}  # argument signature -> what its validation found
        self._workspaces: dict[tuple[int, str], tuple[int, int]] = {}  # (device, name) -> (pointer, bytes)
        self._launches = 0  # what `launch_count` params see: 1 on the first launch, then 2, ...
        self._lock = threading.Lock()  # a prepared launch's parameter buffer is patched, then launched
        tensors, scalars = self.launch.tensors, self.launch.scalars
        self._tensor_count = len(tensors)
        self._arg_count = len(tensors) + len(scalars)
        self._what = tuple(f"{self.name}: argument '{t.name}'" for t in tensors)
        self._scalar_ranges = tuple(None if s.dtype == "f32" else SCALAR_RANGES[s.dtype] for s in scalars)
        # the unaligned-row variants: tensor -> the bytes this kernel copies its rows in; piece -> variant
        self._pieces = {a.tensor: a.bytes for a in self.launch.aligned if a.tensor in self.launch.unaligned}
        self._make_variant = variant if self._pieces else None
        self._variants: dict[int, Kernel] = {}
        self._unaligned_keys: dict[tuple, None] = {}  # signatures whose row pitches need a variant

    def __repr__(self) -> str:
        return f"Kernel({self.name!r})"

    def validate(self, *args: Any) -> Bound:
        """Check the arguments against the launch description and bind the sizes; needs no GPU."""
        return bind(self.launch, args)

    def choose(self, *args: Any) -> Kernel:
        """The kernel a call with these arguments launches: this one, or, where the rows or base addresses
        of its `unaligned` tensors do not fit its vector pieces and it has variants, the variant with the
        widest pieces they fit (compiled on first use). Needs no GPU; the chosen kernel's own checks run
        when it is called (`choose(*args).validate(*args)`)."""
        piece = self._row_piece(args, pointers=True)
        return self if piece is None else self._variant(piece, stacklevel=3)

    def _row_piece(self, args: tuple[Any, ...], pointers: bool) -> int | None:
        """The piece a variant must copy this call's rows in (tkir.requires.unaligned_piece), the base
        addresses counted or not; None: this kernel's pieces fit, it has no variants, or the arguments
        are not ones a variant could take (bind says why)."""
        if self._make_variant is None or len(args) != self._arg_count:
            return None
        tensors: dict[str, tuple[int, tuple[int, ...], tuple[int, ...], int]] = {}
        for i, t in enumerate(self.launch.tensors):
            if t.name in self._pieces:
                try:
                    a = describe_array(args[i], self._what[i])
                except LaunchError:
                    return None
                if a.dtype != t.dtype:  # bind's dtype error, not one a variant could lift
                    return None
                tensors[t.name] = (a.ptr if pointers else 0, a.shape, a.strides, DTYPE_BYTES[t.dtype])
        return unaligned_piece(self._pieces, tensors)

    def _variant(self, piece: int, stacklevel: int = 4) -> Kernel:
        """The variant with pieces of at most `piece` bytes, made once (a warning says so)."""
        k = self._variants.get(piece)
        if k is None:
            assert self._make_variant is not None
            k = self._variants[piece] = self._make_variant(piece)
            widest = max(self._pieces.values())
            warnings.warn(f"{self.name}: rows or base addresses of {', '.join(self.launch.unaligned)} do not fit its "
                          f"{widest}-byte vector accesses; launching its variant in {piece}-byte pieces "
                          f"(infer-layouts{{max_vec_bytes={piece}}}, compiled once; rows that start {widest}-byte "
                          "aligned take the faster kernel)", UnalignedRowsWarning, stacklevel=stacklevel)
        return k

    def _unaligned_call(self, args: tuple[Any, ...], stream: Any, key: tuple | None = None) -> None:
        """A call this kernel refuses: launched by a variant where its rows or bases do not fit this kernel's
        pieces (a signature whose row pitches do not fit goes there straight next time), else refused
        with bind's error."""
        piece = self._row_piece(args, pointers=True)
        if piece is None:
            raise self._refused(args)
        if key is not None and self._row_piece(args, pointers=False) is not None:
            if len(self._unaligned_keys) >= SIGNATURE_CACHE:
                self._unaligned_keys.pop(next(iter(self._unaligned_keys)))
            self._unaligned_keys[key] = None
        self._variant(piece)(*args, stream=stream)

    def __call__(self, *args: Any, stream: int | Any | None = None) -> None:
        """Launch on the device the tensor arguments live on (asynchronously, on `stream`, else on torch's
        current stream of that device when any argument is a torch tensor, else the legacy default
        stream of that device's primary context).

        The checks of `validate` that depend on shapes, strides, dtypes, devices and scalar types run once
        per argument signature (`_Signature`); what depends on the pointers and scalar values runs at every
        call (alignment, read-only overlap, scalar ranges, the driver's word on pointers that do not say
        their device). Anything refused is refused by `bind`, so the error is the one `validate` gives,
        except rows or bases that do not fit the kernel's vector pieces where it has variants: those run
        the variant `choose` names."""
        try:
            key, ptrs, arrays = self._read(args)
        except LaunchError:  # bind's own error below, not raised inside this handler
            key = None
        if key is None:
            raise self._refused(args)
        sig = self._signatures.get(key)
        if sig is None:
            if key in self._unaligned_keys:
                return self._unaligned_call(args, stream)
            try:
                sig = self._new_signature(args, key)
            except LaunchError:
                if self._make_variant is None:
                    raise
                return self._unaligned_call(args, stream, key)
        for i, align in sig.aligns:
            if ptrs[i] % align:
                return self._unaligned_call(args, stream)
        for i, j, i_bytes, j_bytes in sig.overlaps:
            if ptrs[i] < ptrs[j] + j_bytes and ptrs[j] < ptrs[i] + i_bytes:
                raise self._refused(args)
        scalars = self._scalar_values(args) if self._scalar_ranges else ()
        device = sig.device if not sig.unsure else self._ask_device(sig, ptrs, arrays)
        if stream is None:
            handle = sig.torch_stream(device) if sig.torch_stream is not None else 0
        else:
            handle = _stream_handle(stream)
        prepared = sig.prepared.get(device)
        if prepared is None:
            prepared = self._prepare(args, sig, device, handle)
        with self._lock:
            for i, slot in prepared.pointers:
                slot.value = ptrs[i]
            for i, tmap in prepared.maps:
                if ptrs[i] != tmap.address:
                    tmap.point_at(ptrs[i])
            for j, slot in prepared.scalars:
                slot.value = scalars[j]
            self._launch(prepared, handle)

    def _launch(self, p: _Prepared, stream: int) -> None:
        """cuLaunchKernel of a patched launch. The launch goes to the current context: make the device's
        current, then put back the caller's (torch's current device must not move), unless the thread had
        none. The caller's context is asked every call (anyone may have changed it); it is set only when
        it is another one. A kernel with a launch count gets the next count here, or is refused on a stream
        being captured."""
        err, previous = cu.cuCtxGetCurrent()
        if err != CUDA_SUCCESS:
            check((err,), "cuCtxGetCurrent")
        switch = int(previous) != p.context_id
        if switch:
            check(cu.cuCtxSetCurrent(p.context), "cuCtxSetCurrent")
        try:
            if p.counters:
                if stream_capturing(stream):
                    raise LaunchError(f"{self.name}: a kernel with a launch-count parameter (stream-K) cannot be "
                                      "captured in a CUDA graph: each replay would see the count of the capture, "
                                      "which its workspace flags already hold; launch it outside the graph")
                self._launches += 1
                for c in p.counters:
                    c.value = self._launches
            (err,) = cu.cuLaunchKernel(p.function, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1],
                                       p.block[2], p.smem, stream, p.params_address, 0)
            if err != CUDA_SUCCESS:
                check((err,), f"cuLaunchKernel({self.name} on GPU {p.device})")
            if tkcuda.sync_timeout() is not None and not stream_capturing(stream):  # a captured launch runs later
                tkcuda.note_launch(p.device, self.name, stream)
        finally:
            if switch and int(previous):
                check(cu.cuCtxSetCurrent(previous), "cuCtxSetCurrent")

    def _read(self, args: tuple[Any, ...]) -> tuple[tuple, list[int], dict[int, ArrayArg] | None]:
        """The call's signature (everything `bind` reads except the pointers and the scalars' values), the
        tensors' pointers, and the ArrayArgs of the arguments that are not torch tensors (whose device
        the driver may have to tell). Torch tensors are read through their own attributes; the rest
        through describe_array. A LaunchError here is answered with bind's own (`_refused`)."""
        if len(args) != self._arg_count:
            raise LaunchError("argument count")
        key: list[Any] = []
        ptrs: list[int] = []
        arrays: dict[int, ArrayArg] | None = None
        for i in range(self._tensor_count):
            a = args[i]
            torch_like = _TORCH_TYPES.get(type(a))
            if torch_like is None:
                torch_like = is_torch_tensor(a)
            if torch_like:
                key.append((a.shape, a.stride(), a.dtype, a.device))
                ptrs.append(a.data_ptr())
            else:
                arr = describe_array(a, self._what[i])
                key.append((type(a), arr.shape, arr.strides, arr.dtype, arr.on_device, arr.device_index))
                ptrs.append(arr.ptr)
                if arrays is None:
                    arrays = {}
                arrays[i] = arr
        for a in args[self._tensor_count:]:
            key.append(type(a))
        return tuple(key), ptrs, arrays

    def _refused(self, args: tuple[Any, ...]) -> LaunchError:
        """Arguments a per-call check refused: bind raises its error for them, which names the argument
        and the rule, as `validate` does. Should bind accept them, the two disagree: say so."""
        bind(self.launch, args)
        return LaunchError(f"{self.name}: a launch check refused arguments that validate() accepts "
                           "(a bug in tkir.backend.runtime)")

    def _new_signature(self, args: tuple[Any, ...], key: tuple) -> _Signature:
        """Validate a signature not seen before: every check of `bind` (its error if one fails)."""
        bound = bind(self.launch, args)  # the argument checks need no driver: they come first
        sig = _Signature(self.launch, bound, args)
        if len(self._signatures) >= SIGNATURE_CACHE:
            self._signatures.pop(next(iter(self._signatures)))
        self._signatures[key] = sig
        return sig

    def _scalar_values(self, args: tuple[Any, ...]) -> list[int | float]:
        """The user scalars as the parameters take them; their types were checked with the signature, so
        only an integer's range is left to check."""
        values: list[int | float] = []
        for j, limits in enumerate(self._scalar_ranges):
            v = args[self._tensor_count + j]
            if limits is None:
                values.append(float(v))
                continue
            v = int(v)
            if not limits[0] <= v <= limits[1]:
                raise self._refused(args)
            values.append(v)
        return values

    def _ask_device(self, sig: _Signature, ptrs: list[int], arrays: dict[int, ArrayArg] | None) -> int:
        """The device of a launch with pointers that did not say theirs (CUDA Array Interface): the driver
        is asked about each (which also rejects host memory), and all must agree with the arguments that
        said theirs. No tensor argument at all: the default device."""
        device = sig.device if sig.device is not None else tkcuda.DEFAULT_DEVICE
        unsure = [i for i in sig.unsure if ptrs[i]]
        if not unsure or arrays is None:
            return device
        names = [t.name for t in self.launch.tensors]
        with tkcuda.on_device(device):  # a current context for the pointer queries
            found = {names[i]: _check_device_pointer(self.name, names[i], arrays[i]) for i in unsure}
        resolved = _common_device(self.name, sig.devices | found)
        return device if resolved is None else resolved

    def _prepare(self, args: tuple[Any, ...], sig: _Signature, device: int, stream: int = 0) -> _Prepared:
        """Load the module on `device`, bind the sizes with its SM count and build the launch of this
        signature there: once per signature and device. Loading the module and allocating a workspace
        (cuMemAlloc, cuMemsetD8, cuCtxSynchronize) may not happen while `stream` is being captured
        into a CUDA graph: that is refused with a LaunchError saying to launch once before the
        capture. Everything else here is host work (binding, tensor-map encoding), legal in a capture."""
        with tkcuda.on_device(device):
            if self._needs_driver_setup(device) and stream_capturing(stream):
                raise LaunchError(f"{self.name}: first launch on GPU {device} during CUDA graph capture: "
                                  "loading the module (and allocating a workspace) cannot be captured; launch "
                                  "the kernel once before the capture (a warm-up call, as torch.cuda.graph asks)")
            bound = bind(self.launch, args, tkcuda.device_attribute("MULTIPROCESSOR_COUNT", device))
            bound.device = device
            function = self._load(device)
            prepared = self._marshal(bound, device, function)
        sig.prepared[device] = prepared
        return prepared

    def _marshal(self, bound: Bound, device: int, function: Any) -> _Prepared:
        """The cuLaunchKernel parameter array of `bound` on `device` (its context current), with the slots a
        call patches: one per pointer, tensor map and user scalar."""
        launch = self.launch
        tensor_index = {t.name: i for i, t in enumerate(launch.tensors)}
        scalar_index = {s.name: j for j, s in enumerate(launch.scalars)}
        params = (ctypes.c_void_p * max(len(bound.params), 1))()
        encode = _driver_encode_tiled() if bound.tma else None
        values: list[Any] = []
        pointers, maps, scalars, counters = [], [], [], []
        for slot, (p, (kind, value)) in enumerate(zip(launch.params, bound.params, strict=True)):
            if kind == "tensor_map":
                maps.append((tensor_index[value.tensor], _TensorMapSlot(value, encode, params, slot)))
                continue
            if kind == "pointer":
                v = ctypes.c_void_p(value)
                pointers.append((tensor_index[p.tensor], v))
            elif kind == "workspace":
                v = ctypes.c_void_p(self._workspace(device, *value))
            elif kind == "launch_count":
                v = ctypes.c_int32(0)
                counters.append(v)
            else:
                v = SCALAR_CTYPES[kind](value)
                if isinstance(p, ScalarParam):
                    scalars.append((scalar_index[p.scalar], v))
            values.append(v)
            params[slot] = ctypes.addressof(v)
        ctx = tkcuda.primary_context(device)
        return _Prepared(device=device, context=ctx, context_id=int(ctx), function=function, grid=bound.grid,
                         block=bound.block, smem=bound.dynamic_smem, params=params,
                         params_address=ctypes.addressof(params), pointers=tuple(pointers), maps=tuple(maps),
                         scalars=tuple(scalars), counters=tuple(counters), values=values)

    def _needs_driver_setup(self, device: int) -> bool:
        """Whether preparing a launch on `device` would load the module or allocate (or grow) a workspace:
        driver work that a CUDA graph capture forbids."""
        if device not in self._functions:
            return True
        # a workspace's size depends on the device alone (its dims are numbers and NUM_SMS): once
        # allocated on a device it is never grown for another signature
        return any(isinstance(p, WorkspaceParam) and (device, p.name) not in self._workspaces
                   for p in self.launch.params)

    def _workspace(self, device: int, name: str, nbytes: int) -> int:
        """Device scratch memory for a `workspace` param on `device` (its context current): zeroed
        when allocated, then kept (and only ever grown) for this kernel's later launches there. Flags
        in it are compared with the launch count, which grows over all devices, so nothing needs
        clearing between launches; concurrent launches of one Kernel on different streams of one
        device would share it, which stream-K kernels do not support."""
        ptr, have = self._workspaces.get((device, name), (0, 0))
        if have >= nbytes:
            return ptr
        if ptr:  # grown: prepared launches holding the old pointer must be rebuilt
            self._signatures.clear()
            check(cu.cuMemFree(ptr), f"cuMemFree({self.name} workspace {name})")
        ptr = int(check(cu.cuMemAlloc(nbytes), f"cuMemAlloc({self.name} workspace {name}, {nbytes} B, GPU {device})"))
        check(cu.cuMemsetD8(ptr, 0, nbytes), f"cuMemsetD8({self.name} workspace {name})")
        tkcuda.synchronize_current(device)
        self._workspaces[(device, name)] = (ptr, nbytes)
        return ptr

    def _load(self, device: int) -> Any:
        """The kernel's function in `device`'s context (current when called), loading the module there
        on first use: module and function handles are per context."""
        if device in self._functions:
            return self._functions[device]
        image = self.image
        if isinstance(image, str):
            image = image.encode()
        if _looks_like_ptx(image) and not image.endswith(b"\0"):
            image = image + b"\0"  # PTX text must be NUL-terminated for cuModuleLoadData
        try:
            module = check(cu.cuModuleLoadData(image), f"cuModuleLoadData({self.name})")
        except CudaError as e:
            raise CudaError(f"{e} (assemble the PTX with tkir.backend.toolchain.assemble to see why)"
                            ) from None
        function = check(cu.cuModuleGetFunction(module, self.name.encode()),
                         f"cuModuleGetFunction({self.name})")
        smem = self.launch.dynamic_smem
        if smem > STATIC_SMEM_LIMIT:
            limit = tkcuda.device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", device)
            if smem > limit:
                raise LaunchError(f"{self.name}: needs {smem} bytes of dynamic shared memory; "
                                  f"GPU {device} allows at most {limit} per block")
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(function, attr, smem),
                  f"cuFuncSetAttribute({self.name}, {smem} B smem)")
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        max_threads = check(cu.cuFuncGetAttribute(attr, function), "cuFuncGetAttribute")
        threads = math.prod(self.launch.block)
        if threads > max_threads:
            raise LaunchError(f"{self.name}: block of {threads} threads, but the compiled kernel allows "
                              f"{max_threads} (register use)")
        self._modules[device], self._functions[device] = module, function
        return function


# --- the launch cache --------------------------------------------------------------------------------

SIGNATURE_CACHE = 64  # argument signatures kept per kernel (shapes, dtypes, devices seen recently)
TENSOR_MAPS_KEPT = 4  # encoded maps kept per tensor-map parameter (base addresses seen recently)

_TORCH_TYPES: dict[type, bool] = {}  # type -> whether its objects are torch tensors (is_torch_tensor)


def is_torch_tensor(arg: Any) -> bool:
    """Whether `arg` is a torch tensor, known by its type's module (torch need not be imported), answered
    once per type."""
    known = _TORCH_TYPES.get(type(arg))
    if known is None:
        known = _TORCH_TYPES[type(arg)] = _is_torch_tensor(arg)
    return known


class _Signature:
    """One argument signature of a kernel, validated once by `bind`: what a call with it must still check
    (the alignment of each pointer, read-only tensors against the others, which pointers the driver must
    place) and its prepared launch per device. A signature is everything `bind` reads except the
    pointers and the scalars' values (Kernel._read), so every other check holds for all its calls."""

    __slots__ = ("aligns", "overlaps", "unsure", "devices", "device", "torch_stream", "prepared")

    def __init__(self, launch: LaunchDescription, bound: Bound, args: tuple[Any, ...]):
        tensors = launch.tensors
        index = {t.name: i for i, t in enumerate(tensors)}
        tma = {t.tensor for t in launch.tma}
        aligned = {a.tensor: a.bytes for a in launch.aligned}
        aligns = []
        for i, spec in enumerate(tensors):  # _check_memory's address checks, in one modulus
            need = math.lcm(DTYPE_BYTES[spec.dtype], TMA_ALIGN if spec.name in tma else aligned.get(spec.name, 1))
            if need > 1:
                aligns.append((i, need))
        self.aligns: tuple[tuple[int, int], ...] = tuple(aligns)
        overlaps = []  # _check_readonly_overlap's pairs, with their byte counts
        for r in launch.readonly:
            a = bound.tensors[r]
            for name, b in bound.tensors.items():
                if name != r and name not in launch.readonly and a.nbytes and b.nbytes:
                    overlaps.append((index[r], index[name], a.nbytes, b.nbytes))
        self.overlaps: tuple[tuple[int, int, int, int], ...] = tuple(overlaps)
        self.unsure = tuple(i for i, t in enumerate(tensors) if bound.tensors[t.name].on_device is None)
        self.devices = {name: arr.device_index for name, arr in bound.tensors.items()}
        self.device = bound.device if bound.device is not None else tkcuda.DEFAULT_DEVICE
        torch = sys.modules.get("torch")
        self.torch_stream: Callable[[int], int] | None = None
        if torch is not None and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            self.torch_stream = _torch_stream_getter(torch)
        self.prepared: dict[int, _Prepared] = {}


@dataclass(slots=True, eq=False)
class _Prepared:
    """A signature's launch on one device: the parameter array with everything but the pointers and the
    scalars' values filled in, and the slots a call patches."""

    device: int
    context: Any  # the device's primary context (CUcontext)
    context_id: int
    function: Any  # CUfunction
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    params: Any  # (c_void_p * n): the address of each parameter's value
    params_address: int
    pointers: tuple[tuple[int, ctypes.c_void_p], ...]  # (tensor index, its pointer's slot)
    maps: tuple[tuple[int, _TensorMapSlot], ...]  # (tensor index, its tensor map)
    scalars: tuple[tuple[int, Any], ...]  # (user scalar index, its slot)
    counters: tuple[ctypes.c_int32, ...]  # launch_count slots
    values: list[Any]  # every slot, kept alive with the array that points at them


def _looks_like_ptx(image: bytes) -> bool:
    """PTX text (as opposed to a cubin or fatbin): it declares a .version near the top."""
    return b".version" in image[:4096] and not image.startswith(b"\x7fELF")


# --- binding arguments ----------------------------------------------------------------------------

# Persistent kernels size their grid by the device's multiprocessor count (`NUM_SMS` in grid
# expressions); validate() assumes an H100/H200's (HOPPER.md §7.3), a launch reads the device's.
DEFAULT_NUM_SMS = NUM_SMS  # when the device does not say (tkir.target)


def bind(launch: LaunchDescription, args: tuple[Any, ...], num_sms: int = DEFAULT_NUM_SMS) -> Bound:
    """Validate `args` against a checked launch description; the checks of Kernel.validate."""
    kernel = launch.kernel
    tensors, scalars = launch.tensors, launch.scalars
    if len(args) != len(tensors) + len(scalars):
        names = [t.name for t in tensors] + [s.name for s in scalars]
        raise LaunchError(f"{kernel} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")

    arrays: dict[str, ArrayArg] = {}
    for spec, arg in zip(tensors, args, strict=False):
        arr = describe_array(arg, f"{kernel}: argument '{spec.name}'")
        _check_dtype_and_rank(kernel, spec, arr)
        arrays[spec.name] = arr
    sizes, later = _bind_sizes(kernel, tensors, arrays)
    for req in launch.requires:  # a malformed expression is a LaunchError of its own
        if _eval(kernel, req.expr, sizes) != req.equals:
            raise LaunchError(requirement_failure(kernel, req.to_json(), sizes))
    _check_later_dims(kernel, later, sizes)
    tma_tensors = {t.tensor for t in launch.tma}
    aligned = {a.tensor: a for a in launch.aligned}
    for spec in tensors:
        _check_memory(kernel, spec, arrays[spec.name], spec.name in tma_tensors, aligned.get(spec.name))
    _check_readonly_overlap(kernel, launch.readonly, arrays)
    device = _common_device(kernel, {name: arr.device_index for name, arr in arrays.items()})
    user_scalars = {s.name: _check_scalar(kernel, s, arg) for s, arg in zip(scalars, args[len(tensors):], strict=True)}

    grid = tuple(_eval(kernel, g, {"NUM_SMS": num_sms, **sizes}) for g in launch.grid)
    for axis, (g, limit) in enumerate(zip(grid, MAX_GRID, strict=True)):
        if not 1 <= g <= limit:
            raise LaunchError(f"{kernel}: grid dim {axis} = {launch.grid[axis]} = {g} is outside "
                              f"1..{limit} (sizes {sizes})")
    tma = [_tma_args(kernel, t, arrays, sizes) for t in launch.tma]
    params: list[tuple[str, Any]] = []
    for p in launch.params:
        if isinstance(p, TensorMapParam):
            params.append(("tensor_map", tma[p.tma]))
        elif isinstance(p, PointerParam):
            params.append(("pointer", arrays[p.tensor].ptr))
        elif isinstance(p, WorkspaceParam):
            dims = [num_sms if d == "NUM_SMS" else int(d) for d in p.dims]
            params.append(("workspace", (p.name, math.prod(dims) * DTYPE_BYTES[p.dtype])))
        elif isinstance(p, LaunchCountParam):
            params.append(("launch_count", None))
        elif isinstance(p, SizeParam):
            params.append((p.dtype, _size_param(kernel, p, sizes)))
        else:
            params.append((p.dtype, user_scalars[p.scalar]))
    return Bound(sizes=sizes, tensors=arrays, scalars=user_scalars, grid=(grid[0], grid[1], grid[2]),
                 block=launch.block, dynamic_smem=launch.dynamic_smem, tma=tma, params=params, device=device)


def _common_device(kernel: str, devices: dict[str, int | None]) -> int | None:
    """The one GPU of the arguments that say theirs (None when none does); a LaunchError naming each
    argument and its device when they differ: a kernel runs on one device and reads memory there."""
    known = {name: d for name, d in devices.items() if d is not None}
    if len(set(known.values())) > 1:
        where = ", ".join(f"'{name}' on GPU {d}" for name, d in known.items())
        raise LaunchError(f"{kernel}: arguments are on different GPUs ({where}); a kernel runs on one "
                          "device: move them to one GPU first")
    return next(iter(known.values()), None)


def describe_array(arg: Any, what: str) -> ArrayArg:
    """Read pointer, shape, byte strides, dtype and device of a torch tensor, a CUDA Array Interface
    object or a DLPack object, without touching the GPU."""
    if _is_torch_tensor(arg):
        return _from_torch(arg)
    if hasattr(arg, "__cuda_array_interface__"):
        return _from_cai(arg, what)
    if hasattr(arg, "__array_interface__"):
        raise LaunchError(f"{what} is a host array ({type(arg).__name__}); copy it to the GPU first, "
                          "e.g. with tkir.backend.cuda.to_device")
    if hasattr(arg, "__dlpack__"):
        return _from_dlpack(arg, what)
    raise LaunchError(f"{what} must be a GPU tensor (torch, __cuda_array_interface__ or DLPack), "
                      f"not {type(arg).__name__}")


def _is_torch_tensor(arg: Any) -> bool:
    return type(arg).__module__.startswith("torch") and hasattr(arg, "data_ptr") and hasattr(arg, "is_cuda")


def _from_torch(t: Any) -> ArrayArg:
    dtype = str(t.dtype).removeprefix("torch.")
    dtype = FOREIGN_DTYPES.get(dtype, dtype)
    size = t.element_size()
    return ArrayArg(ptr=int(t.data_ptr()), shape=tuple(int(d) for d in t.shape),
                    strides=tuple(int(s) * size for s in t.stride()), dtype=dtype, on_device=bool(t.is_cuda),
                    device_index=t.device.index if t.is_cuda else None, kind="torch", obj=t)


def _from_cai(arg: Any, what: str) -> ArrayArg:
    cai = arg.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise LaunchError(f"{what} has a mask; masked arrays are not supported")
    shape = tuple(int(d) for d in cai["shape"])
    typestr = cai["typestr"]
    order, code = typestr[0], typestr[1:]
    if order == ">" and code[1:] != "1":
        raise LaunchError(f"{what} is big-endian ({typestr})")
    dtype = CAI_TYPESTRS.get(code, typestr)
    named = getattr(getattr(arg, "dtype", None), "name", None) or str(getattr(arg, "dtype", ""))
    named = FOREIGN_DTYPES.get(named.removeprefix("torch."))
    if named is not None:  # an object that says its dtype by name resolves 'V1'/'V2' ambiguity
        if DTYPE_BYTES[named] != int(re.sub(r"\D", "", code) or 0):
            raise LaunchError(f"{what}: dtype {named} does not match typestr {typestr}")
        dtype = named
    itemsize = int(re.sub(r"\D", "", code) or 0)
    strides = cai.get("strides")
    if strides is None:
        strides = _contiguous_strides(shape, itemsize)
    ptr = int(cai["data"][0])
    return ArrayArg(ptr=ptr, shape=shape, strides=tuple(int(s) for s in strides), dtype=dtype, on_device=None,
                    device_index=_said_device(arg, what), kind="cuda_array_interface", obj=arg)


def _said_device(arg: Any, what: str) -> int | None:
    """The GPU a CUDA Array Interface object says it is on through `__dlpack_device__` (tkir's
    DeviceArray and CuPy arrays export both); None when it does not say (CAI v3 has no device field:
    the driver is asked at launch)."""
    said = getattr(arg, "__dlpack_device__", None)
    if said is None:
        return None
    try:
        device_type, index = said()
    except Exception as e:  # a broken export: say which argument
        raise LaunchError(f"{what}: __dlpack_device__() failed: {type(e).__name__}: {e}") from None
    return int(index) if int(device_type) in (DLPACK_CUDA, DLPACK_CUDA_MANAGED) else None


def _from_dlpack(arg: Any, what: str) -> ArrayArg:
    if hasattr(arg, "__dlpack_device__"):
        device_type, index = arg.__dlpack_device__()
        if int(device_type) not in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
            raise LaunchError(f"{what} is not in GPU memory (DLPack device type {int(device_type)}); "
                              "copy it to the GPU first")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        return _from_torch(torch.from_dlpack(arg))
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        raise LaunchError(f"{what} is a DLPack object; reading it needs torch or cuda-core installed"
                          ) from None
    view = StridedMemoryView(arg, stream_ptr=-1)
    itemsize = view.dtype.itemsize
    dtype = FOREIGN_DTYPES.get(view.dtype.name, view.dtype.name)
    strides = view.strides or tuple(s // itemsize for s in _contiguous_strides(view.shape, itemsize))
    return ArrayArg(ptr=int(view.ptr), shape=tuple(view.shape), strides=tuple(s * itemsize for s in strides),
                    dtype=dtype, on_device=bool(view.is_device_accessible) and view.device_id >= 0,
                    device_index=view.device_id, kind="dlpack", obj=(arg, view))


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def _check_dtype_and_rank(kernel: str, spec: TensorArg, arr: ArrayArg) -> None:
    what = f"{kernel}: argument '{spec.name}'"
    declared = f"gl<{spec.dtype}>[{', '.join(str(d) for d in spec.dims)}]"
    if arr.dtype != spec.dtype:
        raise LaunchError(f"{what} has dtype {arr.dtype}, expected {spec.dtype} ({declared})")
    if len(arr.shape) != len(spec.dims):
        raise LaunchError(f"{what} has {len(arr.shape)} dims {list(arr.shape)}, expected {len(spec.dims)} "
                          f"({declared})")


_LaterDim = tuple[str, int, str | int, int]  # (tensor, axis, declared dim, extent)


def _bind_sizes(kernel: str, tensors: tuple[TensorArg, ...],
                arrays: dict[str, ArrayArg]) -> tuple[dict[str, int], list[_LaterDim]]:
    """The sizes the tensors' shapes bind (dims that are plain names), and the other dims (numbers and
    expressions such as "H / 4") for `_check_later_dims` once the `requires` have been checked (they say
    why a size that is not a multiple of a divisor is refused)."""
    sizes: dict[str, int] = {}
    where: dict[str, str] = {}
    later: list[tuple[str, int, str | int, int]] = []
    for spec in tensors:
        for axis, (dim, got) in enumerate(zip(spec.dims, arrays[spec.name].shape, strict=True)):
            if isinstance(dim, str) and dim.isidentifier():
                if dim in sizes and sizes[dim] != got:
                    raise LaunchError(f"{kernel}: argument '{spec.name}' dim {axis} ({dim}) is {got}, but "
                                      f"{where[dim]} gave {dim} = {sizes[dim]}")
                sizes.setdefault(dim, got)
                where.setdefault(dim, f"argument '{spec.name}' dim {axis}")
            else:
                later.append((spec.name, axis, dim, got))
    return sizes, later


def _check_later_dims(kernel: str, later: list[_LaterDim], sizes: dict[str, int]) -> None:
    for name, axis, dim, got in later:  # fixed dims and expressions like "D / 2", once all names are bound
        want = _eval(kernel, dim, sizes)
        if want != got:
            raise LaunchError(f"{kernel}: argument '{name}' dim {axis} is {got}, expected {dim} = {want}")


def _check_memory(kernel: str, spec: TensorArg, arr: ArrayArg, tma: bool,
                  aligned: Alignment | None = None) -> None:
    what = f"{kernel}: argument '{spec.name}'"
    if arr.on_device is False:
        raise LaunchError(f"{what} is in host memory; move it to the GPU first")
    itemsize = DTYPE_BYTES[arr.dtype]
    want = _contiguous_strides(arr.shape, itemsize)
    if any(d != 1 and s != w for d, s, w in zip(arr.shape, arr.strides, want, strict=True)):
        raise LaunchError(f"{what} is not C-contiguous (byte strides {list(arr.strides)}, expected "
                          f"{list(want)}); pass a contiguous copy")
    if arr.ptr % itemsize:
        raise LaunchError(f"{what} address {arr.ptr:#x} is not aligned to its {itemsize}-byte elements")
    if aligned is not None and not tma and arr.ptr % aligned.bytes:
        raise LaunchError(f"{what} is {aligned.why or 'copied in 16-byte pieces'}, which needs a "
                          f"{aligned.bytes}-byte aligned address; {arr.ptr:#x} is not (a sliced view? pass a "
                          "fresh tensor)")
    if tma:
        if arr.ptr % TMA_ALIGN:
            raise LaunchError(f"{what} is read by TMA, which needs a 16-byte aligned address; "
                              f"{arr.ptr:#x} is not (a sliced view? pass a fresh tensor)")
        bad = [s for d, s in zip(arr.shape[:-1], arr.strides[:-1], strict=True) if d != 1 and s % TMA_ALIGN]
        if bad:
            raise LaunchError(f"{what} is read by TMA, which needs row strides that are multiples of 16 "
                              f"bytes; byte strides are {list(arr.strides)} (pad the innermost dim)")


def _check_readonly_overlap(kernel: str, readonly: tuple[str, ...], arrays: dict[str, ArrayArg]) -> None:
    """A tensor the kernel reads through ld.global.nc (the launch's `readonly`, passes/readonly_loads.py)
    may not share a byte with any other tensor argument: the kernel may write that one while the
    non-coherent path still serves the old bytes, and ptxas has moved the reads above the writes (the
    contract of `const T *__restrict__`). Two read-only tensors may overlap. Arguments are C-contiguous
    here (_check_memory), so each covers [ptr, ptr + nbytes)."""
    for r in readonly:
        a = arrays[r]
        for name, b in arrays.items():
            if name == r or name in readonly or not a.nbytes or not b.nbytes:
                continue
            if a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes:
                raise LaunchError(f"{kernel}: argument '{name}' overlaps '{r}', which the kernel only reads, "
                                  "through the read-only data path (ld.global.nc, passes/readonly_loads.py): "
                                  "pass tensors that do not share memory, or compile without readonly-loads "
                                  "for an in-place call")


def _check_scalar(kernel: str, spec: ScalarArg, value: Any) -> int | float:
    what = f"{kernel}: scalar '{spec.name}'"
    dtype = spec.dtype
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise LaunchError(f"{what} must be a Python {'float' if dtype == 'f32' else 'int'}, "
                          f"not {type(value).__name__}")
    if dtype == "f32":
        return float(value)
    if not isinstance(value, numbers.Integral):
        raise LaunchError(f"{what} must be an int ({dtype}), not {type(value).__name__}")
    lo, hi = {"i32": I32_RANGE, "u32": U32_RANGE, "i64": (-(2**63), 2**63 - 1)}[dtype]
    if not lo <= int(value) <= hi:
        raise LaunchError(f"{what} = {value} does not fit {dtype}")
    return int(value)


def _size_param(kernel: str, p: SizeParam, sizes: dict[str, int]) -> int:
    value = _eval(kernel, p.size, sizes)
    lo, hi = {"i32": I32_RANGE, "u32": U32_RANGE, "i64": (-(2**63), 2**63 - 1)}.get(p.dtype, (None, None))
    if lo is None or not lo <= value <= hi:
        raise LaunchError(f"{kernel}: size {p.size} = {value} does not fit the {p.dtype} parameter '{p.name}'")
    return value


def _eval(kernel: str, expr: str | int, sizes: dict[str, int]) -> int:
    try:
        return symexpr.evaluate(expr, sizes)
    except symexpr.SymExprError as e:
        raise LaunchError(f"{kernel}: {e}") from None


def _tma_args(kernel: str, t: TmaSpec, arrays: dict[str, ArrayArg], sizes: dict[str, int]) -> TmaArgs:
    arr = arrays[t.tensor]
    dtype = t.dtype
    dims = [_eval(kernel, d, sizes) for d in t.dims]
    strides = [_eval(kernel, s, sizes) for s in t.strides]
    what = f"{kernel}: tensor map '{t.param}' of argument '{t.tensor}'"
    if any(not 1 <= d <= TMA_MAX_DIM for d in dims):
        raise LaunchError(f"{what}: dims {dims} must be 1..2^32 (sizes {sizes})")
    if any(s % TMA_ALIGN or not 0 < s < TMA_MAX_STRIDE for s in strides):
        raise LaunchError(f"{what}: byte strides {strides} must be positive multiples of 16 below 2^40 "
                          f"(sizes {sizes})")
    itemsize = DTYPE_BYTES[dtype]
    reach = itemsize * dims[0] + sum((d - 1) * s for d, s in zip(dims[1:], strides, strict=True))
    if reach > arr.nbytes:  # a descriptor wider than the tensor would read and write past its end
        raise LaunchError(f"{what}: the map spans {reach} bytes but the tensor holds {arr.nbytes}")
    return TmaArgs(param=t.param, tensor=t.tensor, dtype=dtype, address=arr.ptr, dims=dims, strides=strides,
                   box=list(t.box), elem_strides=list(t.elem_strides), swizzle=t.swizzle,
                   l2_promotion=t.l2_promotion, oob_fill=t.oob_fill)


# --- launching ------------------------------------------------------------------------------------

class TensorMap(ctypes.Structure):
    """The 128-byte CUtensorMap; cuLaunchKernel reads a ctypes Structure parameter from its address."""

    _fields_ = [("opaque", ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))]


def aligned_tensor_map() -> TensorMap:
    """A zeroed TensorMap at a TENSOR_MAP_ALIGN-aligned address (ctypes only guarantees 8 or 16)."""
    raw = (ctypes.c_ubyte * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN))()
    offset = -ctypes.addressof(raw) % TENSOR_MAP_ALIGN
    return TensorMap.from_buffer(raw, offset)  # from_buffer keeps `raw` alive


def encode_args(t: TmaArgs) -> tuple[Any, ...]:
    """The cuTensorMapEncodeTiled arguments after the output pointer, as plain ints and int lists."""
    return (int(TMA_DTYPES[t.dtype]), t.rank, t.address, list(t.dims), list(t.strides), list(t.box),
            list(t.elem_strides), int(TMA_INTERLEAVE_NONE), int(TMA_SWIZZLES[t.swizzle]),
            int(TMA_L2_PROMOTIONS[t.l2_promotion]), int(TMA_OOB_FILLS[t.oob_fill]))


def encode_tensor_map(t: TmaArgs) -> TensorMap:
    """Encode a tiled tensor map into an aligned buffer (HOPPER.md §4.5: the cuda-bindings CUtensorMap
    object is only 16-byte aligned, while the driver requires 64)."""
    out = aligned_tensor_map()
    _TmaEncoder(t, _driver_encode_tiled()).encode(ctypes.addressof(out), t.address)
    return out


class _TmaEncoder:
    """The cuTensorMapEncodeTiled call of one TmaArgs with every argument built once (the dims, strides,
    box and element-stride arrays, the enums) but the base address: encoding for another address is one
    C call."""

    __slots__ = ("tma", "_encode", "_head", "_tail", "_arrays")

    def __init__(self, t: TmaArgs, encode: Callable[..., int]):
        dtype, rank, _address, dims, strides, box, elem_strides, interleave, swizzle, l2, oob = encode_args(t)
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        self._arrays = ((u64 * rank)(*dims), (u64 * max(rank - 1, 1))(*strides), (u32 * rank)(*box),
                        (u32 * rank)(*elem_strides))
        self._head = (dtype, rank)
        self._tail = (*(ctypes.addressof(a) for a in self._arrays), interleave, swizzle, l2, oob)
        self.tma, self._encode = t, encode

    def encode(self, out: int, address: int) -> None:
        """Encode the map for base `address` into the TENSOR_MAP_ALIGN-aligned buffer at `out`."""
        result = self._encode(out, *self._head, address, *self._tail)
        if result != 0:
            t = self.tma
            raise LaunchError(f"cuTensorMapEncodeTiled failed for '{t.param}' ({cu.CUresult(result).name}): "
                              f"dtype {t.dtype}, address {address:#x}, dims {t.dims}, byte strides {t.strides}, "
                              f"box {t.box}, swizzle {t.swizzle}")


class _TensorMapSlot:
    """A tensor-map parameter of a prepared launch: its entry of the parameter array points at a map
    encoded for `address`. The maps of the last TENSOR_MAPS_KEPT addresses are kept, since a model's
    activations come back at a few addresses (torch's caching allocator hands recent blocks out again):
    a map seen before is pointed at, not encoded again. The bytes of a map are only ever written by the
    driver."""

    __slots__ = ("address", "_encoder", "_params", "_index", "_maps")

    def __init__(self, t: TmaArgs, encode: Callable[..., int], params: Any, index: int):
        self._encoder = _TmaEncoder(t, encode)
        self._params, self._index = params, index
        self._maps: dict[int, tuple[TensorMap, int]] = {}  # address -> (map, its address), oldest first
        self.address = -1
        self.point_at(t.address)

    def point_at(self, address: int) -> None:
        found = self._maps.get(address)
        if found is None:
            self.address = -1  # until a map of `address` is in place (an encoding may fail)
            if len(self._maps) >= TENSOR_MAPS_KEPT:
                tmap = self._maps.pop(next(iter(self._maps)))[0]  # the oldest buffer, encoded again
            else:
                tmap = aligned_tensor_map()
            where = ctypes.addressof(tmap)
            self._encoder.encode(where, address)
            found = self._maps[address] = (tmap, where)
        self._params[self._index] = found[1]
        self.address = address


@functools.cache
def _driver_encode_tiled() -> Any:
    """cuTensorMapEncodeTiled from the driver library through ctypes, so it writes our aligned buffer
    (it encodes host memory and needs an initialised driver, not a current context). The output and the
    four arrays are passed as addresses (ints)."""
    fn = tkcuda.libcuda().cuTensorMapEncodeTiled
    ptr = ctypes.c_void_p
    fn.argtypes = [ptr, ctypes.c_int, ctypes.c_uint32, ptr, ptr, ptr, ptr, ptr, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _check_device_pointer(kernel: str, name: str, arr: ArrayArg) -> int:
    """For a pointer whose memory kind the object did not say (CUDA Array Interface), ask the driver:
    host or unknown memory is a LaunchError; returns the device ordinal of the memory, which must be
    the one the object said through `__dlpack_device__`, if it said one."""
    what = f"{kernel}: argument '{name}'"
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    err, kind = cu.cuPointerGetAttribute(attr, arr.ptr)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{what}: address {arr.ptr:#x} is not memory CUDA knows ({err.name})")
    if int(kind) not in DEVICE_MEMORY_TYPES:
        raise LaunchError(f"{what}: address {arr.ptr:#x} is host memory, not device memory")
    ordinal = tkcuda.pointer_device(arr.ptr)
    if arr.device_index is not None and ordinal != arr.device_index:
        raise LaunchError(f"{what} says it is on GPU {arr.device_index} (__dlpack_device__), but its "
                          f"address {arr.ptr:#x} is memory of GPU {ordinal}")
    return ordinal


def _torch_stream_getter(torch: Any) -> Callable[[int], int]:
    """device -> the handle of torch's current stream on it (what Triton launches on), so
    `with torch.cuda.stream(s): k(...)` is ordered with the user's work on s: torch's
    `_cuda_getCurrentRawStream` where it has it (Triton's launcher reads the same), else through
    `torch.cuda.current_stream`."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: int(torch.cuda.current_stream(device).cuda_stream)


def stream_capturing(stream: int) -> bool:
    """Whether `stream` (a handle; 0 is the legacy default stream) is being captured into a CUDA graph
    (cuStreamIsCapturing, itself legal during a capture; the stream's context current). The legacy
    stream while another stream captures in global mode (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) counts
    as capturing: a launch there would break that capture. Any other error answers False: the launch
    itself reports what is wrong."""
    err, status = cu.cuStreamIsCapturing(stream)
    if err != CUDA_SUCCESS:
        return err == cu.CUresult.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _stream_handle(stream: Any) -> int:
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core and others)
        return int(stream.__cuda_stream__()[1])
    raise LaunchError(f"stream must be an int handle or a stream object, not {type(stream).__name__}")
