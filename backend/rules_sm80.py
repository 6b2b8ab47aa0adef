"""Lowering rules for the sm_80 path (cp.async, ldmatrix, mma.sync) and for global->shared copies
without TMA on sm_90a (`--no-tma`).

Rules of backend.rules' table, each for the operand forms its condition names:

* `tk.load` global -> shared (no result): the tile's 16-byte chunks, in row-major order, are spread
  over all the block's threads (chunk tid + k * threads) and copied with `cp.async.cg.shared.global`
  to the tile's physical offset (tkir.layout.SharedLayout, through backend.fragments.shared_offset);
  chunks past the tensor's last row or column are zero-filled (src-size 0, or in a pipelined loop the
  ignore-src predicate, PTX 7.5; HOPPER-style OOB fill),
  so ragged edge tiles work. A run of consecutive loads is committed as one group, then
  `cp.async.wait_group 0`, on sm_90a the async-proxy fence (wgmma reads shared memory through the
  async proxy, HOPPER.md §8.1) and the block barrier. The IR has no barriers of its own, so inside a
  loop a block barrier also precedes the run: every thread has finished reading the tiles the
  previous iteration loaded (load, wait, sync, compute, sync). A loop pipeline-cp-async rewrote has
  no such loads any more, but:
* `pipe.async_copy` (the same copy of one tile into a ring-buffer stage, predicated on its i1
  operand, its rounds' addresses derived from round 0's when the threads cover whole rows per
  round), `pipe.async_commit` (`cp.async.commit_group`) and `pipe.async_wait` (`cp.async.wait_group
  N` + the block barrier). Copies and commits followed, past scalar arithmetic, stage views and fills,
  by a `tk.mma` are handed to that mma (`cx.deferred_copies`), which issues them between its
  mma.syncs.
* `tk.mma` on sm_80, per warp (HOPPER.md §6), in units of one k16 step x one pair of n8 blocks: the A
  fragment of each of the warp's m16 blocks (`ldmatrix.x4` of a K-major shared tile, or bf16 pairs of
  an `mma_a` register tile) with the first unit of its k16 step, one `ldmatrix.x4.trans` (B stored
  K x N) or `ldmatrix.x4` (B stored N x K, `trans_b`) per unit (`.x2` for a last odd n8 block), and
  `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` into the `mma_c` accumulator slots. The
  fragments of unit i + ahead are loaded before the mma.syncs of unit i (`_fragments_ahead`). A warp's
  tile is its block of the accumulator: whole rows (R/W of them), or with `warps_n = N` the R·N/W x
  C/N block of a (W/N) x N warp grid, whose A rows (grid row w / N) and B columns (grid column w % N)
  are all the warp loads: each A fragment then serves C/(8N) mma.syncs and each B pair 2·R·N/(16W)
  (tests/backend/test_sm80_mma_simulated.py runs the emitted code for both). Register A and B operands need
  whole rows (their `mma_a` / `mma_b` layouts are per warp row).
* `pipe.copy {cp_async = true}` (the copies of a cp.async producer role): the tile's chunks with
  cp.async, then an arrival on the stage's mbarrier once they have landed.
* `tk.store` of an `mma_c` tile: bf16 pairs (slots 2j, 2j+1 are adjacent columns of one row) as
  predicated 32-bit stores; rows and columns past the tensor's edge are skipped.

Shared addresses: the lane-dependent offset of the first instance is computed once; every further
instance whose offset differs from it by a constant for all threads (or by a constant XOR, as a
swizzled column step does) reuses it, which is checked at compile time by evaluating
shared_offset for every thread with numpy; anything else gets its own full computation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tkir.backend import ptx as backend_ptx
from tkir.backend.context import tile_stage_bytes
from tkir.backend.fragments import (
    MMA_K,
    MMA_M,
    MMA_N,
    WARP,
    Builder,
    LLVMBuilder,
    NumpyBuilder,
    pack_a_fragment,
    slot_coords,
)
from tkir.backend.idioms import (
    cp_async_commit,
    cp_async_mbarrier_arrive,
    cp_async_wait,
    fence_async_proxy,
    mbarrier_slot,
)
from tkir.backend.rules import loop_hook, rule
from tkir.backend.values import Frag, Global, LoweringError, Smem, register_layout
from tkir.ir import Operation, parent_op
from tkir.target import CP_ASYNC_BYTES, MAX_REGS_PER_THREAD, MMA_A_WORDS, MMA_B_UNIT_WORDS
from tkir.types import GlobalType, TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext

IGNORE_SRC = backend_ptx.IGNORE_SRC  # cp.async's ignore-src predicate register (PTX 7.5; backend/ptx.py)
LDMATRIX_ROWS = 16        # ldmatrix.x4 over a 16 x 16 b16 block: lane L addresses row L % 16 (§6.3)
LDMATRIX_ROW_BYTES = 16   # one 8 x 8 b16 matrix row
MMA_DTYPES = ("bf16", "f16")  # mma.m16n8k16.row.col.{bf16, f16} with f32 accumulators (HOPPER.md §8.1)

B_PAIR_REGS = ((0, 1), (2, 3))  # ldmatrix.x4 registers holding the two n8 blocks' B fragments
# Fragments are loaded this many units (k16 step x two n8 blocks) ahead of their mma.sync. Measured
# on the H200 (gemm 4096^3, BM=256 BN=128 BK=64, STAGES=2/3/4, TFLOP/s): 0 units 360/354/358, 1 unit
# 361/360/362, 2 units 355/349/356, 4 units 352/336/349, a whole k16 step (8 units) 293/331/299
# (255 registers, spills at STAGES=4): ptxas hoists loads itself once the order allows it, and every
# fragment loaded further ahead is a register the 2 warps per scheduler need for their own latency.
# Attention (BQ=64, D=128): 284/291/293/283/288 at 0/1/2/4/8 (noise). docs/experiments.md.
FRAG_AHEAD_UNITS = 1
# A warp tile's A fragments of the next k16 step are loaded with the unit `ahead` of theirs (beside the
# current step's) when one step is at most this many registers (two m16 blocks: a 32-row warp), or when
# the mma says so (`a_ahead`: pipeline-cp-async writes it where two steps fit the registers the occupancy
# plan leaves). At first the 64-row warp tiles
# of a 2-D warp grid hold 16 per step, and loading the next step's beside them took gemm 256 x 128 x 64
# at STAGES = 3 to 255 registers and 32 bytes of spills (ptxas 13.5), so they were loaded right before
# the step's first mma.sync. After the cp.async rewrite and the rotated loop, the same tiles took
# 230-236 registers and no spills at 256 x 128 x 64, STAGES 2-4, and 411.4 -> 423.0 TFLOP/s at STAGES = 4
# on the H200; the four-warp 128 x 128 x 32 / x 64 tiles, two blocks per SM, 402.6 / 400.7 -> 401.6 /
# 398.8 (docs/experiments.md, "sm_80 GEMM: the rotated cp.async loop").
A_AHEAD_MAX_REGS = 8
# Registers kept free of prefetched fragments beyond the occupancy plan's budget: the plan counts
# live tiles, scalars and a fixed overhead, not the shared addresses of the ldmatrix instances and
# ptxas's temporaries.
FRAG_SLACK_REGS = 24

# --- which (row, byte column) of a shared tile each thread addresses ------------------------------
# Builder expressions of the thread index `tid` (backend.fragments.Builder): the rules emit them as
# LLVM instructions, the tests evaluate them with numpy and simulate the instructions.


def cp_async_position(b: Builder, tid: object, threads: int, chunks_per_row: int, k: int) -> tuple[object, object]:
    """Round k of a tile copy: chunk e = tid + k * threads of the row-major 16-byte chunk order."""
    e = b.add(tid, k * threads)
    return b.div(e, chunks_per_row), b.mul(b.rem(e, chunks_per_row), CP_ASYNC_BYTES)


def ldmatrix_a_position(b: Builder, tid: object, slab: int, eb: int, mb: int, kk: int,
                        warps_n: int = 1) -> tuple[object, object]:
    """A (M x K, K contiguous), m16 block mb of the thread's warp (slab rows per warp; the warps of a
    `warps_n`-wide grid row share them), k16 step kk: ldmatrix.x4 with lane L at row m0 + L % 16,
    column k0 + 8 (L / 16), so r0..r3 = a0..a7 (§6.3)."""
    lane = b.rem(tid, WARP)
    row = b.add(b.add(b.mul(b.div(tid, WARP * warps_n), slab), b.rem(lane, LDMATRIX_ROWS)), mb * MMA_M)
    col = b.add(b.mul(b.div(lane, LDMATRIX_ROWS), LDMATRIX_ROW_BYTES), kk * MMA_K * eb)
    return row, col


def ldmatrix_a_trans_position(b: Builder, tid: object, slab: int, eb: int, mb: int,
                              kk: int, warps_n: int = 1) -> tuple[object, object]:
    """A stored K x M (M contiguous), m16 block mb, k16 step kk, with ldmatrix.x4.trans: matrix
    j = L / 8 is (m half j % 2, k half j / 2), lane L gives row k0 + 8 (j / 2) + L % 8 at column
    m0 + 8 (j % 2); .trans hands thread t rows 2(t%4), +1 of column t/4, i.e. A[g][2q, 2q+1], so
    registers r0..r3 are a0a1, a2a3, a4a5, a6a7 as with the K-major form."""
    lane = b.rem(tid, WARP)
    j = b.div(lane, 8)
    row = b.add(b.add(b.mul(b.div(j, 2), 8), b.rem(lane, 8)), kk * MMA_K)
    m = b.add(b.add(b.mul(b.div(tid, WARP * warps_n), slab), b.mul(b.rem(j, 2), 8)), mb * MMA_M)
    return row, b.mul(m, eb)


def ldmatrix_b_position(b: Builder, tid: object, trans_b: bool, eb: int, kk: int, n0: int,
                        warps_n: int = 1, width: int = 0) -> tuple[object, object]:
    """B for k16 step kk and the n8 blocks at columns n0 and n0 + 8 of the thread's warp (with
    `warps_n` > 1, warp w's columns start at (w % warps_n) * width): one ldmatrix.x4 whose matrices
    are (n block, k half) = (0, 0), (0, 1), (1, 0), (1, 1), so r0 r1 = b0b1 b2b3 of the first n8
    block and r2 r3 those of the second (B_PAIR_REGS). Stored K x N (`.trans`): lane L at row
    k0 + L % 16, column n0 + 8 (L / 16); stored N x K (trans_b, no .trans): lane L at row
    n0 + L % 8 + 8 (L / 16), column k0 + 8 ((L / 8) % 2). `.x2` (a last odd n8 block) reads lanes
    0-15 of the same formulas."""
    lane = b.rem(tid, WARP)
    warp_n0 = b.mul(b.rem(b.div(tid, WARP), warps_n), width) if warps_n > 1 else 0
    if not trans_b:
        row = b.add(b.rem(lane, LDMATRIX_ROWS), kk * MMA_K)
        col = b.add(b.mul(b.div(lane, LDMATRIX_ROWS), LDMATRIX_ROW_BYTES), n0 * eb)
        col = b.add(col, b.mul(warp_n0, eb)) if warps_n > 1 else col
    else:
        row = b.add(b.add(b.rem(lane, 8), b.mul(b.div(lane, LDMATRIX_ROWS), 8)), n0)
        row = b.add(row, warp_n0) if warps_n > 1 else row
        col = b.add(b.mul(b.rem(b.div(lane, 8), 2), LDMATRIX_ROW_BYTES), kk * MMA_K * eb)
    return row, col


# --- global -> shared ------------------------------------------------------------------------


def _global_to_shared_tile(cx: LoweringContext, op: Operation) -> bool:
    """tk.load %smem_tile, %global, coords... (and a tma.load that no pipeline took over: a one-shot
    copy outside a pipelined loop is a cooperative cp.async copy, with no mbarrier to set up)."""
    return (not op.results and isinstance(cx.peek(op.operands[0]), Smem) and isinstance(op.operands[0].type, TileType)
            and isinstance(cx.peek(op.operands[1]), Global))


@rule("tk.load", "tma.load", when=_global_to_shared_tile)
def _op_tk_load(cx: LoweringContext, op: Operation) -> None:
    dst, src = cx.get(op.operands[0]), cx.get(op.operands[1])
    w = cx.w
    blk = op.parent
    i = blk.ops.index(op) if blk is not None else 0
    first = i == 0 or not _is_shared_load(blk.ops[i - 1])
    last = blk is None or i + 1 == len(blk.ops) or not _is_shared_load(blk.ops[i + 1])
    in_loop = parent_op(op) is not None and parent_op(op) is not cx.kernel
    if first and in_loop:
        cx.sync()  # readers of the previous iteration's tiles are done
    _cp_async_tile(cx, op, dst, src, [cx.scalar(v) for v in op.operands[2:]])
    if last:
        cp_async_commit(w)
        cp_async_wait(w, 0)
        if cx.target == "sm_90a":
            fence_async_proxy(w)  # wgmma reads via the async proxy
        cx.sync()


@rule("pipe.async_copy")
def _op_pipe_async_copy(cx: LoweringContext, op: Operation) -> None:
    """cp.async of a tile into stage s of a ring buffer if the condition holds (pipeline-cp-async):
    `tk.load`'s copy without its commit, wait and barriers, which the pass wrote as ops of their own.
    When the next op that does more than scalar arithmetic, stage views and fills is a tk.mma, the copy
    is handed to it (`cx.deferred_copies`): the mma.sync rule issues it between its mma.sync units,
    so the address arithmetic runs while the tensor cores work instead of before them (CUTLASS
    MmaMultistage spreads its copies over the warp's k-iterations the same way). Deferring a copy is
    always allowed: nothing may read its stage before a wait, and no wait lies between."""
    steps = _async_copy_steps(cx, op)
    if _next_mma_takes_copies(cx, op):
        cx.deferred_copies.append(steps)
    else:
        for _ in steps:
            pass


@rule("pipe.async_commit")
def _op_pipe_async_commit(cx: LoweringContext, op: Operation) -> None:
    """cp.async.commit_group; after the copies it closes when they were handed to the next mma."""
    def commit() -> Iterator[None]:
        cp_async_commit(cx.w)
        yield

    if cx.deferred_copies:
        cx.deferred_copies.append(commit())
    else:
        for _ in commit():
            pass


DEFER_THROUGH = ("pipe.async_copy", "pipe.async_commit", "pipe.stage", "tk.fill")  # ops copies may move past


def _next_mma_takes_copies(cx: LoweringContext, op: Operation) -> bool:
    """Whether the next tk.mma of op's block (on sm_80) issues op's copies: only scalar arithmetic,
    stage views, fills and further copies and commits lie between."""
    blk = op.parent
    if cx.target != "sm_80" or blk is None:
        return False
    for nxt in blk.ops[blk.ops.index(op) + 1:]:
        if nxt.name == "tk.mma":
            return True
        if nxt.name not in DEFER_THROUGH and not nxt.name.startswith("arith."):
            return False
    return False


def _async_copy_steps(cx: LoweringContext, op: Operation) -> Iterator[None]:
    """The code of one `pipe.async_copy`, emitted as one run of cp.async (a generator: the mma.sync rule
    advances it after one of its units)."""
    cond = cx.w.op(f"zext i1 {cx.scalar(op.operands[0])} to i32", "cp_on")
    buf = cx.get(op.operands[1])
    assert isinstance(buf, Smem)
    off = cx.w.op(f"mul i32 {cx.scalar(op.operands[2])}, {tile_stage_bytes(buf.type)}", "soff")
    stage = Smem(cx.w.op(f"add i32 {buf.addr}, {off}", "stage"), buf.type.with_attr("stages", None))
    src = cx.get(op.operands[3])
    assert isinstance(src, Global)
    yield from cp_async_rows(cx, op, *row_tile(stage, src, [cx.scalar(v) for v in op.operands[4:]]), cond)


def row_tile(dst: Smem, src: Global, coords: list[str]) -> tuple[Smem, Global, list[str]]:
    """A shared vector that cp.async fills (a stage of a ring-buffered `sv<T, n>`) as the one-row tile
    `st<T, 1, n>` it is in its tensor's last two dims: `X[.., r, i]` copies row r's elements i n .. i n + n - 1,
    which is the tile copy at tile coordinates (r, i); a one-dim tensor `X[N]` is the one row of `[1, N]`. Its
    16-byte chunks, edge tests and zero fill are the tile's. (dst, src, coords) as the tile copy takes them."""
    t = dst.type
    if not isinstance(t, VectorType):
        return dst, src, coords
    row = Smem(dst.addr, TileType("st", t.dtype, 1, t.n, tuple((k, v) for k, v in t.attrs if k == "align")))
    if src.type.rank == 1:
        return row, Global(src.ptr, GlobalType(src.type.dtype, (1, *src.type.dims))), ["0", *coords]
    return row, src, coords


@rule("pipe.async_wait")
def _op_pipe_async_wait(cx: LoweringContext, op: Operation) -> None:
    """cp.async.wait_group N (this thread's copies of every older group have landed), then the block
    barrier that makes every thread's copies visible to all and frees the stages read before it."""
    if cx.deferred_copies:  # handed to an mma that never took them (an internal error)
        raise LoweringError(op.loc, "backend: cp.async copies handed to a tk.mma were never issued")
    if cx.frag_rotation is not None and op.parent is cx.frag_rotation.loop.body:
        return  # the rotated loop waited for these groups in the previous iteration (FragRotation)
    cp_async_wait(cx.w, int(op.attrs["pending"]))
    if cx.target == "sm_90a":
        fence_async_proxy(cx.w)  # wgmma reads via the async proxy
    cx.sync()


def cp_async_rows(cx: LoweringContext, op: Operation, dst: Smem, src: Global, coords: list[str],
                   cond: str) -> Iterator[None]:
    """A tile copy whose rounds differ by whole rows (the block's threads cover a whole number of tile
    rows per round, checked for every thread with numpy): round 0's address and edge tests are computed
    once, round k's address is round 0's plus k row pitches and its edge test one compare. Round 0's
    address is the thread's part (its row and column within the tile, the same in every iteration of a
    loop: computed once before it) plus the tile's part (the same for every thread: a uniform multiply-add
    per iteration), and the edge tests compare the thread's row and column with the rows and columns left
    after the tile's start (with step_ahead, gemm.tk's sm_80 default 463.8 -> 486.7 TFLOP/s on the H200;
    docs/experiments.md, "sm_80 GEMM: fragments a whole k16 step ahead"), so a round
    costs a 64-bit add, a compare and a predicate instead of `_cp_async_tile`'s full index and edge
    arithmetic (the copies of a pipelined loop run every iteration, beside the mma.sync). A chunk past
    the edge is copied with its source ignored (`ignore-src`: LDGSTS's own zero-fill predicate). Each
    copy is predicated on `cond` (an i32, 0 or 1); it yields once, after the tile's last cp.async (a
    run of LDGSTS after ldmatrix costs ptxas's three-instruction separation once, not per copy:
    docs/backend.md). Other tiles take `_cp_async_tile`, under a branch on `cond`."""
    t = dst.type
    assert isinstance(t, TileType)
    eb = dtype_bytes(t.dtype)
    if (t.cols * eb) % CP_ASYNC_BYTES or src.type.dtype != t.dtype:
        _cp_async_tile(cx, op, dst, src, coords)  # which raises the located error
    cpr = t.cols * eb // CP_ASYNC_BYTES
    total, threads = t.rows * cpr, cx.role_threads()
    steps = -(-total // threads)
    tids = np.arange(threads)
    nb = NumpyBuilder()
    r0n, c0n = (np.broadcast_to(x, tids.shape) for x in cp_async_position(nb, tids, threads, cpr, 0))
    drows: list[int] = []
    for k in range(steps):
        rk, ck = (np.broadcast_to(x, tids.shape) for x in cp_async_position(nb, tids, threads, cpr, k))
        live = tids + k * threads < total
        if not (ck[live] == c0n[live]).all() or len(set((rk - r0n)[live].tolist())) != 1:
            on = cx.w.op(f"icmp ne i32 {cond}, 0", "cp_on")
            cx.if_then(on, lambda: _cp_async_tile(cx, op, dst, src, coords))
            yield
            return
        drows.append(int((rk - r0n)[live][0]))
    w = cx.w

    def pos(b, tid, k):
        return cp_async_position(b, tid, threads, cpr, k)

    addrs = cx.shared_addresses(dst, pos, list(range(steps)))
    plane, nrows, ncols = cx.plane(src.ptr, src.type, coords)
    r_tile, c_tile = coords[-2:]
    lb = LLVMBuilder(w)
    # The address is split into the thread's part (its row r and column c within the tile: the same in
    # every iteration of a loop, so computed once before it) and the tile's part (its first row and
    # column: the same for every thread, so one uniform multiply-add per iteration); the edge tests
    # compare the thread's row and column against the rows and columns left after the tile's start
    r, c = pos(lb, cx.thread_index(), 0)
    ce = lb.div(c, eb)
    row0 = w.op(f"mul i32 {r_tile}, {t.rows}", "r0")
    col0 = w.op(f"mul i32 {c_tile}, {t.cols}", "c0")
    rows_left = w.op(f"sub i32 {nrows}, {row0}", "rows_left")
    # the launch requires 16-byte rows (tkir.requires: cp.async sources), and every chunk starts at a
    # multiple of 16 bytes, so a chunk is wholly inside its row or wholly past its end: 16 bytes or none
    cok = w.op(f"icmp slt i32 {ce}, {w.op(f'sub i32 {ncols}, {col0}', 'cols_left')}", "cok")
    ncols64 = w.op(f"sext i32 {ncols} to i64", "ld")

    def flat(row: str, col: str) -> str:  # (row * ncols + col) * eb, in i64
        idx = w.op(f"mul i64 {w.op(f'sext i32 {row} to i64', 'row64')}, {ncols64}", "idx")
        idx = w.op(f"add i64 {idx}, {w.op(f'sext i32 {col} to i64', 'col64')}", "idx")
        return w.op(f"mul i64 {idx}, {eb}", "ib")

    g_thread = w.op(f"getelementptr i8, ptr addrspace(1) {plane}, i64 {flat(str(r), str(ce))}", "gt")
    g0 = w.op(f"getelementptr i8, ptr addrspace(1) {g_thread}, i64 {flat(row0, col0)}", "g")
    for k, (saddr, dr) in enumerate(zip(addrs, drows, strict=True)):
        row_k = w.op(f"add i32 {r}, {dr}", "row") if dr else str(r)
        rok = w.op(f"icmp slt i32 {row_k}, {rows_left}", "rok")
        ok = w.op(f"zext i1 {w.op(f'and i1 {rok}, {cok}', 'ok')} to i32", "ok")
        # a chunk past the edge is copied with its source ignored (zeros written: cp.async's ignore-src
        # predicate, PTX 7.5), so its address is never used (CUTLASS's cp_async_zfill passes such addresses
        # too); LDGSTS takes that predicate itself, where a src-size of 16 or 0 cost a select and a compare
        # per copy. Round k's address is round 0's plus dr rows of bytes: one 64-bit add (or multiply-add)
        # per copy instead of an index multiply and a scaled add
        g = (w.op(f"getelementptr i8, ptr addrspace(1) {g0}, i64 {w.op(f'mul i64 {ncols64}, {dr * eb}', 'drow')}",
                  "g") if dr else g0)
        on = cond
        if steps * threads > total and k == steps - 1:  # the last round: some threads have no chunk
            e = lb.add(cx.thread_index(), k * threads)
            have = w.op(f"zext i1 {w.op(f'icmp ult i32 {e}, {total}', 'have')} to i32", "have")
            on = w.op(f"and i32 {cond}, {have}", "cp_on")
        w.asm("void", ["{", f".reg .pred p, {IGNORE_SRC};", "setp.ne.b32 p, $3, 0;",
                       f"setp.eq.b32 {IGNORE_SRC}, $2, 0;",
                       f"@p cp.async.cg.shared.global [$0], [$1], 16, {IGNORE_SRC};", "}"],
              ["r", "l", "r", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", ok), ("i32", on)])
    yield  # the tile's copies as one run: ptxas separates a run of LDGSTS from earlier ldmatrix once, not per copy


def _cp_async_tile(cx: LoweringContext, op: Operation, dst: Smem, src: Global, coords: list[str]) -> None:
    w = cx.w
    t = dst.type
    assert isinstance(t, TileType)
    ptr, gty = src.ptr, src.type
    eb = dtype_bytes(t.dtype)
    if (t.cols * eb) % CP_ASYNC_BYTES:
        raise LoweringError(op.loc, f"backend: rows of {t} are not whole {CP_ASYNC_BYTES}-byte chunks")
    if gty.dtype != t.dtype:
        raise LoweringError(op.loc, f"backend: copying {gty} into {t} converts dtypes")
    per_chunk = CP_ASYNC_BYTES // eb
    cpr = t.cols // per_chunk
    total, threads = t.rows * cpr, cx.role_threads()
    steps = -(-total // threads)
    plane, nrows, ncols = cx.plane(ptr, gty, coords)
    r_tile, c_tile = coords[-2:]
    row0 = w.op(f"mul i32 {r_tile}, {t.rows}", "r0")
    col0 = w.op(f"mul i32 {c_tile}, {t.cols}", "c0")

    def pos(b, tid, k):
        return cp_async_position(b, tid, threads, cpr, k)

    addrs = cx.shared_addresses(dst, pos, list(range(steps)))
    lb = LLVMBuilder(w)
    ncols64 = w.op(f"sext i32 {ncols} to i64", "ld")
    for k, saddr in enumerate(addrs):
        r, c = pos(lb, cx.thread_index(), k)
        row = w.op(f"add i32 {row0}, {r}", "row")
        col = w.op(f"add i32 {col0}, {lb.div(c, eb)}", "col")
        rok = w.op(f"icmp slt i32 {row}, {nrows}", "rok")
        # 16 bytes or nothing, as in _cp_async_rows: the launch requires 16-byte rows
        ok = w.op(f"and i1 {rok}, {w.op(f'icmp slt i32 {col}, {ncols}', 'cok')}", "ok")
        n = w.op(f"select i1 {ok}, i32 {CP_ASYNC_BYTES}, i32 0", "srcsz")
        row64 = w.op(f"sext i32 {row} to i64", "row64")
        idx = w.op(f"mul i64 {row64}, {ncols64}", "idx")
        idx = w.op(f"add i64 {idx}, {w.op(f'sext i32 {col} to i64', 'col64')}", "idx")
        idx = w.op(f"select i1 {ok}, i64 {idx}, i64 0", "idx")  # nothing is read at src-size 0
        g = w.op(f"getelementptr i8, ptr addrspace(1) {plane}, i64 {w.op(f'mul i64 {idx}, {eb}', 'ib')}", "g")
        asm = ["cp.async.cg.shared.global [$0], [$1], 16, $2;"]
        if steps * threads > total and k == steps - 1:  # the last round: some threads have no chunk
            e = lb.add(cx.thread_index(), k * threads)
            have = w.op(f"zext i1 {w.op(f'icmp ult i32 {e}, {total}', 'have')} to i32", "have")
            asm = ["{", ".reg .pred p;", "setp.ne.b32 p, $3, 0;",
                   "@p cp.async.cg.shared.global [$0], [$1], 16, $2;", "}"]
            w.asm("void", asm, ["r", "l", "r", "r"],
                  [("i32", saddr), ("ptr addrspace(1)", g), ("i32", n), ("i32", have)])
            continue
        w.asm("void", asm, ["r", "l", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", n)])


@rule("pipe.copy", when=lambda cx, op: bool(op.attrs.get("cp_async")))
def copy_by_threads(cx: LoweringContext, op: Operation) -> None:
    """`pipe.copy {cp_async = true}`: every thread of the role copies its 16-byte chunks with cp.async
    (zero-filling past the tensor's edge, as the cp.async pipeline does), then arrives on the barrier
    once they have landed: cp.async.mbarrier.arrive.noinc (PTX ISA §9.7.9.25.3; sm_80), counted in the
    barrier's `count`, so waiting on the barrier also makes the copies visible. (The TMA form of
    `pipe.copy` is rules_pipe's.)"""
    dst, bars = cx.get(op.operands[0]), cx.get(op.operands[1])
    assert isinstance(dst, Smem) and isinstance(bars, Smem)
    bar = mbarrier_slot(cx.w, bars.addr, cx.scalar(op.operands[2]))
    src = cx.get(op.operands[3])
    for _ in cp_async_rows(cx, op, *row_tile(dst, src, [cx.scalar(v) for v in op.operands[4:]]), "1"):
        pass
    cp_async_mbarrier_arrive(cx.w, cx.target, bar)


# --- mma.sync ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MmaShape:
    """How one tk.mma on sm_80 splits into mma.sync units (one k16 step x one pair of n8 blocks) per warp."""

    slab: int          # rows of the warp's block of the accumulator
    width: int         # its columns
    warps_n: int       # columns of the warp grid
    mblocks: int       # m16 blocks in the slab
    ksteps: int        # k16 steps
    nblocks: int       # n8 blocks in the width
    trans_a: bool
    trans_b: bool
    dtype: str
    units: tuple[tuple[int, int], ...]   # (k16 step, first column) per unit, step-major

    @property
    def per_k(self) -> int:
        return len(self.units) // self.ksteps

    def unit_blocks(self, n0: int) -> list[int]:
        """The one or two n8 blocks of the unit at column n0."""
        return [n0 // MMA_N + j for j in range(2) if n0 // MMA_N + j < self.nblocks]



def _mma_shape(op: Operation) -> _MmaShape:
    """The unit split of a tk.mma (its operand types: the accumulator's mma_c layout gives the warp grid)."""
    ta, tb, tc = (v.type for v in op.operands)
    trans_a, trans_b = bool(op.attrs.get("trans_a")), bool(op.attrs.get("trans_b"))
    M, K, N = tc.rows, (ta.rows if trans_a else ta.cols), tc.cols
    if (tb.cols, tb.rows) != ((K, N) if trans_b else (N, K)) or (ta.cols if trans_a else ta.rows) != M:
        raise LoweringError(op.loc, f"backend: mma shapes {ta} x {tb} -> {tc} do not match")
    # mma_c: a (W/N) x N grid of warps (N = warps_n, 1: whole rows per warp); each warp computes its
    # slab x width block from its own rows of A and its own columns of B
    layout = register_layout(tc)
    wm, wn = layout.row_warps, layout.col_warps
    slab, width = M // wm, N // wn
    if M % wm or N % wn or slab % MMA_M or K % MMA_K or width % MMA_N:
        raise LoweringError(op.loc, f"backend: {tc} over {wm} x {wn} warps is not made of m16n8k16 blocks")
    units = tuple((kk, n0) for kk in range(K // MMA_K) for n0 in range(0, width, 2 * MMA_N))
    return _MmaShape(slab, width, wn, slab // MMA_M, K // MMA_K, width // MMA_N, trans_a, trans_b, ta.dtype, units)


@rule("tk.mma", targets=("sm_80",))
def _op_tk_mma(cx: LoweringContext, op: Operation) -> None:
    a, b, c = (cx.get(v) for v in op.operands)
    if isinstance(b, Frag) and b.kind != "mma_b":
        raise LoweringError(op.loc, f"backend: register B of mma.sync needs the mma_b layout, not {b.kind}")
    if isinstance(b, Frag) and op.attrs.get("trans_b"):
        raise LoweringError(op.loc, "backend: a transposed register B reaches mma.sync (legalize-mma transposes it)")
    assert isinstance(c, Frag)
    if c.kind != "mma_c" or c.type.dtype != "f32":
        raise LoweringError(op.loc, f"backend: the mma.sync accumulator needs an f32 mma_c layout, not {c.type}")
    if isinstance(a, Frag) and a.kind != "mma_a":
        raise LoweringError(op.loc, f"backend: register A of mma.sync needs the mma_a layout, not {a.kind}")
    if op.attrs.get("trans_a") and isinstance(a, Frag):
        raise LoweringError(op.loc, "backend: a transposed register A reaches mma.sync (legalize-mma transposes it)")
    ta, tb, tc = a.type, b.type, c.type
    if ta.dtype not in MMA_DTYPES or tb.dtype != ta.dtype:
        raise LoweringError(op.loc, f"backend: mma.sync multiplies {' or '.join(MMA_DTYPES)} tiles, not "
                                    f"{ta.dtype} x {tb.dtype}")
    g = _mma_shape(op)
    if g.warps_n > 1 and (isinstance(a, Frag) or isinstance(b, Frag)):
        raise LoweringError(op.loc, f"backend: register operands of mma.sync need an accumulator whose warps own "
                                    f"whole rows, not {tc} (warps_n = {g.warps_n}): infer-layouts{{mma_warps_n=1}}")
    units, mblocks = list(g.units), g.mblocks
    a_frags = _a_fragments(cx, a, g.slab, mblocks, g.ksteps, g.trans_a, g.warps_n)
    b_frags = _b_fragments(cx, b, g.trans_b, g.ksteps, g.nblocks, tb.dtype, units, g.warps_n, g.width)
    ahead = _fragments_ahead(cx, op, g.per_k, mblocks, isinstance(a, Smem))
    vals = list(c.values)
    per_block = g.width // 2
    loaded: dict[int, tuple[list[list[str]] | None, list[tuple[int, list[str]]]]] = {}
    # the next k16 step's A is loaded ahead with its unit only while two steps of it fit beside the rest
    a_ahead = _a_ahead(op, g, isinstance(a, Smem))
    a_early: dict[int, list[list[str]]] = {}  # a step's A loaded before a rotated loop's barrier
    rot = cx.frag_rotation if cx.frag_rotation is not None and cx.frag_rotation.mma is op else None
    barrier_at = len(units) + 1  # the unit before whose mma.syncs a rotated loop waits (none otherwise)
    if rot is not None:
        # the first k16 step's fragments came over the back edge (loaded after the previous barrier)
        a0, b0 = _unflatten_first_step(g, rot.words_in)
        for i in range(g.per_k):
            loaded[i] = (a0 if i == 0 else None, b0[i])
        barrier_at = max(0, len(units) - rot.units)

    def fetch(i: int) -> None:
        if i in loaded or i in done:
            return
        kk, n0 = units[i]
        loaded[i] = (a_frags(kk) if n0 == 0 and (a_ahead or i == 0) else None, b_frags(i))

    done: set[int] = set()
    copies = itertools.chain.from_iterable(cx.deferred_copies)  # handed over by pipe.async_copy
    cx.deferred_copies = []
    for i in range(min(ahead, len(units))):
        fetch(i)
    a_now: list[list[str]] = []
    for i in range(len(units)):
        kk, n0 = units[i]
        if i == barrier_at:
            rot.words_out = _rotate(cx, op, rot, g, a_ahead, i, fetch, a_early, a_frags, copies)
        if not a_ahead and n0 == 0 and i >= min(ahead, len(units)) and not (rot is not None and kk == 0):
            # the step's A right before its first mma.sync: the last step's is dead
            a_now = a_early.pop(kk) if kk in a_early else a_frags(kk)
        if i + ahead < len(units):
            fetch(i + ahead)  # the fragments `ahead` units on are loaded before this unit's mma.sync
        a_next, b_pairs = loaded.pop(i)
        done.add(i)
        a_now = a_next if a_next is not None else a_now
        for nb, words in b_pairs:
            for mb in range(mblocks):
                lo = mb * per_block + 4 * nb
                vals[lo:lo + 4] = _mma_sync(cx, a_now[mb], words, vals[lo:lo + 4], ta.dtype)
        next(copies, None)  # one tile's copies after each unit's mma.syncs
    for _ in copies:
        pass
    cx.set(op.result, Frag(tc, vals))


# --- the rotated loop (pipeline-cp-async{rotate=R}) -------------------------------------------------


@dataclass
class FragRotation:
    """A loop whose block barrier moved into its mma (CUTLASS MmaMultistage's order): the next
    iteration's copies are waited for and the block synchronised `units` units before the end of the
    mma.syncs, and the next iteration's first k16 step of fragments is loaded then, across the back
    edge as phis (`preheader` before the loop, `words_in` in the body, `words_out` from it); the loop's
    own `pipe.async_wait` emits nothing, since the previous iteration (or the prologue) waited for the
    same groups. The scf.for rule carries the words (a backend.rules.LoopCarry: rotation_prologue is
    its loop hook)."""

    loop: Operation
    mma: Operation
    units: int
    pending: int
    preheader: list[str]
    words_in: list[str] = field(default_factory=list)
    words_out: list[str] | None = None
    outer: FragRotation | None = None  # the rotation being lowered around the loop (restored after it)
    hint: ClassVar[str] = "rot"

    def initial(self) -> list[str]:
        return self.preheader

    def enter(self, cx: LoweringContext, phis: list[str]) -> None:
        self.words_in = phis
        self.outer, cx.frag_rotation = cx.frag_rotation, self

    def latch(self, cx: LoweringContext) -> list[str]:
        if self.words_out is None or len(self.words_out) != len(self.preheader):
            raise LoweringError(self.loop.loc, "backend: the rotated loop's mma did not load the next fragments")
        return self.words_out

    def leave(self, cx: LoweringContext) -> None:
        cx.frag_rotation = self.outer


def rotated_mma(loop: Operation) -> tuple[Operation, Operation] | None:
    """(the loop's pipe.async_wait, its tk.mma) if pipeline-cp-async marked it `frag_rotate` and it has
    the form the rotation needs: the wait first, one tk.mma of two stage views of the index's stage
    (`arith.rem %k, S`) and nothing else that reads shared memory; else None."""
    if not loop.attrs.get("frag_rotate"):
        return None
    ops = [op for op in loop.body.ops if op.name != "scf.yield"]
    mmas = [op for op in ops if op.name == "tk.mma"]
    if not ops or ops[0].name != "pipe.async_wait" or len(mmas) != 1 or ops[-1] is not mmas[0]:
        return None
    allowed = ("pipe.async_wait", "pipe.async_copy", "pipe.async_commit", "pipe.stage", "tk.mma")
    if any(op.regions or not (op.name in allowed or op.name.startswith("arith.")) for op in ops):
        return None
    mma = mmas[0]
    views = [v.owner for v in mma.operands[:2]]
    if not all(isinstance(d, Operation) and d.name == "pipe.stage" and d.parent is loop.body for d in views):
        return None
    s = views[0].operands[1]
    rem = s.owner
    if views[1].operands[1] is not s or not (isinstance(rem, Operation) and rem.name == "arith.rem"
                                             and rem.operands[0] is loop.body.args[0]):
        return None
    stages = {d.operands[0].type.get("stages") for d in views}
    n = rem.operands[1].owner
    if len(stages) != 1 or not (isinstance(n, Operation) and n.name == "arith.const"
                                and n.attrs.get("value") == next(iter(stages))):
        return None
    return ops[0], mma


@loop_hook
def rotation_prologue(cx: LoweringContext, loop: Operation) -> FragRotation | None:
    """Before a rotated loop (`rotated_mma`): wait for the first iteration's copies, synchronise the
    block and load its first k16 step of fragments from its stage (lo % S). The words are the phis'
    values from the preheader; the scf.for rule makes the phis and passes their names to `enter`."""
    found = rotated_mma(loop) if cx.target == "sm_80" and cx.role is None else None
    if found is None:
        return None
    wait, mma = found
    if not all(isinstance(cx.get(v.owner.operands[0]), Smem) for v in mma.operands[:2]):
        return None
    g = _mma_shape(mma)
    w = cx.w
    pending = int(wait.attrs["pending"])
    cp_async_wait(w, pending)
    cx.sync()
    n_stages = int(mma.operands[0].owner.operands[0].type.get("stages"))
    s0 = w.op(f"srem i32 {cx.scalar(loop.operands[0])}, {n_stages}", "rot_s0")
    a, b = (_stage_view(cx, v.owner, s0) for v in mma.operands[:2])
    words = _first_step_words(cx, g, a, b)
    return FragRotation(loop, mma, int(loop.attrs["frag_rotate"]), pending, words)


def _stage_view(cx: LoweringContext, view: Operation, s: str) -> Smem:
    """Stage s of the ring buffer a pipe.stage op views."""
    buf = cx.get(view.operands[0])
    assert isinstance(buf, Smem)
    off = cx.w.op(f"mul i32 {s}, {tile_stage_bytes(buf.type)}", "soff")
    return Smem(cx.w.op(f"add i32 {buf.addr}, {off}", "rot_st"), view.result.type)


def _first_step_words(cx: LoweringContext, g: _MmaShape, a: Smem, b: Smem) -> list[str]:
    """The A fragments of the first k16 step (mblocks x 4 words) then its units' B pairs, flat."""
    a_words = _a_fragments(cx, a, g.slab, g.mblocks, 1, g.trans_a, g.warps_n)(0)
    b_frags = _b_fragments(cx, b, g.trans_b, 1, g.nblocks, g.dtype, list(g.units[:g.per_k]), g.warps_n, g.width)
    flat = [x for frag in a_words for x in frag]
    for i in range(g.per_k):
        for _nb, pair in b_frags(i):
            flat += pair
    return flat


def _unflatten_first_step(g: _MmaShape, words: list[str]) -> tuple[list[list[str]], list[list[tuple[int, list[str]]]]]:
    """_first_step_words' layout back: (A per m16 block, [B pairs] per unit of the first step)."""
    n_a = MMA_A_WORDS * g.mblocks
    a = [words[i:i + MMA_A_WORDS] for i in range(0, n_a, MMA_A_WORDS)]
    b, at = [], n_a
    for _kk, n0 in g.units[:g.per_k]:
        pairs = []
        for nb in g.unit_blocks(n0):
            pairs.append((nb, words[at:at + 2]))
            at += 2
        b.append(pairs)
    assert at == len(words)
    return a, b


def _rotate(cx: LoweringContext, op: Operation, rot: FragRotation, g: _MmaShape, a_ahead: bool, at: int,
            fetch: Callable[[int], None], a_early: dict[int, list[list[str]]],
            a_frags: Callable[[int], list[list[str]]], copies: Iterator[None]) -> list[str]:
    """At unit `at` of a rotated loop's mma: load every fragment of this iteration still to come (the
    stage may be overwritten once the block passes the barrier), issue the remaining copies and the
    commit, wait for the next iteration's group, synchronise, and load the next stage's first k16 step
    (stage s + 1 mod S, whatever the loop's next index: past the last iteration the words are dead)."""
    for i in range(at, len(g.units)):
        fetch(i)
        kk, n0 = g.units[i]
        if not a_ahead and n0 == 0 and kk != 0 and kk not in a_early:
            a_early[kk] = a_frags(kk)
    for _ in copies:
        pass
    w = cx.w
    cp_async_wait(w, rot.pending)
    cx.sync()
    views = [v.owner for v in op.operands[:2]]
    s = cx.scalar(views[0].operands[1])
    n_stages = int(views[0].operands[0].type.get("stages"))
    last = w.op(f"icmp eq i32 {s}, {n_stages - 1}", "rot_last")
    nxt = w.op(f"select i1 {last}, i32 0, i32 {w.op(f'add i32 {s}, 1', 'rot_s')}", "rot_next")
    a, b = (_stage_view(cx, d, nxt) for d in views)
    return _first_step_words(cx, g, a, b)


def _a_ahead(op: Operation, g: _MmaShape, a_shared: bool) -> bool:
    """Whether the next k16 step's A is loaded ahead with its unit: the mma's `a_ahead` (pipeline-cp-async
    writes it where two steps fit the plan's registers), else a register A or a step of at most
    A_AHEAD_MAX_REGS."""
    if not a_shared:
        return True
    want = op.attrs.get("a_ahead")
    return want if isinstance(want, bool) else MMA_A_WORDS * g.mblocks <= A_AHEAD_MAX_REGS


def _fragments_ahead(cx: LoweringContext, op: Operation, per_k: int, mblocks: int, a_shared: bool) -> int:
    """How many units (one k16 step x one pair of n8 blocks: one ldmatrix.x4 of B) ahead of their mma.sync
    the fragments are loaded: the mma's `frag_ahead` (pipeline-cp-async{fragments_ahead=n}), else
    FRAG_AHEAD_UNITS; at most a whole k16 step, and at most what the registers the occupancy plan
    leaves free hold (MAX_REGS_PER_THREAD - its budget - FRAG_SLACK_REGS)."""
    want = op.attrs.get("frag_ahead", FRAG_AHEAD_UNITS)
    if not isinstance(want, int) or isinstance(want, bool) or want < 0:
        raise LoweringError(op.loc, f"backend: frag_ahead = {want} must be a count of units >= 0")
    plan = cx.occupancy
    if want == 0 or plan is None or plan.budget is None:
        return 0
    a_regs = MMA_A_WORDS * mblocks if a_shared else 0  # two k16 steps of A live at once
    room = MAX_REGS_PER_THREAD - plan.budget.total - FRAG_SLACK_REGS - 2 * a_regs
    return max(0, min(want, per_k, room // MMA_B_UNIT_WORDS))


def _a_fragments(cx: LoweringContext, a: Smem | Frag, slab: int, mblocks: int, ksteps: int,
                 trans_a: bool, warps_n: int = 1) -> Callable[[int], list[list[str]]]:
    """kk -> the A fragments (4 x b32 per m16 block) of k16 step kk: ldmatrix.x4 (A stored M x K) or
    ldmatrix.x4.trans (stored K x M, `trans_a`) of a shared A, emitted when asked for; the bf16 pairs of
    an `mma_a` register tile."""
    if isinstance(a, Frag):
        words = pack_a_fragment(cx.w, a.values, mblocks, ksteps, a.type.dtype)
        return lambda kk: [words[mb][kk] for mb in range(mblocks)]
    eb = dtype_bytes(a.type.dtype)
    insts = [(mb, kk) for kk in range(ksteps) for mb in range(mblocks)]
    position = ldmatrix_a_trans_position if trans_a else ldmatrix_a_position
    addrs = dict(zip(insts, cx.shared_addresses(a, lambda b, tid, i: position(b, tid, slab, eb, *i, warps_n),
                                                insts), strict=True))
    return lambda kk: [_ldmatrix(cx, addrs[mb, kk], 4, trans=trans_a) for mb in range(mblocks)]


def _b_fragments(cx: LoweringContext, b: Smem | Frag, trans_b: bool, ksteps: int, nblocks: int, dtype: str,
                 units: list[tuple[int, int]], warps_n: int = 1,
                 width: int = 0) -> Callable[[int], list[tuple[int, list[str]]]]:
    """unit i = (kk, n0) -> [(n8 block, its 2 x b32 B fragment)] for the one or two n8 blocks at column n0
    of the warp's `width` columns (its own with warps_n > 1, ldmatrix_b_position):
    one ldmatrix.x4(.trans) (`.x2` for a last odd block) of a shared B, emitted when asked for; the bf16
    pairs of an `mma_b` register tile (slots (kb, nb, i): b0b1 and b2b3, HOPPER.md §6.3)."""
    def blocks(n0: int) -> list[int]:
        return [n0 // MMA_N + j for j in range(2) if n0 // MMA_N + j < nblocks]

    if isinstance(b, Frag):
        def packed(i: int) -> list[tuple[int, list[str]]]:
            kk, n0 = units[i]
            out = []
            for nb in blocks(n0):
                s0 = (kk * nblocks + nb) * 4
                out.append((nb, [cx.w.pack_pair(b.values[s0 + j], b.values[s0 + j + 1], dtype) for j in (0, 2)]))
            return out
        return packed
    eb = dtype_bytes(dtype)
    addrs = cx.shared_addresses(b, lambda bd, tid, i: ldmatrix_b_position(bd, tid, trans_b, eb, *i, warps_n, width),
                                units)

    def loaded(i: int) -> list[tuple[int, list[str]]]:
        bs = blocks(units[i][1])
        regs = _ldmatrix(cx, addrs[i], 2 * len(bs), trans=not trans_b)
        return [(nb, [regs[r0], regs[r1]]) for nb, (r0, r1) in zip(bs, B_PAIR_REGS, strict=False)]
    return loaded


def _ldmatrix(cx: LoweringContext, addr: str, n: int, trans: bool) -> list[str]:
    w = cx.w
    ret = "{" + ", ".join(["i32"] * n) + "}"
    fn = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{n}{'.trans' if trans else ''}.b16.p3"
    p = w.op(f"inttoptr i32 {addr} to ptr addrspace(3)", "lp")
    r = w.call(ret, fn, [("ptr addrspace(3)", p)], hint="ldm")
    return [w.op(f"extractvalue {ret} {r}, {i}", "m") for i in range(n)]


def _mma_sync(cx: LoweringContext, a: list[str], b: list[str], c: list[str], dtype: str = "bf16") -> list[str]:
    w = cx.w
    ret = "{float, float, float, float}"
    args = [("i32", x) for x in a + b] + [("float", x) for x in c]
    if dtype == "bf16":
        r = w.call(ret, "llvm.nvvm.mma.m16n8k16.row.col.bf16", args, hint="mma")
    else:  # f16 inputs, f32 accumulators (PTX ISA §9.7.14.5.14)
        r = w.asm(ret, ["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, "
                        "{$8, $9}, {$10, $11, $12, $13};"],
                  ["=f"] * 4 + ["r"] * 6 + ["f"] * 4, args, "mma")
    return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(4)]

# --- accumulator stores --------------------------------------------------------------------------


def _mma_c_to_global(cx: LoweringContext, op: Operation) -> bool:
    val = cx.peek(op.operands[1])
    return (isinstance(cx.peek(op.operands[0]), Global) and isinstance(val, Frag) and val.kind == "mma_c"
            and val.type.dtype == "bf16")


@rule("tk.store", when=_mma_c_to_global)
def _op_tk_store(cx: LoweringContext, op: Operation) -> None:
    val = cx.get(op.operands[1])
    w = cx.w
    dst = cx.get(op.operands[0])
    ptr, gty = dst.ptr, dst.type
    t = val.type
    if gty.rank < 2 or t.dtype != "bf16":
        raise LoweringError(op.loc, "backend: accumulator stores need a bf16 tile and tensor of rank >= 2")
    coords = [cx.scalar(v) for v in op.operands[2:]]
    plane, nrows, ncols = cx.plane(ptr, gty, coords)
    r_tile, c_tile = coords[-2:]
    lay = val.layout
    slots = slot_coords(lay, t.shape, LLVMBuilder(w), cx.thread_index())  # a consumer role's own index
    tids = np.arange(cx.role_threads())
    num = [[np.broadcast_to(x, tids.shape) for x in sl] for sl in slot_coords(lay, t.shape, NumpyBuilder(), tids)]
    row0 = w.op(f"mul i32 {r_tile}, {t.rows}", "r0")
    col0 = w.op(f"mul i32 {c_tile}, {t.cols}", "c0")
    ncols64 = w.op(f"sext i32 {ncols} to i64", "ld")
    for s in range(0, len(slots), 2):
        (r0n, c0n), (r1n, c1n) = num[s], num[s + 1]
        if not (np.array_equal(r0n, r1n) and np.array_equal(c0n + 1, c1n)):
            raise LoweringError(op.loc, f"backend: slots {s}, {s + 1} of {lay} are not a column pair")
        r, c = slots[s]
        row = w.op(f"add i32 {row0}, {r}", "row")
        col = w.op(f"add i32 {col0}, {c}", "col")
        ok = w.op(f"and i1 {w.op(f'icmp slt i32 {row}, {nrows}', 'rok')}, "
                  f"{w.op(f'icmp slt i32 {col}, {ncols}', 'cok')}", "ok")
        idx = w.op(f"mul i64 {w.op(f'sext i32 {row} to i64', 'row64')}, {ncols64}", "idx")
        idx = w.op(f"add i64 {idx}, {w.op(f'sext i32 {col} to i64', 'col64')}", "idx")
        p = w.op(f"getelementptr bfloat, ptr addrspace(1) {plane}, i64 {idx}", "p")
        bits = w.pack_bf16x2(val.values[s], val.values[s + 1])
        okz = w.op(f"zext i1 {ok} to i32", "okz")
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b32 [$0], $1;", "}"],
              ["l", "r", "r"], [("ptr addrspace(1)", p), ("i32", bits), ("i32", okz)])


def _is_shared_load(op: Operation) -> bool:
    return op.name in ("tk.load", "tma.load") and not op.results

