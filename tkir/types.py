"""Types of the tile IR: scalars, global tensors, shared and register tiles and vectors.

Every type prints in one textual form that `tkir.parser` reads back:

    i32   f32   bf16
    gl<bf16>[M, K]                       global tensor, symbolic or fixed dims
    st<bf16, 128, 64>                    shared tile (rows, cols)
    st<bf16, 128, 64, swizzle=128, align=1024>   ... after select-swizzle
    sv<f32, 128>                         shared vector
    rt<f32, 128, 256, layout=wgmma_acc>  register tile; passes add layout attributes
    rv<f32, 128, axis=row>               register vector

Attributes (`swizzle`, `align`, `layout`, `pad`, ...) are an open, ordered key=value list so
that passes can record decisions in the type without changing this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

# dtype name -> size in bytes. fp8 names follow PTX (e4m3, e5m2).
DTYPE_BYTES: dict[str, int] = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "e4m3": 1,
    "e5m2": 1,
    "i32": 4,
    "i64": 8,  # mbarrier objects (8-byte shared words)
    "u32": 4,
    "i1": 1,
}
# NUMPY_DTYPES: dtype name -> the numpy dtype of arrays holding it (bf16 and fp8 from ml_dtypes; e4m3
# is PTX's e4m3, finite with NaN only: "fn"). Built on first use by the module's __getattr__: only the
# interpreter and the runtime need it, and `import tkir` / `tkc compile` need not import ml_dtypes.
if TYPE_CHECKING:
    NUMPY_DTYPES: dict[str, np.dtype]


def __getattr__(name: str) -> dict[str, np.dtype]:
    if name != "NUMPY_DTYPES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import ml_dtypes
    import numpy as np

    table = {
        "bf16": np.dtype(ml_dtypes.bfloat16),
        "f16": np.dtype(np.float16),
        "f32": np.dtype(np.float32),
        "e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
        "e5m2": np.dtype(ml_dtypes.float8_e5m2),
        "i32": np.dtype(np.int32),
        "u32": np.dtype(np.uint32),
        "i1": np.dtype(np.bool_),
    }
    globals()[name] = table  # later lookups find it without this function
    return table


FLOAT_DTYPES = frozenset({"bf16", "f16", "f32", "e4m3", "e5m2"})
INT_DTYPES = frozenset({"i32", "u32", "i1"})

# Shared-memory tile dims must be multiples of this (ThunderKittens' base tile, 16x16).
TILE_QUANTUM = 16
# Register tiles may also have fewer rows than a base tile: one row per warp or a few (wide-row
# kernels: a 4 x 8192 tile split over 16 warps). Their columns stay multiples of TILE_QUANTUM; the
# matrix instructions still need whole base tiles (tk.mma refuses the others).
SHORT_TILE_ROWS = (1, 2, 4, 8)


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def format_attr_value(v: object) -> str:
    """Print an attribute value in the IR's attribute syntax (see tkir.parser)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if any(c in r for c in ".einf") else r + ".0"
    if isinstance(v, Symbol):
        return f"@{v.name}"
    if isinstance(v, Ident):
        return v.name
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {format_attr_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Type):
        return str(v)
    raise TypeError(f"cannot print attribute value {v!r}")


@dataclass(frozen=True)
class Symbol:
    """A reference to a module-level entity, printed `@name`."""

    name: str


@dataclass(frozen=True)
class Ident:
    """A bare identifier attribute value such as `row`, `sum` or `wgmma_acc`."""

    name: str

    def __str__(self) -> str:
        return self.name


class Type:
    """Base class of IR types."""

    def __str__(self) -> str:  # pragma: no cover - every subclass overrides
        raise NotImplementedError


def _cached_text(t: Type, text: Callable[[], str]) -> str:
    """A frozen type's text, formatted once per instance: the verifier formats its operands' types into
    every check's message (ir: `expect(cond, f"... {a}")`), after every pass, and a tile type with
    layout attributes takes microseconds to format (10,000 statements spent half their compile time there)."""
    cached = t.__dict__.get("_text")
    if cached is None:
        cached = text()
        object.__setattr__(t, "_text", cached)
    return cached


def _attrs_text(attrs: tuple[tuple[str, object], ...]) -> str:
    return "".join(f", {k}={format_attr_value(v)}" for k, v in attrs)


def _attr_get(attrs: tuple[tuple[str, object], ...], key: str, default: object = None) -> object:
    for k, v in attrs:
        if k == key:
            return v
    return default


def _attr_set(attrs: tuple[tuple[str, object], ...], key: str, value: object) -> tuple:
    out = [(k, v) for k, v in attrs if k != key]
    if value is not None:
        out.append((key, value))
    return tuple(out)


@dataclass(frozen=True)
class ScalarType(Type):
    dtype: str

    def __str__(self) -> str:
        return self.dtype


@dataclass(frozen=True)
class GlobalType(Type):
    """A tensor in global memory: dtype and dims (ints, size names, or size expressions such as
    "H / 4" of the names other dims bind: tkir.symexpr syntax, printed quoted in the IR)."""

    dtype: str
    dims: tuple[int | str, ...]

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size_names(self) -> tuple[str, ...]:
        """The dims that bind a size from the tensor's shape (plain names), in order."""
        return tuple(d for d in self.dims if is_size_name(d))

    @property
    def dim_exprs(self) -> tuple[tuple[int, str], ...]:
        """(axis, expression) of each dim that is an expression of sizes, checked at launch."""
        return tuple((i, d) for i, d in enumerate(self.dims) if isinstance(d, str) and not is_size_name(d))

    def __str__(self) -> str:
        shown = (f'"{d}"' if isinstance(d, str) and not is_size_name(d) else str(d) for d in self.dims)
        return f"gl<{self.dtype}>[{', '.join(shown)}]"


def is_size_name(d: object) -> bool:
    """Whether a global dim is a size name (bound from a tensor's shape), not a number or an expression."""
    return isinstance(d, str) and d.isidentifier()


@dataclass(frozen=True)
class TileType(Type):
    """Shared (`st`) or register (`rt`) tile: rows x cols of dtype, plus pass-recorded attrs."""

    space: str  # "st" or "rt"
    dtype: str
    rows: int
    cols: int
    attrs: tuple[tuple[str, object], ...] = field(default=())

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * dtype_bytes(self.dtype)

    def get(self, key: str, default: object = None) -> object:
        return _attr_get(self.attrs, key, default)

    def with_attr(self, key: str, value: object) -> TileType:
        return TileType(self.space, self.dtype, self.rows, self.cols, _attr_set(self.attrs, key, value))

    def with_dtype(self, dtype: str) -> TileType:
        return TileType(self.space, dtype, self.rows, self.cols, self.attrs)

    def bare(self) -> TileType:
        """The same tile without pass-recorded attributes (for shape/dtype comparisons)."""
        return TileType(self.space, self.dtype, self.rows, self.cols)

    def __str__(self) -> str:
        return _cached_text(
            self, lambda: f"{self.space}<{self.dtype}, {self.rows}, {self.cols}{_attrs_text(self.attrs)}>")


@dataclass(frozen=True)
class VectorType(Type):
    """Shared (`sv`) or register (`rv`) vector of length n."""

    space: str  # "sv" or "rv"
    dtype: str
    n: int
    attrs: tuple[tuple[str, object], ...] = field(default=())

    @property
    def nbytes(self) -> int:
        return self.n * dtype_bytes(self.dtype)

    def get(self, key: str, default: object = None) -> object:
        return _attr_get(self.attrs, key, default)

    def with_attr(self, key: str, value: object) -> VectorType:
        return VectorType(self.space, self.dtype, self.n, _attr_set(self.attrs, key, value))

    def with_dtype(self, dtype: str) -> VectorType:
        return VectorType(self.space, dtype, self.n, self.attrs)

    def bare(self) -> VectorType:
        return VectorType(self.space, self.dtype, self.n)

    def __str__(self) -> str:
        return _cached_text(self, lambda: f"{self.space}<{self.dtype}, {self.n}{_attrs_text(self.attrs)}>")


def scalar(dtype: str) -> ScalarType:
    return ScalarType(dtype)


I32 = ScalarType("i32")
F32 = ScalarType("f32")


def st(dtype: str, rows: int, cols: int, **attrs: object) -> TileType:
    return TileType("st", dtype, rows, cols, tuple(attrs.items()))


def rt(dtype: str, rows: int, cols: int, **attrs: object) -> TileType:
    return TileType("rt", dtype, rows, cols, tuple(attrs.items()))


def sv(dtype: str, n: int, **attrs: object) -> VectorType:
    return VectorType("sv", dtype, n, tuple(attrs.items()))


def rv(dtype: str, n: int, **attrs: object) -> VectorType:
    return VectorType("rv", dtype, n, tuple(attrs.items()))


def is_shared(t: Type) -> bool:
    return isinstance(t, (TileType, VectorType)) and t.space in ("st", "sv")


def is_register(t: Type) -> bool:
    return isinstance(t, (TileType, VectorType)) and t.space in ("rt", "rv")


def elem_dtype(t: Type) -> str:
    return t.dtype  # every IR type has a dtype
