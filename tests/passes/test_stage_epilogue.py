"""stage-epilogue (passes/stage_epilogue.py) and its backend rule (backend/rules_epilogue.py).

The rule's emitted LLVM text is run on the CPU for every thread of the block (the simulator of
tests/backend/test_sm80_mma_simulated.py, extended with shared stores and 16-byte loads, the warp barrier and
the global stores): every in-bounds element of the tile must be written exactly once with its value,
nothing outside the tensor, at ragged edges, odd row pitches and unaligned bases; and every shared
store and load of the stage must be free of bank conflicts (4-byte stores: 32 distinct banks per
warp; 16-byte loads: 8 distinct 16-byte bank groups per quarter warp). Then the pass itself: where it
stages, what it skips and why, the plan's shared memory, and the kernels through ptxas (SASS: 16-byte
global stores) and the interpreter.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_sm80_mma_simulated import EB, WARP, _Cx, _Pair, _Simt

import tkir
from tkir.backend.rules_epilogue import _op_tk_store_warp_staged
from tkir.backend.values import Frag, Global, Smem
from tkir.layout import fragment, make_layout
from tkir.parser import parse_module
from tkir.tools.examples import check_interpreted, load_companion

BANKS, BANK_BYTES = 32, 4


class _StagedSimt(_Simt):
    """_Simt plus what the staged store emits; shared memory holds bf16 values at byte address / 2."""

    def __init__(self, threads: int, smem_bytes: int, env: dict[str, object]) -> None:
        super().__init__(threads, np.full(smem_bytes // EB, np.nan), env)
        self.global_writes: list[tuple[int, float]] = []  # (byte address, value) of every executed store

    def _eval(self, rhs: str) -> object:
        if m := re.fullmatch(r"ptrtoint ptr addrspace\(1\) (\S+) to i64", rhs):
            return np.asarray(self.val(m[1]))
        if m := re.fullmatch(r"and i64 (\S+), (\d+)", rhs):
            return np.asarray(self.val(m[1])) & int(m[2])
        if m := re.fullmatch(r"icmp (sle|eq) i(?:32|64) ([^,]+), (.+)", rhs):
            f = np.less_equal if m[1] == "sle" else np.equal
            return f(self.val(m[2]), self.val(m[3]))
        if m := re.fullmatch(r"xor i1 (\S+), true", rhs):
            return np.logical_not(self.val(m[1]))
        if m := re.fullmatch(r"(udiv|urem) i32 ([^,]+), (.+)", rhs):
            a, b = np.asarray(self.val(m[2])), np.asarray(self.val(m[3]))
            return a // b if m[1] == "udiv" else a % b
        if m := re.fullmatch(r"getelementptr bfloat, ptr addrspace\(1\) (\S+), i64 (\S+)", rhs):
            return np.asarray(self.val(m[1])) + EB * np.asarray(self.val(m[2]))
        if m := re.fullmatch(r'call \{i32, i32, i32, i32\} asm sideeffect "ld\.shared\.v4\.b32[^"]*", "[^"]*"\(i32 (\S+)\)',
                             rhs):
            addr = np.broadcast_to(self.val(m[1]), (self.threads,))
            _check_banks(addr, 16)
            vals = np.stack([self.smem[a // EB:a // EB + 8] for a in addr])
            return tuple(_Pair(vals[:, 2 * k:2 * k + 2]) for k in range(4))
        return super()._eval(rhs)

    def _asm(self, line: str) -> None:
        m = re.fullmatch(r'call void asm sideeffect "(.*)", "[^"]*"\((.*)\)', line)
        assert m, line
        text, args = m[1], [self.val(a.split()[-1]) for a in m[2].split(", ")] if m[2] else []
        if text == "bar.warp.sync -1;":
            return
        if text == "st.shared.b32 [$0], $1;":
            addr = np.broadcast_to(args[0], (self.threads,))
            _check_banks(addr, 4)
            for t in range(self.threads):
                self.smem[addr[t] // EB:addr[t] // EB + 2] = args[1].v[t]
            return
        pred = np.broadcast_to(args[-1], (self.threads,)).astype(bool)
        addr = np.broadcast_to(args[0], (self.threads,))
        if "st.global.v4.b32" in text:
            for t in np.flatnonzero(pred):
                assert addr[t] % 16 == 0, "16-byte stores must be 16-byte aligned"
                for k in range(4):
                    for e in range(2):
                        self.global_writes.append((int(addr[t]) + 4 * k + 2 * e, float(args[1 + k].v[t][e])))
            return
        if hm := re.search(r"st\.global\.b16 \[\$0\], (lo|hi);", text):
            for t in np.flatnonzero(pred):
                self.global_writes.append((int(addr[t]), float(args[1].v[t][1 if hm[1] == "hi" else 0])))
            return
        raise AssertionError(f"the simulator does not know: {text}")


def _check_banks(addr: np.ndarray, nbytes: int) -> None:
    """Conflict-free per warp: 4-byte accesses in 32 distinct banks, 16-byte ones in 8 distinct 16-byte
    groups per quarter warp (a warp's 16-byte request is served 8 lanes at a time)."""
    group = 8 if nbytes == 16 else WARP
    for t0 in range(0, len(addr), group):
        banks = (addr[t0:t0 + group] // nbytes) % (BANKS * BANK_BYTES // nbytes)
        assert len(set(banks.tolist())) == group, f"bank conflict: {addr[t0:t0 + group]}"


def _kernel(M: int, N: int, warps: int, warps_n: int, span: int) -> tuple:
    attr = f"{{kind = mma_c, warps = {warps}{f', warps_n = {warps_n}' if warps_n > 1 else ''}}}"
    width = N // warps_n
    text = f"""tk.kernel @k {{grid = ["1"], warps = {warps}}} {{
  ^(%C: gl<bf16>[R, S])
  %st = tk.alloc : st<bf16, {warps * 16}, {width}, swizzle={span}, align=1024>
  %bx = tk.block_id {{dim = 0}} : i32
  %by = tk.block_id {{dim = 1}} : i32
  %v = tk.fill {{value = 0.0}} : rt<bf16, {M}, {N}, layout={attr}>
  tk.store_warp_staged %C, %v, %st, %bx, %by {{rows = 16}}
}}
"""
    return parse_module(text, "k.tkir").kernel, make_layout("mma_c", warps=warps, warps_n=warps_n)


# (M, N, warps, warps_n, stage span, tensor rows, cols, base byte offset of C)
CASES = [
    (256, 128, 8, 2, 128, 1000, 1000, 0),   # the sm_80 gemm's 64 x 64 warp tiles, ragged both ways
    (128, 256, 8, 4, 128, 300, 200, 0),     # gemm.tk's default tile; a partial tile in both directions
    (128, 256, 8, 1, 128, 130, 250, 0),     # whole rows per warp: 256-column blocks, two 128-byte panels
    (64, 64, 4, 2, 64, 64, 64, 0),          # 32-column warp blocks: 64-byte stage rows
    (128, 128, 4, 2, 128, 256, 256, 0),     # interior tile: every chunk a 16-byte store
    (128, 128, 4, 2, 128, 256, 255, 0),     # an odd row pitch: every other row unaligned, element stores
    (256, 128, 8, 2, 128, 512, 512, 2),     # a base 2 bytes off 16: every chunk element by element
]


@pytest.mark.parametrize("M, N, warps, warps_n, span, rows, cols, base", CASES, ids=str)
def test_staged_store_writes_each_element_once_conflict_free(M: int, N: int, warps: int, warps_n: int, span: int,
                                                             rows: int, cols: int, base: int) -> None:
    kernel, layout = _kernel(M, N, warps, warps_n, span)
    st, bx, by, fill, store = kernel.body.ops
    threads = WARP * warps
    table = fragment(layout, "bf16", (M, N))
    tile = np.arange(M * N, dtype=float).reshape(M, N) + 1
    names = [f"%v_{s}" for s in range(table.shape[1])]
    tx, ty = (1 if rows > M else 0), (1 if cols > N else 0)
    env: dict[str, object] = {"%tid": np.arange(threads), "%C": base, "%R": rows, "%S": cols, "%bx": tx, "%by": ty,
                              "%st": 0}
    for s, name in enumerate(names):
        env[name] = tile.ravel()[table[:, s]]
    vals = {id(kernel.body.args[0]): Global("%C", kernel.body.args[0].type), id(bx.result): "%bx",
            id(by.result): "%by", id(fill.result): Frag(fill.result.type, names), id(st.result): Smem("%st", st.result.type)}
    cx = _Cx(threads, vals)
    _op_tk_store_warp_staged(cx, store)
    sim = _StagedSimt(threads, st.result.type.nbytes, env)
    sim.run(cx.w.lines)
    out = np.zeros(rows * cols)
    written = np.zeros(rows * cols, dtype=int)
    for addr, v in sim.global_writes:
        i = (addr - base) // EB
        assert 0 <= i < rows * cols, f"a store outside the tensor: byte {addr}"
        out[i] = v
        written[i] += 1
    want = np.zeros((rows, cols))
    r0, c0 = tx * M, ty * N
    part = tile[:rows - r0, :cols - c0]
    want[r0:r0 + part.shape[0], c0:c0 + part.shape[1]] = part
    assert (written <= 1).all()
    assert written.sum() == part.size
    assert (out.reshape(rows, cols) == want).all()
    text = "\n".join(cx.w.lines)
    assert text.count("st.global.v4.b32") == (M // (warps // warps_n) // 16) * (16 * (N // warps_n) // 8 // WARP)


def _compile(target: str = "sm_80", passes: str | None = None, **consts: int) -> tkir.api.CompiledKernel:
    kw = {"passes": passes} if passes else {}
    return tkir.compile("examples/gemm.tk", target=target, **kw, **consts)


def _ops(k: tkir.api.CompiledKernel) -> list:
    return list(k.module.kernel.walk())


def test_pass_stages_the_sm80_gemm_epilogue_and_grows_the_plan() -> None:
    k = _compile(BM=256, BN=128)
    (store,) = [o for o in _ops(k) if o.name.startswith("tk.store")]
    assert store.name == "tk.store_warp_staged" and store.attrs["rows"] == 16
    stage = store.operands[2].type
    assert (stage.rows, stage.cols, stage.get("swizzle")) == (8 * 16, 64, 128)
    without = tkir.compile("examples/gemm.tk", target="sm_80", BM=256, BN=128,
                           passes=",".join(p for p in tkir.api.default_pipeline() if p != "stage-epilogue"))
    (plain,) = [o for o in _ops(without) if o.name.startswith("tk.store")]
    assert plain.name == "tk.store"
    occ, occ0 = (x.module.kernel.attrs["occupancy"] for x in (k, without))
    assert occ["smem_bytes"] - occ0["smem_bytes"] == 16384
    assert occ["smem"]["fixed_bytes"] - occ0["smem"]["fixed_bytes"] == 16384
    assert occ["stages"] == occ0["stages"] and occ["blocks_per_sm"] == occ0["blocks_per_sm"]


def test_pass_skips_a_stage_that_does_not_fit_and_says_why() -> None:
    """256 x 128 x 32 at 9 stages: 216 KB of ring buffers; 16 KB more would pass the 227 KB a block may have."""
    k = _compile(BM=256, BN=128, BK=32, STAGES=9)
    (store,) = [o for o in _ops(k) if o.name.startswith("tk.store")]
    assert store.name == "tk.store"
    assert "over 232448" in store.attrs["stage_epilogue_skipped"]


def test_pass_leaves_the_wgmma_epilogue_to_create_tma() -> None:
    k = _compile(target="sm_90a")
    assert not [o for o in _ops(k) if o.name == "tk.store_warp_staged"]


def test_staged_gemm_through_ptxas_stores_16_bytes() -> None:
    """The staged epilogue's SASS: 16-byte global stores (STG.E.128), the shared rows read back with 16-byte
    loads, and the element stores of ragged / unaligned chunks."""
    sass = _compile(BM=256, BN=128).asm["sass"]
    assert len(re.findall(r"STG\.E\.128", sass)) == 16
    assert len(re.findall(r"LDS\.128", sass)) == 16
    assert "STG.E.U16" in sass


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_filecheck_kernel_compiles_on_both_targets(target: str) -> None:
    """tests/filecheck/passes/stage-epilogue.tk through ptxas on both targets: staged on sm_80; on sm_90a the wgmma
    accumulator's epilogue stays create-tma's (tk.store_staged), and stage-epilogue leaves it alone. (On sm_90a
    4 stages of its 256 x 128 x 64 tile and the TMA epilogue's staging do not fit: a located error; 3 do.)"""
    k = tkir.compile("tests/filecheck/passes/stage-epilogue.tk", target=target, **({"S": 3} if target == "sm_90a" else {}))
    names = {o.name for o in k.module.kernel.walk()}
    assert ("tk.store_warp_staged" in names) == (target == "sm_80")
    assert ("tk.store_staged" in names) == (target == "sm_90a")
    assert "STG.E.128" in k.asm["sass"] if target == "sm_80" else "UTMASTG" in k.asm["sass"]


@pytest.mark.parametrize("consts, sizes", [(dict(BM=64, BN=64, BK=32, STAGES=2), dict(M=70, N=88, K=40)),
                                           (dict(BM=256, BN=128), dict(M=300, N=136, K=72))], ids=str)
def test_interpreter_runs_the_staged_gemm(consts: dict, sizes: dict) -> None:
    """The op means tk.store: the interpreted kernel matches gemm.tk's reference at ragged sizes."""
    k = _compile(**consts)
    assert any(o.name == "tk.store_warp_staged" for o in _ops(k))
    for r in check_interpreted(k.module, load_companion("examples/gemm.tk"), sizes, consts):
        assert r.ok, f"{sizes}: {r.output} rel_err {r.rel_err}"
