"""The fp8 register A of wgmma, run on the CPU for every thread: an e4m3 tile in the accumulator's fragment (the
softmax probabilities of examples/attention_fp8.tk) converted to the 8-bit A fragment by backend/rules_wgmma.py's
shuffle rule and packed into the four b32 registers of each m64nNk32 step (backend/fragments.py
pack_a_fragment_fp8). Every byte of every register must be the element the PTX ISA's register fragment of an
8-bit A puts there (wgmma .m64nNk32 A: register j of a thread holds four consecutive k, row g (+8 for j odd),
k 4q .. 4q + 3 (+16 for j >= 2); HOPPER.md §1.6), written here from that description, not from tkir.layout.

The evaluator runs the rule's straight-line LLVM text with numpy, one element per thread; `shfl.sync.idx`
reads the source lane's value of the same warp, `prmt` selects bytes as the PTX ISA defines it.
"""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from llvm_block_eval import run_block
from test_sm80_mma_simulated import _Cx

import tkir
from tkir.backend.fragments import NumpyBuilder, pack_a_fragment_fp8, slot_coords, tile_shape
from tkir.backend.rules_wgmma import _op_fp8_acc_to_a
from tkir.backend.values import Frag, register_layout
from tkir.parser import parse_module
from tkir.scalar import round_fp8

WARP_LANES = 32  # PTX ISA: a warp is 32 threads
WARPGROUP = 128  # four warps
M64 = 64         # wgmma's m
K32 = 32         # the k of one 8-bit wgmma step


def _run(lines: list[str], env: dict[str, np.ndarray], threads: int) -> None:
    """Straight-line LLVM text of the rule for all threads at once (only the forms it writes)."""
    lane = np.arange(threads) % WARP_LANES
    warp_base = np.arange(threads) - lane
    ops = {"and": np.bitwise_and, "or": np.bitwise_or, "shl": np.left_shift, "lshr": np.right_shift,
           "add": np.add, "mul": np.multiply}

    def val(x: str) -> np.ndarray:
        x = x.strip()
        return env[x] if x.startswith("%") else np.full(threads, int(x), np.int64)
    for line in lines:
        name, rhs = re.fullmatch(r"\s*(%[\w.]+) = (.*)", line).groups()
        if m := re.fullmatch(r"(and|or|shl|lshr|add|mul) i32 ([^,]+), (.+)", rhs):
            out = ops[m[1]](val(m[2]) & 0xFFFFFFFF, val(m[3])) & 0xFFFFFFFF
        elif m := re.fullmatch(r"insertelement <4 x i8> (\S+), i8 (\S+), i32 (\d)", rhs):
            base = np.zeros(threads, np.int64) if m[1] == "poison" else val(m[1])
            k = int(m[3])
            out = (base & ~(0xFF << (8 * k))) | ((val(m[2]) & 0xFF) << (8 * k))
        elif m := re.fullmatch(r"bitcast <4 x i8> (\S+) to i32", rhs):
            out = val(m[1])
        elif m := re.fullmatch(r"zext i16 (\S+) to i32", rhs):
            out = val(m[1]) & 0xFFFF
        elif m := re.fullmatch(r"trunc i32 (\S+) to i8", rhs):
            out = val(m[1]) & 0xFF
        elif m := re.fullmatch(r"call i32 @llvm\.nvvm\.shfl\.sync\.idx\.i32\(i32 -1, i32 (\S+), i32 (\S+), i32 31\)",
                               rhs):
            out = val(m[1])[warp_base + (val(m[2]) & 31)]
        elif m := re.fullmatch(r"call i32 @llvm\.nvvm\.prmt\(i32 (\S+), i32 (\S+), i32 (\S+)\)", rhs):
            # PTX prmt.b32 d, a, b, c (default mode): byte i of d is byte c[4i+2:4i] of {b, a} (a: bytes 0-3);
            # nibble bit 3 replicates that byte's sign bit
            src = (val(m[1]) & 0xFFFFFFFF) | ((val(m[2]) & 0xFFFFFFFF) << 32)
            sel, out = val(m[3]), np.zeros(threads, np.int64)
            for i in range(4):
                nib = (sel >> (4 * i)) & 0xF
                byte = (src >> (8 * (nib & 7))) & 0xFF
                byte = np.where(nib & 8, np.where(byte & 0x80, 0xFF, 0), byte)
                out |= byte << (8 * i)
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
@pytest.mark.parametrize("pairs", [False, True], ids=["bytes", "cvt-pairs"])
def test_fp8_a_registers_hold_the_isa_fragment(rows: int, cols: int, wg: int, coord: str, pairs: bool) -> None:
    """Each accumulator slot starts as its element's row (or column) number, mod 256; after the conversion and
    the packing, byte e of register j of step kk holds the row (column) of the element the ISA puts there.
    `cvt-pairs`: the slots come in 16-bit pairs (slots 2i, 2i + 1), as the fp8 cvt of an f32 tile makes them,
    and the rule joins two pairs into a word instead of inserting bytes (LLVMWriter.pack_bytes)."""
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
    if pairs:
        for i in range(0, len(names), 2):
            env[f"%p_{i}"] = env[names[i]] | (env[names[i + 1]] << 8)
            cx.w.pairs_of[names[i]], cx.w.pairs_of[names[i + 1]] = (f"%p_{i}", 0), (f"%p_{i}", 1)
            del env[names[i]], env[names[i + 1]]  # only the pairs may be read
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


CARRIED = """
kernel carried(X: gl<e4m3>[N, 64], Y: gl<e4m3>[N, 64], T: gl<f32>[T0])
    grid(cdiv(N, 64))
{
    reg x: rt<e4m3, 64, 64> = X[block.x, 0]
    for i in 0 .. T0 {
        x = e4m3(f32(x) * 1.5)
    }
    Y[block.x, 0] = x
}
"""


@pytest.mark.parametrize("steps", [0, 1, 2, 3])  # a byte order wrong in one direction shows at some parity
def test_fp8_tile_carried_by_a_loop_as_words(tmp_path: Path, steps: int) -> None:
    """An fp8 register tile carried around a loop travels as b32 words (four bytes each: backend/rules_core.py
    _pack_words, as the 8-bit A of attention's P crosses the rotated loop's back edge), and comes out right:
    one block of the kernel's LLVM text run on the CPU (tests/llvm_block_eval.py), against tkir/scalar.py's
    rounding applied `steps` times."""
    src = tmp_path / "carried.tk"
    src.write_text(CARRIED)
    k = tkir.compile(str(src))
    llvm = k.asm["llvm"]
    assert re.search(r"= phi i32 \[", llvm) and not re.search(r"= phi i8 \[", llvm)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(ml_dtypes.float8_e4m3fn)
    y = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
    run_block(llvm, [x, y, np.zeros(steps, np.float32), 64, steps], block=0, grid=1, threads=k.launch.block[0],
              smem_bytes=k.launch.dynamic_smem)
    want = x.astype(np.float64)
    for _ in range(steps):
        want = np.vectorize(lambda v: round_fp8(v * 1.5, "e4m3"))(want)
    assert np.array_equal(y.astype(np.float64), want)
