"""CPU tests that give the backend's output a meaning, so single-line mutations of it fail (issue 14).

Each test checks what the emitted code *does*, recomputed from the hardware's rules, not that an
instruction appears. The addresses, indices and predicates are evaluated from the LLVM text the
backend writes (tests/llvm_eval_test_support.py), thread by thread; docs/mutation.md lists the
mutations each test kills.

* wgmma data path: TMA copies write global elements into shared memory (tensor map box and swizzle,
  PTX ISA §5.5), cp.async copies too (evaluated per thread); each wgmma's 64-bit descriptors and trans
  immediates say which shared bytes the tensor core reads (PTX ISA §9.7.15.5.1.2: canonical layouts,
  descriptor fields, layout types 0 none / 1 128B / 2 64B / 3 32B, imm-trans 0 = K-major). Composed,
  every wgmma of a `tk.mma` must multiply A[m0 + i, k0 + j] by B[k0 + j, n0 + i] and one mma's
  instructions must cover its M x N x K product exactly once, for every consumer warpgroup.
* the staged epilogue: each bf16 pair reaches its accumulator element's global position through the
  128B-swizzled stage and the TMA store; TMA coordinates move with the loop as the IR's do.
* row reductions: the butterfly shuffles of each row (offsets, member mask, c, combine operation)
  combine exactly the lanes that hold that row in the tile's fragment layout (tkir.layout.fragment).
* the causal mask's compares, element by element; the swizzle formulas against the ISA's description
  (16-byte chunk XOR line index).
* tk.outer's bf16 factors held in a different slot by each warp: the products of every thread (the
  emitted LLVM run by tests/ir/test_based.py's evaluator), packed pairs moved only with one half per warp.
* the mbarrier pipeline (counts, expect_tx bytes, stage and parity per iteration, releases after
  wgmma.wait_group), setmaxnreg directions, proxy fences before async reads, pingpong turn barriers.
* pass decisions at their boundaries: create-tma at the TMA box limit (boxDim <= 256), bank-conflicts
  at a 2-way conflict, plan-occupancy at the 1 KB-per-block shared-memory boundary, split-masks on
  affine masks (results unchanged in the interpreter), overlap-mma only inside consumer roles.
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llvm_eval_test_support import LLVMText, ref_swizzle
from test_based import BF16, _Eval, _FakeCx
from test_wgmma_desc import canonical_k_major, canonical_mn_major

import tkir
import tkir.layout
from tkir.backend.fragments import gather_plan, numeric_slots
from tkir.backend.launch import LaunchDescription
from tkir.backend.rules_registers import outer_product
from tkir.backend.values import Frag
from tkir.facts import OccupancyPlan
from tkir.ir import Operation, parent_op
from tkir.layout import layout_of
from tkir.parser import parse_module
from tkir.tools.examples import load_companion
from tkir.types import DTYPE_BYTES
from tkir.verifier import verify

ROOT = Path(__file__).resolve().parents[2]

# PTX ISA §9.7.15.5.1.2.2 (HOPPER.md §2.1): descriptor bits 63-62, the layout type -> swizzle span in
# bytes (16 = the unswizzled "interleaved" canonical layout of 8 x 16-byte core matrices)
ISA_LAYOUT_SPAN = {0: 16, 1: 128, 2: 64, 3: 32}
WGMMA_M, WGMMA_K = 64, 16  # m64nNk16 for 16-bit types (§9.7.15.2)
WARPGROUP = 128

# --- the wgmma data path --------------------------------------------------------------------------


def _plan_warpgroups(k: tkir.CompiledKernel) -> tuple[int, int]:
    """(first warpgroup of the role that runs the mma, its warpgroups)."""
    plan = OccupancyPlan.of(k.module.kernel)
    assert plan is not None
    producer = plan.role("producer")
    role = plan.role("consumer") or plan.role("compute")
    assert role is not None and role.warpgroups
    return (producer.warpgroups if producer and producer.warpgroups else 0), role.warpgroups


def _tma_writes(fn: LLVMText, launch: LaunchDescription) -> dict[int, tuple]:
    """Shared byte address -> (tensor, coordinates innermost first) of every element the kernel's TMA
    loads write in iteration 0 (the box, densely, then the swizzle of the tensor map on the address)."""
    descs = {d.param: d for d in launch.tma}
    out: dict[int, tuple] = {}
    for call in fn.calls:
        if not call.asm.startswith("cp.async.bulk.tensor.") or ".shared::cluster.global" not in call.asm:
            continue
        d = descs[call.args[1][1].lstrip("%")]
        dst = fn.value(call.args[0][1], 0)
        coords = [fn.value(v, 0) for _, v in call.args[3:3 + d.rank]]
        eb = DTYPE_BYTES[d.dtype]
        b0, b1 = d.box[0], (d.box[1] if d.rank > 1 else 1)
        r, c = np.meshgrid(np.arange(b1), np.arange(b0), indexing="ij")
        addr = ref_swizzle(dst + (r * b0 + c) * eb, d.swizzle)
        for a, rr, cc in zip(addr.flat, r.flat, c.flat, strict=True):
            elem = (d.tensor, coords[0] + int(cc), *([coords[1] + int(rr)] if d.rank > 1 else []),
                    *coords[2:])
            assert out.setdefault(int(a), elem) == elem, f"two TMA elements written at shared byte {a}"
    return out


CP_ASYNC_BYTES = 16  # cp.async.cg copies 16 bytes (PTX ISA §9.7.9.25)


def _cp_async_writes(fn: LLVMText, launch: LaunchDescription) -> dict[int, tuple]:
    """Shared byte address -> (tensor, col, row) of every element the block's threads copy with
    `cp.async.cg.shared.global` in iteration 0, evaluated thread by thread (size parameters are 4096, so
    every copy is in bounds and whole)."""
    tensors = {t.name: t for t in launch.tensors}
    threads = launch.block[0]
    out: dict[int, tuple] = {}
    for call in fn.calls:
        if "cp.async.cg.shared.global" not in call.asm:
            continue
        assert f", {CP_ASYNC_BYTES}, " in call.asm, call.asm
        for tid in range(threads):
            dst = fn.value(call.args[0][1], tid)
            name, off = fn.pointer(call.args[1][1], tid)
            t = tensors[name]
            eb = DTYPE_BYTES[t.dtype]
            inner = t.dims[-1] if isinstance(t.dims[-1], int) else fn.params  # row-major
            for e in range(CP_ASYNC_BYTES // eb):
                row, col = divmod(off // eb + e, inner)
                elem = (name, col, row)
                assert out.setdefault(dst + e * eb, elem) == elem, f"two copies write shared byte {dst + e * eb}"
    return out


def _tile_elements(fn: LLVMText, k: tkir.CompiledKernel, written: dict) -> dict[int, tuple]:
    """Shared byte address -> ("tile:NAME", col, row) for the shared tiles no copy writes (the kernel's
    threads store them from registers), by the shared layout convention (docs/passes.md: panels of
    `swizzle` bytes, the swizzle of the ISA) at the offsets of the LLVM text."""
    out: dict[int, tuple] = {}
    for op in k.module.kernel.walk():
        if op.name != "tk.alloc" or not hasattr(op.result.type, "cols"):
            continue
        t = op.result.type
        name = op.result.name
        base = next((fn.value(n, 0) for n, rhs in fn.defs.items()
                     if n.startswith(f"%{name}.") and rhs.startswith("add i32 %smem.")), None)
        if base is None:
            continue
        eb = DTYPE_BYTES[t.dtype]
        span, pad = int(t.get("swizzle") or 0), int(t.get("pad") or 0)
        r, c = np.meshgrid(np.arange(t.rows), np.arange(t.cols), indexing="ij")
        byte = c * eb
        if span:
            off = (byte // span) * t.rows * span + ref_swizzle(r * span + byte % span, span)
        else:
            off = r * (t.cols * eb + pad) + byte
        addr = base + off
        if any(int(a) in written for a in addr.flat):
            continue
        for a, rr, cc in zip(addr.flat, r.flat, c.flat, strict=True):
            out[int(a)] = (f"tile:{name}", int(cc), int(rr))
    return out


def _decode(desc: int) -> tuple[int, int, int, int, int]:
    """(start, LBO, SBO, base offset, layout type) of a wgmma matrix descriptor (PTX ISA §9.7.15.5.1.2.2)."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4,
            (desc >> 49) & 7, (desc >> 62) & 3)


def _operand(elements: dict, desc: int, rows: int, mn_major: bool, stored_mn_major: bool) -> tuple[str, int, int]:
    """Read `rows` x 16 elements (M or N by K) through a descriptor as the tensor core does when the
    instruction says `mn_major` (its imm-trans), and say which (tensor, first M/N index, first K index)
    they are in the program's terms (`stored_mn_major`: the tile is stored K x M/N, i.e. a transposed A
    or a plain B); fails unless they are one contiguous block."""
    start, lbo, sbo, base_offset, code = _decode(desc)
    assert base_offset == 0, "tkir aligns every swizzled tile to its pattern: base offset 0"
    span = ISA_LAYOUT_SPAN[code]
    i, j = np.meshgrid(np.arange(rows), np.arange(WGMMA_K), indexing="ij")
    canon = (canonical_mn_major if mn_major else canonical_k_major)(span, lbo, sbo, i, j)
    addr = ref_swizzle(start + canon, span)
    got = [elements.get(int(a)) for a in addr.flat]
    missing = [int(a) for a, e in zip(addr.flat, got, strict=True) if e is None]
    assert not missing, f"the descriptor reads shared bytes no copy wrote: {missing[:4]}..."
    tensors = {e[0] for e in got}
    assert len(tensors) == 1, f"one operand reads several tensors: {tensors}"
    # coordinates innermost first: (col, row) of a 2-D view; K is the column of a K-major operand
    mn = np.array([e[1] if stored_mn_major else e[2] for e in got]).reshape(i.shape)
    kk = np.array([e[2] if stored_mn_major else e[1] for e in got]).reshape(i.shape)
    m0, k0 = int(mn[0, 0]), int(kk[0, 0])
    bad = (mn != m0 + i) | (kk != k0 + j)
    assert not bad.any(), (f"element ({int(i[bad][0])}, {int(j[bad][0])}) of the operand is "
                           f"({int(mn[bad][0])}, {int(kk[bad][0])}), not ({m0 + int(i[bad][0])}, {k0 + int(j[bad][0])})")
    return tensors.pop(), m0, k0


def _wgmma_groups(fn: LLVMText) -> list[list]:
    """The wgmma.mma_async calls of each tk.mma (between a wgmma.fence and the next commit_group)."""
    groups: list[list] = []
    fences = [i for i, line in enumerate(fn.lines) if "@llvm.nvvm.wgmma.fence.sync.aligned()" in line
              and line.lstrip().startswith("call")]
    for call in fn.calls:
        if call.asm.startswith("wgmma.mma_async"):
            start = max(f for f in fences if f < call.line)
            if not groups or groups[-1][0] != start:
                groups.append([start])
            groups[-1].append(call)
    return [g[1:] for g in groups]


def check_wgmma_data_path(k: tkir.CompiledKernel) -> int:
    """The check of the module docstring for every tk.mma of a compiled sm_90a kernel; returns how many
    wgmma instructions it followed."""
    fn = LLVMText(k.asm["llvm"])
    copies = {**_tma_writes(fn, k.launch), **_cp_async_writes(fn, k.launch)}
    elements = {**_tile_elements(fn, k, copies), **copies}
    first, nwg = _plan_warpgroups(k)
    mmas = [op for op in k.module.kernel.walk() if op.name == "tk.mma"]
    groups = _wgmma_groups(fn)
    assert len(groups) == len(mmas), f"{len(groups)} wgmma groups for {len(mmas)} tk.mma ops"
    followed = 0
    for op, group in zip(mmas, groups, strict=True):
        ta, tc = op.operands[0].type, op.result.type
        trans_a, trans_b = bool(op.attrs.get("trans_a")), bool(op.attrs.get("trans_b"))
        M, N = tc.rows, tc.cols
        K = ta.rows if trans_a else ta.cols
        for w in range(nwg):
            tid = WARPGROUP * (first + w)
            seen = []
            for call in group:
                n_instr = int(call.asm.split(".m64n")[1].split("k")[0])
                imms = [x.strip() for x in call.asm.rstrip(";").split(",")]
                rs = call.args[0][0] == "i32"  # A from registers: four b32 then B's descriptor
                if rs:
                    scale, tb_imm = imms[-4:-1], int(imms[-1])
                    ta_imm = 0
                    b_desc = fn.value(call.args[4][1], tid)
                else:
                    scale, ta_imm, tb_imm = imms[-5:-2], int(imms[-2]), int(imms[-1])
                    b_desc = fn.value(call.args[1][1], tid)
                assert scale == ["1", "1", "1"], f"scale-d / imm-scale-a / imm-scale-b must be 1: {scale}"
                # imm-trans: 0 = K-major, 1 = M/N-major (PTX ISA §9.7.15.5.2); B (K x N) stored K x N is N-major
                assert not rs or not trans_a
                _, n0, kb = _operand(elements, b_desc, n_instr, bool(tb_imm), stored_mn_major=not trans_b)
                if not rs:
                    a_desc = fn.value(call.args[0][1], tid)
                    _, m0, ka = _operand(elements, a_desc, WGMMA_M, bool(ta_imm), stored_mn_major=trans_a)
                    assert ka == kb, f"A's k-step starts at {ka}, B's at {kb}"
                    seen.append((m0, n0, ka))
                else:
                    seen.append((None, n0, kb))
                followed += 1
            share = M // nwg
            ms = list(range(w * share, (w + 1) * share, WGMMA_M)) if not any(s[0] is None for s in seen) else [None]
            want = sorted(itertools.product(ms, range(0, N, n_instr), range(0, K, WGMMA_K)),
                          key=lambda t: (t[0] or 0, t[1], t[2]))
            got = sorted(seen, key=lambda t: (t[0] or 0, t[1], t[2]))
            if ms == [None]:  # register A: this warpgroup's rows come from its registers
                want = sorted(itertools.product(range(0, N, n_instr), range(0, K, WGMMA_K)))
                got = sorted((n, kk) for _, n, kk in seen)
            assert got == want, (f"tk.mma {op.result.name} (warpgroup {w}): the wgmmas multiply (m0, n0, k0) "
                                 f"{got[:6]}..., not the {len(want)} blocks {want[:6]}...")
    return followed


WGMMA_TRANS_A = """
kernel f16t<BM=128, BN=128, BK=64>(A: gl<f16>[K, M], B: gl<f16>[K, N], C: gl<f32>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    shared a: st<f16, BK, BM>
    shared b: st<f16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(2)
    for k in 0 .. cdiv(K, BK) {
        a = A[k, block.x]
        b = B[k, block.y]
        acc += a.T @ b
    }
    C[block.x, block.y] = acc
}
"""

SWIZZLED_GEMM = """
kernel g<BM=128, BN=128, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<f32>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    @swizzle(SA) shared a: st<bf16, BM, BK>
    @swizzle(SB) shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(2)
    for k in 0 .. cdiv(K, BK) {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    C[block.x, block.y] = acc
}
"""

REGISTER_A_K_MAJOR_B = """
kernel rs<BM=64, BN=64, D=64>(Q: gl<bf16>[M, D], K: gl<bf16>[N, D], O: gl<f32>[M, N]) grid(cdiv(M, BM)) {
    shared k: st<bf16, BN, D>
    reg q: rt<bf16, BM, D> = Q[block.x, 0]
    k = K[0, 0]
    reg s: rt<f32, BM, BN> = q @ k.T
    O[block.x, 0] = s
}
"""

REGISTER_B = """
kernel regb<BM=64, BN=64, D=64>(P: gl<bf16>[M, D], Q: gl<bf16>[N, D], O: gl<f32>[M, N]) grid(cdiv(M, BM)) {
    reg p: rt<bf16, BM, D> = P[block.x, 0]
    reg q: rt<bf16, BN, D> = Q[0, 0]
    reg s: rt<f32, BM, BN> = p @ q.T
    O[block.x, 0] = s
}
"""

GEMM_CONSTS = load_companion("examples/gemm.tk").DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
# name -> (source or example path, consts, compile options)
WGMMA_KERNELS = {
    "gemm": ("examples/gemm.tk", {}, {}),
    "gemm-bm64": ("examples/gemm.tk", {**GEMM_CONSTS, "BM": 64}, {}),  # BN, STAGES, SK, SKI: the old header's
    "gemm-interleaved": ("examples/gemm.tk", {}, {"swizzle": "none"}),
    "gemm-no-tma": ("examples/gemm.tk", {}, {"no_tma": True}),
    "linear-k-major-b": ("examples/linear.tk", {}, {}),
    "attention-d128": ("examples/attention_fwd.tk", {}, {}),
    "attention-d64-causal": ("examples/attention_fwd.tk", {"D": 64, "CAUSAL": 1}, {}),
    "f16-m-major-a": (WGMMA_TRANS_A, {}, {}),
    "register-a-k-major-b": (REGISTER_A_K_MAJOR_B, {}, {}),
    "register-b-staged": (REGISTER_B, {}, {}),   # legalize-mma stores B to shared; threads write it
    "swizzle-64-32": (SWIZZLED_GEMM.replace("SA", "64").replace("SB", "32"), {}, {}),
    "swizzle-32-64": (SWIZZLED_GEMM.replace("SA", "32").replace("SB", "64"), {}, {}),
    # cp.async (threads, tkir's swizzle formulas) writes, the tensor core (the hardware's) reads
    "swizzle-64-32-no-tma": (SWIZZLED_GEMM.replace("SA", "64").replace("SB", "32"), {}, {"no_tma": True}),
    "swizzle-32-128-no-tma": (SWIZZLED_GEMM.replace("SA", "32").replace("SB", "128"), {}, {"no_tma": True}),
}


@pytest.fixture(scope="session")
def src_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kernels")


def compile_kernel(src: str, consts: dict, opts: dict, where: Path) -> tkir.CompiledKernel:
    """An example (a path under the repository) or .tk source text (written under `where`), compiled
    and lowered once per session."""
    return _compiled(src, tuple(sorted(consts.items())), tuple(sorted(opts.items())), str(where))


@functools.cache
def _compiled(src: str, consts: tuple, opts: tuple, where: str) -> tkir.CompiledKernel:
    if src.endswith(".tk"):
        path = ROOT / src
    else:
        path = Path(where) / f"k{abs(hash(src))}.tk"
        path.write_text(src, encoding="utf-8")
    k = tkir.compile(str(path), **dict(opts), **dict(consts))
    k.lower()
    return k


@pytest.mark.parametrize("name", list(WGMMA_KERNELS))
def test_wgmma_reads_the_elements_of_its_mma(name: str, src_dir: Path) -> None:
    src, consts, opts = WGMMA_KERNELS[name]
    k = compile_kernel(src, consts, opts, src_dir)
    assert check_wgmma_data_path(k) > 0


# --- row reductions: butterfly shuffles -----------------------------------------------------------

SHFL = "@llvm.nvvm.shfl.sync.bfly.f32("
FULL_WARP_MASK = -1     # membermask 0xffffffff (i32 -1): every lane of the warp takes part
BFLY_C = 0x1F           # c = (segment mask << 8) | clamp: one 32-lane segment (PTX ISA shfl.sync, bfly)
WARP = 32


# what combines a shuffled value with the lane's own, by reduction kind (LLVM LangRef: maxnum/minnum
# return the larger/smaller operand)
COMBINE = {"llvm.maxnum.f32": "max", "llvm.minnum.f32": "min", "fadd": "sum"}


def _combine_kind(fn: LLVMText, shfl: str) -> str:
    """The reduction kind of the instruction that combines the shuffle result `shfl`."""
    import re

    pat = re.compile(re.escape(shfl) + r"(?![\w.])")
    user = next(rhs for rhs in fn.defs.values() if pat.search(rhs) and SHFL not in rhs)
    return next(kind for key, kind in COMBINE.items() if key in user)


def _shuffle_chains(fn: LLVMText) -> list[list[tuple[int, int, int]]]:
    """The butterfly chains of the kernel: each a list of (membermask, offset, c, combine kind), one
    per shuffle, where a shuffle follows the previous one when its input is computed from that one's
    result."""
    shfl: dict[str, tuple[str, tuple[int, int, int]]] = {}
    order: list[str] = []
    for name, rhs in fn.defs.items():
        if SHFL in rhs:
            args = [a.strip().rsplit(" ", 1)[1] for a in rhs.split(SHFL, 1)[1].rstrip(")").split(",")]
            shfl[name] = (args[1], (int(args[0]), int(args[2]), int(args[3]), _combine_kind(fn, name)))
            order.append(name)
    prev: dict[str, str] = {}
    for name in order:
        src = shfl[name][0]
        rhs = fn.defs.get(src, "")
        before = [p for p in order if p != name and (p + "," in rhs + "," or p + ")" in rhs)]
        if before:
            prev[name] = before[-1]
    chains, follows = [], {p: n for n, p in prev.items()}
    for name in order:
        if name in prev:
            continue
        chain, cur = [], name
        while cur is not None:
            chain.append(shfl[cur][1])
            cur = follows.get(cur)
        chains.append(chain)
    return chains


def _lanes_sharing_rows(layout, dtype: str, shape: tuple[int, int]) -> list[set[int]]:
    """For each lane of warp 0: the lanes of that warp that hold exactly the same rows (the fragment)."""
    table = tkir.layout.fragment(layout, dtype, shape)[:WARP]
    rows = [frozenset(int(x) // shape[1] for x in r if x >= 0) for r in table]
    return [{m for m in range(WARP) if rows[m] == rows[lane]} for lane in range(WARP)]


def check_row_reductions(k: tkir.CompiledKernel) -> int:
    """Every butterfly chain combines, in every lane, exactly the lanes holding the lane's rows, once
    each (distinct power-of-two offsets whose XOR span is that set), over the full warp, with its
    reduction's operation (the chains in program order follow the tk.reduce ops' kinds). Returns the
    number of shuffles followed."""
    from tkir.layout import layout_of

    reduces = [op for op in k.module.kernel.walk() if op.name == "tk.reduce" and str(op.attrs["axis"]) == "row"]
    assert reduces, "the kernel has no row reduction"
    forms = {(layout_of(op.operands[0].type).to_attr().__repr__(), op.operands[0].type.shape) for op in reduces}
    assert len(forms) == 1, f"the test kernels reduce tiles of one layout and shape: {forms}"
    t = reduces[0].operands[0].type
    sharing = _lanes_sharing_rows(layout_of(t), t.dtype, t.shape)
    chains = _shuffle_chains(LLVMText(k.asm["llvm"]))
    assert chains, "row reductions without shuffles"
    def runs(kinds: list[str]) -> list[str]:
        return [x for i, x in enumerate(kinds) if i == 0 or kinds[i - 1] != x]

    kinds = [chain[0][3] for chain in chains]
    assert all(len({s[3] for s in chain}) == 1 for chain in chains), "a chain mixes combine operations"
    assert runs(kinds) == runs([str(op.attrs["kind"]) for op in reduces]), (runs(kinds), reduces)
    for chain in chains:
        offsets = [o for _, o, _, _ in chain]
        assert all(mask == FULL_WARP_MASK and c == BFLY_C for mask, _, c, _ in chain), chain
        assert all(o > 0 and o & (o - 1) == 0 for o in offsets) and len(set(offsets)) == len(offsets), \
            f"butterfly offsets must be distinct powers of two (else a lane is counted twice): {offsets}"
        span = {0}
        for o in offsets:
            span |= {s ^ o for s in span}
        for lane in range(WARP):
            assert {lane ^ s for s in span} == sharing[lane], (
                f"lane {lane} combines lanes {sorted(lane ^ s for s in span)} (offsets {offsets}) but its rows are "
                f"held by lanes {sorted(sharing[lane])}")
    return sum(len(c) for c in chains)


ROW_KERNELS = {
    "softmax-32-lanes": ("tests/data/rows/softmax.tk", {}, {}),
    "softmax-8-lanes": ("tests/data/rows/softmax.tk", {"D": 64}, {}),
    "layernorm-16-lanes": ("tests/data/rows/layernorm.tk", {"D": 128}, {}),
    "softmax-4-rows-per-thread": ("tests/data/rows/softmax.tk", {"D": 64, "ROWS": 64, "WG": 1}, {}),
    "rmsnorm-wide-rows": ("tests/data/rows/rmsnorm.tk", {"D": 8192, "DC": 8192, "ROWS": 1, "WG": 2}, {}),
    "softmax-sm80": ("tests/data/rows/softmax.tk", {"D": 64}, {"target": "sm_80"}),
    "attention-quad": ("examples/attention_fwd.tk", {"D": 64}, {}),
    "attention-quad-sm80": ("examples/attention_fwd.tk", {"D": 64}, {"target": "sm_80"}),
}


@pytest.mark.parametrize("name", list(ROW_KERNELS))
def test_row_reduction_shuffles_combine_the_lanes_of_each_row(name: str, src_dir: Path) -> None:
    src, consts, opts = ROW_KERNELS[name]
    k = compile_kernel(src, consts, opts, src_dir)
    assert check_row_reductions(k) > 0


# --- swizzle formulas against the PTX ISA's description ------------------------------------------

SPANS = (32, 64, 128)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, (1 << 18) - 1), st.sampled_from(SPANS))
def test_swizzle_is_the_isa_chunk_xor(addr: int, span: int) -> None:
    """tkir.layout.swizzle (the passes' and the backend's formula) is the ISA's: 16-byte chunk c of
    128-byte line L goes to chunk c ^ (L mod span/16). The backend's address builder agrees."""
    from tkir.backend.fragments import NumpyBuilder, swizzle_in_panel
    from tkir.layout import swizzle

    assert swizzle(addr, span) == ref_swizzle(addr, span)
    row, byte = divmod(addr, span)
    assert swizzle_in_panel(np.array(row), np.array(byte), span, NumpyBuilder()) == ref_swizzle(addr, span)


@pytest.mark.parametrize("span", SPANS)
def test_swizzle_period_is_the_alignment(span: int) -> None:
    """The pattern repeats every span/16 lines (PTX ISA §5.5.7: 256 / 512 / 1024 bytes), which is the
    alignment select-swizzle gives a tile (tkir.layout.SWIZZLE_ALIGN)."""
    from tkir.layout import SWIZZLE_ALIGN

    period = span // 16 * 128
    a = np.arange(4 * period)
    assert (ref_swizzle(a + period, span) == ref_swizzle(a, span) + period).all()
    assert SWIZZLE_ALIGN[span] == period


@pytest.mark.parametrize("span,rows,cols", [(32, 64, 64), (64, 32, 128), (128, 16, 256), (32, 16, 16)])
def test_shared_layout_offsets_follow_the_isa_swizzle(span: int, rows: int, cols: int) -> None:
    """SharedLayout (the passes) and shared_offset (the backend) place byte (r, c) of a swizzled tile
    at panel c // span, then the ISA's swizzle of r * span + c % span inside the panel."""
    from tkir.backend.fragments import NumpyBuilder, shared_offset
    from tkir.layout import SharedLayout

    lay = SharedLayout("bf16", rows, cols, span)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols * 2), indexing="ij")
    want = (c // span) * rows * span + ref_swizzle(r * span + c % span, span)
    assert (lay.offset(r, c) == want).all()
    assert (shared_offset(lay, r, c, NumpyBuilder()) == want).all()


# --- create-tma at the box limit ------------------------------------------------------------------

TMA_MAX_BOX = 256  # cuTensorMapEncodeTiled: boxDim[i] in [1, 256] (CUDA driver API §6.30; HOPPER.md §4.1)


def run_passes(text: str, passes: list[str], **options: object) -> str:
    from tkir.parser import parse_module
    from tkir.passes.registry import load_registry
    from tkir.passmanager import Options, PassManager
    from tkir.printer import print_module

    m = parse_module(text)
    PassManager(load_registry(), passes).run(m, Options(**options))
    return print_module(m)


@pytest.mark.parametrize("shape", ["st<f32, 256, 32>", "st<f32, 257, 32>", "st<f32, 272, 32>", "st<f32, 16, 256>",
                                   "st<f32, 8, 260>", "st<bf16, 256, 64, swizzle=128, align=1024>",
                                   "sv<bf16, 256>", "sv<bf16, 264>", "sv<f32, 260>"])
def test_create_tma_at_the_box_limit(shape: str) -> None:
    """A copy becomes TMA exactly when every box dimension is within 1..256 (the unswizzled boxes here
    are the whole tile: [cols, rows]; a 128B-swizzled 64-column bf16 row is one 128-byte panel)."""
    vec = shape.startswith("sv")
    dims = [int(x) for x in shape.split("<")[1].split(">")[0].split(",")[1:3 if not vec else 2]]
    box = dims[::-1]  # innermost first
    src = "%W: gl<f32>[N]" if "f32" in shape else "%W: gl<bf16>[N]"
    if not vec:
        src = src.replace("[N]", "[N, M]")
    coords = "%c0" if vec else "%c0, %c0"
    text = f"""tk.kernel @box {{grid = ["N / 256"]}} {{
  ^({src})
  %c0 = arith.const {{value = 0}} : i32
  %t = tk.alloc : {shape}
  tk.load %t, %W, {coords}
}}"""
    out = run_passes(text, ["create-tma"])
    fits = all(1 <= b <= TMA_MAX_BOX for b in box)
    assert ("tma.load %t" in out) == fits, out
    if fits:
        assert f"box = {box}".replace("'", "") in out.replace("'", ""), out
    else:
        assert f"> {TMA_MAX_BOX}" in out, out


# --- bank-conflicts fixes a 2-way conflict ----------------------------------------------------------

def test_bank_conflicts_fixes_two_way_conflicts() -> None:
    """f32 accumulator pairs into 64-byte rows: each half-warp phase writes 4 rows x 32 B, and rows
    r and r + 2 share banks (2-way). The pass must bring every such access to degree 1 (padding for a
    pinned unswizzled tile, a swizzle otherwise); the degrees are recounted here by brute force, and every
    access stays aligned to its width: the pinned bf16 tile's 16-byte accesses (32-byte rows, 2-way) are fixed by
    4 bytes of padding in the bank model, which would misalign three rows in four; 16 bytes is the smallest
    aligned fix."""
    from tkir.access_report import reports_of
    from tkir.layout import addresses, brute_force_wavefronts
    from tkir.parser import parse_module
    from tkir.passes.analysis import shared_layout, tile_uses
    from tkir.passmanager import Options

    text = """tk.kernel @two {grid = ["M / 64"]} {
  ^(%X: gl<f32>[M, 16])
  %acc = tk.fill {value = 0.0} : rt<f32, 64, 16, layout={kind = wgmma_acc, wg = 1}>
  %f = tk.alloc {swizzle = 0} : st<f32, 64, 16, swizzle=0, align=128>
  tk.store %f, %acc
  %u = tk.alloc : st<f32, 64, 16, swizzle=0, align=128>
  tk.store %u, %acc
  %r = tk.load %u : rt<f32, 64, 16, layout={kind = wgmma_acc, wg = 1}>
  %h = tk.fill {value = 0.0} : rt<bf16, 64, 16, layout={kind = wgmma_acc, wg = 1}>
  %g = tk.alloc {swizzle = 0} : st<bf16, 64, 16, swizzle=0, align=128>
  tk.store %g, %h
}"""
    module = parse_module(run_passes(text, ["bank-conflicts"]))
    kernel = module.kernels()[0]
    reports = [r for op in kernel.walk() for r in reports_of(op.attrs)]
    assert len(reports) == 4 and all(r.degree_before == 2 for r in reports), reports
    for op in kernel.walk():
        if op.name != "tk.alloc":
            continue
        lay = shared_layout(op.result.type)
        for use in tile_uses(kernel, op.result, Options()):
            addrs = addresses(use.access, lay)
            worst = max(max(brute_force_wavefronts([int(a) for a in row], use.access.width)) for row in addrs)
            assert worst == 1, f"{op.result.name}: {use.access.op} is {worst}-way in {lay}"
            # an 8-byte st.shared.v2 / ld.shared.v2 needs an 8-byte aligned address (PTX ISA §5.4.5): padding
            # rows by less than the access width would leave every other row misaligned
            active = addrs[addrs >= 0]
            assert (active % use.access.width == 0).all(), (
                f"{op.result.name}: {use.access.op} has {use.access.width}-byte accesses at unaligned addresses in {lay}")


# --- plan-occupancy at the shared-memory boundary -------------------------------------------------

SMEM_PER_SM = 228 * 1024      # HOPPER.md §7.3 (CC 9.0)
RESERVED_PER_BLOCK = 1024     # 1 KB per block reserved for the system (CUDA C Programming Guide, CC 9.0)
SMEM_UNIT = 128               # shared-memory allocation granularity (occupancy calculator)


def _blocks_by_smem(smem: int) -> int:
    need = -(-(smem + RESERVED_PER_BLOCK) // SMEM_UNIT) * SMEM_UNIT
    return SMEM_PER_SM // need


def _boundary_sizes() -> list[int]:
    """Shared bytes (multiples of 128) just at and just past the largest size that fits n blocks."""
    out = []
    for n in (1, 2, 3, 4, 6):
        fit = (SMEM_PER_SM // n - RESERVED_PER_BLOCK) // SMEM_UNIT * SMEM_UNIT
        out += [fit, fit + SMEM_UNIT]
    return [s for s in out if s <= 232_448]


@pytest.mark.parametrize("smem", _boundary_sizes())
def test_blocks_per_sm_at_the_shared_memory_boundary(smem: int) -> None:
    """A block whose only resource is `smem` bytes of shared memory (one f32 tile of 128-byte rows):
    plan-occupancy gives floor(228 KB / (smem + 1 KB reserved, in 128-B units)) blocks per SM."""
    text = f"""tk.kernel @k {{grid = ["M / 16"]}} {{
  ^(%X: gl<f32>[M, 32])
  %s = tk.alloc : st<f32, {smem // 128}, 32>
}}"""
    from tkir.parser import parse_module

    kernel = parse_module(run_passes(text, ["plan-occupancy"])).kernels()[0]
    plan = OccupancyPlan.of(kernel)
    assert plan is not None and plan.smem_bytes == smem
    assert plan.blocks_per_sm == min(_blocks_by_smem(smem), 16), (smem, plan.blocks_per_sm)  # 16: 4 warps of 64


# --- the mbarrier pipeline (HOPPER.md §5, PTX ISA §9.7.13.15) -------------------------------------

MBAR_BYTES = 8  # an mbarrier is one .b64 in shared memory


def _barrier_arrays(fn: LLVMText, k: tkir.CompiledKernel) -> dict[str, tuple[int, int]]:
    """kind-qualified name ("full", "empty_k", "once", ...) -> (shared base address, barriers)."""
    sizes = {op.result.name: op.result.type.n for op in k.module.kernel.walk() if op.name == "pipe.barriers"}
    out = {}
    for name, rhs in fn.defs.items():
        base = name[1:].rsplit(".", 1)[0]
        if base in sizes and rhs.startswith("add i32 %smem."):
            out[base] = (fn.value(name, 0), sizes[base])
    assert set(out) == set(sizes), (out, sizes)
    return out


def _which(arrays: dict[str, tuple[int, int]], addr: int) -> tuple[str, int]:
    """(array, index) of the barrier at shared address `addr`."""
    for name, (base, n) in arrays.items():
        if base <= addr < base + n * MBAR_BYTES and (addr - base) % MBAR_BYTES == 0:
            return name, (addr - base) // MBAR_BYTES
    raise AssertionError(f"shared address {addr} is not a barrier")


def check_mbarrier_pipeline(k: tkir.CompiledKernel, releases: bool = True) -> None:
    """What HOPPER.md §5.4 requires of a producer/consumer ring of S stages, in iterations it = 0..2S+1:
    * `full[s]` expects one arrival (the producer's arrive.expect_tx) and exactly the bytes of the TMA
      boxes completing on it in that iteration; `empty[s]` expects one arrival per consumer warp, and
      only lane 0 of a warp arrives; a one-shot `once` barrier expects one arrival and its bytes;
    * in iteration it, stage s = it mod S; the consumer waits full[s] at parity (it div S) mod 2, the
      producer waits empty[s] at the opposite parity (a fresh barrier has completed "phase -1");
    * (`releases`: kernels with one mma per iteration) a consumer releases a stage only after
      `wgmma.wait_group N` has retired the wgmmas that read it: N = 0 for the stage of this iteration,
      N <= 1 for the previous iteration's. Every wait_group keeps at most one group in flight."""
    fn = LLVMText(k.asm["llvm"])
    plan = OccupancyPlan.of(k.module.kernel)
    S = plan.stages
    consumer_warps = 4 * plan.role("consumer").warpgroups
    arrays = _barrier_arrays(fn, k)
    descs = {d.param: d for d in k.launch.tma}
    # `once_empty` (persistent kernels: the consumers release a one-shot buffer per tile) counts warps too
    expected_count = {n: (consumer_warps if n.startswith(("empty", "once_empty")) else 1) for n in arrays}
    for call in fn.calls:
        if call.asm.startswith("mbarrier.init"):
            name, _ = _which(arrays, fn.value(call.args[0][1], 0))
            assert int(call.args[1][1]) == expected_count[name], f"{name} initialised with count {call.args[1][1]}"
    its = sorted({n for c in fn.calls for _, v in c.args for n in fn.depends_on(v, "%it.")})
    per_iteration = {id(c): any(fn.depends_on(v, "%it.") for _, v in c.args) for c in fn.calls}
    for it in range(2 * S + 2):
        over = {n: it for n in its}
        expect: dict[tuple[str, int], int] = {}
        delivered: dict[tuple[str, int], int] = {}
        for call in fn.calls:
            if call.asm.startswith("mbarrier.arrive.expect_tx"):
                bar = _which(arrays, fn.value(call.args[0][1], 0, over))
                expect[bar] = expect.get(bar, 0) + int(call.args[1][1])
            elif call.asm.startswith("cp.async.bulk.tensor.") and ".shared::cluster.global" in call.asm:
                d = descs[call.args[1][1].lstrip("%")]
                bar = _which(arrays, fn.value(call.args[2][1], 0, over))
                delivered[bar] = delivered.get(bar, 0) + int(np.prod(d.box)) * DTYPE_BYTES[d.dtype]
            elif "mbarrier.try_wait.parity" in call.asm:
                name, s = _which(arrays, fn.value(call.args[0][1], 0, over))
                parity = fn.value(call.args[1][1], 0, over)
                if name.startswith("once"):
                    # block 0's first tile (loop-carried values evaluate to 0): the fill is waited at
                    # parity 0, the release of a fresh barrier at parity 1 (it completes at once)
                    want = 1 if name.startswith("once_empty") else 0
                    assert parity == want, f"{name} waited at parity {parity}, not {want} for the first tile"
                    continue
                # a wait computed from this iteration's counter is for iteration `it`; one carried over
                # from the previous iteration (overlap-mma) or peeled before the loop is evaluated at 0
                j = it if per_iteration[id(call)] else 0
                assert s == j % S, f"iteration {j} waits on stage {s} of {name}"
                want = (j // S) % 2 ^ (1 if name.startswith("empty") else 0)
                assert parity == want, f"iteration {it}: {name}[{s}] waited at parity {parity}, not {want}"
        assert expect == delivered, f"iteration {it}: expect_tx {expect} but the TMA boxes deliver {delivered}"
    waits = [int(c.asm.split()[-1].rstrip(";")) for c in fn.calls if c.asm.startswith("wgmma.wait_group")]
    assert waits and all(n <= 1 for n in waits), f"wgmma.wait_group immediates {sorted(set(waits))}"
    if releases:
        _check_releases(fn, arrays, S)
        first, _ = _plan_warpgroups(k)
        _check_release_rounds(fn, arrays, S, WARPGROUP * first)


def _check_releases(fn: LLVMText, arrays: dict, S: int) -> None:
    commits = [i for i, ln in enumerate(fn.lines) if "@llvm.nvvm.wgmma.commit_group.sync.aligned()" in ln
               and ln.lstrip().startswith("call")]
    waits = [(c.line, int(c.asm.split()[-1].rstrip(";"))) for c in fn.calls if c.asm.startswith("wgmma.wait_group")]
    it = 1
    over = {n: it for c in fn.calls for _, v in c.args for n in fn.depends_on(v, "%it.")}
    released = 0
    for call in fn.calls:
        if not call.asm.startswith("mbarrier.arrive.shared"):
            continue
        name, s = _which(arrays, fn.value(call.args[0][1], 0, over))
        if not name.startswith("empty"):
            continue
        lane_guard = _guarded_by_lane0(fn, call.line)
        assert lane_guard, f"line {call.line + 1}: an arrive on {name} not limited to lane 0 of each warp"
        last_commit = max((c for c in commits if c < call.line), default=None)
        if last_commit is None:
            continue
        in_flight = [n for line, n in waits if last_commit < line < call.line]
        assert in_flight, f"line {call.line + 1}: {name}[{s}] released without a wgmma.wait_group"
        allowed = 0 if s == it % S else 1 if s == (it - 1) % S else -1
        assert min(in_flight) <= allowed, (f"line {call.line + 1}: {name}[{s}] released at iteration {it} with "
                                           f"{min(in_flight)} wgmma groups still in flight")
        released += 1
    assert released, "no consumer releases a stage"


_PREV_PHI = re.compile(r"^\s*(%prev_stage[\w.]*) = phi i32 \[ (\S+), %[\w.]+ \], \[ (\S+), %[\w.]+ \]$")


def _check_release_rounds(fn: LLVMText, arrays: dict, S: int, tid: int) -> None:
    """Each stage is released exactly once per round: over iterations it = 0..2S+1 of the consumer's
    loop and the release after it, the arrives on `empty` that lane 0 of a consumer warp (thread `tid`)
    executes -- their branch conditions evaluated, the deferred release's carried stage (`%prev_stage`,
    -1 on entry) computed from the previous iteration -- release stages 0, 1, ..., S-1, 0, ... of each
    `empty` array in order, one per iteration. A release skipped for one stage (stage 0, say) leaves the producer waiting for it
    forever once the ring comes round (every GEMM with more k-iterations than stages hangs)."""
    n = 2 * S + 2
    its = sorted({x for c in fn.calls for _, v in c.args for x in fn.depends_on(v, "%it.")})
    phis = [m.groups() for ln in fn.lines if (m := _PREV_PHI.match(ln))]
    assert len(phis) <= 1, f"several deferred-release stages carried: {phis}"
    phi = phis[0] if phis else None
    header = next(i for i, ln in enumerate(fn.lines) if phi and ln.lstrip().startswith(phi[0] + " =")) if phi else None
    exit_line = None
    if header is not None:  # the loop's exit: the header block's conditional branch names it second
        br = next(ln for ln in fn.lines[header:] if ln.lstrip().startswith("br i1"))
        exit_label = br.rsplit("label %", 1)[1].strip()
        exit_line = next(i for i, ln in enumerate(fn.lines) if ln.startswith(exit_label + ":"))
    prev = [int(phi[1]) if phi else -1]
    for it in range(n):  # the carried stage at the top of iteration it + 1: the latch value of iteration it
        prev.append(fn.value(phi[2], tid, {**{x: it for x in its}, phi[0]: prev[it]}) if phi else -1)
    released: dict[str, list[int]] = {}
    arrives = [c for c in fn.calls if c.asm.startswith("mbarrier.arrive.shared")]
    for it in range(n + 1):  # it = n: after the loop
        over = {**{x: min(it, n - 1) for x in its}, **({phi[0]: prev[it]} if phi else {})}
        for call in arrives:
            after = exit_line is not None and call.line > exit_line
            if (it == n) != after or (not after and not fn.depends_on(call.args[0][1], "%it.")
                                        and not (phi and phi[0] in fn.reachable(call.args[0][1]))):
                continue
            if not _executes(fn, call.line, tid, over):
                continue
            name, s = _which(arrays, fn.value(call.args[0][1], tid, over))
            if name.startswith("empty"):
                released.setdefault(name, []).append(s)
    want = [j % S for j in range(n)]
    assert released and all(got == want for got in released.values()), (
        f"the consumers release stages {released} over {n} iterations of a {S}-stage ring; each stage once per "
        f"round, in order: {want}")


def _executes(fn: LLVMText, line: int, tid: int, over: dict[str, int]) -> bool:
    """Whether thread `tid` reaches the block holding `line` from the conditional branch that enters it
    (True if no conditional branch names the block)."""
    label = next(ln.rstrip(":").strip() for ln in reversed(fn.lines[:line]) if ln.rstrip().endswith(":")
                 and not ln.startswith(" "))
    for ln in fn.lines:
        parts = ln.split()
        if len(parts) >= 7 and parts[0] == "br" and parts[1] == "i1" and f"label %{label}," in ln:
            taken = fn.value(parts[2].rstrip(","), tid, over)
            return bool(taken)
        if len(parts) >= 7 and parts[0] == "br" and parts[1] == "i1" and ln.rstrip().endswith(f"label %{label}"):
            return not fn.value(parts[2].rstrip(","), tid, over)
    return True


def _guarded_by_lane0(fn: LLVMText, line: int) -> bool:
    """Whether the block holding `line` is entered only when some `%lane == 0` test holds."""
    return _guarded_by(fn, line, "lane", ", 0")


def _guarded_by(fn: LLVMText, line: int, hint: str, tail: str = "") -> bool:
    """Whether the block holding `line` is entered by a branch on an `icmp eq` of a value named `hint`
    (ending with `tail`)."""
    label = next(ln.rstrip(":").strip() for ln in reversed(fn.lines[:line]) if ln.rstrip().endswith(":")
                 and not ln.startswith(" "))
    branches = [ln for ln in fn.lines if f"label %{label}," in ln and ln.lstrip().startswith("br i1")]
    for br in branches:
        cond = br.split()[2].rstrip(",")
        for n in fn.reachable(cond):
            rhs = fn.defs.get(n, "")
            if (n.startswith(f"%{hint}") or rhs.startswith(f"icmp eq i32 %{hint}")) and rhs.startswith("icmp eq") \
                    and rhs.endswith(tail):
                return True
    return False


# name -> (source, consts, options, check the stage releases): attention's overlap-mma keeps two
# mmas of different iterations in flight, which this one-mma release rule does not model (the GPU
# tests run it)
PIPELINE_KERNELS = {
    "gemm": ("examples/gemm.tk", {}, {}, True),
    "gemm-3-stages": (SWIZZLED_GEMM.replace("@stages(2)", "@stages(3)").replace("SA", "128").replace("SB", "128"),
                      {}, {}, True),
    "gemm-1-stage": (SWIZZLED_GEMM.replace("@stages(2)", "@stages(1)").replace("SA", "128").replace("SB", "128"),
                     {}, {}, True),
    "linear": ("examples/linear.tk", {}, {}, True),
    # a one-shot TMA load of Z per tile (once / once_empty) beside the ring; wgrad's transposed A
    "linear-dgrad-silu": ("examples/linear_dgrad.tk", {"ACT": 2}, {}, True),
    "linear-wgrad": ("examples/linear_wgrad.tk", {}, {}, True),
    "attention-d64-causal": ("examples/attention_fwd.tk", {"D": 64, "CAUSAL": 1}, {}, False),
    "attention-d128-3-stages": ("examples/attention_fwd.tk", {"STAGES": 3}, {}, False),
}


@pytest.mark.parametrize("name", list(PIPELINE_KERNELS))
def test_mbarrier_pipeline_protocol(name: str, src_dir: Path) -> None:
    src, consts, opts, releases = PIPELINE_KERNELS[name]
    check_mbarrier_pipeline(compile_kernel(src, consts, opts, src_dir), releases)


@pytest.mark.parametrize("name", [n for n, v in PIPELINE_KERNELS.items() if v[3]])
def test_ring_stages_are_disjoint_and_come_round(name: str, src_dir: Path) -> None:
    """The TMA loads of a pipelined loop, evaluated over iterations 0..2S-1: the boxes written in any S
    consecutive iterations (the stages in flight at once) occupy pairwise disjoint shared bytes, and
    iteration it + S writes where iteration it wrote (the ring comes round to the same stage). Stages that
    overlap would let the producer's copy into one stage overwrite a stage the consumers still read."""
    src, consts, opts, _ = PIPELINE_KERNELS[name]
    k = compile_kernel(src, consts, opts, src_dir)
    fn = LLVMText(k.asm["llvm"])
    S = OccupancyPlan.of(k.module.kernel).stages
    descs = {d.param: d for d in k.launch.tma}
    its = sorted({n for c in fn.calls for _, v in c.args for n in fn.depends_on(v, "%it.")})
    loads = [c for c in fn.calls if c.asm.startswith("cp.async.bulk.tensor.") and ".shared::cluster.global" in c.asm
             and fn.depends_on(c.args[0][1], "%it.")]
    assert loads and S >= 1
    boxes: dict[int, list[tuple[int, int, int]]] = {}
    for it in range(2 * S):
        for i, call in enumerate(loads):
            d = descs[call.args[1][1].lstrip("%")]
            size = int(np.prod(d.box)) * DTYPE_BYTES[d.dtype]
            dst = fn.value(call.args[0][1], 0, {n: it for n in its})
            boxes.setdefault(it, []).append((dst, dst + size, i))
    for it in range(S):
        assert sorted(boxes[it + S]) == sorted(boxes[it]), f"iteration {it + S} does not reuse iteration {it}'s stage"
    spans = sorted(b for it in range(S) for b in boxes[it])
    for (a0, a1, i), (b0, b1, j) in itertools.pairwise(spans):  # i, j: which load wrote each
        assert a1 <= b0, f"TMA boxes [{a0}, {a1}) (load {i}) and [{b0}, {b1}) (load {j}) of {S} iterations overlap"


def _block_of(fn: LLVMText, line: int) -> str:
    """The label of the basic block holding `line`."""
    return next(ln.rstrip(":").strip() for ln in reversed(fn.lines[:line]) if ln.rstrip().endswith(":")
                and not ln.startswith(" "))


@pytest.mark.parametrize("name", ["gemm", "attention-d64-causal"])
def test_mbarrier_waits_loop_until_the_phase_completes(name: str, src_dir: Path) -> None:
    """PTX ISA mbarrier.try_wait / test_wait: the predicate is true once the phase of that parity has completed.
    Every wait is a loop around its test (backend.idioms.mbarrier_wait_parity): the branch after the test,
    evaluated with the test's result, goes back to the test while it is 0 and leaves the loop when it is 1.
    Inverted, the wait would fall through at once (no synchronization) and spin once the phase completes."""
    src, consts, opts, _ = PIPELINE_KERNELS[name]
    fn = LLVMText(compile_kernel(src, consts, opts, src_dir).asm["llvm"])
    waits = [c for c in fn.calls if re.search(r"mbarrier\.(try|test)_wait\.parity", c.asm)]
    assert waits, "no mbarrier wait"
    for call in waits:
        label = _block_of(fn, call.line)
        br = next(ln.split() for ln in fn.lines[call.line + 1:] if ln.lstrip().startswith("br "))
        assert br[1] == "i1", f"line {call.line + 1}: the wait's block ends without a conditional branch"
        cond, on_true, on_false = br[2].rstrip(","), br[4].rstrip(",").lstrip("%"), br[6].lstrip("%")
        for done in (0, 1):
            taken = on_true if fn.value(cond, 0, {call.result: done}) else on_false
            assert (taken == label) == (done == 0), (
                f"line {call.line + 1}: with the wait's result {done} the loop {'stays' if taken == label else 'ends'}")


# --- setmaxnreg ------------------------------------------------------------------------------------

REGS_PER_SM = 65536  # HOPPER.md §7.3


@pytest.mark.parametrize("name", ["gemm", "attention-d128", "gemm-bm64"])
def test_setmaxnreg_moves_registers_within_the_block(name: str, src_dir: Path) -> None:
    """PTX ISA §9.7.19.5 (HOPPER.md §7.1): a warpgroup starts at the launch cap floor(65536 / threads / 8)
    * 8; `.dec` must not ask for more than it has, `.inc` not for less; values 24..256 in steps of 8; and
    the roles together stay within the block's registers."""
    import re

    src, consts, opts = WGMMA_KERNELS[name]
    k = compile_kernel(src, consts, opts, src_dir)
    threads = k.launch.block[0]
    cap = REGS_PER_SM // threads // 8 * 8
    calls = re.findall(r"call void @llvm\.nvvm\.setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\(i32 (\d+)\)", k.asm["llvm"])
    plan = OccupancyPlan.of(k.module.kernel)
    assert [int(v) for _, v in calls] == [plan.role("producer").regs, plan.role("consumer").regs]
    for which, v in calls:
        v = int(v)
        assert 24 <= v <= 256 and v % 8 == 0
        assert (v <= cap) if which == "dec" else (v >= cap), f"setmaxnreg.{which} {v} with a launch cap of {cap}"
    total = sum(WARPGROUP * r.warpgroups * r.regs for _, r in plan.roles)
    assert total <= REGS_PER_SM


# --- the async proxy sees what the threads wrote (HOPPER.md §1.4, §4.4, §5.3) -----------------------


def _tile_ranges(fn: LLVMText, k: tkir.CompiledKernel) -> dict[str, tuple[int, int]]:
    """Shared tile name -> [start, end) of its bytes (every stage of a ring buffer)."""
    from tkir.backend.context import tile_stage_bytes

    out = {}
    for op in k.module.kernel.walk():
        if op.name != "tk.alloc":
            continue
        name, t = op.result.name, op.result.type
        base = next((fn.value(n, 0) for n, rhs in fn.defs.items()
                     if n.startswith(f"%{name}.") and rhs.startswith("add i32 %smem.")), None)
        if base is not None:
            out[name] = (base, base + tile_stage_bytes(t) * int(t.get("stages") or 1))
    return out


def check_async_reads_are_fenced(k: tkir.CompiledKernel) -> int:
    """Between the threads' stores to a shared tile (st.shared, stmatrix, cp.async) and a read of it by the async
    proxy (a wgmma descriptor, a TMA store), in program order: `fence.proxy.async.shared::cta`, then a
    barrier (bar.sync / barrier0), so every thread's writes are visible to the tensor core or the copy
    engine. Returns the number of async reads of thread-written tiles checked."""
    fn = LLVMText(k.asm["llvm"])
    tiles = _tile_ranges(fn, k)
    first, _ = _plan_warpgroups(k)
    tid = WARPGROUP * first

    def tile_at(token: str) -> str | None:
        try:
            a = fn.value(token, tid)
        except (KeyError, ValueError):
            return None
        return next((n for n, (lo, hi) in tiles.items() if lo <= a < hi), None)

    asm_at = {c.line: c for c in fn.calls}
    written: set[str] = set()
    fenced: set[str] = set()
    ever_written: set[str] = set()
    checked = 0
    for i, line in enumerate(fn.lines):
        call = asm_at.get(i)
        if "@llvm.nvvm.barrier0()" in line and line.lstrip().startswith("call") or (call and call.asm.startswith("bar.sync")):
            fenced = set()
        if call is None:
            continue
        if call.asm.startswith(("st.shared", "stmatrix", "cp.async.cg.shared")):
            name = tile_at(call.args[0][1])
            if name:
                written.add(name)
                ever_written.add(name)
        elif call.asm.startswith("fence.proxy.async"):
            fenced |= written
            written = set()
        else:
            reads = []
            if call.asm.startswith("wgmma.mma_async"):
                descs = [v for ty, v in call.args if ty == "i64"]
                reads = [_decode(fn.value(d, tid))[0] for d in descs]
                names = [next((n for n, (lo, hi) in tiles.items() if lo <= a < hi), None) for a in reads]
            elif call.asm.startswith("cp.async.bulk.tensor") and ".global.shared::cta" in call.asm:
                names = [tile_at(call.args[1][1])]
            else:
                continue
            for name in names:
                if name in ever_written:
                    checked += 1
                assert name not in written, f"line {i + 1}: the async proxy reads '{name}' with no fence after its stores"
                assert name not in fenced, f"line {i + 1}: '{name}' is read by the async proxy before a barrier"
    return checked


@pytest.mark.parametrize("name", ["gemm", "register-b-staged", "gemm-no-tma", "attention-d64-causal"])
def test_async_proxy_reads_of_thread_written_tiles_are_fenced(name: str, src_dir: Path) -> None:
    src, consts, opts = WGMMA_KERNELS[name]
    k = compile_kernel(src, consts, opts, src_dir)
    checked = check_async_reads_are_fenced(k)
    assert checked > 0 or name.startswith("attention"), "no thread-written tile read by the async proxy"


# --- the causal mask ------------------------------------------------------------------------------

CAUSAL_MASK = """
kernel cm<BQ=64, BKV=64>(Q: gl<bf16>[N, 64], K: gl<bf16>[N, 64], X: gl<f32>[N, 64], O: gl<f32>[N, 64],
                         P: gl<f32>[N, 64], Y: gl<f32>[N, 48], R: gl<f32>[N, 48]) grid(cdiv(N, BQ)) {
    shared q: st<bf16, BQ, 64>
    shared k: st<bf16, BKV, 64>
    q = Q[block.x, 0]
    k = K[0, 0]
    reg s: rt<f32, BQ, BKV> = q @ k.T
    O[block.x, 0] = mask_causal(s, block.x * BQ, 64)
    reg x: rt<f32, BQ, 64> = X[block.x, 0]
    P[block.x, 0] = mask_causal(x, block.x * BQ, 32)
    reg y: rt<f32, BQ, 48> = Y[block.x, 0]
    R[block.x, 0] = mask_causal(y, block.x * BQ, 16)
}
"""


def test_causal_mask_hides_exactly_the_keys_after_the_query(src_dir: Path) -> None:
    """mask_causal(s, row0, col0) hides element (r, c) iff col0 + c > row0 + r (docs/language.md): for
    every thread, slot and block row, the mask the backend computes (its `msk` compares, evaluated)
    against the element each slot holds in the tile's layout (tkir.layout.fragment), on an
    accumulator tile (wgmma_acc), a loaded one (row layout), and a loaded one 48 columns wide, whose 12 chunks
    per row do not divide a warp: a slot's row then differs by lane, and the rule's general branch (a compare
    per slot coordinate, not per-slot constant steps) computes the mask."""
    from tkir.layout import layout_of

    k = compile_kernel(CAUSAL_MASK, {}, {}, src_dir)
    fn = LLVMText(k.asm["llvm"])
    ctaid = [n for n, rhs in fn.defs.items() if "sreg.ctaid.x" in rhs]
    masks = [op for op in k.module.kernel.walk() if op.name == "tk.mask_causal"]
    msk = [n for n in fn.defs if n.startswith("%msk.")]
    tables = [tkir.layout.fragment(layout_of(op.operands[0].type), "f32", op.operands[0].type.shape) for op in masks]
    assert len(msk) == sum(t.shape[1] for t in tables), "one compare per register slot"
    assert any(n.startswith("%nd.") for n in fn.defs), "no mask takes the general branch"
    col0s = (64, 32, 16)
    for bx in (0, 1, 2):
        over = {n: bx for n in ctaid}
        at = 0
        for table, col0, op in zip(tables, col0s, masks, strict=True):
            names, at = msk[at:at + table.shape[1]], at + table.shape[1]
            for tid in range(0, table.shape[0], 3):  # every third thread: all lanes of a quad pattern and warps
                for slot, name in enumerate(names):
                    e = int(table[tid, slot])
                    if e < 0:
                        continue
                    r, c = divmod(e, op.operands[0].type.cols)
                    assert fn.value(name, tid, over) == int(col0 + c > bx * 64 + r), (bx, tid, slot, r, c)


# --- TMA coordinates follow the loop ------------------------------------------------------------------


def _depends_on(v, arg) -> bool:
    """Whether IR value `v` is computed (within its region) from the block argument `arg`."""
    seen, todo = set(), [v]
    while todo:
        x = todo.pop()
        if x is arg:
            return True
        if id(x) in seen or not isinstance(x.owner, Operation):
            continue
        seen.add(id(x))
        todo += list(x.owner.operands)
    return False


def check_tma_coordinates(k: tkir.CompiledKernel) -> int:
    """Each pipelined TMA copy's coordinates (innermost first, in elements) move with the loop exactly as
    the IR's tile coordinates do: one loop step moves a coordinate that is the loop variable by one tile
    (its cols for dim 0, rows for dim 1, 1 beyond), and leaves every coordinate that does not depend on
    it where it was. Evaluated from the LLVM text at iteration 0 and 1. Returns the copies checked."""
    fn = LLVMText(k.asm["llvm"])
    copies = [op for op in k.module.kernel.walk() if op.name == "pipe.copy"]
    calls = [c for c in fn.calls if c.asm.startswith("cp.async.bulk.tensor.") and ".shared::cluster.global" in c.asm]
    per_copy = [int(op.attrs["boxes"]) for op in copies]
    assert sum(per_copy) == len(calls), f"{len(calls)} TMA loads for {per_copy} boxes"
    checked = 0
    for op, n in zip(copies, per_copy, strict=True):
        these, calls = calls[:n], calls[n:]
        loop = parent_op(op)
        while loop is not None and loop.name != "scf.for":
            loop = parent_op(loop)
        if loop is None:
            continue
        var = loop.body.args[0]
        phis = [name for name, rhs in fn.defs.items() if rhs.startswith("phi i32")
                and name[1:].rsplit(".", 1)[0] == var.name.replace(".", "_")]
        assert phis, f"no LLVM phi for the loop variable %{var.name}"
        t = op.operands[0].type
        coords = op.operands[4:]
        for call in these:
            rank = len(call.args) - 3
            for d in range(rank):
                ir = coords[len(coords) - 1 - d]
                at0 = fn.value(call.args[3 + d][1], 0)
                at1 = fn.value(call.args[3 + d][1], 0, {p: 1 for p in phis})
                unit = (t.cols, t.rows)[d] if d < 2 else 1
                want = unit if ir is var else (0 if not _depends_on(ir, var) else None)
                if want is not None:
                    assert at1 - at0 == want, (f"{op.operands[3].name} coordinate {d}: one step of %{var.name} moves "
                                               f"it by {at1 - at0}, not {want}")
            checked += 1
    return checked


@pytest.mark.parametrize("name", ["gemm", "linear-k-major-b", "attention-d64-causal", "gemm-interleaved"])
def test_tma_coordinates_follow_the_loop(name: str, src_dir: Path) -> None:
    src, consts, opts = WGMMA_KERNELS[name]
    assert check_tma_coordinates(compile_kernel(src, consts, opts, src_dir)) > 0


# --- pingpong turns (named barriers, PTX ISA bar.sync / bar.arrive) ---------------------------------

PINGPONG_PASSES = ("canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,"
                   "pipeline,early-release,overlap-mma,pingpong")


def test_pingpong_turns_pass_between_warpgroups(src_dir: Path) -> None:
    """tests/filecheck/passes/pingpong.tk with two consumer warpgroups: warpgroup w waits for its turn on a named
    barrier of its own (`bar.sync id, 256`: its 128 threads + 128 arrivals), distinct from every other
    barrier of the kernel; passing the turn arrives on the next warpgroup's barrier; and the first turn
    is given by warpgroup 0 arriving on its own barrier, only there (the `first_wg` branch)."""
    k = compile_kernel("tests/filecheck/passes/pingpong.tk", {"BQ": 128}, {"passes": PINGPONG_PASSES}, src_dir)
    fn = LLVMText(k.asm["llvm"])
    first, n = _plan_warpgroups(k)
    assert n == 2
    turns = [c for c in fn.calls if c.asm in ("bar.sync $0, 256;", "bar.arrive $0, 256;")]
    others = set()  # every other named barrier any consumer warpgroup uses (fixed ids, and $0 ones evaluated)
    for c in fn.calls:
        if c.asm.startswith(("bar.sync ", "bar.arrive ")) and c not in turns:
            word = c.asm.split()[1].rstrip(",")
            others |= ({int(word)} if word.isdigit() else
                       {fn.value(c.args[0][1], WARPGROUP * (first + w)) for w in range(n)})
    ids = {w: {(c.asm.split()[0], fn.value(c.args[0][1], WARPGROUP * (first + w))) for c in turns} for w in range(n)}
    own = {w: {i for kind, i in ids[w] if kind == "bar.sync"} for w in range(n)}
    assert all(len(own[w]) == 1 for w in range(n)), own
    own = {w: own[w].pop() for w in range(n)}
    assert len(set(own.values())) == n and not set(own.values()) & others, (own, others)
    for c in turns:
        if not c.asm.startswith("bar.arrive"):
            continue
        if _guarded_by(fn, c.line, "first_wg"):  # the first turn: warpgroup 0 only
            assert fn.value(c.args[0][1], WARPGROUP * first) == own[0]
        else:
            for w in range(n):
                assert fn.value(c.args[0][1], WARPGROUP * (first + w)) == own[(w + 1) % n], (w, c.line)


# --- the staged epilogue: accumulator -> 128B-swizzled stage -> TMA store ---------------------------


def _acc_slot(fn: LLVMText, token: str) -> int:
    """The accumulator register slot a bf16 value was converted from (through the fptrunc and the
    extractvalue of the last wgmma wait, or a loop phi named after its slot)."""
    import re

    tok = token
    while True:
        rhs = fn.defs[tok]
        if rhs.startswith("fptrunc"):
            tok = rhs.split()[2]
        elif rhs.startswith("extractvalue %floatx"):
            return int(rhs.rsplit(",", 1)[1])
        elif rhs.startswith("phi") and re.match(r"%acc_(\d+)\.", tok):
            return int(re.match(r"%acc_(\d+)\.", tok).group(1))
        else:
            raise AssertionError(f"cannot follow {tok} = {rhs[:80]}")


def _word_slots(fn: LLVMText, token: str) -> tuple[int, int]:
    """The (low, high) accumulator slots of a packed bf16x2 word written by the staged epilogue."""
    rhs = fn.defs[token]
    if rhs.startswith("extractvalue"):  # the pinned words: output j is input j of the empty asm
        src, j = rhs.rsplit(" ", 2)[-2].rstrip(","), int(rhs.rsplit(",", 1)[1])
        call = next(c for c in fn.calls if c.result == src)
        token = call.args[j][1]
        rhs = fn.defs[token]
    import re

    m = re.fullmatch(r"bitcast <2 x bfloat> (%[\w.]+) to i32", rhs)
    assert m, rhs
    ins = re.compile(r"insertelement <2 x bfloat> (\S+), bfloat (%[\w.]+), i32 ([01])")
    hi = ins.fullmatch(fn.defs[m.group(1)])
    lo = ins.fullmatch(fn.defs[hi.group(1)])
    assert hi.group(3) == "1" and lo.group(3) == "0", (lo, hi)
    return _acc_slot(fn, lo.group(2)), _acc_slot(fn, hi.group(2))


def check_staged_epilogue(k: tkir.CompiledKernel, thread_step: int = 7) -> int:
    """Every bf16 pair a consumer thread writes to the stage reaches, through the TMA store that reads that
    part of the stage (box [64, rows], 128B swizzle, the ISA's), the global element its accumulator slots
    hold (tkir.layout.fragment of the wgmma_acc layout), at block 0. Returns the pairs followed."""
    from tkir.layout import layout_of

    fn = LLVMText(k.asm["llvm"])
    first, nwg = _plan_warpgroups(k)
    store = next(op for op in k.module.kernel.walk() if op.name == "tk.store_staged")
    t = store.operands[1].type
    table = tkir.layout.fragment(layout_of(t), "f32", t.shape)
    descs = {d.param: d for d in k.launch.tma}
    followed = 0
    for w in range(nwg):
        lead = WARPGROUP * (first + w)
        threads = range(lead, lead + WARPGROUP, thread_step)
        pending: dict[int, tuple[int, int]] = {}  # stage byte -> (row, col) of the element there
        for call in fn.calls:
            if call.asm.startswith("st.shared.b32"):
                lo, hi = _word_slots(fn, call.args[1][1])
                for tid in threads:
                    rel = tid - WARPGROUP * first
                    a = fn.value(call.args[0][1], tid)
                    for half, slot in ((0, lo), (2, hi)):
                        e = int(table[rel, slot])
                        assert pending.setdefault(a + half, divmod(e, t.cols)) == divmod(e, t.cols), a + half
            elif call.asm.startswith("cp.async.bulk.tensor") and ".global.shared::cta" in call.asm:
                d = descs[call.args[0][1].lstrip("%")]
                src = fn.value(call.args[1][1], lead)
                x, y = (fn.value(v, lead) for _, v in call.args[2:4])
                b0, b1 = d.box[0], d.box[1]
                for br in range(b1):
                    for bc in range(b0):
                        a = ref_swizzle(src + (br * b0 + bc) * 2, d.swizzle)
                        if a in pending:
                            assert pending.pop(a) == (y + br, x + bc), (
                                f"warpgroup {w}: the stage byte {a} holds element {pending.get(a)}, stored to "
                                f"({y + br}, {x + bc})")
                            followed += 1
        assert not pending, f"warpgroup {w}: {len(pending)} stage elements no TMA store reads"
    return followed


@pytest.mark.parametrize("name, passes", [("gemm", None), ("gemm-bm64", None), (
    "gemm", "canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma{epilogue_chunk=128},"
            "plan-occupancy,pipeline,persistent,canonicalize")])
def test_staged_epilogue_stores_each_element_where_it_belongs(name: str, passes: str | None, src_dir: Path) -> None:
    src, consts, opts = WGMMA_KERNELS[name]
    k = compile_kernel(src, consts, {**opts, **({"passes": passes} if passes else {})}, src_dir)
    assert check_staged_epilogue(k) > 0


# --- split-masks keeps the results, and splits the forms it can -------------------------------------

SPLIT_MASKS = """
kernel att<BQ=64, BKV=64, D=64>(Q: gl<bf16>[N, D], K: gl<bf16>[N, D], V: gl<bf16>[N, D], O: gl<bf16>[N, D])
    grid(cdiv(N, BQ))
{
    shared q: st<bf16, BQ, D>
    shared k: st<bf16, BKV, D>
    shared v: st<bf16, BKV, D>
    reg o: rt<f32, BQ, D> = 0
    reg m: rv<f32, BQ> = -inf
    reg l: rv<f32, BQ> = 0
    reg s: rt<f32, BQ, BKV>
    q = Q[block.x, 0]
    @stages(2)
    for j in 0 .. cdiv(N, BKV) {
        k = K[j, 0]
        v = V[j, 0]
        s = q @ k.T
        s = mask_causal(s, block.x * BQ + ROW_OFF, COL0)
        let m_new = max(m, row_max(s))
        let p = exp2(s - m_new)
        let alpha = exp2(m - m_new)
        l = l * alpha + row_sum(p)
        o *= alpha
        o += bf16(p) @ v
        m = m_new
    }
    o /= l
    O[block.x, 0] = bf16(o)
}
"""
NO_SPLIT = ("canonicalize,legalize-mma,fold-scale,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,"
            "pipeline,early-release,persistent,overlap-mma,canonicalize")


@pytest.mark.parametrize("row_off, col0", [(56, "j * BKV + 8"), (40, "j * BKV + 16"), (0, "block.x * BKV + j * BKV"),
                                           (70, "j * BKV + 8")])
def test_split_masks_splits_affine_masks_and_keeps_the_results(row_off: int, col0: str, src_dir: Path) -> None:
    """A causal mask whose key offset is a * j + b (b a constant, or loop-invariant and written first):
    split-masks splits the loop at the first key block the mask can hide anything in, and the kernel
    computes, in the interpreter, exactly what it computes unsplit (N = 300: a ragged last block). The
    offsets put the split where a bound off by 2b would move it by one block (row offset 56, b = 8), and where
    one off by one would (row offset 70, b = 8: block 0's first query is 70, and key block 0 ends at key 71)."""
    import ml_dtypes

    src = SPLIT_MASKS.replace("ROW_OFF", str(row_off)).replace("COL0", col0)
    split = compile_kernel(src, {}, {}, src_dir)
    assert "%split" in split.ir_after("split-masks"), "split-masks left the loop whole"
    plain = compile_kernel(src, {}, {"passes": NO_SPLIT}, src_dir)
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((300, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    outs = []
    for kern in (split, plain):
        o = np.zeros((300, 64), ml_dtypes.bfloat16)
        tkir.interpret(kern, q, k, v, o)
        outs.append(o.astype(np.float32))
    assert np.isfinite(outs[1]).all()
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("opts", [{"target": "sm_80"}, {"no_tma": True}])
def test_overlap_mma_leaves_kernels_without_roles_alone(opts: dict, src_dir: Path) -> None:
    """passes/overlap_mma.py: only a loop in a warp-specialized consumer role is rotated; attention at
    head dim 64 (rotated on sm_90a with TMA) keeps its loop on sm_80 and under --no-tma."""
    k = compile_kernel("examples/attention_fwd.tk", {"D": 64}, opts, src_dir)
    assert k.ir_after("overlap-mma") == k.ir_after("split-masks")
    assert "tk.mma_wait" in compile_kernel("examples/attention_fwd.tk", {"D": 64}, {}, src_dir).ir


SCRATCH_KERNEL = """
kernel tr<R=16, C=CC>(X: gl<DT>[N, C], Y: gl<DT>[C, N])
    grid(cdiv(N, R))
{
    reg x: rt<DT, R, C> = X[block.x, 0]
    reg y: rt<DT, C, R> = x.T
    Y[0, block.x] = y
}
"""


@pytest.mark.parametrize("dtype, cols", [("f32", 48), ("f32", 32), ("bf16", 48), ("bf16", 64)])
def test_shared_accesses_through_the_scratch_area_are_aligned(dtype: str, cols: int, src_dir: Path) -> None:
    """A register tile transposed through the scratch area (rows of 192, 128, 96 or 128 bytes: padded
    by 16 B only where the row is a multiple of 128 B): every st.shared/ld.shared of every thread is
    aligned to its access width, as PTX requires (PTX ISA, ld/st: the address must be naturally
    aligned to the access size). A mutant that padded other rows by 1 B left every example's PTX
    unchanged (a random mutation sample)."""
    src = SCRATCH_KERNEL.replace("CC", str(cols)).replace("DT", dtype)
    k = compile_kernel(src, {}, {}, src_dir)
    fn = LLVMText(k.asm["llvm"])
    widths = {"b16": 2, "b32": 4, "v2.b32": 8, "v4.b32": 16}
    checked = 0
    for c in fn.calls:
        m = re.match(r"(ld|st)\.shared\.(\S+)", c.asm)
        if not m:
            continue
        width = widths[m.group(2)]
        for tid in range(0, 128):
            addr = fn.value(c.args[0][1], tid)
            assert addr % width == 0, f"{c.asm.split(';')[0]} at {addr} (thread {tid}), line {c.line}"
            checked += 1
    assert checked >= 128 * 2, "the transpose went through shared memory in both directions"


# --- tk.outer's packed 16-bit factors ----------------------------------------------------------------


def _row(warps: int, vec: int) -> str:
    return f"kind = row, warps = {warps}, vec = {vec}"


# (a, b, result: (shape, layout)), the shfl.sync.idx count. Hand-written layouts: those infer-layouts
# gives bf16 tk.outer operands (quad-column, or `row` of 8-wide chunks) put a column in a slot of the
# column's parity in every warp; 1- and 4-wide chunks over different warp counts do not.
OUTER_PAIR_CASES = {
    # a: slot 0 in warp 0, slot 1 in warp 1 (its own slots, a select by warp); b: shuffles
    "local-slots-0-1": (((32, 2), _row(1, 1)), ((32, 8), _row(1, 4)), ((32, 16), _row(2, 8)), 4),
    # b: lane (lane & 28) | c, slot 0 in warp 0 and slot 1 in warp 1 (one 16-bit value per shuffle)
    "shuffled-slots-0-1": (((16, 4), _row(1, 1)), ((16, 4), _row(1, 1)), ((16, 16), _row(2, 4)), 4),
    # b: slots 0 / 2 (and 1 / 3) in warps 0 / 1: one packed register per warp holds both halves
    "shuffled-slots-0-2": (((32, 4), _row(1, 1)), ((32, 4), _row(1, 1)), ((32, 16), _row(2, 4)), 4),
}


@pytest.mark.parametrize("case", list(OUTER_PAIR_CASES))
def test_outer_product_moves_packed_pairs_only_with_one_half_in_every_warp(case: str) -> None:
    """tk.outer of bf16 tiles whose factors sit in a different slot in each warp (a select by warp, or
    a shuffle of slot ks[w] in warp w). The rule may move the 32-bit register of the slot pair k & ~1,
    k | 1 only when every warp takes the same half (k & 1). Its LLVM, evaluated for every thread
    (tests/ir/test_based.py's evaluator), must give every slot round_bf16(a * b) of its element, with one
    shuffle per packed register where the warps' slots share a half (slots 0 / 2: 4 shuffles, not 8).
    A random mutation sample: `k & 1` -> `k & 2` in that condition (backend/rules_registers.py,
    `pairs`) takes slots 0 / 1 as a pair, so warp 1 reads slot 0's half, and misses the 0 / 2 pair;
    it changed no example's PTX and no test saw it."""
    (sa, la), (sb, lb), (sr, lr), n_shfl = OUTER_PAIR_CASES[case]
    text = f"""tk.kernel @k {{grid = ["1"], warps = 2}} {{
  ^()
  %a = tk.fill {{value = 0.0}} : rt<bf16, {sa[0]}, {sa[1]}, layout={{{la}}}>
  %b = tk.fill {{value = 0.0}} : rt<bf16, {sb[0]}, {sb[1]}, layout={{{lb}}}>
  %r = tk.outer %a, %b {{axis = row}} : rt<bf16, {sr[0]}, {sr[1]}, layout={{{lr}}}>
}}
"""
    module = parse_module(text, "outer.tkir")
    verify(module)
    op = module.kernel.body.ops[-1]
    threads = 64
    tid = np.arange(threads)

    def per_thread(layout, shape):  # (row, col) arrays of every slot, the layout repeated over 64 threads
        return [tuple(np.asarray(x)[tid % layout.threads] for x in s) for s in numeric_slots(layout, shape)]

    # the case is what it says: some factor's slot differs between the warps in bit 0 (or only in bit 1)
    rl = layout_of(op.result.type)
    res = per_thread(rl, sr)
    need = ([(r, c // sb[1]) for r, c in res], [(r, c % sb[1]) for r, c in res])  # a[i, p], b[i, q]
    ks = [p[1] if p[0] == "local" else p[2] for x, nd in zip(op.operands, need, strict=True)
          for p in gather_plan(layout_of(x.type), x.type.shape, nd, threads)]
    bit = 2 if case.endswith("0-2") else 1
    assert any(len({k & bit for k in w}) > 1 and len({k & (3 - bit) for k in w}) == 1 for w in ks)

    rng = np.random.default_rng(14)
    env: dict[str, object] = {"%tid": tid}
    vals: dict = {}
    data = []
    for n, v in enumerate(op.operands):
        m = rng.standard_normal(v.type.shape).astype(BF16).astype(np.float32)
        data.append(m)
        names = [f"%in{n}_{k}" for k in range(len(numeric_slots(layout_of(v.type), v.type.shape)))]
        for name, (r, c) in zip(names, per_thread(layout_of(v.type), v.type.shape), strict=True):
            env[name] = m[r, c]
        vals[id(v)] = Frag(v.type, names)
    cx = _FakeCx(threads, vals)
    outer_product(cx, op)
    out = cx.get(op.result)
    out_names = [out.values[i] for i in range(len(out.values))]
    ev = _Eval(threads, env)
    ev.run(cx.w.lines)
    a, b = data
    want = np.einsum("ri,rj->rij", a, b).reshape(sr).astype(BF16).astype(np.float32)
    for s, (name, (r, c)) in enumerate(zip(out_names, res, strict=True)):
        wrong = np.flatnonzero(ev.env[name] != want[r, c])
        assert not len(wrong), f"slot {s}: threads {wrong[:8].tolist()} hold the wrong product"
    assert sum("shfl.sync.idx" in ln for ln in cx.w.lines) == n_shfl
