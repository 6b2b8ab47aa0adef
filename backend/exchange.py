"""Cross-thread exchanges the register rules share: shuffles within a warp, and exchanges through a
scratch area of shared memory between the warps of a block (or the CTAs of a cluster).

* `shfl_bfly_f32`, `shfl_bfly_i32`, `shfl_idx`: one `shfl.sync` across the warp's 32 lanes (butterfly, indexed);
* `scratch_tile`: an unswizzled, padded shared tile in the scratch area (`LoweringContext.scratch`,
  after the kernel's planned allocations) for a value that goes through shared memory;
* `gather_rows`, `broadcast_through_shared`: per-row values or a vector's values written to a scratch
  vector, read back by the threads whose slots need them;
* `combine_row_parts`, `combine_row_stats`, `combine_row_args`: the cross-warp step of a row reduction (a
  plain one, a mean and M2, or an argmax's value and column) over a `row` tile whose rows are split over
  warps, through every CTA's scratch where the parts span the CTAs of a cluster (cluster-rows).

Each exchange puts the barriers of the threads that run it around its use of the scratch area
(`LoweringContext.sync`, or the cluster barrier).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.f32 import combine, from_f32
from tkir.backend.fragments import numeric_slots, tile_shape
from tkir.backend.idioms import cluster_barrier
from tkir.backend.llvm_text import f32_literal
from tkir.backend.shared_slots import as_bits
from tkir.backend.values import Frag, LoweringError, Smem, register_layout
from tkir.layout import exchange_chunk, relayout_scratch
from tkir.target import REG_BYTES as WORD
from tkir.target import WARP as WARP_THREADS
from tkir.types import TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    from tkir.backend.context import LoweringContext
    from tkir.backend.llvm_text import LLVMWriter


# --- within a warp --------------------------------------------------------------------------------


def shfl_bfly_f32(cx: LoweringContext, v: str, step: int) -> str:
    """The f32 `v` of lane (this lane ^ step): one butterfly step, all 32 lanes taking part."""
    args = [("i32", "-1"), ("float", v), ("i32", str(step)), ("i32", "31")]
    return cx.w.call("float", "llvm.nvvm.shfl.sync.bfly.f32", args, hint="sh")


def shfl_bfly_i32(cx: LoweringContext, v: str, step: int) -> str:
    """The i32 `v` of lane (this lane ^ step): one butterfly step, all 32 lanes taking part (clamp 31)."""
    args = [("i32", "-1"), ("i32", v), ("i32", str(step)), ("i32", str(WARP_THREADS - 1))]
    return cx.w.call("i32", "llvm.nvvm.shfl.sync.bfly.i32", args, hint="sh")


def shfl_idx(cx: LoweringContext, word: str, src_lane: str) -> str:
    """The 32-bit `word` of lane `src_lane` (an i32 value) of this warp."""
    return cx.w.call("i32", "llvm.nvvm.shfl.sync.idx.i32", [("i32", "-1"), ("i32", word), ("i32", src_lane),
                                                             ("i32", "31")], hint="sh")


# --- through the scratch area ---------------------------------------------------------------------


def scratch_tile(cx: LoweringContext, t: TileType | VectorType) -> Smem:
    """An unswizzled, 16-byte-padded shared tile of t's shape in the scratch area."""
    if isinstance(t, TileType):
        pad = relayout_scratch(t.dtype, t.rows, t.cols).pad  # rows spread over the banks (the model's tile)
        st = TileType("st", t.dtype, t.rows, t.cols, (("pad", pad),))
        nbytes = t.rows * (t.cols * dtype_bytes(t.dtype) + pad)
    else:
        st = VectorType("sv", t.dtype, t.n)
        nbytes = t.n * dtype_bytes(t.dtype)
    return Smem(cx.scratch(nbytes), st)


def word_addr(w: LLVMWriter, base: str, j: object) -> str:
    """The shared address of 32-bit word j (an int or an i32 value) of a scratch array at `base`."""
    off = str(WORD * j) if isinstance(j, int) else w.op(f"shl i32 {j}, 2", "o")
    return w.op(f"add i32 {base}, {off}", "sa")


def st_f32(w: LLVMWriter, addr: str, v: str) -> None:
    w.asm("void", ["st.shared.f32 [$0], $1;"], ["r", "f"], [("i32", addr), ("float", v)])


def ld_f32(w: LLVMWriter, addr: str, hint: str) -> str:
    return w.asm("float", ["ld.shared.f32 $0, [$1];"], ["=f", "r"], [("i32", addr)], hint)


def ld_f32_words(w: LLVMWriter, addr: str, n: int, hint: str) -> list[str]:
    """n (1, 2 or 4) consecutive f32 words at `addr` (aligned to n words): one ld.shared.f32 / .v2.f32 / .v4.f32."""
    if n == 1:
        return [ld_f32(w, addr, hint)]
    ret = "{" + ", ".join(["float"] * n) + "}"
    regs = ", ".join(f"${i}" for i in range(n))
    v = w.asm(ret, [f"ld.shared.v{n}.f32 {{{regs}}}, [${n}];"], ["=f"] * n + ["r"], [("i32", addr)], hint)
    return [w.op(f"extractvalue {ret} {v}, {i}", hint) for i in range(n)]


def gather_rows(cx: LoweringContext, rows: list, values: list[str], n: int, rt: VectorType) -> Frag:
    """A vector in rt's layout from per-thread (row index, f32 value) pairs: every thread writes its
    pairs to a scratch vector of n floats (threads holding the same row write the same value),
    then reads the rows its result slots hold."""
    w = cx.w
    vec = cx.scratch(n * WORD)
    cx.sync()
    for r, v in zip(rows, values, strict=True):
        st_f32(w, word_addr(w, vec, r), v)
    cx.sync()
    res = [from_f32(cx, ld_f32(w, word_addr(w, vec, j), "rv"), rt.dtype) for (j,) in cx.coords(rt)]
    return Frag(rt, res)


def _spans_ctas(cx: LoweringContext, parts: int) -> bool:
    """Whether a row's `parts` warp parts lie in different CTAs of a cluster kernel (cluster-rows): the
    warps of a row group are `parts` consecutive warps, so they share a CTA when its warps are a
    multiple of `parts`."""
    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0


def _exchange_sync(cx: LoweringContext, across: bool) -> None:
    cluster_barrier(cx.w) if across else cx.sync()


def _st_f32_everywhere(cx: LoweringContext, addr: str, v: str, across: bool) -> None:
    """Store v at scratch address `addr` of this CTA, or (across) of every CTA of the cluster: mapa gives
    the address of the same offset in CTA r's shared memory (PTX ISA 7.8, sm_90)."""
    w = cx.w
    if not across:
        st_f32(w, addr, v)
        return
    for r in range(cx.cluster):
        remote = w.asm("i32", ["mapa.shared::cluster.u32 $0, $1, $2;"], ["=r", "r", "r"],
                       [("i32", addr), ("i32", str(r))], "dsmem")
        w.asm("void", ["st.shared::cluster.f32 [$0], $1;"], ["r", "f"], [("i32", remote), ("float", v)])


def _exchange_row_values(cx: LoweringContext, rows: list, values: list[list[str]], nrows: int,
                         parts: int) -> Callable[[object, int, int], str]:
    """The exchange both row combines share: each thread writes the k f32 values (k = 1 or 2) of each of its
    rows (values[i] for rows[i]) to scratch[row][part][0..k) (the lanes that share
    a row write the same values), between barriers (the cluster's, with each value written to every
    CTA's scratch, where the parts span the CTAs of a cluster). Returns load(row, p, j): this thread's
    read of part p's value j of `row`, emitted where the caller asks, so each caller keeps its order."""
    w = cx.w
    k = len(values[0]) if values else 1
    if k not in (1, 2):
        raise LoweringError(None, f"backend: a row exchange of {k} values per row (1 or 2)")
    across = _spans_ctas(cx, parts)
    base = cx.scratch(nrows * parts * k * WORD, cluster_wide=True)
    warp = w.op(f"lshr i32 {cx.thread_index()}, 5", "warp")
    part = w.op(f"urem i32 {warp}, {parts}", "part")

    def slot(row: object, p: object, j: int) -> str:
        r = str(row * parts * k) if isinstance(row, int) else w.op(f"mul i32 {row}, {parts * k}", "rp")
        if k == 1:
            pk = p
        elif isinstance(p, int):
            pk = str(p * 2 + j)
        else:
            pk = w.op(f"add i32 {w.op(f'shl i32 {p}, 1', 'p2')}, {j}", "pk")
        return word_addr(w, base, w.op(f"add i32 {r}, {pk}", "ri"))

    _exchange_sync(cx, across)  # earlier users of the scratch area are done
    for row, vs in zip(rows, values, strict=True):
        for j, v in enumerate(vs):
            _st_f32_everywhere(cx, slot(row, part, j), v, across)
    _exchange_sync(cx, across)
    # a row's parts * k words are consecutive and aligned to their count: read in vectors of up to 4
    # (tkir/layout.py exchange_chunk), each the first time the caller asks for one of its words
    chunk = exchange_chunk(parts, k)
    loaded: dict[tuple[object, int], list[str]] = {}

    def load(row: object, p: int, j: int) -> str:
        i = p * k + j
        key = (row, i // chunk)
        if key not in loaded:
            first = i // chunk * chunk
            loaded[key] = ld_f32_words(w, slot(row, first // k, first % k), chunk, "rx")
        return loaded[key][i % chunk]
    return load


def combine_row_parts(cx: LoweringContext, fop: str, rows: list, partials: list[str], nrows: int,
                      parts: int) -> list[str]:
    """The whole-row results of a reduction over a `row` tile whose rows are split over `parts` warps
    (layout `parts`): every thread writes its f32 partial of each of its rows to scratch[row][part],
    and after a barrier reads the `parts` partials of its rows back and combines them in part order, so
    every warp of a row group holds the same result bit for bit (_exchange_row_values)."""
    load = _exchange_row_values(cx, rows, [[v] for v in partials], nrows, parts)
    out = []
    for row in rows:
        acc = None
        for p in range(parts):
            v = load(row, p, 0)
            acc = v if acc is None else combine(cx, fop, acc, v)
        out.append(acc)
    return out


def combine_row_stats(cx: LoweringContext, rows: list, means: list[str], m2s: list[str], nrows: int, parts: int,
                      n: int) -> tuple[list[str], list[str]]:
    """combine_row_parts for a row mean and M2 (rules_registers._row_stats): each warp part writes its
    (mean, M2) of `n` elements per row to scratch[row][part], and after one barrier every thread merges
    the `parts` pairs in part order (equal counts: mean = the parts' mean, M2 = sum M2_p + n sum
    (m_p - mean)^2), so every warp of a row group holds the same bits."""
    w = cx.w
    load = _exchange_row_values(cx, rows, [[m, m2] for m, m2 in zip(means, m2s, strict=True)], nrows, parts)
    out_m, out_m2 = [], []
    for row in rows:
        ms = [load(row, p, 0) for p in range(parts)]
        qs = [load(row, p, 1) for p in range(parts)]
        total = ms[0]
        for v in ms[1:]:
            total = combine(cx, "add", total, v)
        mean = w.op(f"fmul float {total}, {f32_literal(1.0 / parts)}", "pm")
        m2 = qs[0]
        for v in qs[1:]:
            m2 = combine(cx, "add", m2, v)
        dev = None
        for v in ms:
            d = combine(cx, "sub", v, mean)
            dev = combine(cx, "mul", d, d) if dev is None else combine(cx, "add", dev, combine(cx, "mul", d, d))
        out_m.append(mean)
        out_m2.append(combine(cx, "add", m2, w.op(f"fmul float {dev}, {f32_literal(float(n))}", "pq")))
    return out_m, out_m2


def combine_row_args(cx: LoweringContext, rows: list, values: list[str], indices: list[str], nrows: int,
                     parts: int, better: Callable[[str, str, str, str], tuple[str, str]]) -> list[str]:
    """combine_row_parts for a row argmax / argmin (rules_registers): each warp part writes its (f32 value,
    i32 column) of each row to scratch[row][part], and after one barrier every thread merges the `parts`
    pairs in part order with `better(value, index, other value, other index) -> (value, index)`."""
    w = cx.w
    pairs = [[v, w.op(f"bitcast i32 {i} to float", "ib")] for v, i in zip(values, indices, strict=True)]
    load = _exchange_row_values(cx, rows, pairs, nrows, parts)
    out = []
    for row in rows:
        v, i = load(row, 0, 0), w.op(f"bitcast float {load(row, 0, 1)} to i32", "ia")
        for p in range(1, parts):
            v, i = better(v, i, load(row, p, 0), w.op(f"bitcast float {load(row, p, 1)} to i32", "ia"))
        out.append(i)
    return out


def broadcast_through_shared(cx: LoweringContext, x: Frag, vals: list[str], rt: TileType, axis: int,
                             ints: bool = False) -> list[str]:
    """The vector value for every slot of tile type rt (its row for axis 0, its column for axis 1),
    when the vector's layout does not hold it in the same thread: the vector's values (32-bit,
    as given in `vals`) go to a scratch vector, each thread reads the entries its slots need (one
    load per distinct index)."""
    w = cx.w
    n = x.type.n
    vec = cx.scratch(n * WORD)
    cx.sync()
    for (j,), v in zip(cx.coords(x.type), vals, strict=True):
        addr = word_addr(w, vec, j)
        word = v if ints else as_bits(w, v, "f32")
        w.asm("void", ["st.shared.b32 [$0], $1;"], ["r", "r"], [("i32", addr), ("i32", word)])
    cx.sync()
    num = numeric_slots(register_layout(rt), tile_shape(rt))
    seen: list[tuple[np.ndarray, str]] = []
    out = []
    for slot, ts in zip(cx.coords(rt), num, strict=True):
        hit = next((v for key, v in seen if np.array_equal(key, ts[axis])), None)
        if hit is None:
            j = slot[axis]
            addr = word_addr(w, vec, j)
            hit = w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "bv") if ints \
                else ld_f32(w, addr, "bv")
            seen.append((ts[axis], hit))
        out.append(hit)
    cx.sync()  # the scratch vector may be reused right after
    return out
