"""Lowering rule of `tk.store_warp_staged` (passes/stage_epilogue.py): the mma.sync accumulator store
through per-warp rows of a shared staging tile, 16 bytes a lane.

Per warp of the accumulator's `mma_c` layout (a (W/N) x N grid of warps, each holding a slab x width
block), for each m16 block of its slab:

1. the warp's lanes write their bf16 pairs of the block into the warp's own `rows` (16) rows of the stage:
   lane (g, q) = (lane / 4, lane % 4) holds, for n8 block j, columns 8j + 2q, +1 of rows g and g + 8
   (HOPPER.md §6.3), one 4-byte `st.shared.b32` each, at the stage's swizzled offset (backend.fragments.
   shared_offset): the 8 rows x 16 bytes of one store instruction land in 32 different banks;
2. `bar.warp.sync` (the warp's shared writes are visible to its other lanes, PTX ISA §9.7.13.2);
3. the 16 rows are read back as 16-byte chunks, lane L taking chunk L of each group of 32 (8 lanes a
   128-byte row of a 64-column block), `ld.shared.v4.b32`, and stored with one `st.global.v4.b32`
   where the chunk lies inside the tensor and its global address is 16-byte aligned; a chunk past the
   last column or unaligned (an odd row pitch, an offset view) is stored element by element
   (`st.global.b16`, each element predicated on its column), a row past the last row not at all;
4. `bar.warp.sync` before the next m16 block overwrites the rows (every lane has read them).

Everything is straight-line predicated code (tests/backend/test_sm80_mma_simulated.py runs it for every thread).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend.context import shared_layout
from tkir.backend.fragments import MMA_M, MMA_N, WARP, BitLLVMBuilder, shared_offset
from tkir.backend.idioms import warp_sync
from tkir.backend.rules import rule
from tkir.backend.values import Frag, Global, LoweringError, Smem
from tkir.ir import Operation
from tkir.target import VECTOR_BYTES as CHUNK_BYTES  # one ld.shared.v4 / st.global.v4 per lane

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext

BF16_BYTES = 2
CHUNK_ELEMS = CHUNK_BYTES // BF16_BYTES


@rule("tk.store_warp_staged")
def _op_tk_store_warp_staged(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    dst, val, stage = (cx.get(v) for v in op.operands[:3])
    if not (isinstance(dst, Global) and isinstance(val, Frag) and isinstance(stage, Smem)):
        raise LoweringError(op.loc, "backend: tk.store_warp_staged needs a gl, a register tile and a shared tile")
    t, lay, st_t = val.type, val.layout, stage.type
    rows = int(op.attrs["rows"])
    if val.kind != "mma_c" or t.dtype != "bf16" or rows != MMA_M:
        raise LoweringError(op.loc, f"backend: tk.store_warp_staged stages a bf16 mma_c tile {MMA_M} rows at a time, "
                                    f"not {t} ({val.kind}) {rows} rows")
    wn = lay.col_warps
    slab, width = t.rows // lay.row_warps, t.cols // wn
    if st_t.rows != lay.split * rows or st_t.cols != width or width % (2 * CHUNK_ELEMS):
        raise LoweringError(op.loc, f"backend: the staging tile {st_t} does not hold {rows} rows of each of the "
                                    f"{lay.split} warps' {width}-column blocks")
    slay = shared_layout(st_t)
    bb = BitLLVMBuilder(w)
    coords = [cx.scalar(v) for v in op.operands[3:]]
    plane, nrows, ncols = cx.plane(dst.ptr, dst.type, coords)
    r_tile, c_tile = coords[-2:]
    tid = cx.thread_index()
    warp = w.op(f"lshr i32 {tid}, 5", "warp")
    lane = w.op(f"and i32 {tid}, 31", "lane")
    g = w.op(f"lshr i32 {lane}, 2", "g")
    q4 = w.op(f"shl i32 {w.op(f'and i32 {lane}, 3', 'q')}, 2", "q4")
    wrow, wcol = ((w.op(f"mul i32 {w.op(f'udiv i32 {warp}, {wn}', 'wr')}, {slab}", "wrow"),
                   w.op(f"mul i32 {w.op(f'urem i32 {warp}, {wn}', 'wc')}, {width}", "wcol"))
                  if wn > 1 else (w.op(f"mul i32 {warp}, {slab}", "wrow"), "0"))
    grow0 = w.op(f"add i32 {w.op(f'mul i32 {r_tile}, {t.rows}', 'tr')}, {wrow}", "grow0")
    gcol0 = w.op(f"add i32 {w.op(f'mul i32 {c_tile}, {t.cols}', 'tc')}, {wcol}", "gcol0")
    srow0 = w.op(f"mul i32 {warp}, {rows}", "srow0")  # the warp's rows of the stage
    ncols64 = w.op(f"sext i32 {ncols} to i64", "ld")
    per_block = width // 2                             # slots of one m16 block (slot_coords' order)
    chunks_per_row = width // CHUNK_ELEMS
    for mb in range(slab // MMA_M):
        if mb:
            warp_sync(w)  # every lane has read the previous block's rows
        for i in range(0, per_block, 2):        # slots i, i + 1: n8 block i >> 2, row half (i >> 1) & 1
            j, h = i >> 2, (i >> 1) & 1
            srow = w.op(f"add i32 {srow0}, {w.op(f'add i32 {g}, {8 * h}', 'gh')}", "srow")
            byte = w.op(f"add i32 {q4}, {j * MMA_N * BF16_BYTES}", "sb")
            addr = w.op(f"add i32 {stage.addr}, {shared_offset(slay, srow, byte, bb)}", "sa")
            s = mb * per_block + i
            w.asm("void", ["st.shared.b32 [$0], $1;"], ["r", "r"],
                  [("i32", addr), ("i32", w.pack_bf16x2(val.values[s], val.values[s + 1]))])
        warp_sync(w)
        for p in range(rows * chunks_per_row // WARP):
            ci = w.op(f"add i32 {lane}, {p * WARP}", "ci")
            r = w.op(f"udiv i32 {ci}, {chunks_per_row}", "cr")
            ch = w.op(f"urem i32 {ci}, {chunks_per_row}", "cc")
            sbyte = w.op(f"mul i32 {ch}, {CHUNK_BYTES}", "cb")
            saddr = w.op(f"add i32 {stage.addr}, {shared_offset(slay, w.op(f'add i32 {srow0}, {r}', 'sr'), sbyte, bb)}",
                         "la")
            ret = "{i32, i32, i32, i32}"
            v4 = w.asm(ret, ["ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];"], ["=r"] * 4 + ["r"], [("i32", saddr)], "ld4")
            words = [w.op(f"extractvalue {ret} {v4}, {k}", "wd") for k in range(4)]
            row = w.op(f"add i32 {grow0}, {w.op(f'add i32 {r}, {mb * MMA_M}', 'rr')}", "row")
            col = w.op(f"add i32 {gcol0}, {w.op(f'mul i32 {ch}, {CHUNK_ELEMS}', 'ce')}", "col")
            rok = w.op(f"icmp slt i32 {row}, {nrows}", "rok")
            idx = w.op(f"mul i64 {w.op(f'sext i32 {row} to i64', 'row64')}, {ncols64}", "idx")
            idx = w.op(f"add i64 {idx}, {w.op(f'sext i32 {col} to i64', 'col64')}", "idx")
            gp = w.op(f"getelementptr bfloat, ptr addrspace(1) {plane}, i64 {idx}", "gp")
            low = w.op(f"and i64 {w.op(f'ptrtoint ptr addrspace(1) {gp} to i64', 'pi')}, {CHUNK_BYTES - 1}", "mis")
            inside = w.op(f"icmp sle i32 {w.op(f'add i32 {col}, {CHUNK_ELEMS}', 'cend')}, {ncols}", "cin")
            aligned = w.op(f"icmp eq i64 {low}, 0", "al")
            vec = w.op(f"and i1 {rok}, {w.op(f'and i1 {inside}, {aligned}', 'va')}", "vec")
            vz = w.op(f"zext i1 {vec} to i32", "vz")
            w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $5, 0;",
                           "@p st.global.v4.b32 [$0], {$1, $2, $3, $4};", "}"],
                  ["l", "r", "r", "r", "r", "r"],
                  [("ptr addrspace(1)", gp)] + [("i32", x) for x in words] + [("i32", vz)])
            scalar = w.op(f"and i1 {rok}, {w.op(f'xor i1 {vec}, true', 'nv')}", "sc")
            for e in range(CHUNK_ELEMS):  # the chunk element by element: past the last column or unaligned
                ecol = w.op(f"add i32 {col}, {e}", "ec")
                ok = w.op(f"and i1 {scalar}, {w.op(f'icmp slt i32 {ecol}, {ncols}', 'eok')}", "eo")
                ep = w.op(f"getelementptr bfloat, ptr addrspace(1) {gp}, i64 {e}", "ep")
                half = "hi" if e & 1 else "lo"
                w.asm("void", ["{", ".reg .pred p;", ".reg .b16 lo, hi;", "setp.ne.b32 p, $2, 0;",
                               "mov.b32 {lo, hi}, $1;", f"@p st.global.b16 [$0], {half};", "}"],
                      ["l", "r", "r"],
                      [("ptr addrspace(1)", ep), ("i32", words[e // 2]), ("i32", w.op(f"zext i1 {ok} to i32", "ez"))])
