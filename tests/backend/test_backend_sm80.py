"""The sm_80 backend path (cp.async, ldmatrix, mma.sync) and the no-TMA path on sm_90a, without a GPU.

* Simulations: the thread -> (row, byte column) formulas of backend/rules_sm80.py, evaluated for every
  thread, drive a model of cp.async and ldmatrix (HOPPER.md §6.1) over a shared tile laid out by
  tkir.layout.SharedLayout; what each lane receives must be exactly the mma.sync fragment that
  tkir.layout's mma_a / mma_b tables assign to it (HOPPER.md §6.3), for swizzled and padded tiles.
* The shared addresses the rules emit (LLVM integer instructions, with the reuse of one lane offset
  across instances) are evaluated for all threads and compared with SharedLayout.offset.
* Every example compiles for sm_80 (and gemm/attention with no_tma on sm_90a) to PTX that ptxas
  assembles, with the instructions the path is made of and no local memory.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tkir
from tkir.backend.context import LoweringContext
from tkir.backend.fragments import NumpyBuilder, shared_offset
from tkir.backend.llvm_text import LLVMWriter
from tkir.backend.lower_llvm import plan_shared
from tkir.backend.rules_sm80 import (
    B_PAIR_REGS,
    CP_ASYNC_BYTES,
    _cp_async_tile,
    cp_async_position,
    cp_async_rows,
    ldmatrix_a_position,
    ldmatrix_b_position,
)
from tkir.backend.toolchain import local_memory_ops, sass_count
from tkir.backend.values import Global, Smem
from tkir.facts import OccupancyPlan
from tkir.layout import SharedLayout, fragment, make_layout
from tkir.parser import parse_module
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.types import GlobalType, TileType

EB = 2  # bf16
NB = NumpyBuilder()
# every layout a bf16 tile can have: the three swizzles, padded rows, plain rows
SHARED_KINDS = [(128, 0), (64, 0), (32, 0), (0, 16), (0, 0)]


def _cases(shapes: list[tuple], cols_of) -> list[tuple]:
    """(shape..., SharedLayout) for every shape and every layout that exists for its stored rows."""
    out = []
    for shape in shapes:
        rows, cols = cols_of(*shape)
        for span, pad in SHARED_KINDS:
            lay = SharedLayout("bf16", rows, cols, span, pad)
            if lay.problem() is None:
                out.append((*shape, lay))
    return out


def _stored(lay: SharedLayout, ids: np.ndarray) -> np.ndarray:
    """Shared memory as 2-byte slots holding each element's id where the layout puts it (-1: none)."""
    mem = np.full(lay.size_bytes // EB, -1, dtype=np.int64)
    r, c = np.meshgrid(np.arange(lay.rows), np.arange(lay.cols), indexing="ij")
    mem[lay.offset(r, c * EB) // EB] = ids
    return mem


def _ldmatrix(mem: np.ndarray, addrs: np.ndarray, n: int, trans: bool) -> np.ndarray:
    """HOPPER.md §6.1: lanes 8j..8j+7 give matrix j's row addresses (16 contiguous bytes each);
    non-trans: register j of lane t = matrix j's row t/4, columns 2(t%4), +1; .trans: (rows 2(t%4),
    +1, column t/4). Returns (32 lanes, n registers, 2 halves) of element ids."""
    out = np.zeros((32, n, 2), dtype=np.int64)
    for j in range(n):
        rows = addrs[8 * j:8 * j + 8]
        assert (rows % 16 == 0).all(), "ldmatrix rows must be 16-byte aligned"
        mat = np.stack([mem[a // EB:a // EB + 8] for a in rows])  # 8 x 8
        for t in range(32):
            g, q = t // 4, t % 4
            out[t, j] = (mat[2 * q, g], mat[2 * q + 1, g]) if trans else (mat[g, 2 * q], mat[g, 2 * q + 1])
    return out


# --- ldmatrix -> mma.sync fragments ------------------------------------------------------------------


@pytest.mark.parametrize("M, K, warps, lay", _cases([(128, 64, 8), (64, 128, 4), (64, 32, 2)],
                                                     lambda m, k, w: (m, k)), ids=str)
def test_ldmatrix_a_gives_the_mma_a_fragment(M: int, K: int, warps: int, lay: SharedLayout) -> None:
    mem = _stored(lay, np.arange(M * K).reshape(M, K))
    table = fragment(make_layout("mma_a", warps=warps), "bf16", (M, K))  # ids r * K + c
    slab, tid = M // warps, np.arange(32 * warps)
    for mb in range(slab // 16):
        for kk in range(K // 16):
            offs = shared_offset(lay, *ldmatrix_a_position(NB, tid, slab, EB, mb, kk), NB)
            for w in range(warps):
                got = _ldmatrix(mem, np.broadcast_to(offs, tid.shape)[32 * w:32 * w + 32], 4, trans=False)
                s0 = mb * (K // 2) + 8 * kk
                want = table[32 * w:32 * w + 32, s0:s0 + 8].reshape(32, 4, 2)  # register j = a(2j), a(2j+1)
                assert (got == want).all(), (mb, kk, w)


B_SHAPES = [(64, 256, False), (64, 128, False), (32, 24, False), (128, 64, True), (64, 64, True), (32, 24, True)]


@pytest.mark.parametrize("K, N, trans_b, lay", _cases(B_SHAPES, lambda k, n, t: (n, k) if t else (k, n)), ids=str)
def test_ldmatrix_b_gives_the_mma_b_fragment(K: int, N: int, trans_b: bool, lay: SharedLayout) -> None:
    k, n = np.meshgrid(np.arange(K), np.arange(N), indexing="ij")
    ids = k * N + n  # logical B (K x N), as tkir.layout numbers it
    mem = _stored(lay, ids.T if trans_b else ids)
    table = fragment(make_layout("mma_b", warps=1), "bf16", (K, N))  # slots (kb, nb, i)
    lane = np.arange(32)
    for kk in range(K // 16):
        for n0 in range(0, N, 16):
            blocks = [b for b in (n0 // 8, n0 // 8 + 1) if b < N // 8]
            offs = shared_offset(lay, *ldmatrix_b_position(NB, lane, trans_b, EB, kk, n0), NB)
            got = _ldmatrix(mem, np.broadcast_to(offs, lane.shape), 2 * len(blocks), trans=not trans_b)
            for nb, regs in zip(blocks, B_PAIR_REGS, strict=False):
                s0 = (kk * (N // 8) + nb) * 4
                want = table[:, s0:s0 + 4].reshape(32, 2, 2)  # b0b1 in register 0, b2b3 in register 1
                assert (got[:, list(regs)] == want).all(), (kk, nb)


@pytest.mark.parametrize("M, K, N, warps, warps_n, trans_b, lay_a, lay_b",
                         [(M, K, N, w, wn, t, la, lb) for M, K, N, w, wn, t in
                          [(256, 64, 128, 8, 2, False), (128, 32, 256, 8, 4, True), (64, 32, 64, 4, 2, False)]
                          for la, lb in [(SharedLayout("bf16", M, K, 64 if K == 32 else 128),
                                          SharedLayout("bf16", *((N, K) if t else (K, N)), 64 if t and K == 32 else 128)),
                                         (SharedLayout("bf16", M, K, 0, 16),
                                          SharedLayout("bf16", *((N, K) if t else (K, N)), 0, 16))]], ids=str)
def test_ldmatrix_of_a_warp_grid_reads_the_warps_rows_and_columns(M: int, K: int, N: int, warps: int, warps_n: int,
                                                                  trans_b: bool, lay_a: SharedLayout,
                                                                  lay_b: SharedLayout) -> None:
    """warps_n > 1 (an mma_c accumulator over a (W/N) x N grid): warp w's A fragments are the mma_a
    fragments of the rows of grid row w / N, and its B fragments the mma_b fragments of the columns
    of grid column w % N."""
    wm, width, tid = warps // warps_n, N // warps_n, np.arange(32 * warps)
    slab = M // wm
    mem_a = _stored(lay_a, np.arange(M * K).reshape(M, K))
    a_table = fragment(make_layout("mma_a", warps=wm), "bf16", (M, K))
    k, n = np.meshgrid(np.arange(K), np.arange(N), indexing="ij")
    ids = k * N + n
    mem_b = _stored(lay_b, ids.T if trans_b else ids)
    for w in range(warps):
        lanes = slice(32 * w, 32 * w + 32)
        for kk in range(K // 16):
            for mb in range(slab // 16):
                offs = shared_offset(lay_a, *ldmatrix_a_position(NB, tid, slab, EB, mb, kk, warps_n), NB)
                got = _ldmatrix(mem_a, np.broadcast_to(offs, tid.shape)[lanes], 4, trans=False)
                gm = w // warps_n
                s0 = mb * (K // 2) + 8 * kk
                want = a_table[32 * gm:32 * gm + 32, s0:s0 + 8].reshape(32, 4, 2)
                assert (got == want).all(), (w, mb, kk)
            b_cols = ids[:, (w % warps_n) * width:(w % warps_n + 1) * width]  # the warp's columns of B
            b_table = fragment(make_layout("mma_b", warps=1), "bf16", (K, width))  # numbered r * width + c
            b_ids = b_cols.ravel()[b_table]
            for n0 in range(0, width, 16):
                offs = shared_offset(lay_b, *ldmatrix_b_position(NB, tid, trans_b, EB, kk, n0, warps_n, width), NB)
                got = _ldmatrix(mem_b, np.broadcast_to(offs, tid.shape)[lanes], 4, trans=not trans_b)
                for nb, regs in zip((n0 // 8, n0 // 8 + 1), B_PAIR_REGS, strict=True):
                    s0 = (kk * (width // 8) + nb) * 4
                    assert (got[:, list(regs)] == b_ids[:, s0:s0 + 4].reshape(32, 2, 2)).all(), (w, kk, nb)


# --- cp.async -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows, cols, threads, lay",
                         _cases([(128, 64, 256), (64, 256, 256), (64, 128, 128), (16, 40, 128), (64, 192, 128)],
                                lambda r, c, t: (r, c)), ids=str)
def test_cp_async_chunks_fill_the_shared_layout(rows: int, cols: int, threads: int, lay: SharedLayout) -> None:
    ids = np.arange(rows * cols).reshape(rows, cols)
    mem = np.full(lay.size_bytes // EB, -1, dtype=np.int64)
    cpr = cols * EB // CP_ASYNC_BYTES
    total, tid = rows * cpr, np.arange(threads)
    writes = 0
    for k in range(-(-total // threads)):
        r, c = (np.broadcast_to(x, tid.shape) for x in cp_async_position(NB, tid, threads, cpr, k))
        offs = np.broadcast_to(shared_offset(lay, r, c, NB), tid.shape)
        for t in np.flatnonzero(tid + k * threads < total):  # the last round may leave threads idle
            assert offs[t] % CP_ASYNC_BYTES == 0
            chunk = mem[offs[t] // EB:offs[t] // EB + 8]
            assert (chunk == -1).all(), "a chunk written twice"
            chunk[:] = ids[r[t], c[t] // EB:c[t] // EB + 8]
            writes += 1
    assert writes == total
    assert (mem == _stored(lay, ids)).all()


# --- emitted shared addresses -----------------------------------------------------------------------------


class _Harness(LoweringContext):
    """Just what the cp.async and address rules need from a lowering context: a writer, the block's
    threads, %tid, size parameters."""

    def __init__(self, threads: int) -> None:
        self.w = LLVMWriter()
        self.threads = threads
        self.tid = "%tid"
        self.role = None

    def dim(self, d: int | str) -> str:
        return str(d) if isinstance(d, int) else f"%{d}"


_BINOPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "shl": np.left_shift,
           "lshr": np.right_shift, "and": np.bitwise_and, "xor": np.bitwise_xor,
           "udiv": np.floor_divide, "urem": np.remainder, "slt": np.less, "sgt": np.greater, "ult": np.less,
           "smin": np.minimum, "smax": np.maximum}
_V = r"([%\w.-]+)"
_FORMS = [  # (pattern, how to evaluate the operands): the integer code of addresses and copies
    (rf"(\w+) i(?:1|32|64) {_V}, {_V}", lambda op, a, b: _BINOPS[op](a, b)),
    (rf"icmp (\w+) i32 {_V}, {_V}", lambda op, a, b: _BINOPS[op](a, b)),
    (rf"[sz]ext i(?:1|32) {_V} to i(?:32|64)", lambda a: np.asarray(a, dtype=np.int64)),
    (rf"select i1 {_V}, i(?:32|64) {_V}, i(?:32|64) {_V}", np.where),
    (rf"call i32 @llvm\.(\w+)\.i32\(i32 {_V}, i32 {_V}\)", lambda op, a, b: _BINOPS[op](a, b)),
    (rf"getelementptr i8, ptr addrspace\(1\) {_V}, i64 {_V}", np.add),
    (rf"getelementptr bfloat, ptr addrspace\(1\) {_V}, i64 {_V}", lambda p, i: p + EB * i),
]


def _evaluate(lines: list[str], env: dict[str, object]) -> list[list[object]]:
    """Evaluate the emitted integer instructions over numpy arrays (one element per thread); returns
    the operands of each inline-asm call, in order."""
    calls = []
    for line in lines:
        m = re.fullmatch(r"\s*call void asm sideeffect \"[^\"]*\", \"[^\"]*\"\((.*)\)", line)
        if m:
            calls.append([env[a.split()[-1]] for a in m.group(1).split(", ")])
            continue
        name, rhs = re.fullmatch(r"\s*(%[\w.]+) = (.*)", line).groups()
        for pattern, fn in _FORMS:
            f = re.fullmatch(pattern, rhs)
            if f:
                args = [x if not re.fullmatch(r"%[\w.]+|-?\d+", x) else env[x] if x[0] == "%" else int(x)
                        for x in f.groups()]
                env[name] = fn(*args)
                break
        else:
            raise AssertionError(f"unexpected instruction: {line}")
    return calls


EMITTED = [(what, SharedLayout("bf16", 64, 256 if what in ("b", "b_grid") else 128, span, pad))
           for what in ("a", "b", "b_trans", "cp_async", "a_grid", "b_grid", "b_trans_grid") for span, pad in SHARED_KINDS]
# 24 chunks per row, 128 threads: a round moves 5 1/3 rows, neither a constant add nor a constant xor
EMITTED += [("cp_async", SharedLayout("bf16", 64, 192, 128)), ("cp_async", SharedLayout("bf16", 64, 192, 64))]


@pytest.mark.parametrize("what, lay", EMITTED, ids=str)
def test_emitted_shared_addresses_match_the_layout(what: str, lay: SharedLayout) -> None:
    threads = 128
    rows, cols = lay.rows, lay.cols
    grid = 2 if what.endswith("_grid") else 1  # a 2 x 2 warp grid: the warps_n = 2 positions
    if what.startswith("a"):
        def pos(b, t, i):
            return ldmatrix_a_position(b, t, rows * grid // 4, EB, *i, grid)
        insts = [(mb, kk) for mb in range(grid) for kk in range(cols // 16)]
    elif what.startswith("b"):
        trans = what.startswith("b_trans")
        n, k = (rows, cols) if trans else (cols, rows)

        def pos(b, t, i):
            return ldmatrix_b_position(b, t, trans, EB, *i, grid, n // grid)
        insts = [(kk, n0) for kk in range(k // 16) for n0 in range(0, n // grid, 16)]
    else:
        def pos(b, t, i):
            return cp_async_position(b, t, threads, cols * EB // 16, i)
        insts = list(range(-(-rows * cols * EB // 16 // threads)))
    h = _Harness(threads)
    tile = TileType("st", "bf16", rows, cols, (("swizzle", lay.swizzle), ("pad", lay.pad)))
    names = h.shared_addresses(Smem("%base", tile), pos, insts)
    tid = np.arange(threads)
    env: dict[str, object] = {"%tid": tid, "%base": 0}
    _evaluate(h.w.lines, env)
    for name, inst in zip(names, insts, strict=True):
        want = np.broadcast_to(shared_offset(lay, *pos(NB, tid, inst), NB), tid.shape)
        assert (np.broadcast_to(env[name], tid.shape) == want).all(), inst
    if lay.cols != 192:
        # one full offset computation, then a constant add or xor per further instance (swizzled
        # column steps xor, row steps add): far fewer instructions than one formula per instance
        assert len(h.w.lines) <= 24 + 2 * len(insts)


@pytest.mark.parametrize("lay", [SharedLayout("bf16", 64, 64, 128), SharedLayout("bf16", 32, 128, 64),
                                 SharedLayout("bf16", 48, 32, 0, 16)], ids=str)
def test_emitted_cp_async_copies_a_ragged_tile_with_zero_fill(lay: SharedLayout) -> None:
    # a [2, M, N] tensor, M = 100 and N = 72 not multiples of the tile: the copy of tile (1, 1) of
    # plane 1 finds rows and columns past the edge (N = 72: 16-byte aligned rows, as launch requires)
    threads, M, N = 128, 100, 72
    rows, cols = lay.rows, lay.cols
    h = _Harness(threads)
    tile = TileType("st", "bf16", rows, cols, (("swizzle", lay.swizzle), ("pad", lay.pad)))
    g = np.arange(2 * M * N).reshape(2, M, N) + 1  # element ids, 0 = zero fill
    _cp_async_tile(h, None, Smem("%base", tile), Global("%A", GlobalType("bf16", ("P", "M", "N"))),
                     ["%p", "%tr", "%tc"])
    tid = np.arange(threads)
    env: dict[str, object] = {"%tid": tid, "%base": 0, "%A": 0, "%P": 2, "%M": M, "%N": N, "%p": 1,
                              "%tr": M // rows, "%tc": 1 if cols < N else 0}
    calls = _evaluate(h.w.lines, env)
    mem = np.full(lay.size_bytes // EB, -1, dtype=np.int64)
    flat = g.ravel()
    for call in calls:
        saddr, src, n = (np.broadcast_to(x, tid.shape) for x in call[:3])
        active = np.broadcast_to(call[3], tid.shape) if len(call) > 3 else np.ones(threads, bool)
        for t in np.flatnonzero(active):
            chunk = np.zeros(8, dtype=np.int64)  # cp.async: bytes past src-size are zero-filled
            chunk[:n[t] // EB] = flat[src[t] // EB:src[t] // EB + n[t] // EB]
            mem[saddr[t] // EB:saddr[t] // EB + 8] = chunk
    r0, c0 = env["%tr"] * rows, env["%tc"] * cols
    want = np.zeros((rows, cols), dtype=np.int64)
    part = g[1, r0:r0 + rows, c0:c0 + cols]
    want[:part.shape[0], :part.shape[1]] = part
    assert part.shape != want.shape  # the tile is ragged in at least one dim
    assert (mem == _stored(lay, want)).all()


@pytest.mark.parametrize("lay, r_tile, c_tile", [
    (SharedLayout("bf16", 64, 64, 128), 1, 1), (SharedLayout("bf16", 32, 128, 64), 3, 0),
    (SharedLayout("bf16", 64, 64, 128), 0, 1), (SharedLayout("bf16", 48, 32, 0, 16), 2, 2)], ids=str)
def test_emitted_pipelined_copy_of_a_ragged_tile(lay: SharedLayout, r_tile: int, c_tile: int) -> None:
    # the pipelined loop's copy (cp_async_rows: round k's address is round 0's plus k row pitches, chunks
    # past the edge copied with their source ignored): tile (r_tile, c_tile) of plane 1 of a [2, 100, 72]
    # tensor, ragged in rows, columns or both; a copy whose condition is 0 writes nothing
    threads, M, N = 128, 100, 72
    rows, cols = lay.rows, lay.cols
    h = _Harness(threads)
    tile = TileType("st", "bf16", rows, cols, (("swizzle", lay.swizzle), ("pad", lay.pad)))
    g = np.arange(2 * M * N).reshape(2, M, N) + 1  # element ids, 0 = zero fill
    for on in (1, 0):
        h.w = LLVMWriter()
        list(cp_async_rows(h, None, Smem("%base", tile), Global("%A", GlobalType("bf16", ("P", "M", "N"))),
                           ["%p", "%tr", "%tc"], "%on"))
        tid = np.arange(threads)
        env: dict[str, object] = {"%tid": tid, "%base": 0, "%A": 0, "%P": 2, "%M": M, "%N": N, "%p": 1,
                                  "%tr": r_tile, "%tc": c_tile, "%on": on}
        calls = _evaluate(h.w.lines, env)
        assert calls and all(len(c) == 4 for c in calls)  # (shared address, source, copy the source?, on)
        mem = np.full(lay.size_bytes // EB, -1, dtype=np.int64)
        flat = g.ravel()
        for saddr, src, ok, cond in ((np.broadcast_to(x, tid.shape) for x in call) for call in calls):
            for t in np.flatnonzero(cond):
                mem[saddr[t] // EB:saddr[t] // EB + 8] = flat[src[t] // EB:src[t] // EB + 8] if ok[t] else 0
        if not on:
            assert (mem == -1).all()
            continue
        r0, c0 = r_tile * rows, c_tile * cols
        want = np.zeros((rows, cols), dtype=np.int64)
        part = g[1, r0:r0 + rows, c0:c0 + cols]
        want[:part.shape[0], :part.shape[1]] = part
        assert (mem == _stored(lay, want)).all()


# --- whole kernels: PTX that ptxas assembles, the instructions the path is made of ------------------------

SM80_MMA = [("gemm", {}), ("attention_fwd", {}), ("attention_fwd", {"CAUSAL": 1}), ("attention_fwd", {"D": 64})]


@pytest.mark.parametrize("name, consts", SM80_MMA, ids=str)
def test_sm80_mma_kernels_use_ldgsts_ldsm_hmma(name: str, consts: dict) -> None:
    k = tkir.compile(f"examples/{name}.tk", target="sm_80", **consts)
    assert ".target sm_80" in k.asm["ptx"]
    sass = k.asm["sass"]
    assert sass_count(sass, "HMMA") >= 64     # mma.sync m16n8k16
    assert sass_count(sass, "LDSM") >= 32     # ldmatrix
    assert sass_count(sass, "LDGSTS") >= 12   # cp.async
    # a chunk is 16 bytes or nothing: each copy carries a predicate (zero fill where it is false), not
    # the variable-size ZFILL form whose size ptxas folds into the address
    # (ptxas may add the .LTC128B L2 prefetch hint itself)
    assert re.search(r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128 \[[^]]*\], \[[^]]*\], !?P\d", sass)
    assert "ZFILL" not in sass
    assert not local_memory_ops(sass)
    producer = OccupancyPlan.of(k.module.kernel).role("producer")   # none by default (the rotated one-role loop)
    assert producer is None
    assert k.launch.block[0] == 32 * (k.module.kernel.attrs["warps"] + (producer.warps if producer else 0))


# the one-role cp.async loop (a gemm's loop would otherwise get producer warps: plan-occupancy{producer_warps})
ONE_ROLE = ",".join("plan-occupancy{producer_warps=0}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
ONE_D = ",".join({"infer-layouts": "infer-layouts{mma_warps_n=1}",
                  "plan-occupancy": "plan-occupancy{producer_warps=0}"}.get(p, p) for p in DEFAULT_PIPELINE)


# the grid's loop is rotated (pipeline-cp-async's step_ahead: by a whole k16 step): its first k16 step's 4 + 4 ldmatrix once more before
# the loop; the 1-D ablation's 16 B units of a step do not fit the registers beside its budget: not rotated
@pytest.mark.parametrize("passes, ldsm", [(ONE_ROLE, 32 + 8), (ONE_D, 68)], ids=["grid", "one-d"])
def test_sm80_gemm_counts(passes: str | None, ldsm: int) -> None:
    k = tkir.compile("examples/gemm.tk", target="sm_80", passes=passes)
    sass = k.asm["sass"]
    # 8 warps in a 2 x 4 grid of 64 x 64 warp tiles; per k-tile (BK = 64) a warp runs 4 k16 steps x
    # 4 m16 x 8 n8 blocks of mma.sync, 4 x 4 ldmatrix.x4 for A and 4 x 4 ldmatrix.x4.trans for B (the
    # 1-D ablation: 16-row warps, 4 x 1 for A and 4 x 16 for B); 256 threads copy 128 x 64 x 2 B of A
    # and 64 x 256 x 2 B of B = 1024 + 2048 16-byte chunks: 12 cp.async each, in the loop and for each
    # of the 3 k-tiles the 4-stage pipeline issues ahead (pipeline-cp-async)
    assert ("warps_n = 4" in k.ir) == (passes == ONE_ROLE) == ("frag_rotate = " in k.ir)
    assert sass_count(sass, "HMMA") == 128
    assert sass_count(sass, "LDSM") == ldsm
    assert sass_count(sass, "LDGSTS") == 4 * 12
    assert k.launch.block == (256, 1, 1)
    # cp.async zero-fills every edge: a ragged M, N or K needs only 16-byte aligned rows
    assert {r.expr for r in k.launch.requires} == {"(K * 2) % 16", "(N * 2) % 16"}
    assert k.asm["ptxas"].spill_stores == 0


def test_sm80_loop_orders_barriers_around_the_copies() -> None:
    ptx = tkir.compile("examples/gemm.tk", target="sm_80", passes=ONE_ROLE).asm["ptx"]
    body = ptx[ptx.index("cp.async.wait_group 2"):]
    pat = r"bar\.sync|cp\.async\.cg|cp\.async\.commit_group|cp\.async\.wait_group|mma\.sync|ldmatrix"
    order = [m.group(0) for m in re.finditer(pat, body)]
    order = order[:order.index("cp.async.commit_group") + 1]  # one iteration of the loop
    # own copies of this k-tile landed, then everybody's (and everybody is done with the stage the
    # copies refill), then fragments and math, with the next k-tiles' copies issued between them and
    # committed as one group
    assert order[:3] == ["cp.async.wait_group", "bar.sync", "ldmatrix"]
    first_mma, copies = order.index("mma.sync"), [i for i, x in enumerate(order) if x == "cp.async.cg"]
    assert len(copies) == 12 and copies[0] > first_mma
    assert order[-1] == "cp.async.commit_group" and "bar.sync" not in order[2:]


@pytest.mark.parametrize("name, consts", [("gemm", {}), ("attention_fwd", {}), ("attention_fwd", {"CAUSAL": 1})],
                         ids=str)
def test_no_tma_on_sm90a_uses_cp_async_and_wgmma(name: str, consts: dict) -> None:
    k = tkir.compile(f"examples/{name}.tk", no_tma=True, **consts)
    sass = k.asm["sass"]
    assert sass_count(sass, "HGMMA") >= 4 and sass_count(sass, "LDGSTS") >= 12
    assert "UTMALDG" not in sass and not local_memory_ops(sass)
    ptx = k.asm["ptx"]
    # the copies are made visible to wgmma's async proxy before the barrier that releases the math
    fence = ptx.index("fence.proxy.async.shared::cta")
    assert ptx.index("cp.async.wait_group") < fence < ptx.index("wgmma.mma_async")
    assert k.launch.tma == ()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rotary"])
def test_sm80_row_kernels_assemble(name: str) -> None:
    k = tkir.compile(f"{'examples' if name == 'rotary' else 'tests/data/rows'}/{name}.tk", target="sm_80")
    sass = k.asm["sass"]
    assert "LDG.E.128" in sass and not local_memory_ops(sass)


def test_shared_plan_counts_row_padding() -> None:
    text = """tk.kernel @k {grid = ["1"]} {
  ^(%A: gl<bf16>[M, K])
  %a = tk.alloc : st<bf16, 64, 40, pad=16>
  %b = tk.alloc : st<bf16, 64, 64, swizzle=128, align=1024>
}
"""
    kernel = parse_module(text, "k.tkir").kernel
    allocs = [op for op in kernel.walk() if op.name == "tk.alloc"]
    plan = plan_shared(kernel)
    a_bytes = SharedLayout("bf16", 64, 40, 0, 16).size_bytes  # 64 x (80 + 16)
    assert plan.offsets[id(allocs[1].result)] >= a_bytes


@pytest.mark.parametrize("name, consts", [("gemm", {}), ("linear", {"ACT": 1}), ("gemm", {"BM": 64, "BN": 64, "STAGES": 4}),
                                           ("gemm", {"STAGE_EPILOGUE": 0})], ids=str)
def test_sm80_roles_address_by_their_own_thread_index(name: str, consts: dict) -> None:
    """Inside a role (the cp.async producer warps and the mma warps after them) every layout, copy and
    store addresses by the role's thread index: the block's %tid.x defines only the role's index and
    lane. (A bug found on the GPU: the sm_80 accumulator store used the block's index, so the consumers, after 4
    producer warps, stored their rows 128 threads off; only the GPU check saw it.)"""
    consts = dict(consts)
    # STAGE_EPILOGUE = 0 (a test switch, not a constant of the kernel): stage-epilogue left out, so the
    # accumulator is stored from registers by the sm_80 store rule, which the staged epilogue replaces
    stage = consts.pop("STAGE_EPILOGUE", 1)
    pw4 = ",".join("plan-occupancy{producer_warps=4}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE
                   if stage or p != "stage-epilogue")
    llvm = tkir.compile(f"examples/{name}.tk", target="sm_80", passes=pw4, **consts).asm["llvm"]
    tid = re.search(r"(%tid_x[.\w]*) = call i32 @llvm\.nvvm\.read\.ptx\.sreg\.tid\.x", llvm).group(1)
    roles = re.findall(r"^role_(producer|consumer)[.\d]*:\n(.*?)^end_\1", llvm, re.S | re.M)
    assert [r for r, _ in roles] == ["producer", "consumer"]
    for role, body in roles:
        uses = [line.strip() for line in body.splitlines() if re.search(re.escape(tid) + r"\b", line)]
        assert len(uses) == 2 and all(re.match(r"%(rtid|lane)[.\d]* = ", u) for u in uses), (role, uses)
    # the roles take consecutive warps: the producers' 4 warps first, so the consumers' index starts at 128
    firsts = [int(m) for m in re.findall(r"%rtid[.\d]* = sub i32 " + re.escape(tid) + r", (\d+)", llvm)]
    assert firsts == [0, 32 * 4]


UNPIPELINED = ",".join(p for p in DEFAULT_PIPELINE if not p.startswith("pipeline-cp-async"))


@pytest.mark.parametrize("name, consts", [("gemm", {}), ("attention_fwd", {"D": 64})], ids=str)
def test_unpipelined_copies_have_landed_at_every_barrier(name: str, consts: dict) -> None:
    """Without pipeline-cp-async every shared tile a thread copies with cp.async is read right after the block
    barrier that follows its copies (backend/rules_sm80.py, tk.load), so at every barrier no cp.async group may
    still be in flight: walking the LLVM in order, `cp.async.commit_group` closes a group and
    `cp.async.wait_group N` retires all but the newest N (PTX ISA §9.7.9.25.3). A wait that leaves the tile's own
    group in flight lets the threads read the tile before its bytes land."""
    llvm = tkir.compile(f"examples/{name}.tk", target="sm_80", passes=UNPIPELINED, **consts).asm["llvm"]
    groups, open_copies, barriers = [], 0, 0
    for line in llvm.splitlines():
        if "cp.async.cg.shared.global" in line or "cp.async.ca.shared.global" in line:
            open_copies += 1
        elif "cp.async.commit_group" in line:
            groups.append(open_copies)
            open_copies = 0
        elif m := re.search(r"cp\.async\.wait_group (\d+)", line):
            keep = int(m.group(1))
            groups = groups[len(groups) - keep:] if keep else []
        elif "cp.async.wait_all" in line:
            groups, open_copies = [], 0
        elif "@llvm.nvvm.barrier0()" in line or re.search(r'"bar\.sync ', line):
            barriers += 1
            assert not groups and not open_copies, (
                f"a block barrier with {len(groups)} cp.async groups ({sum(groups)} copies) and {open_copies} "
                "uncommitted copies in flight")
    assert barriers and "cp.async.commit_group" in llvm
