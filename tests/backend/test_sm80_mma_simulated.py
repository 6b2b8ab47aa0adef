"""The mma.sync rule's emitted code, run on the CPU: every warp of the block, every instruction.

backend/rules_sm80.py lowers a `tk.mma` of shared A and B into an `mma_c` accumulator to LLVM text:
integer address arithmetic, `ldmatrix` (x4 / x2, with and without .trans), `extractvalue` and
`mma.sync.m16n8k16` calls. `_Simt` executes exactly that text for all threads at once (one numpy
element per thread), with ldmatrix and mma.sync written from the PTX ISA's fragment maps (HOPPER.md
§6.1, §6.3 — not from tkir.layout), over a shared memory that holds A and B where their swizzled
layouts put them. The accumulator the rule returns must then hold, in every thread's slot s, the
element of A @ B (+ the old accumulator) that tkir.layout.fragment assigns to that slot — for the 1-D
layout (whole rows per warp) and for the 2-D warp grids (`warps_n`), for every operand form. The
bf16 accumulator store (`tk.store` of an mma_c tile) is run the same way into a global array.

Small integer inputs keep every product and sum exact in f32, so the comparisons are exact.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from tkir.backend.context import LoweringContext
from tkir.backend.llvm_text import LLVMWriter
from tkir.backend.rules_sm80 import _op_tk_mma, _op_tk_store
from tkir.backend.values import Frag, Global, Smem
from tkir.layout import SharedLayout, fragment, make_layout
from tkir.parser import parse_module

EB = 2  # bf16 / f16 bytes
WARP = 32


class _Pair:
    """A b32 register holding two 16-bit values (low half first), per thread: (threads, 2) floats."""

    def __init__(self, v: np.ndarray) -> None:
        self.v = v


_INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "shl": np.left_shift, "lshr": np.right_shift,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "udiv": np.floor_divide,
            "urem": np.remainder}
_CMP = {"slt": np.less, "ult": np.less, "sgt": np.greater, "ne": np.not_equal, "eq": np.equal}


class _Simt:
    """Runs the straight-line LLVM text of one rule for `threads` threads (module docstring)."""

    def __init__(self, threads: int, smem: np.ndarray, env: dict[str, object]) -> None:
        self.threads, self.smem, self.env = threads, smem, env
        self.stores: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (address, pair, predicate)

    def val(self, x: str) -> object:
        x = x.strip()
        if x.startswith("%"):
            return self.env[x]
        if x in ("poison", "undef"):
            return None
        return int(x) if re.fullmatch(r"-?\d+", x) else float(x)

    def run(self, lines: list[str]) -> None:
        for line in lines:
            line = line.strip()
            if line.startswith("call void asm"):
                self._asm(line)
                continue
            name, rhs = re.fullmatch(r"(%[\w.]+) = (.*)", line).groups()
            self.env[name] = self._eval(rhs)

    def _eval(self, rhs: str) -> object:
        if m := re.fullmatch(r"(\w+) (?:nuw |nsw )*i(?:32|64) ([^,]+), (.+)", rhs):
            return _INT_OPS[m[1]](np.asarray(self.val(m[2])), np.asarray(self.val(m[3])))
        if m := re.fullmatch(r"icmp (\w+) i32 ([^,]+), (.+)", rhs):
            return _CMP[m[1]](self.val(m[2]), self.val(m[3]))
        if m := re.fullmatch(r"and i1 ([^,]+), (.+)", rhs):
            return np.logical_and(self.val(m[1]), self.val(m[2]))
        if m := re.fullmatch(r"(?:sext|zext) i(?:1|32) (\S+) to i(?:32|64)", rhs):
            return np.asarray(self.val(m[1])).astype(np.int64)
        if m := re.fullmatch(r"inttoptr i32 (\S+) to ptr addrspace\(3\)", rhs):
            return self.val(m[1])
        if m := re.fullmatch(r"getelementptr bfloat, ptr addrspace\(1\) (\S+), i64 (\S+)", rhs):
            return np.asarray(self.val(m[1])) + EB * np.asarray(self.val(m[2]))
        if m := re.fullmatch(r"extractvalue \{[^}]*\} (\S+), (\d+)", rhs):
            return self.val(m[1])[int(m[2])]
        if m := re.fullmatch(r"call \{[^}]*\} @llvm\.nvvm\.ldmatrix\.sync\.aligned\.m8n8\.x(\d)(\.trans)?\.b16\.p3"
                             r"\(ptr addrspace\(3\) (\S+)\)", rhs):
            return self._ldmatrix(np.broadcast_to(self.val(m[3]), (self.threads,)), int(m[1]), bool(m[2]))
        if m := re.fullmatch(r"call \{float, float, float, float\} @llvm\.nvvm\.mma\.m16n8k16\.row\.col\.bf16\((.*)\)",
                             rhs):
            return self._mma([self.val(a.split()[-1]) for a in m[1].split(", ")])
        if m := re.fullmatch(r"insertelement <2 x bfloat> (\S+), bfloat (\S+), i32 (\d)", rhs):
            old = self.val(m[1])
            pair = np.zeros((self.threads, 2)) if old is None else old.copy()
            pair[:, int(m[3])] = np.broadcast_to(self.val(m[2]), (self.threads,))
            return pair
        if m := re.fullmatch(r"bitcast <2 x bfloat> (\S+) to i32", rhs):
            return _Pair(self.val(m[1]))
        raise AssertionError(f"the simulator does not know: {rhs}")

    def _ldmatrix(self, addr: np.ndarray, n: int, trans: bool) -> tuple[_Pair, ...]:
        """PTX ldmatrix.m8n8.xN.b16: lanes 8j..8j+7 give the row addresses of matrix j (16 bytes each);
        register j of lane t holds matrix j's (row t/4, columns 2(t%4), +1), or with .trans its
        (rows 2(t%4), +1, column t/4)."""
        out = [np.zeros((self.threads, 2)) for _ in range(n)]
        for w0 in range(0, self.threads, WARP):
            for j in range(n):
                rows = addr[w0 + 8 * j:w0 + 8 * j + 8]
                assert (rows % 16 == 0).all(), "ldmatrix row addresses must be 16-byte aligned"
                mat = np.stack([self.smem[a // EB:a // EB + 8] for a in rows])
                for t in range(WARP):
                    g, q = t // 4, t % 4
                    out[j][w0 + t] = (mat[2 * q, g], mat[2 * q + 1, g]) if trans else (mat[g, 2 * q], mat[g, 2 * q + 1])
        return tuple(_Pair(o) for o in out)

    def _mma(self, args: list) -> tuple[np.ndarray, ...]:
        """mma.sync.m16n8k16.row.col, per warp (PTX ISA): A regs a0a1 (g, 2q..), a2a3 (g+8, 2q..),
        a4a5 (g, 2q+8..), a6a7 (g+8, 2q+8..); B regs b0b1 (k 2q.., n g), b2b3 (k 2q+8.., n g); C/D
        c0 c1 (g, 2q + 0/1), c2 c3 (g + 8, 2q + 0/1)."""
        a, b, c = [x.v for x in args[:4]], [x.v for x in args[4:6]], [np.broadcast_to(x, (self.threads,)) for x in args[6:]]
        d = [np.zeros(self.threads) for _ in range(4)]
        for w0 in range(0, self.threads, WARP):
            A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8))
            for t in range(WARP):
                g, q = t // 4, t % 4
                for r, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
                    A[g + dr, 2 * q + dc:2 * q + dc + 2] = a[r][w0 + t]
                for r in range(2):
                    B[2 * q + 8 * r:2 * q + 8 * r + 2, g] = b[r][w0 + t]
                for i in range(4):
                    C[g + 8 * (i >> 1), 2 * q + (i & 1)] = c[i][w0 + t]
            D = A @ B + C
            for t in range(WARP):
                g, q = t // 4, t % 4
                for i in range(4):
                    d[i][w0 + t] = D[g + 8 * (i >> 1), 2 * q + (i & 1)]
        return tuple(d)

    def _asm(self, line: str) -> None:
        m = re.fullmatch(r'call void asm sideeffect "(.*)", "[^"]*"\((.*)\)', line)
        assert m and "st.global.b32" in m[1], line
        addr, bits, pred = (self.val(a.split()[-1]) for a in m[2].split(", "))
        self.stores.append((np.broadcast_to(addr, (self.threads,)), bits.v, np.broadcast_to(pred, (self.threads,))))


class _Cx(LoweringContext):
    """What the mma.sync and store rules read from a lowering context."""

    def __init__(self, threads: int, vals: dict[int, object], occupancy: object = None) -> None:
        self.w = LLVMWriter()
        self.threads, self.tid, self.role, self.target = threads, "%tid", None, "sm_80"
        self.vals, self.occupancy, self.deferred_copies, self._coord_cache = vals, occupancy, [], {}
        self.frag_rotation = None
        self.set_in, self.waited_in = [], []  # the regions being lowered (none here)

    def dim(self, d: int | str) -> str:
        return str(d) if isinstance(d, int) else f"%{d}"


def _stored(lay: SharedLayout, values: np.ndarray) -> np.ndarray:
    mem = np.zeros(lay.size_bytes // EB)
    r, c = np.meshgrid(np.arange(lay.rows), np.arange(lay.cols), indexing="ij")
    mem[lay.offset(r, c * EB) // EB] = values
    return mem


def _span(cols: int, want: int) -> int:
    """The swizzle span asked for, or the largest one the rows hold whole."""
    return next(s for s in (want, 64, 32, 0) if s == 0 or (cols * EB) % s == 0)


# (M, N, K, warps, warps_n, trans_a, trans_b, A span, B span, fragments ahead)
CASES = [
    (256, 128, 32, 8, 2, False, False, 64, 128, 1),   # the recommended sm_80 gemm tile: 64 x 64 warp tiles
    (128, 256, 32, 8, 4, False, False, 64, 128, 1),   # the default gemm tile: 2 x 4 warps
    (128, 256, 32, 8, 1, False, False, 64, 128, 1),   # the 1-D ablation of it
    (256, 128, 32, 8, 1, False, False, 64, 128, 0),
    (64, 64, 32, 4, 2, False, True, 64, 64, 1),       # linear's K-major B (trans_b)
    (64, 64, 32, 4, 2, True, False, 128, 128, 0),     # A stored K x M (ldmatrix.trans of A)
    (64, 48, 16, 4, 2, False, False, 0, 32, 1),       # 24-column warp tiles: a last .x2 ldmatrix of B
    (128, 64, 16, 8, 4, False, True, 32, 32, 1),      # 16 columns per warp
    (32, 256, 16, 2, 2, False, False, 32, 128, 1),
    (64, 64, 16, 4, 4, True, True, 0, 0, 1),          # unswizzled, both operands transposed
]


@pytest.mark.parametrize("M, N, K, warps, warps_n, trans_a, trans_b, span_a, span_b, ahead", CASES, ids=str)
def test_emitted_mma_sync_computes_the_product_in_the_layouts_slots(M: int, N: int, K: int, warps: int, warps_n: int,
                                                                   trans_a: bool, trans_b: bool, span_a: int,
                                                                   span_b: int, ahead: int) -> None:
    rng = np.random.default_rng(M * N + K + warps_n)
    a_shape, b_shape = ((K, M) if trans_a else (M, K)), ((N, K) if trans_b else (K, N))
    span_a, span_b = _span(a_shape[1], span_a), _span(b_shape[1], span_b)
    lay_a = SharedLayout("bf16", *a_shape, span_a)
    lay_b = SharedLayout("bf16", *b_shape, span_b)
    layout = make_layout("mma_c", warps=warps, warps_n=warps_n)
    acc_attr = f"{{kind = mma_c, warps = {warps}{f', warps_n = {warps_n}' if warps_n > 1 else ''}}}"
    flags = ", ".join(f for f, on in (("trans_a = true", trans_a), ("trans_b = true", trans_b)) if on)
    text = f"""tk.kernel @k {{grid = ["1"], warps = {warps}}} {{
  ^()
  %a = tk.alloc : st<bf16, {a_shape[0]}, {a_shape[1]}, swizzle={span_a}>
  %b = tk.alloc : st<bf16, {b_shape[0]}, {b_shape[1]}, swizzle={span_b}>
  %z = tk.fill {{value = 0.0}} : rt<f32, {M}, {N}, layout={acc_attr}>
  %c = tk.mma %a, %b, %z {{{flags}}} : rt<f32, {M}, {N}, layout={acc_attr}>
}}
"""
    kernel = parse_module(text.replace(" {}", ""), "k.tkir").kernel
    alloc_a, alloc_b, fill, mma = kernel.body.ops
    threads = WARP * warps
    nslots = fragment(layout, "f32", (M, N)).shape[1]
    a = rng.integers(-3, 4, size=(M, K)).astype(float)
    b = rng.integers(-3, 4, size=(K, N)).astype(float)
    c0 = rng.integers(-8, 9, size=(M, N)).astype(float)
    b_base = lay_a.size_bytes
    smem = np.concatenate([_stored(lay_a, a.T if trans_a else a), _stored(lay_b, b.T if trans_b else b)])
    table = fragment(layout, "f32", (M, N))  # (threads, slots): flat index row * N + col
    env: dict[str, object] = {"%tid": np.arange(threads), "%a_s": 0, "%b_s": b_base}
    acc_names = [f"%acc_{s}" for s in range(nslots)]
    for s, name in enumerate(acc_names):
        env[name] = c0.ravel()[table[:, s]]
    vals = {id(alloc_a.result): Smem("%a_s", alloc_a.result.type), id(alloc_b.result): Smem("%b_s", alloc_b.result.type),
            id(fill.result): Frag(fill.result.type, acc_names)}
    plan = SimpleNamespace(budget=SimpleNamespace(total=160)) if ahead else None
    cx = _Cx(threads, vals, plan)
    _op_tk_mma(cx, mma)
    sim = _Simt(threads, smem, env)
    sim.run(cx.w.lines)
    got = np.stack([np.broadcast_to(sim.env[v], (threads,)) for v in cx.get(mma.result).values], axis=1)
    want = (a @ b + c0).ravel()[table]
    assert (got == want).all(), np.argwhere(got != want)[:5]
    # each warp reads only its rows of A and its columns of B: ldmatrix.x4 per mma.sync
    text = "\n".join(cx.w.lines)
    wm, wn = warps // warps_n, warps_n
    mblocks, nblocks, ksteps = M // wm // 16, N // wn // 8, K // 16
    assert text.count("@llvm.nvvm.mma.m16n8k16") == mblocks * nblocks * ksteps
    assert text.count("@llvm.nvvm.ldmatrix") == ksteps * (mblocks + -(-nblocks // 2))


@pytest.mark.parametrize("M, N, warps, warps_n, rows, cols", [(128, 256, 8, 4, 300, 200), (256, 128, 8, 2, 1000, 1000),
                                                             (64, 48, 4, 2, 64, 40), (128, 256, 8, 1, 130, 250)],
                         ids=str)
def test_emitted_accumulator_store_writes_each_element_once(M: int, N: int, warps: int, warps_n: int, rows: int,
                                                           cols: int) -> None:
    """The bf16 mma_c store into a rows x cols tensor, block (1, 1) (or (0, 0) when it is the only one):
    every in-bounds element of the block's tile is written once, with its value, and nothing else."""
    layout = make_layout("mma_c", warps=warps, warps_n=warps_n)
    attr = f"{{kind = mma_c, warps = {warps}{f', warps_n = {warps_n}' if warps_n > 1 else ''}}}"
    text = f"""tk.kernel @k {{grid = ["1"], warps = {warps}}} {{
  ^(%C: gl<bf16>[R, S])
  %bx = tk.block_id {{dim = 0}} : i32
  %by = tk.block_id {{dim = 1}} : i32
  %v = tk.fill {{value = 0.0}} : rt<bf16, {M}, {N}, layout={attr}>
  tk.store %C, %v, %bx, %by
}}
"""
    kernel = parse_module(text, "k.tkir").kernel
    bx, by, fill, store = kernel.body.ops
    threads = WARP * warps
    table = fragment(layout, "bf16", (M, N))
    tile = np.arange(M * N, dtype=float).reshape(M, N) + 1
    names = [f"%v_{s}" for s in range(table.shape[1])]
    tx, ty = (1 if rows > M else 0), (1 if cols > N else 0)
    env: dict[str, object] = {"%tid": np.arange(threads), "%C": 0, "%R": rows, "%S": cols, "%bx": tx, "%by": ty}
    for s, name in enumerate(names):
        env[name] = tile.ravel()[table[:, s]]
    vals = {id(kernel.body.args[0]): Global("%C", kernel.body.args[0].type), id(bx.result): "%bx", id(by.result): "%by",
            id(fill.result): Frag(fill.result.type, names)}
    cx = _Cx(threads, vals)
    _op_tk_store(cx, store)
    sim = _Simt(threads, np.zeros(0), env)
    sim.run(cx.w.lines)
    out = np.zeros(rows * cols)
    written = np.zeros(rows * cols, dtype=int)
    for addr, pair, pred in sim.stores:
        for t in np.flatnonzero(pred):
            i = addr[t] // EB
            assert addr[t] % 4 == 0, "bf16 pairs are 4-byte aligned"
            out[i:i + 2] = pair[t]
            written[i:i + 2] += 1
    want = np.zeros((rows, cols))
    r0, c0 = tx * M, ty * N
    part = tile[:rows - r0, :cols - c0]
    want[r0:r0 + part.shape[0], c0:c0 + part.shape[1]] = part
    assert (written <= 1).all()
    assert (out.reshape(rows, cols) == want).all()
    assert written.sum() == part.size



@pytest.mark.parametrize("M, N, K, warps, warps_n", [(64, 64, 32, 4, 1), (64, 64, 16, 4, 1), (128, 64, 32, 8, 1),
                                                     (64, 48, 16, 4, 1)], ids=str)
def test_emitted_mma_sync_with_a_register_b(M: int, N: int, K: int, warps: int, warps_n: int) -> None:
    """B from registers (an `mma_b` tile: every warp holds all of B, HOPPER.md §6.3; register operands
    need whole-row warps, warps_n = 1) instead of shared memory: the rule packs each n8 block's b0b1 / b2b3 pairs from the tile's slots. (A random
    mutation sample: reading slot s0 - j instead of s0 + j changed no example's PTX and no test saw
    it; no example has a register B on sm_80.)"""
    rng = np.random.default_rng(M + N + K + warps_n)
    span_a = _span(K, 64)
    lay_a = SharedLayout("bf16", M, K, span_a)
    layout = make_layout("mma_c", warps=warps, warps_n=warps_n)
    acc_attr = f"{{kind = mma_c, warps = {warps}{f', warps_n = {warps_n}' if warps_n > 1 else ''}}}"
    text = f"""tk.kernel @k {{grid = ["1"], warps = {warps}}} {{
  ^()
  %a = tk.alloc : st<bf16, {M}, {K}, swizzle={span_a}>
  %b = tk.fill {{value = 0.0}} : rt<bf16, {K}, {N}, layout={{kind = mma_b, warps = {warps}}}>
  %z = tk.fill {{value = 0.0}} : rt<f32, {M}, {N}, layout={acc_attr}>
  %c = tk.mma %a, %b, %z : rt<f32, {M}, {N}, layout={acc_attr}>
}}
"""
    kernel = parse_module(text, "k.tkir").kernel
    alloc_a, fill_b, fill, mma = kernel.body.ops
    threads = WARP * warps
    a = rng.integers(-3, 4, size=(M, K)).astype(float)
    b = rng.integers(-3, 4, size=(K, N)).astype(float)
    c0 = rng.integers(-8, 9, size=(M, N)).astype(float)
    table = fragment(layout, "f32", (M, N))
    b_table = fragment(make_layout("mma_b", warps=warps), "bf16", (K, N))
    env: dict[str, object] = {"%tid": np.arange(threads), "%a_s": 0}
    acc_names = [f"%acc_{s}" for s in range(table.shape[1])]
    b_names = [f"%b_{s}" for s in range(b_table.shape[1])]
    for s, name in enumerate(acc_names):
        env[name] = c0.ravel()[table[:, s]]
    for s, name in enumerate(b_names):
        env[name] = np.where(b_table[:, s] >= 0, b.ravel()[np.maximum(b_table[:, s], 0)], np.nan)
    vals = {id(alloc_a.result): Smem("%a_s", alloc_a.result.type), id(fill_b.result): Frag(fill_b.result.type, b_names),
            id(fill.result): Frag(fill.result.type, acc_names)}
    cx = _Cx(threads, vals, None)
    _op_tk_mma(cx, mma)
    sim = _Simt(threads, _stored(lay_a, a), env)
    sim.run(cx.w.lines)
    got = np.stack([np.broadcast_to(sim.env[v], (threads,)) for v in cx.get(mma.result).values], axis=1)
    want = (a @ b + c0).ravel()[table]
    assert (got == want).all(), np.argwhere(got != want)[:5]
