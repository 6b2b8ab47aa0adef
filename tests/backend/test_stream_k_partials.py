"""Stream-K's partial sums in the emitted LLVM (backend/rules_streamk.py), evaluated for every consumer thread
with tests/llvm_eval_test_support.py: a helper block's consumer warpgroups each store their part of the f32
accumulator to the block's workspace slot and then raise their own flag; the owner's warpgroups each wait on
the flag of their own warpgroup and read back exactly what the same thread stored. The interpreter checks the
schedule (tests/passes/test_stream_k.py); only this sees which flag and which words each warpgroup uses."""

from __future__ import annotations

import re

import pytest
from llvm_eval_test_support import LLVMText  # tests/ is on sys.path under pytest

import tkir
from tkir.passes.plan_occupancy import OccupancyPlan

GEMM = "examples/gemm.tk"
WARPGROUP = 128
VEC = 4  # st.global.v4.f32 / ld.global.cg.v4.f32
_GEP = re.compile(r"^getelementptr (float|i32), ptr addrspace\(1\) (%[\w.]+), i64 (\S+)$")


def _element(fn: LLVMText, token: str, tid: int, over: dict[str, int]) -> tuple[str, int]:
    """(workspace parameter, element index) of a typed getelementptr chain."""
    tok, idx = token.strip(), 0
    while tok in fn.defs:
        m = _GEP.match(fn.defs[tok])
        assert m, f"cannot follow {tok}: {fn.defs[tok]}"
        tok, idx = m.group(2), idx + fn.value(m.group(3), tid, over)
    return tok.lstrip("%"), idx


@pytest.fixture(scope="module")
def streamk() -> tuple[LLVMText, range, int]:
    on = ["stream-k" if p.startswith("stream-k") else p for p in tkir.api.default_pipeline()]
    k = tkir.compile(GEMM, passes=on)
    plan = OccupancyPlan.of(k.module.kernel)
    producer, consumer = plan.role("producer"), plan.role("consumer")
    first = producer.warpgroups if producer and producer.warpgroups else 0
    tids = range(WARPGROUP * first, WARPGROUP * (first + consumer.warpgroups))
    return LLVMText(k.asm["llvm"]), tids, consumer.warpgroups


@pytest.fixture(scope="module")
def streamk_consts() -> dict:
    on = ["stream-k" if p.startswith("stream-k") else p for p in tkir.api.default_pipeline()]
    return dict(tkir.compile(GEMM, passes=on).module.kernel.attrs["consts"])


def _block(fn: LLVMText, block: int, peer: int) -> dict[str, int]:
    """Overrides: this block's index (%ctaid.x) and the owner's peer loop variable (a phi)."""
    over = {n: block for n, rhs in fn.defs.items() if "sreg.ctaid.x" in rhs}
    over |= {n: peer for n, rhs in fn.defs.items() if rhs.startswith("phi i32") and n.startswith("%peer")}
    return over


@pytest.mark.parametrize("block", [0, 5])
def test_each_warpgroup_flags_and_reads_back_its_own_part(streamk, block: int) -> None:
    fn, tids, nwg = streamk
    over = _block(fn, block, block)
    stores = [c for c in fn.calls if "st.global.v4.f32" in c.asm]
    loads = [c for c in fn.calls if "ld.global.cg.v4.f32" in c.asm]
    release = [c for c in fn.calls if c.asm.startswith("st.release.gpu.global.b32")]
    acquire = [c for c in fn.calls if c.asm.startswith("ld.acquire.gpu.global.b32")]
    assert stores and loads and len(release) == 1 and len(acquire) == 1
    elems = len(stores) * VEC * WARPGROUP * nwg  # the accumulator, over the warpgroups
    written: dict[int, tuple[int, int]] = {}
    for tid in tids:
        for j, c in enumerate(stores):
            name, e = _element(fn, c.args[0][1], tid, over)
            assert name == "sk_part"
            for i in range(VEC):
                assert e + i not in written, f"partial word {e + i} written by threads {written[e + i]} and {tid}"
                written[e + i] = (tid, VEC * j + i)
    assert sorted(written) == list(range(block * elems, (block + 1) * elems)), "the slot is not covered exactly"
    for tid in tids:  # the owner's thread reads the words the same thread of the helper wrote, in slot order
        got = [(_element(fn, c.args[0][1], tid, over)[1] + i) for c in loads for i in range(VEC)]
        assert [written[e] for e in got] == [(tid, s) for s in range(len(got))], f"thread {tid} reads others' words"
    flags = {}
    for tid in tids:
        wg = (tid - tids[0]) // WARPGROUP
        name, f = _element(fn, release[0].args[0][1], tid, over)
        assert name == "sk_flags"
        assert f == block * nwg + wg, f"warpgroup {wg} of block {block} raises flag {f}"
        assert _element(fn, acquire[0].args[-1][1], tid, over)[1] == f, "the owner waits on another flag"
        flags.setdefault(f, set()).add(wg)
    assert len(flags) == nwg and all(len(w) == 1 for w in flags.values()), f"warpgroups share a flag: {flags}"


def _acc_row(t: int, slot: int, rows: int, cols: int, nwg: int) -> int:
    """The wgmma accumulator row of value `slot` of consumer thread `t` (0 .. 128 * nwg), from the PTX
    ISA's m64nNk16 D fragment (HOPPER.md): warpgroup slabs of rows / nwg, m64 blocks of cols / 2 values,
    row = 16 * warp + lane / 4, plus 8 for the second pair of every four values."""
    wg, lane, warp = t // WARPGROUP, t % 32, (t % WARPGROUP) // 32
    per_mb = cols // 2
    mb, i = divmod(slot, per_mb)
    return wg * (rows // nwg) + mb * 64 + 16 * warp + lane // 4 + 8 * ((i >> 1) & 1)


@pytest.mark.parametrize("valid", [1, 9, 17, 64, 200])
def test_partials_move_only_rows_inside_the_output(streamk, streamk_consts, valid: int) -> None:
    """With the ops' `rows` operand (`M - tile_row * BM`, passes/stream_k.py) a thread stores and reads
    a group of four values exactly when one of its rows is inside the output: at M = 1 only the four
    lanes holding row 0 move their partials."""
    fn, tids, nwg = streamk
    consts = streamk_consts
    stores = [c for c in fn.calls if "st.global.v4.f32" in c.asm]
    loads = [c for c in fn.calls if "ld.global.cg.v4.f32" in c.asm]
    assert all("@p " in c.asm for c in stores + loads), "a partial moves every row"
    nrows = {re.match(r"icmp slt i32 \S+, (\S+)$", fn.defs[fn.defs[c.args[-1][1]].split()[2]]).group(1)
             for c in stores + loads}
    assert len(nrows) == 1 and "sk_rows" in next(iter(nrows))
    over = {next(iter(nrows)): valid}
    rows, cols = consts["BM"], consts["BN"]
    assert len(stores) * VEC * WARPGROUP * nwg == rows * cols
    for calls in (stores, loads):
        for tid in tids:
            t = tid - tids[0]
            for j, c in enumerate(calls):
                moved = fn.value(c.args[-1][1], tid, over) != 0
                first = [_acc_row(t, VEC * j + i, rows, cols, nwg) for i in range(VEC)]
                assert moved == (min(first) < valid), (tid, j, first, valid)
