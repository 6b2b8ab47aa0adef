"""Layout math, free of IR: swizzles, shared-tile panels, register fragments and the bank model.

Used by the passes infer-layouts, select-swizzle and bank-conflicts (and by tests/report):

* `swizzle(o, span)`: the byte-offset XOR of HOPPER.md §3.1 (128B/64B/32B; none for 16B).
* `SharedLayout`: where logical byte (row, byte column) of a shared tile lives. A tile with a span
  is stored as column panels of `span` bytes (panel-major, rows at `span` pitch inside a panel,
  swizzled within the panel); span 0 is row-major with `pad` extra bytes per row. Span 16 is the
  unswizzled *interleaved* layout (CuTe's INTERLEAVE, PTX's "no swizzling" canonical layout): each
  16-byte column chunk is a panel, so every 8 rows x 16 B core matrix is 128 contiguous bytes. It is
  the only unswizzled layout wgmma reads when rows are wider than 16 B (HOPPER.md §2.3-2.4).
* `RegisterLayout`: a register tile's or vector's fragment layout, the type attr printed as
  `layout={kind = ..., ...}` (`to_attr`/`from_attr`, `layout_of(type)`); `fragment(layout, dtype,
  shape)`: which logical elements each thread holds, in register order.
* `Access` + `wavefronts`: the 32-bank x 4-byte model of one warp-wide shared-memory instruction,
  and the access patterns (ldmatrix/stmatrix, v2/v4 ld/st.shared, wgmma core-matrix fetches, TMA
  writes) that the passes attribute to each op. `brute_force_wavefronts` is the slow reference.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tkir.facts import FactError, check_keys, count, malformed, table
from tkir.target import MAX_THREADS_PER_BLOCK, MMA_K, MMA_M, MMA_N, QUAD, WARP, WARPGROUP, WGMMA_M
from tkir.target import VECTOR_BYTES as CHUNK_BYTES  # one ldmatrix row / core-matrix row / v4 access
from tkir.types import DTYPE_BYTES, Ident, TileType, VectorType

if TYPE_CHECKING:
    from tkir.ir import Loc

# --- hardware constants (HOPPER.md §0, §3) -------------------------------------------------------
SWIZZLE_SPANS = (0, 32, 64, 128)  # bytes; 0 = none. The spans the passes choose between
INTERLEAVED = 16                   # 16-byte panels, no XOR: wgmma's unswizzled operand layout (§2.3)
SHARED_SPANS = (0, INTERLEAVED, 32, 64, 128)  # every span a SharedLayout may have
SWIZZLE_MASK = {0: 0x00, 16: 0x00, 32: 0x10, 64: 0x30, 128: 0x70}  # o ^ ((o >> 3) & mask), §3.1
SWIZZLE_ALIGN = {0: 128, 16: 128, 32: 256, 64: 512, 128: 1024}  # pattern period §3.2; TMA's 128 B min
NUM_BANKS = 32            # shared memory banks
BANK_BYTES = 4            # bytes per bank word
WAVEFRONT_BYTES = NUM_BANKS * BANK_BYTES  # 128 bytes served per wavefront
# A `row` / `col_vec` register tile moves to and from global memory one lane chunk (`vec` elements) per
# access when the chunk is one of these sizes: ld/st.global .b32, .v2.b32, .v4.b32, each needing an
# address aligned to its size (PTX ISA, "Data Movement and Conversion Instructions: ld", vector
# operands); narrower chunks (one bf16) are copied element by element.
VECTOR_ACCESS_BYTES = (4, 8, 16)
REGS_CACHE = 1024  # (layout, dtype, shape) triples whose register count regs_per_thread keeps
LAYOUTS_CACHE = 4096  # distinct layout attributes whose RegisterLayout layout_of keeps


def vector_access_bytes(layout: RegisterLayout | None, dtype: str) -> int | None:
    """Bytes of one global access of a lane chunk of a `row` / `col_vec` layout (VECTOR_ACCESS_BYTES),
    None where the layout's copies are element by element."""
    if layout is None or layout.kind not in ("row", "col_vec") or layout.vec is None:
        return None
    n = layout.vec * dtype_bytes(dtype)
    return n if n in VECTOR_ACCESS_BYTES else None


def swizzle(offset: int | np.ndarray, span: int) -> int | np.ndarray:
    """Physical byte offset of byte `offset` inside a swizzle pattern of `span` bytes (§3.1)."""
    return offset ^ ((offset >> 3) & SWIZZLE_MASK[span])


def tma_swizzle(span: int) -> int:
    """The TMA swizzle mode (bytes, 0 = CU_TENSOR_MAP_SWIZZLE_NONE) that fills a tile of this span:
    an interleaved tile is filled unswizzled, one 16-byte-wide box per panel."""
    return 0 if span == INTERLEAVED else span


def tma_box(t: TileType | VectorType, rank: int) -> tuple[list[int], int]:
    """The TMA box (innermost first) that fills shared tile or vector `t` from a rank-`rank` tensor,
    and how many boxes: one per column panel when rows are wider than the swizzle span (create-tma's
    convention, read back by the verifier), leading dims 1."""
    eb = DTYPE_BYTES[t.dtype]
    rows, cols = (t.rows, t.cols) if isinstance(t, TileType) else (1, t.n)
    lay = SharedLayout(t.dtype, rows, cols, int(t.get("swizzle", 0) or 0))
    inner, boxes = lay.box_bytes // eb, lay.row_bytes // lay.box_bytes
    if isinstance(t, TileType):
        return [inner, rows] + [1] * (rank - 2), boxes
    return [inner] + [1] * (rank - 1), boxes


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


# --- shared tiles -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharedLayout:
    """Physical layout of a shared tile (st) or vector (sv, rows = 1)."""

    dtype: str
    rows: int
    cols: int
    swizzle: int = 0
    pad: int = 0

    @property
    def row_bytes(self) -> int:
        return self.cols * dtype_bytes(self.dtype)

    @property
    def pitch(self) -> int:
        """Distance between consecutive rows (inside a panel for swizzled tiles)."""
        return self.swizzle if self.swizzle else self.row_bytes + self.pad

    @property
    def panels(self) -> int:
        return self.row_bytes // self.swizzle if self.swizzle else 1

    @property
    def box_bytes(self) -> int:
        """Bytes of each row that one TMA box fills: a panel when rows are wider than the span (one
        box per panel, create-tma), else the whole row."""
        return self.swizzle if self.swizzle and self.row_bytes > self.swizzle else self.row_bytes

    @property
    def size_bytes(self) -> int:
        return self.rows * (self.row_bytes + (0 if self.swizzle else self.pad))

    def problem(self) -> str | None:
        """Why this layout cannot exist, or None."""
        if self.swizzle not in SHARED_SPANS:
            return f"swizzle must be one of {', '.join(map(str, SHARED_SPANS))} bytes"
        if self.swizzle and self.row_bytes % self.swizzle:
            return (f"rows of {self.row_bytes} bytes are not a whole number of {self.swizzle}-byte "
                    f"panels")
        if self.swizzle and self.pad:
            return "row padding applies to unswizzled tiles only"
        return None

    def offset(self, row: np.ndarray, bytecol: np.ndarray) -> np.ndarray:
        """Physical byte offset of logical byte `bytecol` of row `row` (arrays broadcast)."""
        row, bytecol = np.asarray(row), np.asarray(bytecol)
        if not self.swizzle:
            return row * self.pitch + bytecol
        s = self.swizzle
        panel, within = bytecol // s, bytecol % s
        return panel * (self.rows * s) + swizzle(row * s + within, s)


# --- register layouts ---------------------------------------------------------------------------
# A layout is printed in the type as an attribute dict: {kind = wgmma_acc, wg = 2}. Keys per kind
# (every layout has exactly one of wg / warps):
#   wgmma_acc, wgmma_a: wg            mma_a, mma_b, mma_c: warps        row: warps, vec
#   acc_row_vec: wg | warps           row_vec: warps                    col_vec: of, wg | warps
# (a col_vec of row has vec too). `row`, `row_vec` and `col_vec of row` may have `parts = P` (> 1):
# P consecutive warps share each row group, warp w holding columns [(w % P) C/P, (w % P + 1) C/P) of
# the rows of group w / P (wide rows: fewer registers per thread; row reductions then combine the P
# warps' partial results through shared memory). `mma_c`, `acc_row_vec` over warps and `col_vec of
# mma_c` may have `warps_n = N` (> 1): the warps form a (W/N) x N grid over the accumulator, warp w
# owning the (R N/W) x (C/N) block at rows (w / N) R N/W, columns (w % N) C/N, in the m16n8 fragment
# map (CUTLASS's warp tiles: each warp reads only its rows of A and its columns of B). `RegisterLayout`
# checks these; `layout_of(type)` reads one.

TILE_KINDS = ("wgmma_acc", "wgmma_a", "mma_a", "mma_b", "mma_c", "row")
VECTOR_KINDS = ("acc_row_vec", "row_vec", "col_vec")
COL_VEC_OF = ("row", "wgmma_acc", "mma_c")  # the tile kinds a col_vec's columns can follow
LAYOUT_ATTR = "layout"
# kind -> the splits it takes: over warpgroups ("wg"), warps ("warps"), or either
_SPLIT = {"wgmma_acc": ("wg",), "wgmma_a": ("wg",), "mma_a": ("warps",), "mma_b": ("warps",),
          "mma_c": ("warps",), "row": ("warps",), "acc_row_vec": ("wg", "warps"), "row_vec": ("warps",),
          "col_vec": ("wg", "warps")}


@dataclass(frozen=True)
class RegisterLayout:
    """How a register tile or vector is spread over threads (the type attr `layout`, written by
    infer-layouts): a kind and its parameters (`of` for col_vec, the split over warpgroups `wg` or
    warps `warps`, the chunk width `vec` of `row` layouts). Constructing one checks that the
    parameters fit the kind (FactError otherwise)."""

    kind: str
    of: str | None = None
    wg: int | None = None
    warps: int | None = None
    vec: int | None = None
    parts: int | None = None  # warps sharing each row (row, row_vec, col_vec of row); None = 1
    warps_n: int | None = None  # warps along the columns (mma_c, acc_row_vec, col_vec of mma_c); None = 1

    def __post_init__(self) -> None:
        if self.kind not in _SPLIT:
            raise FactError(None, f"unknown kind '{self.kind}' (expected {', '.join(TILE_KINDS + VECTOR_KINDS)})")
        for name in ("wg", "warps", "vec", "parts", "warps_n"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise FactError(None, f"'{name}' must be a positive integer, not {v!r}")
        given = [k for k in ("wg", "warps") if getattr(self, k) is not None]
        allowed = _SPLIT[self.kind]
        if len(given) != 1 or given[0] not in allowed:
            raise FactError(None, f"{self.kind} takes {' or '.join(repr(k) for k in allowed)}, exactly one")
        if (self.of is not None) != (self.kind == "col_vec"):
            raise FactError(None, "'of' belongs to col_vec only" if self.of is not None else "col_vec needs 'of'")
        if self.of is not None and self.of not in COL_VEC_OF:
            raise FactError(None, f"col_vec of '{self.of}' is not a layout (expected {', '.join(COL_VEC_OF)})")
        needs_vec = self.kind == "row" or self.of == "row"
        if needs_vec and self.vec is None:
            raise FactError(None, f"{self.kind}{' of row' if self.of else ''} needs 'vec'")
        if self.vec is not None and not needs_vec:
            raise FactError(None, f"'vec' belongs to row and col_vec of row layouts, not {self.kind}")
        if self.parts is not None:
            if not (self.kind in ("row", "row_vec") or self.of == "row"):
                raise FactError(None, f"'parts' belongs to row, row_vec and col_vec of row layouts, not {self.kind}")
            if self.parts < 2 or self.warps is None or self.warps % self.parts:
                raise FactError(None, f"'parts' must be 2 or more and divide warps = {self.warps}, not {self.parts}")
        if self.warps_n is not None:
            if not (self.kind in ("mma_c", "acc_row_vec") or self.of == "mma_c") or self.warps is None:
                raise FactError(None, f"'warps_n' belongs to mma_c, acc_row_vec and col_vec of mma_c layouts over "
                                      f"warps, not {self.kind}{' of ' + self.of if self.of else ''}"
                                      f"{'' if self.warps is not None else ' over warpgroups'}")
            if self.warps_n < 2 or self.warps % self.warps_n:
                raise FactError(None, f"'warps_n' must be 2 or more and divide warps = {self.warps}, "
                                      f"not {self.warps_n}")

    @property
    def threads(self) -> int:
        """Threads that hold the value: 128 per warpgroup or 32 per warp."""
        return WARPGROUP * self.wg if self.wg is not None else WARP * self.split

    @property
    def split(self) -> int:
        """The number of warpgroups (wg) or warps (warps) the layout spreads rows over."""
        n = self.wg if self.wg is not None else self.warps
        assert n is not None  # __post_init__: exactly one of them
        return n

    @property
    def nparts(self) -> int:
        """Warps sharing each row (1 unless the rows are split over warps)."""
        return self.parts or 1

    @property
    def groups(self) -> int:
        """Row groups: warps / parts (the warps that own different rows)."""
        return self.split // self.nparts

    @property
    def col_warps(self) -> int:
        """Warps along the columns (`warps_n`; 1 unless the warps form a 2-D grid)."""
        return self.warps_n or 1

    @property
    def row_warps(self) -> int:
        """Warps (or warpgroups) along the rows: split / col_warps."""
        return self.split // self.col_warps

    @property
    def chunk(self) -> int:
        """Elements per lane chunk (`vec`) of a row layout or a col_vec of one."""
        if self.vec is None:
            raise FactError(None, f"a {self.kind} layout has no 'vec'")
        return self.vec

    def to_attr(self) -> dict[str, object]:
        """The attribute dict printed in the type: kind (and `of`) as identifiers, then the counts."""
        out: dict[str, object] = {"kind": Ident(self.kind)}
        if self.of is not None:
            out["of"] = Ident(self.of)
        for k in ("wg", "warps", "vec", "parts", "warps_n"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    @classmethod
    def from_attr(cls, attr: object, loc: Loc | None = None) -> RegisterLayout:
        """The layout a `layout` attribute holds; FactError at `loc` when it is malformed."""
        try:
            d = table(attr)
            check_keys(d, ("kind",), ("of", "wg", "warps", "vec", "parts", "warps_n"))
            kind, of = d["kind"], d.get("of")
            for key, v in (("kind", kind), ("of", of)):
                if v is not None and not isinstance(v, (Ident, str)):
                    raise FactError(None, f"'{key}' must be a layout name, not {v!r}")
            return cls(str(kind), None if of is None else str(of), count(d, "wg", 1), count(d, "warps", 1),
                       count(d, "vec", 1), count(d, "parts", 1), count(d, "warps_n", 1))
        except FactError as e:
            raise malformed("layout", attr, e.message, loc) from None


def layout_of(t: object, loc: Loc | None = None) -> RegisterLayout | None:
    """The register layout of type `t` (its `layout` attribute), None when it has none (shared and
    scalar types, register values before infer-layouts); FactError at `loc` when it is malformed."""
    if not isinstance(t, (TileType, VectorType)):
        return None
    cached = t.__dict__.get("_layout", _UNREAD)
    if cached is not _UNREAD:
        return cached
    attr = t.get(LAYOUT_ATTR)
    lay = None if attr is None else _read_layout(attr, loc)
    # read once per type instance (types are frozen; tkir.types caches their text the same way): the
    # backend asks for the layout of every operand of every op, several times
    object.__setattr__(t, "_layout", lay)
    return lay


_UNREAD = object()  # layout_of: no layout read from this type yet
_LAYOUTS: dict[tuple, RegisterLayout] = {}  # a layout attribute's (key, type, value) triples -> its layout


def _read_layout(attr: object, loc: Loc | None) -> RegisterLayout:
    """RegisterLayout.from_attr, remembered per attribute content (every op of a kernel has its own type
    instance, most with one of a few layouts). The key holds each value's type: 4.0 is not 4 here."""
    try:
        key = tuple((k, type(v), v) for k, v in attr.items()) if isinstance(attr, dict) else None
        lay = _LAYOUTS.get(key) if key is not None else None
    except TypeError:  # an unhashable value (hand-written IR): from_attr says what is wrong
        key = lay = None
    if lay is None:
        lay = RegisterLayout.from_attr(attr, loc)
        if key is not None and len(_LAYOUTS) < LAYOUTS_CACHE:
            _LAYOUTS[key] = lay
    return lay


def make_layout(kind: str, *, of: str | None = None, wg: int | None = None, warps: int | None = None,
                vec: int | None = None, parts: int | None = None, warps_n: int | None = None) -> RegisterLayout:
    """A register layout (keywords as printed): make_layout("row", warps=4, vec=8); parts and warps_n of 1
    are left out (the 1-D layouts print as they always did)."""
    return RegisterLayout(kind, of, wg, warps, vec, parts if parts and parts > 1 else None,
                          warps_n if warps_n and warps_n > 1 else None)


def row_layout_warps(rows: int, cols: int, vec: int, max_warps: int) -> int:
    """Warps for a `row` tile: the most (<= max_warps) that split the rows evenly and keep every
    lane of every warp busy (at least 32 chunks per warp); 1 when none does."""
    chunks_per_row = cols // vec
    for w in range(max_warps, 0, -1):
        if rows % w == 0 and (rows // w) * chunks_per_row % WARP == 0:
            return w
    return 1


def mma_warps_n(rows: int, cols: int, warps: int) -> int:
    """Warps along the columns of an `mma_c` accumulator (rows x cols over `warps` warps) that read the
    fewest shared-memory bytes per mma.sync: a warp tile of mb m16 blocks x nb n8 blocks loads, per k16
    step, mb A fragments and nb/2 B fragment pairs (one ldmatrix.x4 each) for mb * nb mma.syncs, i.e.
    1/nb + 1/(2 mb) = 8 N/cols + 8 (W/N)/rows loads per mma.sync. Only grids whose warp tiles are whole
    m16 blocks and whole n16 pairs count; ties go to fewer column warps; 1 when nothing else fits (the
    1-D layout: whole rows per warp). 256 x 128 over 8 warps: 2 (64 x 64 warp tiles, 0.25 loads per
    mma.sync against 0.31 for 32 x 128); 128 x 256: 4 (0.25 against 0.53 for 16 x 256)."""
    best, best_cost = 1, None
    for wn in range(1, warps + 1):
        wm = warps // wn
        if warps % wn or rows % (MMA_M * wm) or cols % (2 * MMA_N * wn):
            continue
        cost = wn * rows + wm * cols  # (wn / cols + wm / rows) * rows * cols: exact, in integers
        if best_cost is None or cost < best_cost:
            best, best_cost = wn, cost
    return best


def row_split(rows: int, cols: int, vec: int, warps: int, max_elems: int) -> tuple[int, int] | None:
    """(row groups G, parts P), G * P = warps, P >= 2, for a `row` tile whose rows are too wide for
    one warp each: the fewest parts that bring a thread's share to at most `max_elems` elements, else
    the split with the smallest share; every lane busy in whole steps. None when no split fits, or
    when none beats the unsplit layout's share (row_layout_warps)."""
    unsplit = rows * cols // (row_layout_warps(rows, cols, vec, warps) * WARP)
    best: tuple[int, int, int] | None = None
    for parts in range(2, warps + 1):
        groups = warps // parts
        if warps % parts or rows % groups or cols % (parts * vec):
            continue
        slab, cpr = rows // groups, cols // parts // vec
        if slab * cpr % WARP:
            continue
        elems = slab * cpr * vec // WARP
        if elems >= unsplit:
            continue
        if elems <= max_elems:
            return groups, parts
        if best is None or elems < best[0]:
            best = (elems, groups, parts)
    return None if best is None else (best[1], best[2])


def fragment(layout: RegisterLayout, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """(threads, elements per thread) array of the logical elements each thread holds, in
    register order: flat index row * cols + col for tiles, index for vectors; -1 = unused slot.
    Raises ValueError when the layout does not fit the shape."""
    if layout.threads > MAX_THREADS_PER_BLOCK:  # hand-written IR: `warps = 2**32` would need 1 TiB here
        raise FactError(None, f"{layout.threads} threads: more than the {MAX_THREADS_PER_BLOCK} a block may have")
    kind = layout.kind
    if kind in TILE_KINDS:
        rows, cols = shape
        coords = _tile_fragment(kind, layout, dtype, rows, cols)
        flat = np.where(coords[..., 0] >= 0, coords[..., 0] * cols + coords[..., 1], -1)
        return flat
    (n,) = shape
    return _vector_fragment(kind, layout, n)


@functools.lru_cache(maxsize=REGS_CACHE)
def regs_per_thread(layout: RegisterLayout, dtype: str, shape: tuple[int, ...]) -> int:
    """32-bit registers each thread needs (16-bit elements pack two per register). Remembered per
    (layout, dtype, shape): plan-occupancy asks once per value of the kernel."""
    frag = fragment(layout, dtype, shape)
    elems = int((frag >= 0).sum(axis=1).max())
    return -(-elems * dtype_bytes(dtype) // BANK_BYTES)


def _lane_parts(threads: int) -> tuple[np.ndarray, ...]:
    t = np.arange(threads)
    lane = t % WARP
    return t, t // WARP, lane, lane // QUAD, lane % QUAD


def _tile_fragment(kind: str, layout: RegisterLayout, dtype: str, rows: int, cols: int) -> np.ndarray:
    threads = layout.threads
    t, warp, lane, g, q = _lane_parts(threads)
    if kind in ("wgmma_acc", "wgmma_a"):
        wg = layout.split
        if rows % (WGMMA_M * wg):
            raise ValueError(f"{rows} rows do not split into {wg} warpgroups of m64 blocks")
        slab = rows // wg
        w = warp % 4
        base = (t // WARPGROUP) * slab + 16 * w + g  # HOPPER §1.5: row = 16w + g + ...
        eb = dtype_bytes(dtype)
        if kind == "wgmma_acc" or eb == 2:  # §1.5 / §1.6 16-bit: col = 8(i>>2) + 2q + (i&1)
            i = np.arange(cols // 2)
            r_off, c_off, q_mul = 8 * ((i >> 1) & 1), 8 * (i >> 2) + (i & 1), 2
        elif eb == 4:  # tf32 A, §1.6: row = 16w + g + 8(i&1), k = q + 4(i>>1)
            i = np.arange(cols // 2)
            r_off, c_off, q_mul = 8 * (i & 1), 4 * (i >> 1), 1
        else:  # 8-bit A, §1.6: row = 16w + g + 8((i>>2)&1), k = 4q + (i&3) + 16(i>>3)
            i = np.arange(cols // 2)
            r_off, c_off, q_mul = 8 * ((i >> 2) & 1), (i & 3) + 16 * (i >> 3), 4
        blocks = np.arange(slab // WGMMA_M) * WGMMA_M
        r = base[:, None, None] + blocks[None, :, None] + r_off[None, None, :]
        c = (q_mul * q)[:, None, None] + c_off[None, None, :] + 0 * blocks[None, :, None]
        return np.stack([r.reshape(threads, -1), c.reshape(threads, -1)], axis=-1)
    if kind in ("mma_a", "mma_c"):
        # §6.3 C: row = g + 8(i>>1), col = 2q + (i&1), per n8 block; A: row = g + 8((i>>1)&1),
        # col = 2q + (i&1) + 8(i>>2), per k16 block: the same formula. With warps_n = N the warps form a
        # (W/N) x N grid and warp w repeats it over its own block (rows of w / N, columns of w % N).
        wm, wn = layout.row_warps, layout.col_warps
        if rows % (MMA_M * wm):
            raise ValueError(f"{rows} rows do not split into {wm} warps of m16 blocks")
        if wn > 1 and cols % (MMA_N * wn):
            raise ValueError(f"{cols} columns do not split into {wn} warps of n8 blocks")
        slab, width = rows // wm, cols // wn
        blocks = np.arange(slab // MMA_M) * MMA_M
        i = np.arange(width // 2)
        r_off, c_off = 8 * ((i >> 1) & 1), 8 * (i >> 2) + (i & 1)
        base = (warp // wn) * slab + g
        col0 = (warp % wn) * width + 2 * q
        r = base[:, None, None] + blocks[None, :, None] + r_off[None, None, :]
        c = col0[:, None, None] + c_off[None, None, :] + 0 * blocks[None, :, None]
        return np.stack([r.reshape(threads, -1), c.reshape(threads, -1)], axis=-1)
    if kind == "mma_b":  # §6.3 B (K x N): k = 2q + (i&1) + 8(i>>1), n = g; every warp holds all
        kb = np.arange(rows // MMA_K) * MMA_K
        nb = np.arange(cols // MMA_N) * MMA_N
        i = np.arange(4)
        k_off = (i & 1) + 8 * (i >> 1)
        full = (threads, len(kb), len(nb), 4)
        r = np.broadcast_to(kb[None, :, None, None] + (2 * q)[:, None, None, None] + k_off, full)
        c = np.broadcast_to(nb[None, None, :, None] + g[:, None, None, None], full)
        return np.stack([r.reshape(threads, -1), c.reshape(threads, -1)], axis=-1)
    if kind == "row":
        return _row_fragment(layout, rows, cols, threads)
    raise ValueError(f"unknown tile layout kind '{kind}'")


def _row_fragment(layout: RegisterLayout, rows: int, cols: int, threads: int) -> np.ndarray:
    """`row`: warp w owns rows [w*R/W, (w+1)*R/W); its lanes walk the slab's vec-element chunks
    in row-major order, lane l taking chunk i*32 + l in its i-th step. With `parts = P`, warps
    w / P = g form row group g (rows [g*R/G, (g+1)*R/G), G = W/P) and warp w walks columns
    [(w % P)*C/P, (w % P + 1)*C/P) of them the same way."""
    warps, vec, parts = layout.split, layout.chunk, layout.nparts
    if rows % (warps // parts) or cols % (vec * parts):
        raise ValueError(f"a {rows}x{cols} tile does not split into {warps // parts} row groups of {parts} "
                         f"warps of {vec}-wide chunks")
    slab, width = rows // (warps // parts), cols // parts
    cpr = width // vec
    steps = -(-slab * cpr // WARP)
    t, warp, lane, _, _ = _lane_parts(threads)
    e = np.arange(steps)[None, :] * WARP + lane[:, None]            # (threads, steps)
    valid = e < slab * cpr
    r = (warp // parts)[:, None] * slab + e // cpr
    c0 = (warp % parts)[:, None] * width + (e % cpr) * vec
    v = np.arange(vec)
    r = np.where(valid, r, -1)[:, :, None] + 0 * v
    c = np.where(valid[:, :, None], c0[:, :, None] + v, -1)
    return np.stack([r.reshape(threads, -1), c.reshape(threads, -1)], axis=-1)


def _vector_fragment(kind: str, layout: RegisterLayout, n: int) -> np.ndarray:
    threads = layout.threads
    t, warp, lane, g, q = _lane_parts(threads)
    if kind == "acc_row_vec":  # one value per accumulator row the thread holds (rows g, g+8)
        if layout.wg is not None:
            wg = layout.wg
            slab = n // wg
            blocks = np.arange(slab // WGMMA_M) * WGMMA_M
            base = (t // WARPGROUP) * slab + 16 * (warp % 4) + g
        else:  # mma_c; with warps_n, the warps of one grid row hold the same rows
            wm, wn = layout.row_warps, layout.col_warps
            if wn > 1 and n % (MMA_M * wm):
                raise ValueError(f"{n} rows do not split into {wm} warps of m16 blocks")
            slab = n // wm
            blocks = np.arange(slab // MMA_M) * MMA_M
            base = (warp // wn) * slab + g
        h = np.array([0, 8])
        return (base[:, None, None] + blocks[None, :, None] + h[None, None, :]).reshape(threads, -1)
    if kind == "row_vec":  # every lane of warp w holds the values of w's rows (of its row group's)
        groups = layout.groups
        slab = n // groups
        return (warp // layout.nparts)[:, None] * slab + np.arange(slab)[None, :]
    if kind == "col_vec":
        of = str(layout.of)
        if of in ("wgmma_acc", "mma_c"):  # cols 8j + 2q + {0, 1}: what the thread's fragment covers
            wn = layout.col_warps  # of the warp's own columns, with warps_n
            if wn > 1 and n % (MMA_N * wn):
                raise ValueError(f"{n} columns do not split into {wn} warps of n8 blocks")
            width = n // wn
            j = np.arange(width // 8) * 8
            cols = ((warp % wn) * width + 2 * q)[:, None, None] + j[None, :, None] + np.arange(2)[None, None, :]
            return cols.reshape(threads, -1)
        if of == "row":  # the columns the thread's chunks cover (of its warp's part of the row)
            vec, parts = layout.chunk, layout.nparts
            if n % (vec * parts):  # as for the row tile it broadcasts along (_row_fragment)
                raise ValueError(f"{n} columns do not split into {parts} part(s) of {vec}-wide chunks")
            width = n // parts
            base = ((warp % parts) * width)[:, None]
            cpr = width // vec
            if WARP % cpr == 0:
                chunks = (lane % cpr)[:, None]
            elif cpr % WARP == 0:
                chunks = lane[:, None] + WARP * np.arange(cpr // WARP)[None, :]
            else:  # lanes meet every chunk: keep the whole vector (the part's columns)
                return base + np.arange(width)[None, :]
            return (base[:, :, None] + chunks[:, :, None] * vec + np.arange(vec)[None, None, :]).reshape(threads, -1)
        raise ValueError(f"col_vec of '{of}' is not a layout")
    raise ValueError(f"unknown vector layout kind '{kind}'")


# Register layouts whose thread holds, of each row it owns, the columns 8t + 2q + {0, 1} (t = 0, 1, ...)
# whatever the width: the wgmma (HOPPER.md §1.5, §1.6) and mma.sync (§6.3) fragment maps.
QUAD_COLUMN_KINDS = ("wgmma_acc", "wgmma_a", "mma_a", "mma_c")


def outer_operand_layout(result: RegisterLayout, axis: str, shape: tuple[int, int],
                         dtype: str) -> RegisterLayout | None:
    """The layout of an operand of `tk.outer` (shape rows x cols) whose result has layout `result`,
    chosen so that the backend finds both factors of every product in the product's own thread or
    in its warp (shuffles), or None when no such layout is known (the caller takes `row`, and the
    backend exchanges the factors through shared memory).

    axis = row: r[i, p Cb + q] = a[i, p] b[i, q]. In a quad-column layout the result's row i is held
    by the threads that hold row i of a tile of the same kind, and column p Cb + q (Cb a multiple of
    8) sits at 2q' + {0, 1} + 8t like column q of b: the operands take the result's layout; b's
    factor is the thread's own, a's is in the same quad (ThunderKittens' mul_slice_row).
    axis = col: r[p Rb + q, j] = a[p, j] b[q, j]. With Rb = 16 (one m16 block) every result row
    p Rb + q is g + 8h within its 16-row block, so a 16-row operand replicated in every warp in the
    m16 fragment map (mma_a / mma_c of one warp: the backend repeats a layout of fewer threads
    over the others) holds b's factor in the thread and a's in the same quad column of the warp
    (ThunderKittens' mul_slice_col)."""
    if result.kind not in QUAD_COLUMN_KINDS:
        return None
    rows, cols = shape
    if axis == "row":
        return result if cols % 8 == 0 else None
    if rows != MMA_M:
        return None
    return make_layout("mma_a" if dtype_bytes(dtype) == 2 else "mma_c", warps=1)


def conversion(src: RegisterLayout, dst: RegisterLayout, dtype: str, shape: tuple[int, ...]) -> tuple[str, int]:
    """How a value moves from layout `src` to `dst`: ("none", 0) when every thread already holds
    what it needs, ("shuffle", n) when every needed element is in the same warp (n = the most
    32-bit shuffles one thread needs), else ("smem", 0) (a round trip through shared memory)."""
    a, b = fragment(src, dtype, shape), fragment(dst, dtype, shape)
    if a.shape[0] != b.shape[0] or dst.kind == "mma_b":
        return "smem", 0
    size = int(np.prod(shape))
    threads = a.shape[0]
    held = np.zeros((threads, size + 1), dtype=bool)
    held[np.arange(threads)[:, None], np.where(a >= 0, a, size)] = True
    held[:, size] = True  # unused slots are "held"
    need = np.where(b >= 0, b, size)
    missing = ~held[np.arange(threads)[:, None], need]
    if not missing.any():
        return "none", 0
    warp_held = np.zeros((threads // WARP, size + 1), dtype=bool)
    for w in range(threads // WARP):
        warp_held[w] = held[w * WARP:(w + 1) * WARP].any(axis=0)
    if not (~warp_held[np.arange(threads)[:, None] // WARP, need]).any():
        per_thread = int(missing.sum(axis=1).max())
        return "shuffle", -(-per_thread * dtype_bytes(dtype) // BANK_BYTES)
    return "smem", 0


# --- the bank model ------------------------------------------------------------------------------


@dataclass
class Access:
    """One kind of warp-wide shared-memory instruction on one tile, all its instances.

    `rows`/`bytecols` are (instructions, 32) arrays of the logical row and byte column each lane
    addresses (-1: lane idle); each lane moves `width` bytes (4, 8 or 16) starting there."""

    op: str
    width: int
    rows: np.ndarray
    bytecols: np.ndarray
    hardware: bool = False


def lanes_per_phase(width: int) -> int:
    """A warp's request is served in phases of 128 bytes: 32 lanes of 4 B, 16 of 8 B, 8 of 16 B; accesses
    narrower than a bank word (1 or 2 B: fp8 and 16-bit elements one at a time) in one phase of 32 lanes."""
    return min(WARP, WAVEFRONT_BYTES // width)


def addresses(access: Access, layout: SharedLayout) -> np.ndarray:
    """(instructions, 32) physical byte addresses (-1 for idle lanes)."""
    phys = layout.offset(np.maximum(access.rows, 0), np.maximum(access.bytecols, 0))
    return np.where(access.rows >= 0, phys, -1)


def wavefronts(addrs: np.ndarray, width: int) -> np.ndarray:
    """Wavefronts of each (instruction, phase): in each phase of `lanes_per_phase(width)` lanes,
    the most distinct `width`-byte units that fall in the same bank group (unit index modulo
    128/width). Lanes asking for the same unit are served together (broadcast). Idle-only phases
    count 0. Assumes width-aligned addresses. Returns an (instructions, phases) int array.
    Accesses narrower than a bank word count whole words: lanes reading bytes of one word are served
    together, as lanes reading the same word are."""
    n_instr = addrs.shape[0]
    lpp = lanes_per_phase(width)
    nphases = WARP // lpp
    ph = addrs.reshape(n_instr, nphases, lpp)
    unit_bytes = max(width, BANK_BYTES)
    slots = WAVEFRONT_BYTES // unit_bytes
    # each phase's units sorted, idle lanes (-1) first; a unit counts once, where it first appears
    unit = np.sort(np.where(ph >= 0, ph // unit_bytes, -1), axis=-1)
    first = np.ones(unit.shape, dtype=bool)
    first[..., 1:] = unit[..., 1:] != unit[..., :-1]
    distinct = first & (unit >= 0)
    # distinct units per (instruction, phase, bank group), all phases in one bincount
    phase = np.arange(n_instr * nphases).reshape(n_instr, nphases, 1)
    cell = (phase * slots + unit % slots)[distinct]
    counts = np.bincount(cell, minlength=n_instr * nphases * slots).reshape(n_instr, nphases, slots)
    return counts.max(axis=-1).astype(np.int64)


def conflict_degree(access: Access, layout: SharedLayout) -> int:
    """Wavefronts per phase of the worst instruction (1 = conflict-free; the hardware minimum)."""
    w = wavefronts(addresses(access, layout), access.width)
    return max(int(w.max()), 1) if w.size else 1


def brute_force_wavefronts(lane_addrs: list[int], width: int) -> list[int]:
    """Reference model, one instruction: per phase, enumerate every 4-byte word each active lane
    touches, group distinct words by bank (word % 32), and take the largest group."""
    lpp = WAVEFRONT_BYTES // width
    out = []
    for p in range(0, WARP, lpp):
        banks: dict[int, set[int]] = {}
        for a in lane_addrs[p:p + lpp]:
            if a < 0:
                continue
            for byte in range(a, a + width):
                word = byte // BANK_BYTES
                banks.setdefault(word % NUM_BANKS, set()).add(word)
        out.append(max((len(s) for s in banks.values()), default=0))
    return out


# --- access patterns the passes attribute to ops -------------------------------------------------


def _pack(rows: list[np.ndarray], cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if not rows:
        return np.full((0, WARP), -1), np.full((0, WARP), -1)
    return np.stack(rows), np.stack(cols)


def ldmatrix_pattern(op: str, rows: int, row_bytes: int) -> Access:
    """ldmatrix/stmatrix .x4 over every 16-row x 32-byte block: lane L addresses row L % 16,
    bytes 16 * (L / 16) of the block (HOPPER §6.3); each 8-lane phase is one 8x8 matrix."""
    lane = np.arange(WARP)
    rs, cs = [], []
    for r0 in range(0, rows - 15, 16):
        for c0 in range(0, row_bytes - 31, 32):
            rs.append(r0 + lane % 16)
            cs.append(c0 + CHUNK_BYTES * (lane // 16))
    r, c = _pack(rs, cs)
    return Access(op, CHUNK_BYTES, r, c)


def acc_pair_pattern(op: str, rows: int, row_bytes: int) -> Access:
    """32-bit accumulator fragments (wgmma_acc / mma_c) moved as v2: lane (g, q) addresses row
    r0 + g, bytes c0 + 8q, for each 8-row half and each 32-byte (8-column) block (HOPPER §1.5)."""
    return _quad_pair_pattern(op, rows, row_bytes, 8)


def bf16_pair_pattern(op: str, rows: int, row_bytes: int) -> Access:
    """A 16-bit accumulator fragment written as bf16 pairs (st.shared.b32, the staged epilogue):
    lane (g, q) addresses row r0 + g, bytes c0 + 4q, for each 8-row half and 16-byte (8-column) block."""
    return _quad_pair_pattern(op, rows, row_bytes, 4)


def _quad_pair_pattern(op: str, rows: int, row_bytes: int, pair_bytes: int) -> Access:
    """The accumulator fragment's pair access: the 4 lanes of a quad cover one row's 8 columns."""
    lane = np.arange(WARP)
    block = QUAD * pair_bytes
    r0 = np.arange(0, rows - 7, 8)[:, None, None]  # one instruction per (8-row half, block), rows outer
    c0 = np.arange(0, row_bytes - block + 1, block)[None, :, None]
    shape = (r0.shape[0], c0.shape[1], WARP)
    r = np.broadcast_to(r0 + lane // QUAD, shape).reshape(-1, WARP).copy()
    c = np.broadcast_to(c0 + pair_bytes * (lane % QUAD), shape).reshape(-1, WARP).copy()
    return Access(op, pair_bytes, r, c)


def row_chunk_pattern(op: str, layout: RegisterLayout, dtype: str, rows: int, cols: int) -> Access:
    """`row` tiles: every lane moves its vec-element chunk as min(16, chunk bytes)-byte pieces."""
    frag = _row_fragment(layout, rows, cols, layout.threads)  # (threads, steps*vec, 2)
    vec, eb = layout.chunk, dtype_bytes(dtype)
    width = min(CHUNK_BYTES, vec * eb)
    pieces = vec * eb // width
    threads = frag.shape[0]
    chunks = frag[:, ::vec, :]  # first element of each chunk: (threads, steps, 2)
    rs, cs = [], []
    for w in range(threads // WARP):
        block = chunks[w * WARP:(w + 1) * WARP]
        for s in range(block.shape[1]):
            for p in range(pieces):
                rr = block[:, s, 0]
                rs.append(rr)
                cs.append(np.where(rr >= 0, block[:, s, 1] * eb + p * width, -1))
    r, c = _pack(rs, cs)
    return Access(op, width, r, c)


def core_matrix_pattern(rows: int, row_bytes: int) -> Access:
    """wgmma descriptor reads: core matrices of 8 consecutive stored rows x 16 bytes at the same
    byte column (HOPPER §2.2, §3.3), four per modelled instruction."""
    lane = np.arange(WARP)
    c0 = np.arange(0, row_bytes, CHUNK_BYTES)[:, None, None]  # one instruction per (column, 32 rows)
    rr = np.arange(0, rows, WARP)[None, :, None] + lane
    shape = (c0.shape[0], rr.shape[1], WARP)
    r = np.broadcast_to(np.where(rr < rows, rr, -1), shape).reshape(-1, WARP).copy()
    c = np.broadcast_to(c0, shape).reshape(-1, WARP).copy()
    return Access("wgmma.desc", CHUNK_BYTES, r, c, hardware=True)


def tma_pattern(rows: int, row_bytes: int, box_bytes: int | None = None) -> Access:
    """TMA (or a cp.async fallback) fills the tile box by box (a box is `box_bytes` wide, the whole
    row by default), each box in row-major 16-byte chunks, lane = chunk."""
    box = box_bytes or row_bytes
    cpb = box // CHUNK_BYTES
    per_box = rows * cpb
    total = per_box * (row_bytes // box)
    if total <= 0:
        r, c = _pack([], [])
        return Access("tma", CHUNK_BYTES, r, c, hardware=True)
    e = np.arange(-(-total // WARP) * WARP).reshape(-1, WARP)  # chunk e: instruction e // WARP, lane e % WARP
    ok = e < total
    p, i = e // per_box, e % per_box
    r = np.where(ok, i // cpb, -1)
    c = np.where(ok, p * box + (i % cpb) * CHUNK_BYTES, -1)
    return Access("tma", CHUNK_BYTES, r, c, hardware=True)


def fragment_pattern(op: str, layout: RegisterLayout, dtype: str, shape: tuple[int, ...]) -> Access:
    """Generic: register slot j of every lane is one 4-byte-word access (vectors, odd kinds)."""
    frag = fragment(layout, dtype, shape)
    cols = shape[1] if len(shape) == 2 else shape[0]
    eb = dtype_bytes(dtype)
    rs, cs = [], []
    for w in range(frag.shape[0] // WARP):
        block = frag[w * WARP:(w + 1) * WARP]
        for j in range(block.shape[1]):
            idx = block[:, j]
            if len(shape) == 2:
                rr, cc = idx // cols, idx % cols
            else:
                rr, cc = np.zeros_like(idx), idx
            rs.append(np.where(idx >= 0, rr, -1))
            cs.append(np.where(idx >= 0, (cc * eb) // BANK_BYTES * BANK_BYTES, -1))
    r, c = _pack(rs, cs)
    return Access(op, BANK_BYTES, r, c)


def register_access(is_load: bool, layout: RegisterLayout, dtype: str, shape: tuple[int, ...]) -> Access:
    """The instruction a register tile/vector of `layout` uses to read (load) or write shared."""
    kind, eb = layout.kind, dtype_bytes(dtype)
    if len(shape) == 2:
        rows, cols = shape
        if kind in ("wgmma_acc", "wgmma_a", "mma_a", "mma_c") and eb == 2:
            return ldmatrix_pattern("ldmatrix.x4" if is_load else "stmatrix.x4", rows, cols * eb)
        if kind == "mma_b" and eb == 2:
            return ldmatrix_pattern("ldmatrix.x4.trans" if is_load else "stmatrix.x4.trans", rows, cols * eb)
        if kind in ("wgmma_acc", "mma_c") and eb == 4:
            return acc_pair_pattern("ld.shared.v2" if is_load else "st.shared.v2", rows, cols * eb)
        if kind == "row":
            width = min(CHUNK_BYTES, layout.chunk * eb)
            name = f"{'ld' if is_load else 'st'}.shared.{ {1: 'b8', 2: 'b16', 4: 'b32', 8: 'v2', 16: 'v4'}[width] }"
            return row_chunk_pattern(name.replace(" ", ""), layout, dtype, rows, cols)
    return fragment_pattern("ld.shared.b32" if is_load else "st.shared.b32", layout, dtype, shape)


MAX_AUTO_CONSUMERS = 3  # up to three m64 consumer warpgroups (ThunderKittens' attention: 192 query rows)


def auto_consumer_warpgroups(acc_rows: int) -> int:
    """Consumer warpgroups for an accumulator of `acc_rows` rows when the kernel does not say: the
    most, up to MAX_AUTO_CONSUMERS, that split its m64 blocks evenly (64 rows -> 1, 128 -> 2,
    192 -> 3, 256 -> 2 of 128 rows each, CUTLASS's cooperative GEMM shape)."""
    blocks = max(acc_rows // 64, 1)  # WGMMA_M: every wgmma has 64 rows (HOPPER.md §1.2)
    return max(c for c in range(1, MAX_AUTO_CONSUMERS + 1) if blocks % c == 0)


# --- the column reduction's scratch tile ----------------------------------------------------------
# A column reduction (backend rules_memory.column_reduction) stores its f32 tile to a scratch tile, then
# thread t reads column t down the rows (32 lanes on 32 consecutive words of one row: conflict-free at
# any pitch) and the results go through a scratch vector. Only the store depends on the row padding.
SCRATCH_PAD_STEP = 16      # bytes: keeps every row 16-byte aligned for the widest (v4) stores
SCRATCH_MAX_PAD = 64       # the largest padding tried (16-byte steps up to half a wavefront)


def column_scratch_pad(layout: RegisterLayout, rows: int, cols: int) -> int:
    """Row padding (bytes) of the f32 scratch tile a column reduction of a `rows` x `cols` register tile of
    `layout` stores into: the smallest pad (0, 16, ... SCRATCH_MAX_PAD) whose store has the least conflict
    degree under the bank model. Rows of 64 bytes stored by 4 lanes each (a quarter-warp covers two rows)
    need none; 32-byte row pieces of an mma accumulator (4 rows per 128-byte phase) need 32."""
    store = register_access(False, layout, "f32", (rows, cols))
    best = None
    for pad in range(0, SCRATCH_MAX_PAD + 1, SCRATCH_PAD_STEP):
        degree = conflict_degree(store, SharedLayout("f32", rows, cols, pad=pad))
        if best is None or degree < best[0]:
            best = (degree, pad)
    assert best is not None
    return best[1]


def column_scratch_accesses(layout: RegisterLayout, rows: int, cols: int,
                            result: RegisterLayout) -> list[tuple[Access, SharedLayout]]:
    """The column reduction's shared accesses, each with the layout it addresses (the bank-conflicts
    report lists them): the tile's store into the scratch tile (padded by column_scratch_pad); the column
    reads, lane t of a warp reading word (t + k) of a row, one instruction per row; each column's sum
    written by its thread to a scratch vector (lanes on consecutive words); the result vector (of layout
    `result`) read back from it."""
    pad = column_scratch_pad(layout, rows, cols)
    tile = SharedLayout("f32", rows, cols, pad=pad)
    store = register_access(False, layout, "f32", (rows, cols))
    lanes = np.arange(WARP)
    col_rows = np.repeat(np.arange(rows)[:, None], WARP, axis=1)
    # lanes past the columns read column 0 of the same row (a broadcast of lane 0's word)
    col_bytes = np.broadcast_to(np.where(lanes < cols, lanes, 0) * BANK_BYTES, (rows, WARP))
    reads = Access("ld.shared.f32", BANK_BYTES, col_rows, np.ascontiguousarray(col_bytes))
    vec = SharedLayout("f32", 1, cols)
    sums = Access("st.shared.f32", BANK_BYTES, np.zeros((1, WARP), np.int64),
                  np.where(lanes < cols, lanes * BANK_BYTES, -1)[None, :])
    return [(store, tile), (reads, tile), (sums, vec)] + [(a, vec) for a in vector_read_accesses(result, cols)]


# --- a row reduction's cross-warp step ------------------------------------------------------------
# A row reduction over a `row` tile whose rows are split over `parts` warps (backend/exchange.py
# _exchange_row_values) stores each thread's k f32 values (k = 1: a sum, max, min or mean; k = 2: a mean and
# M2, or an argmax's value and column) of each of its rows to word (row * parts + part) * k + j of a scratch
# vector of rows * parts * k words, one instruction per (row group of its slots, j), then reads its rows' words
# of every part back, in vectors of up to 4 words (exchange_chunk: the row's parts * k words are consecutive), one
# instruction per (row group, vector). Where the result vector's layout holds a row in
# a thread that did not reduce it, the results go through a second scratch vector (gather_rows): word `row`
# stored by each row group, read back per result slot.


RELAYOUT_PAD_BYTES = 16  # the relayout scratch tile's row padding where rows are a multiple of 128 bytes


def relayout_scratch(dtype: str, rows: int, cols: int) -> SharedLayout:
    """The unswizzled scratch tile a register tile goes through for a layout conversion or a transpose
    (backend/exchange.py scratch_tile): rows padded by RELAYOUT_PAD_BYTES where they are a multiple of 128 bytes
    (so they do not all start in bank 0), else dense."""
    pad = RELAYOUT_PAD_BYTES if (cols * dtype_bytes(dtype)) % WAVEFRONT_BYTES == 0 else 0
    return SharedLayout(dtype, rows, cols, pad=pad)


def exchange_word(row: int, part: int, j: int, parts: int, k: int) -> int:
    """The scratch word of value j (of k) of warp part `part` (of `parts`) of row `row` (_exchange_row_values)."""
    return (row * parts + part) * k + j


def exchange_chunk(parts: int, k: int) -> int:
    """Words a thread reads back with one instruction: a row's parts * k words are consecutive and aligned to
    their count, read in vectors of up to CHUNK_BYTES (ld.shared.v4.f32; v2 or f32 where they are fewer)."""
    n = CHUNK_BYTES // BANK_BYTES
    while (parts * k) % n:
        n //= 2
    return n


def _row_groups(layout: RegisterLayout, rows: int, cols: int) -> list[np.ndarray]:
    """Each thread's row of every group of its slots that hold the same row (backend/rules_registers.py
    _row_slot_groups: slots whose row is the same for every thread form one group), in slot order."""
    coords = _tile_fragment(layout.kind, layout, "f32", rows, cols)[..., 0]  # (threads, slots) rows
    groups: list[np.ndarray] = []
    for s in range(coords.shape[1]):
        if not any(np.array_equal(g, coords[:, s]) for g in groups):
            groups.append(coords[:, s])
    return groups


def _word_accesses(op: str, per_instruction: list[np.ndarray], width: int = BANK_BYTES) -> Access:
    """An Access of `width` bytes a lane on a scratch vector (one row of f32 words) from (threads,) first word
    indices per instruction (-1: idle lane), cut into warps."""
    rs, cs = [], []
    for words in per_instruction:
        for w in range(len(words) // WARP):
            idx = words[w * WARP:(w + 1) * WARP]
            rs.append(np.where(idx >= 0, 0, -1))
            cs.append(np.where(idx >= 0, idx * BANK_BYTES, -1))
    return Access(op, width, *_pack(rs, cs))


def row_exchange_accesses(layout: RegisterLayout, rows: int, cols: int, k: int) -> list[tuple[Access, SharedLayout]]:
    """The shared accesses of a row reduction's cross-warp step over a `rows` x `cols` tile of `layout` (a `row`
    layout with parts > 1; none otherwise), k values per row, each with the scratch vector it addresses: the
    parts' stores, then their loads (see above)."""
    if layout.kind != "row" or layout.nparts < 2:
        return []
    parts = layout.nparts
    groups = _row_groups(layout, rows, cols)
    part = (np.arange(layout.threads) // WARP) % parts
    scratch = SharedLayout("f32", 1, rows * parts * k)
    stores = [np.where(r >= 0, exchange_word(r, part, j, parts, k), -1) for r in groups for j in range(k)]
    chunk = exchange_chunk(parts, k)
    loads = [np.where(r >= 0, exchange_word(r, 0, 0, parts, k) + c, -1)
             for r in groups for c in range(0, parts * k, chunk)]
    load = _word_accesses({1: "ld.shared.f32", 2: "ld.shared.v2", 4: "ld.shared.v4"}[chunk], loads, chunk * BANK_BYTES)
    return [(_word_accesses("st.shared.f32", stores), scratch), (load, scratch)]


def row_gather_accesses(layout: RegisterLayout, rows: int, cols: int,
                        result: RegisterLayout) -> list[tuple[Access, SharedLayout]]:
    """Where the reduction's result layout `result` holds a row in a thread whose slots of the reduced tile
    (`layout`) do not (backend/rules_registers.py _set_row_result and _row_arg: gather_rows): the row
    groups' stores of their results to word `row` of a scratch vector of `rows` words, and each result slot's
    load. None otherwise."""
    groups = _row_groups(layout, rows, cols)
    if not _gathers(groups, result, rows):
        return []
    vec = SharedLayout("f32", 1, rows)
    wanted = fragment(result, "f32", (rows,))
    return [(_word_accesses("st.shared.f32", [np.where(r >= 0, r, -1) for r in groups]), vec),
            (_word_accesses("ld.shared.f32", [wanted[:, i] for i in range(wanted.shape[1])]), vec)]


def _gathers(groups: list[np.ndarray], result: RegisterLayout, rows: int) -> bool:
    """Whether a result slot's rows (over the threads) are no group's (backend _set_row_result: then
    gather_rows)."""
    wanted = fragment(result, "f32", (rows,))
    return any(not any(np.array_equal(g, wanted[:, i]) for g in groups) for i in range(wanted.shape[1]))


def vector_accesses(is_load: bool, layout: RegisterLayout, dtype: str, n: int) -> list[Access]:
    """A register vector of `layout` read from (or written to) a plain shared vector of n elements, as the
    backend's shared_slots groups each lane's slots: runs of k slots whose elements are consecutive and aligned
    to k for every lane that holds them, k * element bytes 4, 8 or 16 (a lone 1- or 2-byte element is its own
    access), become one ld/st.shared.b32 / v2 / v4. One Access per width used, narrowest first."""
    frag = fragment(layout, dtype, (n,))
    eb = dtype_bytes(dtype)
    by_width: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    i, slots = 0, frag.shape[1]
    while i < slots:
        k = CHUNK_BYTES // eb
        first = frag[:, i]
        held = first >= 0
        while k > 1:
            if i + k <= slots and k * eb >= BANK_BYTES and (first[held] % k == 0).all() \
                    and all((frag[held, i + j] == first[held] + j).all() for j in range(k)):
                break
            k //= 2
        for w in range(frag.shape[0] // WARP):
            idx = frag[w * WARP:(w + 1) * WARP, i]
            rs, cs = by_width.setdefault(k * eb, ([], []))
            rs.append(np.where(idx >= 0, 0, -1))
            cs.append(np.where(idx >= 0, (idx * eb) // BANK_BYTES * BANK_BYTES, -1))
        i += k
    kind = "ld" if is_load else "st"
    names = {1: "b8", 2: "b16", 4: "b32", 8: "v2", 16: "v4"}
    return [Access(f"{kind}.shared.{names[b]}", max(b, BANK_BYTES), *_pack(rs, cs))
            for b, (rs, cs) in sorted(by_width.items())]


def vector_read_accesses(layout: RegisterLayout, n: int) -> list[Access]:
    """A register f32 vector of `layout` read from an f32 shared vector of n words, as the backend's
    load_from_shared groups each lane's slots (vector_accesses; single words named ld.shared.f32)."""
    return [dataclasses.replace(a, op="ld.shared.f32") if a.op == "ld.shared.b32" else a
            for a in vector_accesses(True, layout, "f32", n)]
