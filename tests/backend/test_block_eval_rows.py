"""The backend's cross-warp row paths on the CPU: one block of each row kernel's LLVM text, every thread.

softmax, rmsnorm and layernorm (tests/data/rows/) at sizes where each row is split over 2, 4 or 8 warps, and a
row mean / variance kernel (the Welford merge: rules_registers._row_stats, exchange.combine_row_stats),
are lowered for sm_90a and sm_80 and their LLVM text is executed for one block by tests/llvm_block_eval.py:
per-lane butterflies (`shfl.sync.bfly`), the partials through shared memory between barriers, the final
combine, the global stores. The block's output rows are compared with numpy; every other row must stay
untouched (NaN); the evaluator also fails on a shared-memory race between warps (a missing barrier), a
deadlock, or an access out of bounds. scripts/mutants.py's `block-oracle` topic lists the single-line
mutations of these paths that this file kills (`python3 scripts/mutate.py --named --topic block-oracle`).

Also the two branches of the `tk.mask_causal` rule (rules_registers): per-slot constant steps (`cut`)
and per-slot coordinates (`nd`, for row layouts whose chunks per row neither divide nor are a multiple of
32), each run and compared with the mask's definition.
"""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from llvm_block_eval import EvalError, run_block

import tkir

ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
BF16 = ml_dtypes.bfloat16
WARP_LANES = 32  # PTX ISA: a warp is 32 threads
TARGETS = ["sm_90a", "sm_80"]
LN_EPS = 1e-5   # layernorm.tk's EPS
RMS_EPS = 1e-6  # rmsnorm.tk's EPS
# bf16 outputs: half a unit in the last place (2^-9 relative) of the output plus the f32 work before it
BF16_TOL = 2 ** -8
# f32 statistics of 2048 values: a few units of f32 rounding (2^-24) per merge level
F32_TOL = 2e-5

STATS_KERNEL = """
@warpgroups(consumers=WG)
kernel stats<R=1, C=2048, WG=2>(X: gl<bf16>[M, C], Mu: gl<f32>[M], Var: gl<f32>[M])
    grid(cdiv(M, R))
{
    reg x: rt<bf16, R, C> = X[block.x, 0]
    let xf = f32(x)
    reg m: rv<f32, R> = row_mean(xf)
    reg v: rv<f32, R> = row_var(xf)
    Mu[block.x] = m
    Var[block.x] = v
}
"""
# the same pair lowered apart (fuse-row-stats left out): the mean as a row sum, the variance on its own
APART = "canonicalize,infer-layouts,create-tma,cache-policy,readonly-loads,plan-occupancy,canonicalize"

MASK_KERNEL = """
kernel mask<R=4, C=96, C0=0>(X: gl<f32>[M, C], Y: gl<f32>[M, C])
    grid(cdiv(M, R))
{
    reg x: rt<f32, R, C> = X[block.x, 0]
    Y[block.x, 0] = mask_causal(x, block.x * R, C0)
}
"""


def _parts(k: tkir.CompiledKernel) -> set[int]:
    """The `parts` of the kernel's row layouts (1: whole rows per warp)."""
    return {int(p or 1) for p in re.findall(r"kind = row, warps = \d+, vec = \d+(?:, parts = (\d+))?", k.ir)}


def _block(k: tkir.CompiledKernel, args: list, block: int, grid: int) -> None:
    """Run `block` of k's LLVM text on the CPU (stores land in args' arrays)."""
    run = run_block(k.asm["llvm"], args, block=block, grid=grid, threads=k.launch.block[0],
                    smem_bytes=k.launch.dynamic_smem)
    assert run.shuffles > 0 and (run.barriers > 0) == (max(_parts(k)) > 1)  # the paths under test ran


def _rows(n: int, d: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """bf16 rows whose halves differ (a ramp along the row): each warp's part has its own mean."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) + np.linspace(-3, 3, d) + offset + rng.standard_normal((n, 1))
    return x.astype(BF16)


def _check_rows(y: np.ndarray, ref: np.ndarray, rows: slice, tol: float) -> None:
    got = y.astype(np.float64)
    scale = np.abs(ref[rows]).max()
    err = np.abs(got[rows] - ref[rows]).max() / scale
    assert err < tol, f"max error {err:.3g} (relative to the largest output) over rows {rows}"
    outside = np.ones(len(y), bool)
    outside[rows] = False
    assert np.isnan(got[outside]).all(), "a store outside the block's rows"


SOFTMAX = [dict(ROWS=1, WG=1, D=1024, DC=1024),   # one row over 4 warps
           dict(ROWS=2, WG=2, D=2048, DC=2048),   # two rows, each over 4 of 8 warps
           dict(ROWS=1, WG=1, D=2048, DC=1024)]   # the chunked (online) path, 2 chunks over 4 warps


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", SOFTMAX, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_softmax_rows_split_over_warps(target: str, consts: dict) -> None:
    k = tkir.compile(str(ROW_KERNELS / "softmax.tk"), target=target, **consts)
    assert max(_parts(k)) > 1
    r, d = consts["ROWS"], consts["D"]
    n = 3 * r
    # no ramp: the exponentials' mass is spread over the row, not held by the last warp's columns
    x = (np.random.default_rng(1).standard_normal((n, d)) * 2).astype(BF16)
    y = np.full((n, d), np.nan, BF16)
    _block(k, [x, y, n], 1, 3)
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    _check_rows(y, e / e.sum(axis=1, keepdims=True), slice(r, 2 * r), BF16_TOL)


RMSNORM = [dict(ROWS=1, WG=2, D=2048, DC=2048),   # one row over 8 warps
           dict(ROWS=2, WG=1, D=2048, DC=1024)]   # chunked, two rows of 2 warps each, a row past the end


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", RMSNORM, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_rmsnorm_rows_split_over_warps(target: str, consts: dict) -> None:
    k = tkir.compile(str(ROW_KERNELS / "rmsnorm.tk"), target=target, **consts)
    assert max(_parts(k)) > 1
    r, d = consts["ROWS"], consts["D"]
    n = 2 * r - (r > 1)   # with two rows a block, the last block holds one row
    x, w = _rows(n, d, 2), _rows(1, d, 3)[0]
    y = np.full((n, d), np.nan, BF16)
    _block(k, [x, w, y, n], 1, 2)
    xf = x.astype(np.float64)
    ref = xf / np.sqrt((xf * xf).mean(axis=1, keepdims=True) + RMS_EPS) * w.astype(np.float64)
    _check_rows(y, ref, slice(r, n), BF16_TOL)


LAYERNORM = [dict(ROWS=1, WG=1, D=1024, DC=1024),             # one row over 4 warps
             dict(ROWS=2, WG=1, D=2048, DC=1024),             # chunked: shifted sums, merged after the loop
             dict(ROWS=2, WG=1, D=2048, DC=1024, REREAD=1)]   # statistics from the whole row, chunked store


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("consts", LAYERNORM, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_layernorm_rows_split_over_warps(target: str, consts: dict) -> None:
    k = tkir.compile(str(ROW_KERNELS / "layernorm.tk"), target=target, **consts)
    assert max(_parts(k)) > 1
    r, d = consts["ROWS"], consts["D"]
    n = 3 * r
    x = _rows(n, d, 4, offset=8.0)   # a large mean: the centred variance matters
    w, b = _rows(1, d, 5)[0], _rows(1, d, 6)[0]
    y = np.full((n, d), np.nan, BF16)
    _block(k, [x, w, b, y, n], 1, 3)
    xf = x.astype(np.float64)
    mu = xf.mean(axis=1, keepdims=True)
    ref = (xf - mu) / np.sqrt(xf.var(axis=1, keepdims=True) + LN_EPS) * w.astype(np.float64) + b.astype(np.float64)
    _check_rows(y, ref, slice(r, 2 * r), BF16_TOL)


STATS = [dict(R=1, WG=2),   # one row of 2048 over 8 warps
         dict(R=2, WG=2),   # two rows over 4 warps each
         dict(R=4, WG=1)]   # whole rows per warp: the butterfly's merge alone, no exchange


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "apart"])
@pytest.mark.parametrize("consts", STATS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_row_mean_and_var_welford_merge(tmp_path: Path, target: str, fused: bool, consts: dict) -> None:
    """row_mean / row_var (fused: one Welford butterfly of (mean, M2) pairs and one exchange; apart: the
    variance's Welford merge alone) against numpy in f32 precision, on rows with a large mean."""
    src = tmp_path / "stats.tk"
    src.write_text(STATS_KERNEL)
    k = tkir.compile(str(src), target=target, passes=None if fused else APART, **consts)
    assert ("stats = 0" in k.ir) is fused
    r, c = consts["R"], 2048
    m = 2 * r + 1                 # the last block holds one row
    grid = -(-m // r)
    x = _rows(m, c, 7, offset=100.0)
    mu, var = np.full(m, np.nan, np.float32), np.full(m, np.nan, np.float32)
    _block(k, [x, mu, var, m], grid - 1, grid)
    _block(k, [x, mu, var, m], 0, grid)
    rows = np.r_[0:r, (grid - 1) * r:m]
    xf = x.astype(np.float64)
    np.testing.assert_allclose(mu[rows], xf[rows].mean(axis=1), rtol=F32_TOL)
    np.testing.assert_allclose(var[rows], xf[rows].var(axis=1), rtol=F32_TOL)
    untouched = np.setdiff1d(np.arange(m), rows)
    assert np.isnan(mu[untouched]).all() and np.isnan(var[untouched]).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("consts", "branch"), [(dict(R=4, C=96, C0=0), "nd"), (dict(R=16, C=96, C0=-37), "nd"),
                                                (dict(R=4, C=128, C0=0), "cut"), (dict(R=2, C=192, C0=5), "cut")])
def test_mask_causal_both_branches(tmp_path: Path, target: str, consts: dict, branch: str) -> None:
    """Elements with col0 + c > row0 + r take -inf. 96 f32 columns are 24 chunks of 4 per row, which
    neither divide nor are a multiple of a warp's 32 lanes: the slots' steps differ between lanes and the
    rule compares per-slot coordinates (`nd`); 128 or 192 columns take the constant-step form (`cut`)."""
    src = tmp_path / "mask.tk"
    src.write_text(MASK_KERNEL)
    k = tkir.compile(str(src), target=target, **consts)
    text = k.asm["llvm"]
    assert f"%{branch}." in text and ("%cut." in text) == (branch == "cut")
    r, c, c0 = consts["R"], consts["C"], consts["C0"]
    m = 3 * r
    x = np.random.default_rng(8).standard_normal((m, c)).astype(np.float32)
    y = np.full((m, c), np.nan, np.float32)
    run_block(text, [x, y, m], block=1, grid=3, threads=k.launch.block[0], smem_bytes=k.launch.dynamic_smem)
    rows, cols = np.arange(r, 2 * r)[:, None], np.arange(c)[None, :]
    ref = np.where(c0 + cols > rows, -np.inf, x[r:2 * r])
    np.testing.assert_array_equal(y[r:2 * r], ref)
    assert np.isnan(y[:r]).all() and np.isnan(y[2 * r:]).all()


# --- the evaluator itself: what it must refuse ----------------------------------------------------------


def _softmax_text() -> tuple[str, tkir.CompiledKernel]:
    k = tkir.compile(str(ROW_KERNELS / "softmax.tk"), ROWS=1, WG=1, D=1024, DC=1024)
    return k.asm["llvm"], k


@pytest.mark.parametrize("which", [1, 2, 3])
@pytest.mark.parametrize("order", ["up", "down"])
def test_a_missing_barrier_is_a_race(which: int, order: str) -> None:
    """softmax's row max and row sum each go through the same scratch words between barriers. Without
    the barrier after the stores (1, 3) a warp reads a partial another warp wrote, or one no warp has
    written yet;
    without the one before the second exchange's stores (2) a warp overwrites a partial another warp may
    still read. Each is a race, whichever order the warps run in. The first barrier of the kernel guards
    nothing the kernel itself did before it, and dropping it is no race (a control)."""
    text, k = _softmax_text()
    lines = text.splitlines()
    bars = [i for i, ln in enumerate(lines) if ln.strip() == "call void @llvm.nvvm.barrier0()"]
    assert len(bars) == 4
    x = _rows(3, 1024, 9)
    for drop, races in [(bars[which], True), (bars[0], False)]:
        cut = "\n".join(ln for i, ln in enumerate(lines) if i != drop)
        y = np.full((3, 1024), np.nan, BF16)
        args = dict(block=1, grid=3, threads=128, smem_bytes=k.launch.dynamic_smem, warp_order=order)
        if races:
            with pytest.raises(EvalError, match="race|no thread wrote"):
                run_block(cut, [x, y, 3], **args)
        else:
            run_block(cut, [x, y, 3], **args)


def _around_first_barrier(text: str, wait: str) -> str:
    """softmax's text with warps 1..3 branching around its first barrier, and warp 0 running `wait`
    there instead."""
    return text.replace("  call void @llvm.nvvm.barrier0()\n",
                        "  %skip = icmp ugt i32 %tid_x.1, 31\n  br i1 %skip, label %past, label %wait\n"
                        f"wait:\n  {wait}\n  br label %past\npast:\n", 1)


def test_warps_that_skip_a_barrier_race() -> None:
    """bar.sync 0 counts arrivals, not instructions: warp 0 at the first barrier and warps 1..3 at the
    second release each other, and warp 0's partial is then read before a barrier orders it."""
    text, k = _softmax_text()
    x, y = _rows(3, 1024, 9), np.full((3, 1024), np.nan, BF16)
    with pytest.raises(EvalError, match="race"):
        run_block(_around_first_barrier(text, "call void @llvm.nvvm.barrier0()"), [x, y, 3], block=1, grid=3,
                  threads=128, smem_bytes=k.launch.dynamic_smem)


def test_a_barrier_never_complete_is_a_deadlock() -> None:
    """Warp 0 waits on named barrier 1 for 128 threads that never come; the others wait at barrier 0."""
    text, k = _softmax_text()
    x, y = _rows(3, 1024, 9), np.full((3, 1024), np.nan, BF16)
    wait = 'call void asm sideeffect "bar.sync 1, 128;", "~{memory}"()'
    with pytest.raises(EvalError, match="deadlock"):
        run_block(_around_first_barrier(text, wait), [x, y, 3], block=1, grid=3, threads=128,
                  smem_bytes=k.launch.dynamic_smem)


def test_a_shuffle_some_lanes_skip_is_a_deadlock() -> None:
    """Lanes 16..31 of every warp branch around the first shfl.sync: the others wait for them for ever."""
    text, k = _softmax_text()
    first = re.search(r"^  (%sh\.\d+) = call float @llvm\.nvvm\.shfl\.sync\.bfly\.f32\(i32 -1, float (%[\w.]+), .*$",
                      text, re.M)
    text = text.replace(first[0], f"  %hi = icmp ugt i32 %ix.9, 15\n  br i1 %hi, label %skip, label %shfl\n"
                                  f"shfl:\n{first[0]}\n  br label %skip\nskip:\n"
                                  f"  %shm = phi float [ {first[1]}, %shfl ], [ 0x0, %entry ]", 1)
    text = text.replace(f"float {first[1]})", "float %shm)", 1)
    x, y = _rows(3, 1024, 9), np.full((3, 1024), np.nan, BF16)
    with pytest.raises(EvalError, match="deadlock.*shfl"):
        run_block(text, [x, y, 3], block=1, grid=3, threads=128, smem_bytes=k.launch.dynamic_smem)


def test_out_of_bounds_accesses_are_errors() -> None:
    text, k = _softmax_text()
    x, y = _rows(3, 1024, 9), np.full((3, 1024), np.nan, BF16)
    with pytest.raises(EvalError, match="out of the bounds of argument X"):   # N = 3 rows, X holds 2
        run_block(text, [x[:2].copy(), y, 3], block=2, grid=3, threads=128, smem_bytes=k.launch.dynamic_smem)
    with pytest.raises(EvalError, match="out of the bounds of shared memory"):
        run_block(text, [x, y, 3], block=1, grid=3, threads=128, smem_bytes=8)


SHFL_KERNEL = """define ptx_kernel void @k(ptr addrspace(1) %out) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %s = call i32 @llvm.nvvm.shfl.sync.MODE.i32(i32 -1, i32 %t, i32 B, i32 C)
  %o = sext i32 %t to i64
  %p = getelementptr i32, ptr addrspace(1) %out, i64 %o
  store i32 %s, ptr addrspace(1) %p, align 4
  ret void
}
"""


@pytest.mark.parametrize("mode", ["bfly", "down", "up", "idx"])
@pytest.mark.parametrize("width", [32, 8])
def test_shuffle_source_lanes_follow_cuda_width_segments(mode: str, width: int) -> None:
    """The evaluator's shfl.sync against CUDA's __shfl_*_sync(mask, v, b, width) (CUDA C++ Programming
    Guide, "Warp Shuffle Functions": a warp is segments of `width` lanes; down/up read lane +- b of the
    same segment or keep their own value, idx reads lane b of the segment, xor lane ^ b), with the c
    operand CUDA passes: ((32 - width) << 8) | 31, or (32 - width) << 8 for up."""
    b = 3
    c = ((WARP_LANES - width) << 8) | (0 if mode == "up" else 31)
    text = SHFL_KERNEL.replace("MODE", mode).replace("i32 B", f"i32 {b}").replace("i32 C", f"i32 {c}")
    out = np.full(64, -1, np.int32)
    run_block(text, [out], threads=64)
    lane = np.arange(64) % WARP_LANES
    start = lane - lane % width
    src = {"bfly": lane ^ b, "down": lane + b, "up": lane - b, "idx": start + b % width}[mode]
    src = np.where((src >= start) & (src < start + width), src, lane)
    np.testing.assert_array_equal(out, src + np.arange(64) // WARP_LANES * WARP_LANES)
