"""Where each register slot of a distributed tile or vector lives, as expressions of the thread index.

`slot_coords(layout, shape, b, tid)` returns, for every register slot a thread holds, the logical
(row, col) of a tile (or (index,) of a vector) as expressions built with `b`, an expression builder.
The backend passes an LLVM builder (instructions on the thread index); the tests pass
`NumpyBuilder`, which evaluates the same formulas for all threads at once, and compare them with
`tkir.layout.fragment`, the layouts' definition. So the code the backend emits addresses exactly
the elements the layout passes assigned. Slots a thread does not hold (-1 in the table) are None.

`shared_offset(layout, row, bytecol, b)` is the same idea for shared tiles: tkir.layout.SharedLayout's
offset formula (swizzled panels or padded rows) written with builder operations, so the addresses the
backend computes for cp.async and ldmatrix are checked against the layout passes' definition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from tkir.facts import FactError
from tkir.layout import SWIZZLE_MASK, RegisterLayout, SharedLayout, layout_of, vector_access_bytes
from tkir.target import MMA_K, MMA_M, MMA_N, QUAD, WARP, WARPGROUP, WGMMA_M
from tkir.types import TileType, VectorType, format_attr_value

SWIZZLE_SHIFT = 3  # byte-address swizzle: o ^ ((o >> 3) & mask) (HOPPER.md §3.1)


class Builder(Protocol):
    def add(self, a: object, b: object) -> object: ...
    def mul(self, a: object, b: object) -> object: ...
    def div(self, a: object, b: object) -> object: ...
    def rem(self, a: object, b: object) -> object: ...


class BitBuilder(Builder, Protocol):
    """A builder that also has the bit operations of the swizzle formula."""

    def xor(self, a: object, b: object) -> object: ...
    def band(self, a: object, b: object) -> object: ...
    def shr(self, a: object, b: int) -> object: ...


class NumpyBuilder:
    """Evaluates expressions on arrays of thread indices (for tests)."""

    def add(self, a, b):
        return a + b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        return a // b

    def rem(self, a, b):
        return a % b

    def xor(self, a, b):
        return a ^ b

    def band(self, a, b):
        return a & b

    def shr(self, a, b):
        return a >> b


def _parts(b: Builder, tid: object) -> dict[str, object]:
    lane = b.rem(tid, WARP)
    return {"lane": lane, "warp": b.div(tid, WARP), "g": b.div(lane, QUAD), "q": b.rem(lane, QUAD),
            "wg": b.div(tid, WARPGROUP), "wwg": b.rem(b.div(tid, WARP), 4)}


def slot_coords(layout: RegisterLayout, shape: tuple[int, ...], b: Builder, tid: object) -> list[tuple | None]:
    kind = layout.kind
    p = _parts(b, tid)
    if kind in ("wgmma_acc", "wgmma_a"):  # wgmma_a: the 16-bit A fragment has the same order (§1.6)
        rows, cols = shape
        slab = rows // layout.split  # over wg warpgroups
        base = b.add(b.add(b.mul(p["wg"], slab), b.mul(p["wwg"], 16)), p["g"])
        col0 = b.mul(p["q"], 2)
        out = []
        for mb in range(slab // WGMMA_M):
            for i in range(cols // 2):
                r = b.add(base, mb * WGMMA_M + 8 * ((i >> 1) & 1))
                c = b.add(col0, 8 * (i >> 2) + (i & 1))
                out.append((r, c))
        return out
    if kind in ("mma_a", "mma_c"):
        # per warp, the m16n8k16 A (k16 blocks) or C (n8 blocks) fragment of HOPPER.md §6.3, repeated
        # over the warp's m16 blocks; one formula serves both: row = g + 8((i>>1)&1), col = 2q + 8(i>>2) + (i&1).
        # With warps_n = N, warp w's block is rows (w / N) slab, columns (w % N) width of a (W/N) x N grid.
        rows, cols = shape
        wn = layout.col_warps
        slab, width = rows // layout.row_warps, cols // wn
        if wn > 1:
            base = b.add(b.mul(b.div(p["warp"], wn), slab), p["g"])
            col0 = b.add(b.mul(b.rem(p["warp"], wn), width), b.mul(p["q"], 2))
        else:
            base = b.add(b.mul(p["warp"], slab), p["g"])
            col0 = b.mul(p["q"], 2)
        out = []
        for mb in range(slab // MMA_M):
            for i in range(width // 2):
                out.append((b.add(base, mb * MMA_M + 8 * ((i >> 1) & 1)), b.add(col0, 8 * (i >> 2) + (i & 1))))
        return out
    if kind == "mma_b":  # B (K x N), every warp holds all of it: k = 2q + (i&1) + 8(i>>1), n = g (§6.3)
        rows, cols = shape
        k0 = b.mul(p["q"], 2)
        return [(b.add(k0, kb * MMA_K + (i & 1) + 8 * (i >> 1)), b.add(p["g"], nb * MMA_N))
                for kb in range(rows // MMA_K) for nb in range(cols // MMA_N) for i in range(4)]
    if kind == "row":  # tkir.layout._row_fragment; with parts, warp w: row group w / P, columns of part w % P
        rows, cols = shape
        parts = layout.nparts
        vec, slab, width = layout.chunk, rows // layout.groups, cols // parts
        cpr = width // vec
        steps = -(-slab * cpr // WARP)
        group = b.div(p["warp"], parts) if parts > 1 else p["warp"]
        col_base = b.mul(b.rem(p["warp"], parts), width) if parts > 1 else 0
        out = []
        for s in range(steps):
            e = b.add(p["lane"], s * WARP)
            if (s + 1) * WARP > slab * cpr:
                # a FactError: lower_op reports it at the op (a tile of fewer than 32 chunks per warp)
                spelled = format_attr_value(layout.to_attr())
                raise FactError(None, f"backend: a {rows}x{cols} tile in layout {spelled} has {slab * cpr} "
                                      f"chunks of {vec} per warp, fewer than its {WARP} lanes (a row layout "
                                      "with a partial last step is not supported yet)")
            r = b.add(b.mul(group, slab), b.div(e, cpr))
            c0 = b.mul(b.rem(e, cpr), vec)
            if parts > 1:
                c0 = b.add(col_base, c0)
            out.extend((r, b.add(c0, v)) for v in range(vec))
        return out
    if kind == "acc_row_vec":  # the rows g and g + 8 of each m block an accumulator thread holds
        (n,) = shape
        if layout.warps is not None:  # mma_c: warp w owns rows [w n/W, (w+1) n/W) in m16 blocks (w / N with warps_n)
            slab, block = n // layout.row_warps, MMA_M
            row_warp = b.div(p["warp"], layout.col_warps) if layout.col_warps > 1 else p["warp"]
            base = b.add(b.mul(row_warp, slab), p["g"])
        else:
            slab, block = n // layout.split, WGMMA_M
            base = b.add(b.add(b.mul(p["wg"], slab), b.mul(p["wwg"], 16)), p["g"])
        return [(b.add(base, mb * block + h),) for mb in range(slab // block) for h in (0, 8)]
    if kind == "row_vec":
        (n,) = shape
        slab = n // layout.groups
        group = b.div(p["warp"], layout.nparts) if layout.nparts > 1 else p["warp"]
        return [(b.add(b.mul(group, slab), i),) for i in range(slab)]
    if kind == "col_vec" and layout.of == "row":  # with parts: the columns of the warp's part
        (n,) = shape
        vec, parts = layout.chunk, layout.nparts
        width = n // parts
        cpr = width // vec
        base = b.mul(b.rem(p["warp"], parts), width) if parts > 1 else None
        if WARP % cpr == 0:
            chunks = [b.rem(p["lane"], cpr)]
        elif cpr % WARP == 0:
            chunks = [b.add(p["lane"], WARP * k) for k in range(cpr // WARP)]
        else:
            return [(i,) if base is None else (b.add(base, i),) for i in range(width)]
        cols = [b.add(b.mul(c, vec), v) for c in chunks for v in range(vec)]
        return [(c,) if base is None else (b.add(base, c),) for c in cols]
    if kind == "col_vec" and layout.of in ("wgmma_acc", "mma_c"):  # with warps_n: of the warp's columns
        (n,) = shape
        wn = layout.col_warps
        width = n // wn
        col0 = b.mul(p["q"], 2)
        if wn > 1:
            col0 = b.add(b.mul(b.rem(p["warp"], wn), width), col0)
        return [(b.add(col0, 8 * j + e),) for j in range(width // 8) for e in (0, 1)]
    raise NotImplementedError(f"backend: no slot formulas for layout '{kind}'")


def row_groups(layout: RegisterLayout, shape: tuple[int, int]) -> tuple[int, int]:
    """For a reduction along rows: (lanes sharing one row within a warp, xor distance limit).

    `row`: a row's chunks sit in min(cpr, 32) consecutive lanes; `wgmma_acc`, `mma_c`: the 4 lanes of
    a quad.
    """
    kind = layout.kind
    if kind == "mma_c" and layout.col_warps > 1:
        spelled = format_attr_value(layout.to_attr())
        raise FactError(None, f"backend: a row reduction of a tile in layout {spelled} would combine "
                              f"{layout.col_warps} warps' parts of each row; not supported (infer-layouts gives "
                              "reduced accumulators whole rows per warp)")
    if kind in ("wgmma_acc", "mma_c"):
        return QUAD, QUAD
    if kind == "row":  # the lanes of one warp (a row split over `parts` warps is combined after this)
        cpr = shape[1] // layout.nparts // layout.chunk
        n = min(cpr, WARP)
        return n, n
    raise NotImplementedError(f"backend: no row reduction for layout '{kind}'")


def shared_offset(layout: SharedLayout, row: object, bytecol: object, b: BitBuilder) -> object:
    """Physical byte offset of logical byte `bytecol` of row `row` in a shared tile: tkir.layout's
    SharedLayout.offset, step for step (swizzled tiles are panels of `swizzle` bytes per row,
    rows at that pitch, the byte address XOR-swizzled inside a panel; others are padded rows)."""
    if not layout.swizzle:
        return b.add(b.mul(row, layout.pitch), bytecol)
    s = layout.swizzle
    panel, within = b.div(bytecol, s), b.rem(bytecol, s)
    swizzled = swizzle_in_panel(row, within, s, b)
    return b.add(b.mul(panel, layout.rows * s), swizzled)


def swizzle_in_panel(row: object, byte: object, span: int, b: BitBuilder) -> object:
    """Byte offset of byte `byte` (< span) of row `row` inside one swizzled panel of `span`-byte rows:
    o = row * span + byte, XOR-swizzled (HOPPER.md §3.1). shared_offset adds the panel; the staged
    epilogue (rules_wgmma), which knows its panel at compile time, calls this directly."""
    o = b.add(b.mul(row, span), byte)
    return b.xor(o, b.band(b.shr(o, SWIZZLE_SHIFT), SWIZZLE_MASK[span]))


# ---------------------------------------------------------------------------------------------
# The builders the backend emits these formulas with, and compile-time evaluation of them


class LLVMBuilder:
    """Builder on LLVM i32 values (an LLVMWriter); folds constants, uses shifts for powers of 2."""

    def __init__(self, w):
        self.w = w

    def _bin(self, op: str, a, b, fold):
        if isinstance(a, int) and isinstance(b, int):
            return fold(a, b)
        return self.w.op(f"{op} i32 {a}, {b}", "ix")

    def add(self, a, b):
        if b == 0:
            return a
        if a == 0:
            return b
        return self._bin("add", a, b, lambda x, y: x + y)

    def mul(self, a, b):
        if b == 1:
            return a
        if a == 0 or b == 0:
            return 0
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"shl i32 {a}, {b.bit_length() - 1}", "ix")
        return self._bin("mul", a, b, lambda x, y: x * y)

    def div(self, a, b):
        if b == 1:
            return a
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"lshr i32 {a}, {b.bit_length() - 1}", "ix")
        return self._bin("udiv", a, b, lambda x, y: x // y)

    def rem(self, a, b):
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"and i32 {a}, {b - 1}", "ix")
        return self._bin("urem", a, b, lambda x, y: x % y)


class BitLLVMBuilder(LLVMBuilder):
    """LLVMBuilder plus the bit operations of the swizzle formula (BitBuilder)."""

    def xor(self, a, b):
        if b == 0:
            return a
        return self._bin("xor", a, b, lambda x, y: x ^ y)

    def band(self, a, b):
        return self._bin("and", a, b, lambda x, y: x & y)

    def shr(self, a, b):
        if b == 0:
            return a
        return self._bin("lshr", a, b, lambda x, y: x >> y)


def tile_shape(t: TileType | VectorType) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


def chunked(t: object) -> bool:
    """A `row` tile or vector whose lanes own whole chunks of 4, 8 or 16 bytes (one access each)."""
    return isinstance(t, (TileType, VectorType)) and vector_access_bytes(layout_of(t), t.dtype) is not None


NUMERIC_SLOTS_CACHE = 256  # distinct (layout, shape) pairs kept; a kernel has a handful


@functools.lru_cache(maxsize=NUMERIC_SLOTS_CACHE)
def numeric_slots(layout: RegisterLayout, shape: tuple[int, ...]) -> tuple[tuple[np.ndarray, ...], ...]:
    """Slot coordinates evaluated for every thread of the layout (compile-time analysis).

    Computed once per (layout, shape): every element-wise op's lowering asks for its result's slot count,
    and a 10,000-statement kernel spent half its backend time re-evaluating the same formulas. The arrays
    are read-only views (np.broadcast_to), the container a tuple, so the shared answer cannot be edited."""
    tid = np.arange(layout.threads)
    return tuple(tuple(np.broadcast_to(np.asarray(x), tid.shape) for x in s)
                 for s in slot_coords(layout, shape, NumpyBuilder(), tid))


class LazyValues(Sequence):
    """A fragment's values computed on first access, at the point of the access (then kept): a
    tk.outer product read only by the next op, a wgmma, is multiplied k-step by k-step right before
    the wgmma that reads it, so only a slice of it is ever live (backend/rules_wgmma.py slices the issue)."""

    def __init__(self, n: int, make: Callable[[int], str]):
        self._vals: list[str | None] = [None] * n
        self._make = make

    def __len__(self) -> int:
        return len(self._vals)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._vals[i] is None:
            self._vals[i] = self._make(i)
        return self._vals[i]


def pack_a_fragment(w, values: list[str], mblocks: int, ksteps: int, dtype: str = "bf16") -> list[list[list[str]]]:
    """A 16-bit A fragment (wgmma_a, HOPPER.md §1.6, or mma_a, §6.3 - the same order) as 4 x b32 per
    m block and k16 step: slots 8 kk + 2j, 2j + 1 of a block are register j's low and high halves.
    Values computed where they are read (a `lazy` sequence: a tk.outer product) give a grid whose
    entries are packed at first access, so an mma.sync loop multiplies each step right before it."""
    if isinstance(values, LazyValues):
        return _LazySteps(w, values, mblocks, ksteps, dtype)  # type: ignore[return-value]
    return [[a_fragment_step(w, values, mblocks, mb, kk, dtype) for kk in range(ksteps)] for mb in range(mblocks)]


class _LazySteps:
    """pack_a_fragment's [mb][kk] grid of a lazy fragment: each entry packed on first access."""

    def __init__(self, w, values, mblocks: int, ksteps: int, dtype: str):
        self.w, self.values, self.mblocks, self.ksteps, self.dtype = w, values, mblocks, ksteps, dtype
        self.done: dict[tuple[int, int], list[str]] = {}

    def __len__(self) -> int:
        return self.mblocks

    def __getitem__(self, mb: int) -> _LazyRow:
        if not 0 <= mb < self.mblocks:
            raise IndexError(mb)
        return _LazyRow(self, mb)


class _LazyRow:
    def __init__(self, grid: _LazySteps, mb: int):
        self.grid, self.mb = grid, mb

    def __len__(self) -> int:
        return self.grid.ksteps

    def __getitem__(self, kk: int) -> list[str]:
        g = self.grid
        if not 0 <= kk < g.ksteps:
            raise IndexError(kk)
        if (self.mb, kk) not in g.done:
            g.done[self.mb, kk] = a_fragment_step(g.w, g.values, g.mblocks, self.mb, kk, g.dtype)
        return g.done[self.mb, kk]


def is_fp8_a_conversion(src: TileType, dst: TileType) -> bool:
    """A `tk.convert_layout` of an 8-bit tile from the wgmma accumulator's fragment to the 8-bit wgmma A
    fragment (rules_wgmma lowers it with shuffles; slot_coords knows only the 16-bit A order)."""
    s, d = layout_of(src), layout_of(dst)
    return (s is not None and d is not None and s.kind == "wgmma_acc" and d.kind == "wgmma_a"
            and s.split == d.split and dst.dtype in ("e4m3", "e5m2") and src.dtype == dst.dtype)


def pack_a_fragment_fp8(w, values: list[str], mblocks: int, ksteps: int) -> list[list[list[str]]]:
    """An 8-bit A fragment (wgmma_a of an fp8 tile, HOPPER.md §1.6: k = 4q + (i&3) + 16(i>>3)) as 4 x b32
    per m block and k32 step: register j of step kk holds slots 16 kk + 4j .. 4j + 3, lowest byte first
    (PTX ISA, wgmma register fragment of .e4m3/.e5m2 A: a0..a3, four 8-bit elements each)."""
    per_block = len(values) // mblocks
    out = []
    for mb in range(mblocks):
        row = []
        for kk in range(ksteps):
            words = []
            for j in range(4):
                base = mb * per_block + 16 * kk + 4 * j
                words.append(w.pack_bytes(values[base:base + 4]))
            row.append(words)
        out.append(row)
    return out


def a_fragment_step(w, values: list[str], mblocks: int, mb: int, kk: int, dtype: str = "bf16") -> list[str]:
    """The 4 b32 registers of m block `mb`, k16 step `kk` of a 16-bit A fragment (pack_a_fragment's
    entry [mb][kk]); reads only those 8 slots of `values` (a lazy fragment computes just them)."""
    per_block = len(values) // mblocks
    return [w.pack_pair(values[mb * per_block + 8 * kk + 2 * j], values[mb * per_block + 8 * kk + 2 * j + 1], dtype)
            for j in range(4)]


# ---------------------------------------------------------------------------------------------
# Gathering elements of a distributed tile: in the thread, from a lane of the warp, or neither


# lane & mask keeps these lane bits: the quad (g, 28), the quad column (q, 3), nothing (a broadcast),
# the lane itself; the rest after them
LANE_MASKS = (0b11100, 0b00011, 0, 31) + tuple(m for m in range(32) if m not in (31, 0b11100, 0b00011, 0))


def gather_plan(layout: RegisterLayout, shape: tuple[int, int], needed: list[tuple[np.ndarray, np.ndarray]],
                threads: int) -> list[tuple | None]:
    """Where each thread finds the tile elements it needs, one entry per `needed` (row, col) pair of
    arrays over `threads` threads (a layout of fewer threads is repeated over the others, as the
    backend's LoweringContext.coords does). With w the thread's warp:

    * ("local", ks): every thread of warp w holds its element in its own slot ks[w];
    * ("shuffle", mask, ks, cs): every thread of warp w reads slot ks[w] of lane (lane & mask) | cs[w]
      of its warp (one shfl.sync.idx; cs[w] has no bit of mask);
    * None: some thread's element is held by no lane of its warp in one slot by that formula (the
      caller goes through shared memory).

    Evaluated with numpy at compile time, for tk.outer's factors (ThunderKittens' mul_slice_row /
    mul_slice_col are the two shuffle patterns it finds for the quad-column layouts)."""
    rows, cols = shape
    lay_threads = layout.threads
    held = np.full((lay_threads, rows * cols), -1, dtype=np.int64)  # element -> slot, per thread
    slots = numeric_slots(layout, shape)
    elem_of = np.full((len(slots), lay_threads), -1, dtype=np.int64)  # slot k of thread t holds element
    for k, (r, c) in enumerate(slots):
        ok = (r >= 0) & (c >= 0)
        e = np.where(ok, r * cols + c, -1)
        elem_of[k] = e
        tt = np.nonzero(ok)[0]
        first = held[tt, e[ok]] < 0
        held[tt[first], e[ok][first]] = k
    cache: dict[bytes, tuple | None] = {}
    out: list[tuple | None] = []
    for r, c in needed:
        e = np.broadcast_to(np.asarray(r) * cols + np.asarray(c), (threads,)).astype(np.int64)
        key = e.tobytes()
        if key not in cache:
            cache[key] = _find_source(e, held, elem_of, lay_threads)
        out.append(cache[key])
    return out


def _find_source(e: np.ndarray, held: np.ndarray, elem_of: np.ndarray, lay_threads: int) -> tuple | None:
    threads = e.shape[0]
    nwarps = -(-threads // WARP)
    own = held[np.arange(threads) % lay_threads, e]
    if (own >= 0).all():
        ks = [int(own[w * WARP]) for w in range(nwarps)]
        if all((own[w * WARP:(w + 1) * WARP] == ks[w]).all() for w in range(nwarps)):
            return ("local", tuple(ks))
    lane = np.arange(WARP)
    base = np.arange(WARP)
    for mask in LANE_MASKS:
        free = (base & mask) == 0  # lane bases with no bit of the mask
        src_lanes = (lane[None, :] & mask) | base[:, None]  # (base, lane) -> source lane
        ks, cs = [], []
        for w in range(nwarps):
            ew = e[w * WARP:(w + 1) * WARP]
            n = len(ew)
            src = (w * WARP + src_lanes[:, :n]) % lay_threads  # the layout thread of each source lane
            ok = (elem_of[:, src] == ew[None, None, :]).all(axis=2) & free[None, :]  # (slot, base)
            hit = np.argwhere(ok)
            if not len(hit):
                break
            ks.append(int(hit[0][0]))
            cs.append(int(hit[0][1]))
        else:
            return ("shuffle", mask, tuple(ks), tuple(cs))
    return None
