"""Lowering rules for wgmma (sm_90a): `tk.mma` on shared operands, accumulator stores.

Rules of backend.rules' table. `tk.mma` with both operands in shared memory becomes
`wgmma.mma_async` with 64-bit matrix descriptors (HOPPER.md §2: start address, LBO, SBO, swizzle;
the offsets and strides for each shared layout come from backend.wgmma_desc);
the accumulator fragment (HOPPER.md §1.5) is a list of per-thread float values threaded through
`wgmma.wait_group` so LLVM cannot read them early. Accumulator tiles are stored to global memory
with predicated 32-bit stores of bf16 pairs (rows and columns past the tensor's edge are skipped).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend import wgmma_desc
from tkir.backend.context import RoleCtx
from tkir.backend.exchange import shfl_idx
from tkir.backend.fragments import (
    BitLLVMBuilder,
    LazyValues,
    a_fragment_step,
    is_fp8_a_conversion,
    pack_a_fragment,
    pack_a_fragment_fp8,
    swizzle_in_panel,
)
from tkir.backend.idioms import (
    NAMED_BARRIERS,
    bulk_commit,
    bulk_wait,
    fence_async_proxy,
    named_barrier_sync,
    wgmma_commit_group,
    wgmma_fence,
    wgmma_wait_group,
)
from tkir.backend.rules import rule
from tkir.backend.values import (
    THREADS_PER_WARPGROUP,
    WGMMA_K_BYTES,
    WGMMA_M,
    WGMMA_MAX_N,
    Frag,
    Global,
    LoweringError,
    Smem,
)
from tkir.ir import Operation
from tkir.layout import layout_of
from tkir.types import TileType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext

WGMMA_DTYPES = ("bf16", "f16")  # 16-bit inputs, f32 accumulation (k16); tf32 is not lowered
# 8-bit inputs, f32 accumulation (k32), either pairing; A K-major in shared memory or in registers (the 8-bit
# wgmma_a fragment), B K-major in shared memory: the 8-bit forms have no transpose immediates (PTX ISA,
# wgmma.mma_async)
WGMMA_FP8_DTYPES = ("e4m3", "e5m2")
WGMMA_FP8_K = 32
# prmt.b32 selectors (PTX ISA, prmt: nibble i picks byte i of d from {b, a}, a's bytes 0-3, b's 4-7)
PRMT_LOW_HALVES = 0x5410   # a.b0, a.b1, b.b0, b.b1
PRMT_HIGH_HALVES = 0x7632  # a.b2, a.b3, b.b2, b.b3
LAZY_SLICE_KSTEPS = 4  # k16 steps per slice of a lazily computed A: 16 registers of 16-bit A per thread


def _acc_layout(cx: LoweringContext, t: TileType, op: Operation) -> tuple[int, int]:
    """(m64 blocks per warpgroup, values per thread) of a wgmma_acc tile in the current role."""
    lay = layout_of(t, op.loc)
    if lay is None or lay.kind != "wgmma_acc":
        raise LoweringError(op.loc, f"backend: register tile {t} needs a wgmma_acc layout here "
                                    "(run infer-layouts)")
    wg = lay.split
    rows_per_wg = t.rows // wg
    if rows_per_wg % WGMMA_M:
        raise LoweringError(op.loc, f"backend: {t} over {wg} warpgroups is not a multiple of 64 rows each")
    mblocks = rows_per_wg // WGMMA_M
    return mblocks, mblocks * t.cols // 2


@rule("tk.mma", targets=("sm_90a",))
def _op_tk_mma(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    a, b, c = (cx.get(v) for v in op.operands)
    if not isinstance(b, Smem):
        raise LoweringError(op.loc, "backend: wgmma reads B from shared memory (HOPPER.md §1.3)")
    assert isinstance(c, Frag)
    a_regs = isinstance(a, Frag)
    if a_regs and a.kind != "wgmma_a":
        raise LoweringError(op.loc, f"backend: register A of wgmma needs the wgmma_a layout, not {a.kind}")
    ta, tb, tc = a.type, b.type, c.type
    mblocks, _ = _acc_layout(cx, tc, op)
    trans_a, trans_b = bool(op.attrs.get("trans_a")), bool(op.attrs.get("trans_b"))
    if trans_a and a_regs:
        raise LoweringError(op.loc, "backend: a transposed register A reaches wgmma (legalize-mma transposes it)")
    fp8 = ta.dtype in WGMMA_FP8_DTYPES
    if fp8 and (tb.dtype not in WGMMA_FP8_DTYPES or trans_a or not trans_b):
        raise LoweringError(op.loc, f"backend: an fp8 wgmma reads A ({ta.dtype}) and B ({tb.dtype}) K-major "
                                    "(A stored M x K in shared memory or registers, B N x K in shared memory)")
    if fp8 and a_regs and isinstance(a.values, LazyValues):
        raise LoweringError(op.loc, "backend: a lazily computed fp8 A (tk.outer) is not lowered; compute it first")
    if not fp8 and (ta.dtype not in WGMMA_DTYPES or tb.dtype != ta.dtype):
        raise LoweringError(op.loc, f"backend: wgmma multiplies {' or '.join(WGMMA_DTYPES)} tiles, not "
                                    f"{ta.dtype} x {tb.dtype}")
    K = ta.rows if trans_a else ta.cols
    N = tc.cols
    ebytes = dtype_bytes(ta.dtype)
    ksteps = K * ebytes // WGMMA_K_BYTES
    nchunk = min(N, WGMMA_MAX_N)
    if N % nchunk:
        raise LoweringError(op.loc, f"backend: N={N} is not a multiple of {nchunk}")
    sw_a, sw_b = (0 if a_regs else int(ta.get("swizzle") or 0)), int(tb.get("swizzle") or 0)
    if (not sw_a and not a_regs) or not sw_b:
        raise LoweringError(op.loc, "backend: wgmma operands need a swizzled or interleaved shared "
                                    "layout (run select-swizzle)")
    rows_per_wg = mblocks * WGMMA_M  # each warpgroup's rows (whole m64 blocks: _acc_layout)
    wg = (cx.role or cx.thread_parts()).wg  # no roles (--no-tma): warpgroup = tid / 128
    # A (K-major): this warpgroup's rows start rows_per_wg * wg rows down every panel
    if not a_regs and not trans_a:
        a_row0 = w.op(f"mul i32 {wg}, {rows_per_wg * sw_a}", "arow")
        a_base = w.op(f"add i32 {a.addr}, {a_row0}", "abase")
    elif not a_regs:  # A stored K x M (M-major): this warpgroup's rows are whole column panels
        panel_cols = sw_a // ebytes
        if rows_per_wg % panel_cols:
            raise LoweringError(op.loc, f"backend: M-major A needs each warpgroup's {rows_per_wg} rows to be "
                                        f"whole {sw_a}-byte panels")
        a_row0 = w.op(f"mul i32 {wg}, {rows_per_wg // panel_cols * ta.rows * sw_a}", "arow")
        a_base = w.op(f"add i32 {a.addr}, {a_row0}", "abase")
    # an A computed where it is read (a tk.outer product, rules_registers.LazyValues): m block by m
    # block, LAZY_SLICE_KSTEPS k-steps per wgmma group, waiting for the group before last, so at most
    # two slices of A are live (ThunderKittens' based kernel: mul_slice, mma, mma_async_wait<1>)
    lazy = a_regs and isinstance(a.values, LazyValues)
    if a_regs and not lazy:
        a_words = (pack_a_fragment_fp8(w, a.values, mblocks, ksteps) if fp8
                   else pack_a_fragment(w, a.values, mblocks, ksteps, ta.dtype))
    wgmma_fence(w)
    vals = list(c.values)
    per_block = tc.cols // 2
    steps = [(kk, mb) for kk in range(ksteps) for mb in range(mblocks)]
    if lazy:
        steps = [(kk, mb) for mb in range(mblocks) for kk in range(ksteps)]
    for n, (kk, mb) in enumerate(steps):
        if lazy and n and n % LAZY_SLICE_KSTEPS == 0:
            wgmma_commit_group(w)
            cx.commit_group()
            wgmma_wait_group(w, 1)
            wgmma_fence(w)  # the next slice's A was just written
        if lazy:
            desc_a = a_fragment_step(w, a.values, mblocks, mb, kk, ta.dtype)
        elif a_regs:
            desc_a = a_words[mb][kk]
        else:
            if trans_a:
                a_off, lbo, sbo = wgmma_desc.mn_major(sw_a, ebytes, ta.rows, mb * WGMMA_M, kk)
            else:
                a_off, lbo, sbo = wgmma_desc.k_major(sw_a, ta.rows, mb * WGMMA_M, kk)
            desc_a = _desc(cx, w.op(f"add i32 {a_base}, {a_off}", "aaddr"), lbo, sbo, sw_a)
        for nc in range(N // nchunk):
            if trans_b:  # B stored N x K (K-major): like A
                b_off, lbo, sbo = wgmma_desc.k_major(sw_b, tb.rows, nc * nchunk, kk)
            else:        # B stored K x N (N-major): panels of span bytes along N
                b_off, lbo, sbo = wgmma_desc.mn_major(sw_b, ebytes, tb.rows, nc * nchunk, kk)
            desc_b = _desc(cx, w.op(f"add i32 {b.addr}, {b_off}", "baddr"), lbo, sbo, sw_b)
            lo = mb * per_block + nc * (nchunk // 2)
            chunk = vals[lo:lo + nchunk // 2]
            if fp8:
                vals[lo:lo + nchunk // 2] = _wgmma_fp8(cx, nchunk, desc_a, desc_b, chunk, ta.dtype, tb.dtype)
            else:
                vals[lo:lo + nchunk // 2] = _wgmma(cx, nchunk, desc_a, desc_b, chunk, int(trans_b is False),
                                                   int(trans_a), ta.dtype)
    wgmma_commit_group(w)
    group = cx.commit_group()
    if op.attrs.get("defer_wait"):  # overlap-mma: waited at the first use (LoweringContext.groups_after)
        cx.set(op.result, Frag(tc, vals, pending=True, group=group))
        return
    depth = int(op.attrs.get("async_groups") or 0)
    vals = cx.wait_group(vals, depth)
    cx.set(op.result, Frag(tc, vals, pending=depth > 0))


@rule("tk.convert_layout", targets=("sm_90a",),
      when=lambda cx, op: str(op.attrs.get("via", "none")) != "none"
      and is_fp8_a_conversion(op.operands[0].type, op.result.type))
def _op_fp8_acc_to_a(cx: LoweringContext, op: Operation) -> None:
    """An fp8 tile from the accumulator's fragment to the 8-bit A fragment, by two shuffles per b32 word.

    Per m block, 16-column group G and row half h (rows g and g + 8 of the warp's 16), lane 4g + q holds
    columns 16G + 2q + {0, 1} and 16G + 8 + 2q + {0, 1} in the accumulator (HOPPER.md §1.5) and needs
    16G + 4q + {0..3} in the 8-bit A (§1.6). Every lane packs its four bytes into a word W (the first pair
    low: the two fp8 cvt pairs joined); lane q reads W of quad lanes 2(q & 1) and 2(q & 1) + 1 and keeps their
    low halves (q < 2: columns 16G + 4q + {0..3} lie in the first 8-column chunk) or their high halves (q >= 2:
    the second chunk), one prmt."""
    w = cx.w
    x = cx.get(op.operands[0])
    assert isinstance(x, Frag)
    n = len(x.values)
    if n % 8:
        raise LoweringError(op.loc, f"backend: {x.type} is not whole 16-column groups per thread")
    lane = w.op(f"and i32 {cx.thread_index()}, 31", "lane")
    q = w.op(f"and i32 {lane}, 3", "q")
    q2 = w.op(f"shl i32 {w.op(f'and i32 {q}, 1', 'qodd')}, 1", "q2")
    src0 = w.op(f"or i32 {w.op(f'and i32 {lane}, 28', 'quad')}, {q2}", "src0")  # 4g + 2(q & 1)
    src1 = w.op(f"or i32 {src0}, 1", "src1")
    # prmt selector: bytes 0, 1 of a then of b (q < 2), or bytes 2, 3 of each (q >= 2)
    qh = w.op(f"lshr i32 {q}, 1", "qh")
    sel = w.op(f"add i32 {w.op(f'mul i32 {qh}, {PRMT_HIGH_HALVES - PRMT_LOW_HALVES}', 'selq')}, {PRMT_LOW_HALVES}",
               "sel")
    out: list[str] = [""] * n
    for g0 in range(0, n, 8):  # slots of one 16-column group of one m block (the same order in both)
        for h in (0, 1):
            s = g0 + 2 * h
            word = w.pack_bytes([x.values[slot] for slot in (s, s + 1, s + 4, s + 5)])
            a, b = shfl_idx(cx, word, src0), shfl_idx(cx, word, src1)
            a8 = w.call("i32", "llvm.nvvm.prmt", [("i32", a), ("i32", b), ("i32", sel)], hint="a8")
            out[g0 + 4 * h:g0 + 4 * h + 4] = w.unpack_bytes(a8)
    cx.set(op.result, Frag(op.result.type, out))


def _desc(cx: LoweringContext, addr: str, lbo: int, sbo: int, swizzle: int) -> str:
    w = cx.w
    a64 = w.op(f"zext i32 {addr} to i64", "a64")
    a_enc = w.op(f"lshr i64 {a64}, 4", "aenc")
    a_enc = w.op(f"and i64 {a_enc}, 16383", "aenc")
    hi = ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | wgmma_desc.LAYOUT_CODE[swizzle] << 62
    if hi >= 1 << 63:
        hi -= 1 << 64  # LLVM i64 literals are signed
    return w.op(f"or i64 {a_enc}, {hi}", "desc")


def _wgmma(cx: LoweringContext, n: int, desc_a: str | list[str], desc_b: str, acc: list[str],
           trans_b: int, trans_a: int = 0, dtype: str = "bf16") -> list[str]:
    w = cx.w
    k = len(acc)
    outs = ", ".join(f"${i}" for i in range(k))
    ret = w.struct("float", k)
    if isinstance(desc_a, list):  # A from registers (RS form): no trans-a immediate
        line = (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype} {{{outs}}}, "
                f"{{${k}, ${k + 1}, ${k + 2}, ${k + 3}}}, ${k + 4}, 1, 1, 1, {trans_b};")
        cons = ["=f"] * k + ["r"] * 4 + ["l"] + [str(i) for i in range(k)]
        args = [("i32", x) for x in desc_a] + [("i64", desc_b)] + [("float", v) for v in acc]
        r = w.asm(ret, [line], cons, args, "mma")
        return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(k)]
    line = (f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dtype}.{dtype} {{{outs}}}, ${k}, ${k + 1}, "
            f"1, 1, 1, {trans_a}, {trans_b};")
    cons = ["=f"] * k + ["l", "l"] + [str(i) for i in range(k)]
    args = [("i64", desc_a), ("i64", desc_b)] + [("float", v) for v in acc]
    r = w.asm(ret, [line], cons, args, "mma")
    return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(k)]


def _wgmma_fp8(cx: LoweringContext, n: int, desc_a: str | list[str], desc_b: str, acc: list[str], atype: str,
               btype: str) -> list[str]:
    """One m64nNk32 of 8-bit A and B (B's descriptor K-major; A a K-major descriptor or four b32 registers of
    the 8-bit A fragment), f32 accumulation: scale-d 1 (accumulate), imm-scale-a/b 1, and no transpose
    operands (the 8-bit forms have none)."""
    w = cx.w
    k = len(acc)
    outs = ", ".join(f"${i}" for i in range(k))
    ret = w.struct("float", k)
    if isinstance(desc_a, list):  # A from registers (RS form)
        line = (f"wgmma.mma_async.sync.aligned.m64n{n}k{WGMMA_FP8_K}.f32.{atype}.{btype} {{{outs}}}, "
                f"{{${k}, ${k + 1}, ${k + 2}, ${k + 3}}}, ${k + 4}, 1, 1, 1;")
        cons = ["=f"] * k + ["r"] * 4 + ["l"] + [str(i) for i in range(k)]
        args = [("i32", x) for x in desc_a] + [("i64", desc_b)] + [("float", v) for v in acc]
        r = w.asm(ret, [line], cons, args, "mma")
        return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(k)]
    line = (f"wgmma.mma_async.sync.aligned.m64n{n}k{WGMMA_FP8_K}.f32.{atype}.{btype} {{{outs}}}, ${k}, ${k + 1}, "
            "1, 1, 1;")
    cons = ["=f"] * k + ["l", "l"] + [str(i) for i in range(k)]
    args = [("i64", desc_a), ("i64", desc_b)] + [("float", v) for v in acc]
    r = w.asm(ret, [line], cons, args, "mma")
    return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(k)]


def _wgmma_acc_to_global(cx: LoweringContext, op: Operation) -> bool:
    val = cx.peek(op.operands[1])
    return (isinstance(cx.peek(op.operands[0]), Global) and isinstance(val, Frag) and val.kind == "wgmma_acc"
            and val.type.dtype == "bf16")


@rule("tk.store", when=_wgmma_acc_to_global)
def _store_wgmma_acc(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    dst = cx.get(op.operands[0])
    val = cx.get(op.operands[1])
    ptr, gty = dst.ptr, dst.type
    t = val.type
    if gty.rank < 2 or t.dtype != "bf16":
        raise LoweringError(op.loc, "backend: accumulator stores need a bf16 tensor of rank >= 2")
    nlead = gty.rank - 2
    rows_name, cols_name = gty.dims[-2:]
    nrows = cx.dim(rows_name)
    ncols = cx.dim(cols_name)
    coords = [cx.scalar(v) for v in op.operands[2:]]
    r_tile, c_tile = coords[nlead:]
    # leading coordinates are plain indices into a row-major tensor: fold them into the base
    base = "0"
    if nlead:
        stride = w.op(f"mul i64 {cx.i64(nrows)}, {cx.i64(ncols)}", "plane")
        for k in reversed(range(nlead)):
            base = w.op(f"add i64 {base}, {w.op(f'mul i64 {cx.i64(coords[k])}, {stride}', 'lo')}", "lb")
            stride = w.op(f"mul i64 {stride}, {cx.i64(cx.dim(gty.dims[k]))}", "st")
        ptr = w.op(f"getelementptr bfloat, ptr addrspace(1) {ptr}, i64 {base}", "pb")
    ctx = cx.role or cx.thread_parts()  # no roles (--no-tma): from %tid.x
    mblocks, _ = _acc_layout(cx, t, op)
    rows_per_wg = mblocks * WGMMA_M  # each warpgroup's rows (whole m64 blocks: _acc_layout)
    row0 = w.op(f"mul i32 {r_tile}, {t.rows}", "r0")
    wgr = w.op(f"mul i32 {ctx.wg}, {rows_per_wg}", "wgr")
    row0 = w.op(f"add i32 {row0}, {wgr}", "r0")
    w16 = w.op(f"mul i32 {ctx.warp}, 16", "w16")
    g = w.op(f"lshr i32 {ctx.lane}, 2", "g")
    q = w.op(f"and i32 {ctx.lane}, 3", "q")
    row0 = w.op(f"add i32 {row0}, {w16}", "r0")
    row0 = w.op(f"add i32 {row0}, {g}", "r0")
    col0 = w.op(f"mul i32 {c_tile}, {t.cols}", "c0")
    q2 = w.op(f"shl i32 {q}, 1", "q2")
    col0 = w.op(f"add i32 {col0}, {q2}", "c0")
    per_block = t.cols // 2
    ncols64 = w.op(f"sext i32 {ncols} to i64", "ld")
    for mb in range(mblocks):
        for h in range(2):
            row = w.op(f"add i32 {row0}, {mb * WGMMA_M + 8 * h}", "row")
            rok = w.op(f"icmp slt i32 {row}, {nrows}", "rok")
            row64 = w.op(f"sext i32 {row} to i64", "row64")
            rbase = w.op(f"mul i64 {row64}, {ncols64}", "rbase")
            for j in range(t.cols // 8):
                col = w.op(f"add i32 {col0}, {8 * j}", "col")
                cok = w.op(f"icmp slt i32 {col}, {ncols}", "cok")
                ok = w.op(f"and i1 {rok}, {cok}", "ok")
                col64 = w.op(f"sext i32 {col} to i64", "col64")
                idx = w.op(f"add i64 {rbase}, {col64}", "idx")
                p = w.op(f"getelementptr bfloat, ptr addrspace(1) {ptr}, i64 {idx}", "p")
                i0 = mb * per_block + 4 * j + 2 * h
                bits = w.pack_bf16x2(val.values[i0], val.values[i0 + 1])
                okz = w.op(f"zext i1 {ok} to i32", "okz")
                w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b32 [$0], $1;", "}"],
                      ["l", "r", "r"], [("ptr addrspace(1)", p), ("i32", bits), ("i32", okz)])


# --- staged epilogue: registers -> swizzled shared chunk -> TMA store --------------------------


@rule("tk.store_staged", targets=("sm_90a",))
def _op_tk_store_staged(cx: LoweringContext, op: Operation) -> None:
    """Each consumer warpgroup writes its rows of one column chunk into its part of the staging
    tile (bf16 pairs, 128B-swizzled panels: the fragment's 8 rows x 16 B land in 8 different bank
    groups), fences the writes into the async proxy, syncs its 128 threads on a named barrier, and
    one thread issues a TMA store per 64-column panel and commits the bulk group. Chunks take the
    staging tile's `buffers` parts in turn; before a chunk overwrites its part, that thread waits
    until at most `buffers - 1` stores are still reading shared memory (`cp.async.bulk.wait_group
    .read`), i.e. until the store that last used this part has read it, then the warpgroup syncs.
    With two buffers the warpgroup writes one half while the copy engine reads the other."""
    w = cx.w
    dst, val, stage = (cx.get(v) for v in op.operands[:3])
    assert isinstance(dst, Global) and isinstance(val, Frag) and isinstance(stage, Smem)
    gty = dst.type
    st_t = stage.type
    t = val.type
    if val.kind != "wgmma_acc" or int(st_t.get("swizzle") or 0) != 128 or t.dtype != "bf16":
        raise LoweringError(op.loc, "backend: tk.store_staged needs a bf16 wgmma_acc tile and a "
                                    "128B-swizzled stage")
    desc = cx.module.lookup(op.attrs["desc"].name)
    tmap = cx.tmaps[desc.symbol]
    ctx = cx.role
    if ctx is None:  # a kernel without warp specialization: the same parts from %tid.x
        parts = cx.thread_parts()
        ctx = RoleCtx("compute", 0, cx.threads // THREADS_PER_WARPGROUP, False, tid=cx.tid, wg=parts.wg,
                      lane=parts.lane, warp=parts.warp)
    coords = [cx.scalar(v) for v in op.operands[3:]]
    nlead = gty.rank - 2
    mblocks, _ = _acc_layout(cx, t, op)
    slab = mblocks * WGMMA_M  # each warpgroup's rows (whole m64 blocks: _acc_layout)
    span, panel_cols = 128, 64
    chunk = int(op.attrs["chunk_cols"])
    buffers = int(op.attrs.get("buffers") or 1)
    if chunk % panel_cols or chunk * buffers != st_t.cols:
        raise LoweringError(op.loc, f"backend: {buffers} staging buffers of {chunk} columns do not "
                                    f"fill the {st_t.cols}-column staging tile")
    panels = chunk // panel_cols
    panel_bytes = st_t.rows * span
    per_block = t.cols // 2
    g = w.op(f"lshr i32 {ctx.lane}, 2", "g")
    q = w.op(f"and i32 {ctx.lane}, 3", "q")
    w16 = w.op(f"mul i32 {ctx.warp}, 16", "w16")
    r_in = w.op(f"add i32 {w16}, {g}", "rin")  # the thread's row in its m64 block
    wg_row = w.op(f"mul i32 {ctx.wg}, {slab}", "wgrow")
    lead = w.op(f"icmp eq i32 {w.op(f'and i32 {ctx.tid}, 127', 't')}, 0", "wglead")
    bar_id = NAMED_BARRIERS.emit_id(w, "warpgroup", ctx.wg, "barid")  # the warpgroup's named barrier
    row0 = w.op(f"mul i32 {coords[nlead]}, {t.rows}", "grow")
    row0 = w.op(f"add i32 {row0}, {wg_row}", "grow")
    col0 = w.op(f"mul i32 {coords[nlead + 1]}, {t.cols}", "gcol")
    cx.staged_stores = True
    # pack every bf16 pair now and pin the words with one empty asm (CUTLASS's
    # warpgroup_fence_operand): otherwise LLVM sinks the conversions into the later chunks and
    # ptxas, seeing accumulator registers read late, serializes the next tile's wgmmas (C7514)
    words = []
    for i in range(0, len(val.values), 2):
        words.append(w.pack_bf16x2(val.values[i], val.values[i + 1]))
    n = len(words)
    ret = "{" + ", ".join(["i32"] * n) + "}"
    pinned = w.asm(ret, [""], ["=r"] * n + [str(i) for i in range(n)], [("i32", x) for x in words], "pin")
    words = [w.op(f"extractvalue {ret} {pinned}, {i}", "wd") for i in range(n)]
    for c in range(t.cols // chunk):
        first_panel = (c % buffers) * panels  # this chunk's part of the staging tile
        cx.if_then(lead, lambda: bulk_wait(w, buffers - 1, read=True))
        named_barrier_sync(w, bar_id, THREADS_PER_WARPGROUP)
        for mb in range(mblocks):
            for h in range(2):
                row = w.op(f"add i32 {r_in}, {mb * WGMMA_M + 8 * h}", "row")
                srow = w.op(f"add i32 {wg_row}, {row}", "srow")
                for j in range(chunk // 8):
                    col = 8 * j  # + 2q, within the chunk
                    p = first_panel + col // panel_cols
                    byte = w.op(f"add i32 {w.op(f'shl i32 {q}, 2', 'q4')}, {(col % panel_cols) * 2}", "b")
                    off = swizzle_in_panel(srow, byte, span, BitLLVMBuilder(w))
                    addr = w.op(f"add i32 {stage.addr}, {w.op(f'add i32 {off}, {p * panel_bytes}', 'po')}", "sa")
                    i0 = mb * per_block + 4 * (c * chunk // 8 + j) + 2 * h
                    w.asm("void", ["st.shared.b32 [$0], $1;"], ["r", "r"], [("i32", addr), ("i32", words[i0 // 2])])
        fence_async_proxy(w)
        named_barrier_sync(w, bar_id, THREADS_PER_WARPGROUP)

        def issue(c: int = c, first_panel: int = first_panel) -> None:
            for p in range(panels):
                so = w.op(f"mul i32 {wg_row}, {span}", "so")
                sp = w.op(f"add i32 {so}, {(first_panel + p) * panel_bytes}", "sp")
                src = w.op(f"add i32 {stage.addr}, {sp}", "src")
                x = w.op(f"add i32 {col0}, {c * chunk + p * panel_cols}", "x")
                xs = [x, row0] + [coords[nlead - 1 - i] for i in range(nlead)]
                regs = ", ".join(f"${2 + i}" for i in range(len(xs)))
                line = f"cp.async.bulk.tensor.{len(xs)}d.global.shared::cta.bulk_group [$0, {{{regs}}}], [$1];"
                w.asm("void", [line], ["l", "r"] + ["r"] * len(xs),
                      [("ptr", tmap), ("i32", src)] + [("i32", e) for e in xs])
            bulk_commit(w)
        cx.if_then(lead, issue)
