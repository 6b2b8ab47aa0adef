"""The launch description (`tkc compile --emit launch`): what another toolchain needs to launch the PTX.

    params = kernel_params(module)                       # the PTX signature (lower_kernel reads it)
    launch = build_launch(module, "sm_90a", dynamic_smem=smem, params=params)   # a LaunchDescription
    launch.block, launch.tma[0].box, launch.params[0].name       # typed, frozen records
    launch.to_json()                                     # the JSON-ready dict `--emit launch` prints
    LaunchDescription.from_json(d)                       # read (and check) a description from JSON

A LaunchDescription is built once, by the backend, with everything known: `dynamic_smem` is the
shared memory the lowering used (tkir.backend.lower passes it in). `from_json` is the one reader of a
description from outside (the runtime's `Kernel(image, launch)`, `--emit c`, the disk cache): it checks
the types and names of every field, fills the defaults of a foreign description (docs/runtime.md,
"Launch description") and runs `validate`, raising a LaunchError that names the bad field.
`to_json(from_json(d))` is `d` for every description the backend writes. Sizes (grid, TMA dims and
strides, requirements) are `tkir.symexpr` expressions of the kernel's size names.

PTX parameter order (the backend declares its kernel parameters in exactly this order):
1. one `tensor_map` per `tma.desc`, in module order (name = the descriptor's symbol, `tma` = its index
   in the "tma" list; a 128-byte, 64-byte aligned `.param`, HOPPER.md §4.3);
2. one `pointer` per `gl` kernel parameter, in order (name = the parameter's name), also for tensors
   that are only reached through a tensor map;
3. one i32 `scalar` per size name or dim expression (`"H / 4"`), in order of first appearance in the
   `gl` dims (`"size"`: the name or expression; an expression's param is named `<tensor>_dim<axis>`);
4. the kernel's own scalar parameters, in order (`"scalar": name`);
5. hidden parameters the runtime provides, in IR order: a `workspace` pointer per `tk.workspace`
   (`dtype`, `dims` of ints and NUM_SMS: device memory zeroed once and kept across launches) and an
   i32 `launch_count` per `tk.launch_count` (1 on the first launch of the kernel, then 2, ...).

`requires` lists the run-time conditions the kernel refuses to run without (the runtime checks
them); tkir.requires computes them from the IR, and the interpreter checks the same list. `aligned`
lists the tensors whose base address must be 16-byte aligned because they are copied in 16-byte pieces
without TMA (cp.async chunks, ld/st.global.v4): `{"tensor", "bytes", "why"}` (tkir.requires.kernel_alignments).
`unaligned` (present when not empty) names those of them copied only to and from registers, whose rows a
variant of the kernel with narrower pieces copies at any alignment (tkir.requires.row_piece_tensors): a
runtime Kernel that has the variants (tkir.compile's) launches one where these rows or bases do not fit
their pieces, instead of refusing the call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from tkir import symexpr
from tkir.diagnostics import CompileError, TkirError
from tkir.facts import MULTICAST_ATTR, OccupancyPlan
from tkir.ir import Module, Operation
from tkir.ops_tma import TMA_L2_PROMOTIONS, TMA_OOB_FILLS, TMA_SWIZZLES  # runtime's enum tables match them
from tkir.requires import kernel_alignments, kernel_requires, row_piece_tensors
from tkir.target import (
    MAX_GRID,
    MAX_THREADS_PER_BLOCK,
    PLAIN_SMEM_ALIGN,
    SMEM_PER_BLOCK,
    TMA_INNER_BYTES_ALIGN,
    TMA_MAX_BOX,
    TMA_MAX_ELEM_STRIDE,
    TMA_MAX_RANK,
)
from tkir.target import WARPGROUP as THREADS_PER_WARPGROUP
from tkir.types import DTYPE_BYTES, GlobalType, ScalarType, TileType, is_size_name
from tkir.verify_tma import verify_tma

DESC_FIELDS = ("dtype", "rank", "dims", "strides", "box", "elem_strides", "swizzle", "l2_promotion",
               "oob_fill")

# The values a description may hold, each of which the runtime (tkir.backend.runtime) maps to the
# driver's type or enum; tests/runtime/test_launch.py keeps the two tables equal.
TENSOR_DTYPES = ("bf16", "f16", "f32", "e4m3", "e5m2", "i32", "u32", "i1")  # tkir.types.NUMPY_DTYPES
SCALAR_DTYPES = ("i32", "u32", "i64", "f32")                     # runtime.SCALAR_CTYPES
TMA_DTYPES = ("bf16", "f16", "f32", "i32", "u32", "e4m3", "e5m2")  # runtime.TMA_DTYPES (CUtensorMapDataType)
# What a foreign description may leave out of a `tma` entry (docs/runtime.md).
TMA_DEFAULT_SWIZZLE, TMA_DEFAULT_L2_PROMOTION, TMA_DEFAULT_OOB_FILL = 0, 128, "zero"
DEFAULT_TARGET = "sm_90a"
NUM_SMS_NAME = "NUM_SMS"  # the device's multiprocessor count, in grids and workspace dims

Dim = str | int  # a size name or expression (tkir.symexpr), or a fixed extent


class LaunchError(TkirError, ValueError):
    """An argument (or the launch description) does not fit the kernel; the message names which."""


class _Record:
    """to_json for the frozen records below: fields in order, tuples as lists, None fields left out."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


class _Param(_Record):
    """A PTX kernel parameter: `{"name", "kind", ...}` in JSON."""

    __slots__ = ()
    kind: ClassVar[str]
    name: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **{k: v for k, v in super().to_json().items() if k != "name"}}


@dataclass(frozen=True, slots=True)
class TensorArg(_Record):
    """A tensor argument of the kernel (the user passes tensors first, in this order)."""

    name: str
    dtype: str
    dims: tuple[Dim, ...]


@dataclass(frozen=True, slots=True)
class ScalarArg(_Record):
    """A scalar argument of the kernel (after the tensors)."""

    name: str
    dtype: str


@dataclass(frozen=True, slots=True)
class TensorMapParam(_Param):
    """A CUtensorMap (`tma` is the index of its spec in LaunchDescription.tma)."""

    kind: ClassVar[str] = "tensor_map"
    name: str
    tma: int


@dataclass(frozen=True, slots=True)
class PointerParam(_Param):
    """The device address of a tensor argument."""

    kind: ClassVar[str] = "pointer"
    name: str
    dtype: str
    tensor: str


@dataclass(frozen=True, slots=True)
class SizeParam(_Param):
    """A size (an expression of the sizes bound from the tensors' shapes) as a scalar."""

    kind: ClassVar[str] = "scalar"
    name: str
    dtype: str
    size: Dim


@dataclass(frozen=True, slots=True)
class ScalarParam(_Param):
    """A scalar argument of the user's."""

    kind: ClassVar[str] = "scalar"
    name: str
    dtype: str
    scalar: str


@dataclass(frozen=True, slots=True)
class WorkspaceParam(_Param):
    """Device memory the runtime allocates, zeroes once and keeps: prod(dims) x sizeof(dtype) bytes."""

    kind: ClassVar[str] = "workspace"
    name: str
    dtype: str
    dims: tuple[Dim, ...]  # ints and NUM_SMS


@dataclass(frozen=True, slots=True)
class LaunchCountParam(_Param):
    """1 on the kernel's first launch, then 2, ... (the runtime counts)."""

    kind: ClassVar[str] = "launch_count"
    name: str
    dtype: str = "i32"


Param = TensorMapParam | PointerParam | SizeParam | ScalarParam | WorkspaceParam | LaunchCountParam


@dataclass(frozen=True, slots=True)
class Requirement(_Record):
    """A run-time condition: `expr` evaluated at the bound sizes must be `equals` (tkir.requires)."""

    expr: Dim
    equals: int
    why: str | None = None


@dataclass(frozen=True, slots=True)
class Alignment(_Record):
    """A tensor whose base address must be aligned to `bytes` (copied in pieces that wide, without TMA)."""

    tensor: str
    bytes: int
    why: str | None = None


@dataclass(frozen=True, slots=True)
class TmaSpec(_Record):
    """One cuTensorMapEncodeTiled call: dims innermost first, byte strides (rank - 1 of them)."""

    param: str
    tensor: str
    dtype: str
    rank: int
    dims: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    box: tuple[int, ...]
    elem_strides: tuple[int, ...]
    swizzle: int
    l2_promotion: int
    oob_fill: str


@dataclass(frozen=True, slots=True)
class LaunchDescription:
    """Everything another toolchain needs to launch the kernel's PTX (the module docstring)."""

    kernel: str
    target: str
    tensors: tuple[TensorArg, ...]
    scalars: tuple[ScalarArg, ...]
    params: tuple[Param, ...]
    grid: tuple[Dim, Dim, Dim]  # blocks (CTAs), as size expressions of the sizes and NUM_SMS
    block: tuple[int, int, int]  # threads of one CTA
    dynamic_smem: int  # bytes per CTA
    requires: tuple[Requirement, ...] = ()
    aligned: tuple[Alignment, ...] = ()
    readonly: tuple[str, ...] = ()  # tensors read through ld.global.nc: no other argument may overlap them
    tma: tuple[TmaSpec, ...] = ()
    cluster: tuple[int, int, int] | None = None  # CTAs per cluster (cluster-rows), None: no clusters
    unaligned: tuple[str, ...] = ()  # `aligned` tensors whose rows a narrower-piece variant copies (module doc)

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict (`--emit launch`), keys in the documented order."""
        out: dict[str, Any] = {
            "kernel": self.kernel,
            "target": self.target,
            "tensors": [t.to_json() for t in self.tensors],
            "scalars": [s.to_json() for s in self.scalars],
            "params": [p.to_json() for p in self.params],
            "grid": list(self.grid),
            "block": list(self.block),
            "dynamic_smem": self.dynamic_smem,
            "requires": [r.to_json() for r in self.requires],
            "aligned": [a.to_json() for a in self.aligned],
            "readonly": list(self.readonly),
            "tma": [t.to_json() for t in self.tma],
        }
        if self.cluster is not None:
            out["cluster"] = list(self.cluster)
        if self.unaligned:
            out["unaligned"] = list(self.unaligned)
        return out

    def to_text(self) -> str:
        """`to_json` as indented JSON text (what `tkc compile --emit launch` writes)."""
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> LaunchDescription:
        """Read a description from its JSON form (a dict; see `read_launch` for text): every field is
        checked, defaults filled, then `validate`d; a LaunchError names the first bad field."""
        return _Reader(data).description().validate()

    def validate(self) -> LaunchDescription:
        """Check what the types do not: names that refer to tensors, scalars and tma entries exist, values
        the driver takes (dtypes, swizzles, box sizes, ...), grid expressions and CUDA's limits. Returns
        self; a LaunchError names the bad field. Runs once per description read (not per launch)."""
        _validate(self)
        return self


def read_launch(launch: LaunchDescription | dict | str) -> LaunchDescription:
    """A checked description from a LaunchDescription, its JSON dict or JSON text (Kernel, emit_c)."""
    if isinstance(launch, LaunchDescription):
        return launch.validate()
    if isinstance(launch, str):
        try:
            launch = json.loads(launch)
        except json.JSONDecodeError as e:
            raise LaunchError(f"a launch description is JSON text: {e}") from None
    return LaunchDescription.from_json(launch)


# --- building it from the IR ------------------------------------------------------------------------

def kernel_params(module: Module) -> tuple[Param, ...]:
    """The kernel's PTX parameters, in the order the backend declares them (the module docstring),
    after checking its TMA descriptors against the copies that use them (the verifier's rule, tiles
    without swizzle= as unswizzled): the tensor-map parameters pass those descriptors."""
    verify_tma(module, CompileError, decided=True)
    kernel = module.kernel
    args = kernel.body.args
    tensors = [a for a in args if isinstance(a.type, GlobalType)]
    sizes: dict[str, str] = {}  # size or dim expression ("H / 4") -> its parameter's name
    for t in tensors:
        for axis, d in enumerate(t.type.dims):
            if isinstance(d, str) and d not in sizes:
                sizes[d] = d if is_size_name(d) else f"{t.name}_dim{axis}"
    params: list[Param] = [TensorMapParam(d.symbol, i) for i, d in enumerate(_descs(module))]
    params += [PointerParam(t.name, t.type.dtype, t.name) for t in tensors]
    params += [SizeParam(name, "i32", s) for s, name in sizes.items()]
    params += [ScalarParam(s.name, s.type.dtype, s.name) for s in args if isinstance(s.type, ScalarType)]
    for op in kernel.walk():  # hidden parameters the runtime provides (passes/stream_k.py)
        if op.name == "tk.workspace":
            t = op.result.type
            params.append(WorkspaceParam(op.attrs["name"], t.dtype, tuple(t.dims)))
        elif op.name == "tk.launch_count":
            params.append(LaunchCountParam(op.attrs["name"]))
    return tuple(params)


def block_threads(kernel: Operation) -> int:
    """Threads of one CTA: the occupancy plan's (its roles' warpgroups; sm_80: 32 x warps), else one
    warpgroup."""
    plan = OccupancyPlan.of(kernel)
    if plan is None:
        return THREADS_PER_WARPGROUP
    warpgroups = sum(r.warpgroups if r.warpgroups is not None else 1 for _, r in plan.roles) or 1
    return plan.threads or THREADS_PER_WARPGROUP * warpgroups


def planned_smem(kernel: Operation) -> int:
    """Dynamic shared memory as planned before lowering: the occupancy plan's, else the allocations'.
    The backend's description carries what the lowering used instead (build_launch's dynamic_smem)."""
    plan = OccupancyPlan.of(kernel)
    if plan is not None and plan.smem_bytes is not None:
        return plan.smem_bytes
    return _alloc_bytes(kernel)


def _multicast_cluster(kernel: Operation) -> tuple[int, int, int] | None:
    """passes/multicast.py's clusters along x (the grid already counts their CTAs), None without."""
    mc = kernel.attrs.get(MULTICAST_ATTR)
    return (int(mc["ctas"]), 1, 1) if isinstance(mc, dict) and int(mc.get("ctas", 1)) > 1 else None


def build_launch(module: Module, target: str, *, dynamic_smem: int | None = None,
                 params: tuple[Param, ...] | None = None) -> LaunchDescription:
    """The launch description of the module's kernel. `dynamic_smem`: the bytes the lowering used
    (None: `planned_smem`, for analyses that do not lower); `params`: `kernel_params(module)` when the
    caller has them already."""
    kernel = module.kernel
    if params is None:
        params = kernel_params(module)
    descs = _descs(module)
    args = kernel.body.args
    grid = [str(g) for g in kernel.attrs["grid"]]
    cluster = kernel.attrs.get("cluster")  # cluster-rows: a block is `cluster` CTAs along x
    clustered = isinstance(cluster, int) and cluster > 1
    if clustered:
        grid[0] = f"{cluster} * ({grid[0]})"
    grid += ["1"] * (3 - len(grid))
    return LaunchDescription(
        kernel=kernel.symbol,
        target=target,
        tensors=tuple(TensorArg(a.name, a.type.dtype, tuple(a.type.dims)) for a in args
                      if isinstance(a.type, GlobalType)),
        scalars=tuple(ScalarArg(a.name, a.type.dtype) for a in args if isinstance(a.type, ScalarType)),
        params=params,
        grid=(grid[0], grid[1], grid[2]),
        block=(block_threads(kernel), 1, 1),
        dynamic_smem=planned_smem(kernel) if dynamic_smem is None else dynamic_smem,
        requires=tuple(Requirement(r["expr"], r["equals"], r["why"]) for r in kernel_requires(kernel, descs)),
        aligned=tuple(Alignment(a["tensor"], a["bytes"], a["why"]) for a in kernel_alignments(kernel)),
        # tensors read through ld.global.nc (passes/readonly_loads.py): no other argument may overlap them
        readonly=tuple(str(n) for n in kernel.attrs.get("readonly_params", [])),
        tma=tuple(TmaSpec(param=d.symbol, tensor=d.attrs["tensor"],
                          **{k: _frozen(d.attrs[k]) for k in DESC_FIELDS}) for d in descs),
        # the PTX says .reqnctapercluster: a plain launch forms them
        cluster=(cluster, 1, 1) if clustered else _multicast_cluster(kernel),
        unaligned=tuple(row_piece_tensors(kernel, descs)),
    )


def _descs(module: Module) -> list[Operation]:
    return [op for op in module.ops if op.name == "tma.desc"]


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _alloc_bytes(kernel: Operation) -> int:
    """Shared memory of the kernel's allocations, each rounded to its alignment (no occupancy plan)."""
    total, max_align = 0, PLAIN_SMEM_ALIGN
    for op in kernel.walk():
        if op.name != "tk.alloc":
            continue
        t = op.result.type
        eb = DTYPE_BYTES[t.dtype]
        pad = int(t.get("pad", 0) or 0)
        size = t.rows * (t.cols * eb + pad) if isinstance(t, TileType) else t.n * eb + pad
        align = int(t.get("align", 0) or 0) or PLAIN_SMEM_ALIGN
        stages = t.get("stages") if isinstance(t.get("stages"), int) else 1
        total += -(-size // align) * align * stages
        max_align = max(max_align, align)
    return total + (max_align if max_align > PLAIN_SMEM_ALIGN else 0)


# --- reading it from JSON -----------------------------------------------------------------------------

_REQUIRED = object()
TOP_FIELDS = ("kernel", "target", "tensors", "scalars", "params", "grid", "block", "dynamic_smem", "requires",
              "aligned", "readonly", "tma", "cluster", "unaligned")
PARAM_FIELDS = {"tensor_map": ("name", "kind", "tma"), "pointer": ("name", "kind", "dtype", "tensor"),
                "scalar": ("name", "kind", "dtype", "size", "scalar"), "workspace": ("name", "kind", "dtype", "dims"),
                "launch_count": ("name", "kind", "dtype")}
TMA_FIELDS = ("param", "tensor", *DESC_FIELDS)
MAX_DIMS = 3  # grid, block and cluster have at most three entries (padded with 1)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_dim(v: Any) -> bool:
    return isinstance(v, str) or _is_int(v)


_KINDS: dict[Callable[[Any], bool], str] = {_is_int: "an int", _is_dim: "a size expression or an int"}


class _Reader:
    """One JSON description being read: typed access whose errors name the field (`tma[0].box`)."""

    def __init__(self, data: Any):
        if not isinstance(data, dict):
            raise LaunchError(f"a launch description is a JSON object, not {type(data).__name__}")
        self.data = data
        kernel = data.get("kernel")
        self.kernel = kernel if isinstance(kernel, str) else "?"

    def bad(self, msg: str) -> LaunchError:
        return LaunchError(f"launch description of '{self.kernel}': {msg}")

    def obj(self, value: Any, where: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise self.bad(f"{where} is not an object: {value!r}")
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise self.bad(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(allowed)})")
        return value

    def get(self, d: dict, key: str, where: str, default: Any = _REQUIRED) -> Any:
        if key not in d:
            if default is _REQUIRED:
                raise self.bad(f"{where}: missing '{key}'" if where else f"missing '{key}'")
            return default
        return d[key]

    def string(self, d: dict, key: str, where: str, default: Any = _REQUIRED) -> Any:
        v = self.get(d, key, where, default)
        if v is not default and not isinstance(v, str):
            raise self.bad(f"{_at(where, key)} is not a string: {v!r}")
        return v

    def integer(self, d: dict, key: str, where: str, default: Any = _REQUIRED) -> Any:
        v = self.get(d, key, where, default)
        if v is not default and not _is_int(v):
            raise self.bad(f"{_at(where, key)} is not an int: {v!r}")
        return v

    def dim(self, d: dict, key: str, where: str) -> Dim:
        v = self.get(d, key, where)
        if not _is_dim(v):
            raise self.bad(f"{_at(where, key)} is not a size expression or an int: {v!r}")
        return v

    def items(self, d: dict, key: str, where: str, ok: Callable[[Any], bool] | None = None,
              default: Any = _REQUIRED) -> tuple:
        """A list field, as a tuple; with `ok`, each item must pass it (an int, a dim)."""
        v = self.get(d, key, where, default)
        if v is default:
            return v
        if not isinstance(v, list):
            raise self.bad(f"{_at(where, key)} is not a list: {v!r}")
        if ok is not None:
            for i, x in enumerate(v):
                if not ok(x):
                    raise self.bad(f"{_at(where, key)}[{i}] is not {_KINDS[ok]}: {x!r}")
        return tuple(v)

    def names(self, d: dict, key: str, where: str) -> tuple[str, ...]:
        v = self.items(d, key, where, default=())
        for i, x in enumerate(v):
            if not isinstance(x, str):
                raise self.bad(f"{_at(where, key)}[{i}] is not a name: {x!r}")
        return v

    def triple(self, d: dict, key: str, ok: Callable[[Any], bool], default: Any = _REQUIRED) -> Any:
        """grid, block, cluster: at most three entries, padded with 1."""
        v = self.items(d, key, "", ok, default)
        if v is default:
            return v
        if len(v) > MAX_DIMS:
            raise self.bad(f"{key} has {len(v)} entries; grid, block and cluster have at most {MAX_DIMS}")
        return (*v, *(1,) * (MAX_DIMS - len(v)))

    # --- the records -------------------------------------------------------------------------------

    def each(self, d: dict, key: str, read: Callable[..., Any], *extra: Any, default: Any = ()) -> tuple:
        """`read(item, "key[i]", *extra)` for every item of the list field `key`."""
        return tuple(read(x, f"{key}[{i}]", *extra) for i, x in enumerate(self.items(d, key, "", default=default)))

    def description(self) -> LaunchDescription:
        d = self.obj(self.data, "the description", TOP_FIELDS)
        tensors = self.each(d, "tensors", self.tensor)
        by_name = {t.name: t for t in tensors}
        return LaunchDescription(
            kernel=self.string(d, "kernel", ""),
            target=self.string(d, "target", "", DEFAULT_TARGET),
            tensors=tensors,
            scalars=self.each(d, "scalars", self.scalar),
            params=self.each(d, "params", self.param, by_name, default=_REQUIRED),
            grid=self.triple(d, "grid", _is_dim),
            block=self.triple(d, "block", _is_int),
            dynamic_smem=self.integer(d, "dynamic_smem", "", 0),
            requires=self.each(d, "requires", self.requirement),
            aligned=self.each(d, "aligned", self.alignment),
            readonly=self.names(d, "readonly", ""),
            tma=self.each(d, "tma", self.tma, by_name),
            cluster=self.triple(d, "cluster", _is_int, None),
            unaligned=self.names(d, "unaligned", ""),
        )

    def tensor(self, value: Any, where: str) -> TensorArg:
        t = self.obj(value, where, ("name", "dtype", "dims"))
        return TensorArg(self.string(t, "name", where), self.string(t, "dtype", where),
                         self.items(t, "dims", where, _is_dim))

    def scalar(self, value: Any, where: str) -> ScalarArg:
        s = self.obj(value, where, ("name", "dtype"))
        return ScalarArg(self.string(s, "name", where), self.string(s, "dtype", where))

    def param(self, value: Any, where: str, tensors: dict[str, TensorArg]) -> Param:
        if not isinstance(value, dict):
            raise self.bad(f"{where} is not an object: {value!r}")
        kind = value.get("kind")
        if kind not in PARAM_FIELDS:
            raise self.bad(f"param '{value.get('name')}' has unknown kind {kind!r}")
        p = self.obj(value, where, PARAM_FIELDS[kind])
        name = self.string(p, "name", where)
        if kind == "tensor_map":
            return TensorMapParam(name, self.integer(p, "tma", where))
        if kind == "pointer":
            tensor = self.string(p, "tensor", where)
            if tensor not in tensors:  # its dtype defaults to the tensor's
                raise self.bad(f"param '{name}' points at unknown tensor {tensor!r}")
            return PointerParam(name, self.string(p, "dtype", where, tensors[tensor].dtype), tensor)
        dtype = self.string(p, "dtype", where)
        if kind == "workspace":
            return WorkspaceParam(name, dtype, self.items(p, "dims", where, _is_dim))
        if kind == "launch_count":
            return LaunchCountParam(name, dtype)
        if "size" in p:
            if "scalar" in p:
                raise self.bad(f"scalar param '{name}' names both a size and a user scalar")
            return SizeParam(name, dtype, self.dim(p, "size", where))
        if "scalar" not in p:
            raise self.bad(f"scalar param '{name}' names neither a size nor a user scalar")
        return ScalarParam(name, dtype, self.string(p, "scalar", where))

    def requirement(self, value: Any, where: str) -> Requirement:
        r = self.obj(value, where, ("expr", "equals", "why"))
        return Requirement(self.dim(r, "expr", where), self.integer(r, "equals", where),
                           self.string(r, "why", where, None))

    def alignment(self, value: Any, where: str) -> Alignment:
        a = self.obj(value, where, ("tensor", "bytes", "why"))
        return Alignment(self.string(a, "tensor", where), self.integer(a, "bytes", where),
                         self.string(a, "why", where, None))

    def tma(self, value: Any, where: str, tensors: dict[str, TensorArg]) -> TmaSpec:
        t = self.obj(value, where, TMA_FIELDS)
        tensor = self.string(t, "tensor", where)
        if tensor not in tensors:  # its dtype defaults to the tensor's
            raise self.bad(f"{where}: unknown tensor {tensor!r}")
        dims = self.items(t, "dims", where, _is_dim)
        return TmaSpec(param=self.string(t, "param", where), tensor=tensor,
                       dtype=self.string(t, "dtype", where, tensors[tensor].dtype),
                       rank=self.integer(t, "rank", where, len(dims)), dims=dims,
                       strides=self.items(t, "strides", where, _is_dim), box=self.items(t, "box", where, _is_int),
                       elem_strides=self.items(t, "elem_strides", where, _is_int, (1,) * len(dims)),
                       swizzle=self.integer(t, "swizzle", where, TMA_DEFAULT_SWIZZLE),
                       l2_promotion=self.integer(t, "l2_promotion", where, TMA_DEFAULT_L2_PROMOTION),
                       oob_fill=self.string(t, "oob_fill", where, TMA_DEFAULT_OOB_FILL))


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- checking it ------------------------------------------------------------------------------------

def _validate(launch: LaunchDescription) -> None:
    def bad(msg: str) -> LaunchError:
        return LaunchError(f"launch description of '{launch.kernel}': {msg}")

    if len(launch.grid) != MAX_DIMS or len(launch.block) != MAX_DIMS:
        raise bad("grid and block have 3 entries")
    if math.prod(launch.block) > MAX_THREADS_PER_BLOCK or min(launch.block) < 1:
        raise bad(f"block {list(launch.block)} is not 1..{MAX_THREADS_PER_BLOCK} threads")
    smem = launch.dynamic_smem
    if not 0 <= smem <= SMEM_PER_BLOCK:
        raise bad(f"dynamic_smem {smem!r} is not 0..{SMEM_PER_BLOCK} bytes (the most a block may have)")
    if launch.cluster is not None and min(launch.cluster) < 1:
        raise bad(f"cluster {list(launch.cluster)} must be positive")
    _check_grid(launch.grid, launch.tensors, bad)
    tensors = {t.name: t for t in launch.tensors}
    scalars = {s.name for s in launch.scalars}
    for t in launch.tensors:
        if t.dtype not in TENSOR_DTYPES:
            raise bad(f"tensor '{t.name}' has unknown dtype {t.dtype!r}")
    for s in launch.scalars:
        if s.dtype not in SCALAR_DTYPES:
            raise bad(f"scalar '{s.name}' has unsupported dtype {s.dtype!r}")
    for p in launch.params:
        if isinstance(p, TensorMapParam):
            if not 0 <= p.tma < len(launch.tma):
                raise bad(f"param '{p.name}' names tma entry {p.tma}, which does not exist")
        elif isinstance(p, PointerParam):
            if p.tensor not in tensors:
                raise bad(f"param '{p.name}' points at unknown tensor {p.tensor!r}")
        elif isinstance(p, (SizeParam, ScalarParam)):
            if p.dtype not in SCALAR_DTYPES:
                raise bad(f"param '{p.name}' has unsupported dtype {p.dtype!r}")
            if isinstance(p, ScalarParam) and p.scalar not in scalars:
                raise bad(f"scalar param '{p.name}' names neither a size nor a user scalar")
        elif isinstance(p, WorkspaceParam):
            if p.dtype not in DTYPE_BYTES or not all(_is_int(d) or d == NUM_SMS_NAME for d in p.dims):
                raise bad(f"workspace param '{p.name}' needs a dtype and dims of ints or {NUM_SMS_NAME}")
        elif isinstance(p, LaunchCountParam):
            if p.dtype != "i32":
                raise bad(f"launch_count param '{p.name}' is i32")
    for a in launch.aligned:
        if a.tensor not in tensors:
            raise bad(f"aligned entry {a.to_json()} names no tensor of the kernel")
        if a.bytes < 1 or a.bytes & (a.bytes - 1):
            raise bad(f"aligned entry {a.to_json()} needs 'bytes', a power of two")
    for i, t in enumerate(launch.tma):
        _check_tma_spec(t, tensors, lambda msg, i=i: bad(f"tma[{i}]: {msg}"))
    if any(n not in tensors for n in launch.readonly):
        raise bad(f"readonly {list(launch.readonly)!r} must list tensors of the kernel")
    if any(n not in tensors for n in launch.unaligned):  # one without an `aligned` entry has no piece to lift
        raise bad(f"unaligned {list(launch.unaligned)!r} must list tensors of the kernel")


def _check_grid(grid: tuple[Dim, ...], tensors: tuple[TensorArg, ...], bad: Callable[[str], LaunchError]) -> None:
    """Each grid dim is a size expression of the tensors' sizes and NUM_SMS; a number is within CUDA's
    limits (a garbage expression would fail only at bind time, a bad number in the driver)."""
    sizes = {d for t in tensors for d in t.dims if isinstance(d, str) and d.isidentifier()} | {NUM_SMS_NAME}
    for axis, g in enumerate(grid):
        try:
            names = symexpr.check(g)
            unknown = sorted(names - sizes)
            if unknown:
                raise bad(f"grid dim {axis} ({g}) uses {', '.join(unknown)}, which no tensor dim names")
            value = None if names else symexpr.evaluate(g, {})
        except symexpr.SymExprError as e:
            raise bad(f"grid dim {axis}: {e}") from None
        if value is not None and not 1 <= value <= MAX_GRID[axis]:
            raise bad(f"grid dim {axis} is {value} blocks, not 1..{MAX_GRID[axis]}")


def _check_tma_spec(t: TmaSpec, tensors: dict[str, TensorArg], bad: Callable[[str], LaunchError]) -> None:
    if t.tensor not in tensors:
        raise bad(f"unknown tensor {t.tensor!r}")
    dtype, own = t.dtype, tensors[t.tensor].dtype
    if dtype != own:
        raise bad(f"dtype {dtype} differs from tensor '{t.tensor}' ({own})")
    if dtype not in TMA_DTYPES:
        raise bad(f"dtype {dtype!r} has no tensor-map encoding")
    rank = t.rank
    if not 1 <= rank <= TMA_MAX_RANK or len(t.dims) != rank or len(t.box) != rank:
        raise bad(f"rank {rank} does not match dims {list(t.dims)} and box {list(t.box)}")
    if len(t.strides) != rank - 1:
        raise bad(f"a rank-{rank} map has {rank - 1} strides, not {len(t.strides)}")
    if len(t.elem_strides) != rank:
        raise bad("elem_strides must have one entry per dim")
    if t.swizzle not in TMA_SWIZZLES:
        raise bad(f"swizzle {t.swizzle} is not one of {sorted(TMA_SWIZZLES)}")
    if t.l2_promotion not in TMA_L2_PROMOTIONS:
        raise bad(f"l2_promotion {t.l2_promotion} is not one of {sorted(TMA_L2_PROMOTIONS)}")
    if t.oob_fill not in TMA_OOB_FILLS:
        raise bad(f"oob_fill {t.oob_fill!r} is not one of {sorted(TMA_OOB_FILLS)}")
    if any(not 1 <= b <= TMA_MAX_BOX for b in t.box):
        raise bad(f"box {list(t.box)} entries must be 1..{TMA_MAX_BOX}")
    if any(not 1 <= e <= TMA_MAX_ELEM_STRIDE for e in t.elem_strides):
        raise bad(f"elem_strides {list(t.elem_strides)} entries must be 1..{TMA_MAX_ELEM_STRIDE}")
    inner_bytes = t.box[0] * DTYPE_BYTES[dtype]
    if inner_bytes % TMA_INNER_BYTES_ALIGN:
        raise bad(f"inner box dim {t.box[0]} x {DTYPE_BYTES[dtype]} B is not a multiple of 16 bytes")
    if t.swizzle and inner_bytes > t.swizzle:
        raise bad(f"inner box dim is {inner_bytes} bytes, wider than the {t.swizzle}B swizzle span")
