"""The fp8 register A of wgmma, run on the CPU for every thread: an e4m3 tile in the accumulator's fragment (the
softmax probabilities of examples/attention_fp8.tk) converted to the 8-bit A fragment by backend/rules_wgmma.py's
shuffle rule and packed into the four b32 registers of each m64nNk32 step (backend/fragments.py
pack_a_fragment_fp8). Every byte of every register must be the element the PTX ISA's register fragment of an
8-bit A puts there (wgmma .m64nNk32 A: register j of a thread holds four consecutive k, row g (+8 for j odd),
k 4q .. 4q + 3 (+16 for j >= 2); HOPPER.md §1.6), written here from that description, not from tkir.layout.

The evaluator runs the rule's straight-line LLVM text with numpy, one element per thread; `shfl.sync.idx`
reads the source lane's value of the same warp.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_sm80_mma_simulated import _Cx

from tkir.backend.fragments import NumpyBuilder, pack_a_fragment_fp8, slot_coords, tile_shape
from tkir.backend.rules_wgmma import _op_fp8_acc_to_a
from tkir.backend.values import Frag, register_layout
from tkir.parser import parse_module

WARP_LANES = 32  # PTX ISA: a warp is 32 threads
WARPGROUP = 128  # four warps
M64 = 64         # wgmma's m
K32 = 32         # the k of one 8-bit wgmma step


def _run(lines: list[str], env: dict[str, np.ndarray], threads: int) -> None:
    """Straight-line LLVM text of the rule for all threads at once (only the forms it writes)."""
    lane = np.arange(threads) % WARP_LANES
    warp_base = np.arange(threads) - lane
    ops = {"and": np.bitwise_and, "or": np.bitwise_or, "shl": np.left_shift, "lshr": np.right_shift}

    def val(x: str) -> np.ndarray:
        x = x.strip()
        return env[x] if x.startswith("%") else np.full(threads, int(x), np.int64)
    for line in lines:
        name, rhs = re.fullmatch(r"\s*(%[\w.]+) = (.*)", line).groups()
        if m := re.fullmatch(r"(and|or|shl|lshr) i32 ([^,]+), (.+)", rhs):
            out = ops[m[1]](val(m[2]) & 0xFFFFFFFF, val(m[3])) & 0xFFFFFFFF
        elif m := re.fullmatch(r"insertelement <4 x i8> (\S+), i8 (\S+), i32 (\d)", rhs):
            base = np.zeros(threads, np.int64) if m[1] == "poison" else val(m[1])
            k = int(m[3])
            out = (base & ~(0xFF << (8 * k))) | ((val(m[2]) & 0xFF) << (8 * k))
        elif m := re.fullmatch(r"bitcast <4 x i8> (\S+) to i32", rhs):
            out = val(m[1])
        elif m := re.fullmatch(r"trunc i32 (\S+) to i8", rhs):
            out = val(m[1]) & 0xFF
        elif m := re.fullmatch(r"call i32 @llvm\.nvvm\.shfl\.sync\.idx\.i32\(i32 -1, i32 (\S+), i32 (\S+), i32 31\)",
                               rhs):
            out = val(m[1])[warp_base + (val(m[2]) & 31)]
        else:
            raise AssertionError(f"the evaluator does not know: {line}")
        env[name] = np.asarray(out, np.int64)


def _isa_a_element(threads: int, slab: int, mb: int, kk: int, j: int, e: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of byte e of A register j, k32 step kk, m block mb, per thread (PTX ISA, 8-bit A fragment)."""
    t = np.arange(threads)
    lane, warp, wg = t % WARP_LANES, (t // WARP_LANES) % 4, t // WARPGROUP
    g, q = lane // 4, lane % 4
    row = wg * slab + mb * M64 + 16 * warp + g + 8 * (j & 1)
    col = kk * K32 + 4 * q + e + 16 * (j >> 1)
    return row, col


CASES = [(64, 64, 1), (128, 64, 1), (128, 128, 2), (64, 256, 1)]  # (rows, cols, consumer warpgroups)


@pytest.mark.parametrize(("rows", "cols", "wg"), CASES, ids=[f"{r}x{c}-wg{w}" for r, c, w in CASES])
@pytest.mark.parametrize("coord", ["row", "col"])
def test_fp8_a_registers_hold_the_isa_fragment(rows: int, cols: int, wg: int, coord: str) -> None:
    """Each accumulator slot starts as its element's row (or column) number, mod 256; after the conversion and
    the packing, byte e of register j of step kk holds the row (column) of the element the ISA puts there."""
    text = f"""tk.kernel @k {{grid = ["1"]}} {{
  ^(%Y: gl<f32>[R, S])
  %v = tk.fill {{value = 0.0}} : rt<e4m3, {rows}, {cols}, layout={{kind = wgmma_acc, wg = {wg}}}>
  %a = tk.convert_layout %v {{via = "shuffle", smem_bytes = 0, shuffles = 1}} : rt<e4m3, {rows}, {cols}, layout={{kind = wgmma_a, wg = {wg}}}>
}}
"""
    fill, conv = parse_module(text, "k.tkir").kernel.body.ops
    t = fill.result.type
    threads = WARPGROUP * wg
    acc_slots = slot_coords(register_layout(t), tile_shape(t), NumpyBuilder(), np.arange(threads))
    names = [f"%v_{s}" for s in range(len(acc_slots))]
    env = {n: np.asarray(np.broadcast_to(rc[0 if coord == "row" else 1], (threads,)), np.int64) % 256
           for n, rc in zip(names, acc_slots, strict=True)}
    env["%tid"] = np.arange(threads, dtype=np.int64)
    cx = _Cx(threads, {id(fill.result): Frag(t, names)})
    cx.target = "sm_90a"
    _op_fp8_acc_to_a(cx, conv)
    a = cx.get(conv.result)
    slab = rows // wg
    mblocks, ksteps = slab // M64, cols // K32
    words = pack_a_fragment_fp8(cx.w, a.values, mblocks, ksteps)
    _run(cx.w.lines, env, threads)
    for mb in range(mblocks):
        for kk in range(ksteps):
            for j in range(4):
                word = env[words[mb][kk][j]]
                for e in range(4):
                    r, c = _isa_a_element(threads, slab, mb, kk, j, e)
                    want = (r if coord == "row" else c) % 256
                    got = (word >> (8 * e)) & 0xFF
                    bad = np.flatnonzero(got != want)
                    assert not bad.size, (f"m block {mb}, step {kk}, register {j}, byte {e}: thread {bad[0]} holds "
                                          f"{coord} {got[bad[0]]}, the ISA's fragment puts {coord} {want[bad[0]]}")


def test_packing_reuses_the_shuffled_words() -> None:
    """pack_a_fragment_fp8 of the rule's bytes is the rule's words themselves: no unpack-and-repack copies
    (ptxas treats a copy into a wgmma's A registers as a write and serializes the wgmmas, warning C7513)."""
    text = """tk.kernel @k {grid = ["1"]} {
  ^(%Y: gl<f32>[R, S])
  %v = tk.fill {value = 0.0} : rt<e4m3, 64, 64, layout={kind = wgmma_acc, wg = 1}>
  %a = tk.convert_layout %v {via = "shuffle", smem_bytes = 0, shuffles = 1} : rt<e4m3, 64, 64, layout={kind = wgmma_a, wg = 1}>
}
"""
    fill, conv = parse_module(text, "k.tkir").kernel.body.ops
    cx = _Cx(WARPGROUP, {id(fill.result): Frag(fill.result.type, [f"%v_{s}" for s in range(32)])})
    cx.target = "sm_90a"
    _op_fp8_acc_to_a(cx, conv)
    before = len(cx.w.lines)
    words = pack_a_fragment_fp8(cx.w, cx.get(conv.result).values, 1, 2)
    assert len(cx.w.lines) == before
    assert all(re.fullmatch(r"%a8\.\d+", w) for row in words for step in row for w in step)
