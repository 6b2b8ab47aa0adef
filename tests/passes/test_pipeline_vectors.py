"""Shared vectors ring-buffered in a pipelined loop (passes/pipeline.py, pipeline_cp_async.py, early_release.py).

The kernel is tests/filecheck/passes/pipeline-vectors.tk (one key block, a loop over query blocks that TMA-loads a
Q tile and the block's L vector with it, as the attention backward does): its vector stage is copied by TMA on
sm_90a and by cp.async on sm_80, the result equals numpy's on both targets, and a read of the vector's stage after
its release is a verifier error and, in the interpreter, a race it reports. The conformance table's GEMM loop
with a bf16 vector of a one-dim tensor (the conformance case sv_copy in_pipelined_loop) works too.
"""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.interp import InterpError, interpret
from tkir.parser import parse_module
from tkir.verifier import VerifyError, verify

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "tests" / "filecheck" / "passes" / "pipeline-vectors.tk"
TARGETS = ("sm_90a", "sm_80")
BF16 = ml_dtypes.bfloat16
# the vector's load into registers, then its release (early-release puts the release right after it)
LOAD_THEN_RELEASE = re.compile(r"( *)(%lse = tk\.load %l_s\.1[^\n]*\n) *(pipe\.arrive %empty_l[^\n]*\n)")


def _inputs(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    k, q = (rng.standard_normal((n, 64)).astype(BF16) for _ in range(2))
    lse = rng.standard_normal(n).astype(np.float32)
    return k, q, lse, np.full((n, 64), np.nan, np.float32)


def _reference(k: np.ndarray, q: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """O[kb * 64 + r, c] = sum over query blocks i of exp2(S[r, c] - L[i * 64 + c]), S = K_kb Q_i^T."""
    n = k.shape[0]
    out = np.zeros((n, 64))
    kf, qf = k.astype(np.float64), q.astype(np.float64)
    for kb in range(n // 64):
        for i in range(n // 64):
            s = kf[kb * 64:(kb + 1) * 64] @ qf[i * 64:(i + 1) * 64].T
            out[kb * 64:(kb + 1) * 64] += np.exp2(s - lse[i * 64:(i + 1) * 64])
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_the_vector_is_ring_buffered_and_copied_with_the_tiles(target: str) -> None:
    k = tkir.compile(str(KERNEL), target=target)
    assert re.search(r"%l = tk\.alloc : sv<f32, 64, [^>]*stages=2>", k.ir), k.ir
    ptx = k.asm["ptx"]
    if target == "sm_90a":  # one 1-D TMA box of 64 f32 at element i * 64, completing on the vector's barrier
        assert len(re.findall(r"cp\.async\.bulk\.tensor\.1d\.shared::cluster\.global\.mbarrier", ptx)) == 1, ptx
    else:  # 16-byte cp.async chunks of the one-row tile, prologue and loop
        assert "cp.async.cg.shared.global" in ptx
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.stack_frame == 0, res


# sm_80's two ways: pipeline-cp-async's one role, and plan-occupancy's cp.async producer warps (pipeline: the
# vector's copy by every producer thread, each arriving on the stage's barrier)
BUILDS = {"sm_90a": ("sm_90a", None), "sm_80": ("sm_80", None),
          "sm_80-producer": ("sm_80", "plan-occupancy{producer_warps=4}")}


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("n", [64, 192, 320])
def test_the_interpreter_matches_numpy(build: str, n: int) -> None:
    target, edits = BUILDS[build]
    k = tkir.compile(str(KERNEL), target=target, pass_edits=edits)
    if edits:
        assert re.search(r"%full = pipe\.barriers \{count = 256\}", k.ir)  # 128 threads x (q's copy, l's copy)
    kk, q, lse, out = _inputs(n, seed=n)
    interpret(k.module, kk, q, lse, out)
    want = _reference(kk, q, lse)
    assert np.abs(out - want).max() <= 2e-2 * np.abs(want).max(), np.abs(out - want).max()


def test_a_tma_copy_into_a_vector_holds_no_thread_address(tmp_path: Path) -> None:
    """plan-occupancy's budget: the vector's TMA copy (issued by the producer) counts no per-thread address; kept
    off TMA (`@no_tma`: the consumers copy it themselves) it counts one (2 registers)."""
    def addr_regs(path: Path) -> int:
        plan = tkir.compile(str(path)).module.kernel.attrs["occupancy"]
        return int(plan["budget"]["addr_regs"])

    plain = tmp_path / "k.tk"
    plain.write_text(KERNEL.read_text().replace("        l = L[i]\n", "        @no_tma\n        l = L[i]\n"))
    assert addr_regs(KERNEL) + 2 == addr_regs(plain)


def _mutant() -> str:
    text = tkir.compile(str(KERNEL)).ir
    matches = LOAD_THEN_RELEASE.findall(text)
    assert len(matches) == 1, "the vector's load and its release no longer sit together"
    indent, read, release = matches[0]
    return text.replace(indent + read + indent + release, indent + release + indent + read)


def test_a_read_of_the_vector_after_its_release_is_a_verify_error() -> None:
    with pytest.raises(VerifyError, match=r"mutant\.tkir:\d+:\d+: error: 'tk\.load' in the consumer role \(1 warpgroup\) reads "
                                          r"stage \d of %l after releasing it \('pipe\.arrive %empty_l'"):
        verify(parse_module(_mutant(), "mutant.tkir"))


def test_a_read_of_the_vector_after_its_release_is_an_interp_error() -> None:
    kk, q, lse, out = _inputs(192)
    with pytest.raises(InterpError, match=r"mutant\.tkir:\d+:\d+: 'tk\.load' reads stage \d of %l after the "
                                          r"consumer role released it"):
        interpret(parse_module(_mutant(), "mutant.tkir"), kk, q, lse, out)


# the conformance table's sv_copy in a pipelined loop: a one-dim bf16 tensor's block through a shared vector
SHARED_VECTOR_LOOP = """kernel k(A: gl<bf16>[M, K], B: gl<bf16>[K, 64], V: gl<bf16>[M], C: gl<bf16>[M, 64], Y: gl<bf16>[M])
    grid(cdiv(M, 64))
{
    shared a: st<bf16, 64, 64>
    shared b: st<bf16, 64, 64>
    shared s: sv<bf16, 64>
    reg acc: rt<f32, 64, 64> = 0
    @stages(2)
    for k in 0 .. cdiv(K, 64) {
        a = A[block.x, k]
        b = B[k, 0]
        acc += a @ b
        s = V[block.x]
        reg v: rv<bf16, 64> = s
        Y[block.x] = v
    }
    C[block.x, 0] = bf16(acc)
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_the_conformance_gemm_loop_with_a_vector_works(target: str, tmp_path: Path) -> None:
    """C = A B and Y = V copied through a shared vector loaded in the K loop (a one-dim bf16 tensor)."""
    path = tmp_path / "k.tk"
    path.write_text(SHARED_VECTOR_LOOP)
    k = tkir.compile(str(path), target=target)
    assert re.search(r"%s = tk\.alloc : sv<bf16, 64, [^>]*stages=2>", k.ir), k.ir
    rng = np.random.default_rng(1)
    m, kd = 200, 192
    a, b = rng.standard_normal((m, kd)).astype(BF16), rng.standard_normal((kd, 64)).astype(BF16)
    v = rng.standard_normal(m).astype(BF16)
    c, y = np.full((m, 64), np.nan, BF16), np.full(m, np.nan, BF16)
    interpret(k.module, a, b, v, c, y)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(c.astype(np.float64) - ref).max() <= 1e-2 * np.abs(ref).max()
    assert np.array_equal(y.astype(np.float32), v.astype(np.float32))


def test_the_report_lists_the_vector_load_as_the_backend_groups_it() -> None:
    """The consumers read L's stage into a column vector of the wgmma accumulator, two consecutive elements a
    thread per 8 columns: the backend loads each pair with one ld.shared.v2, and bank-conflicts lists that
    (tkir/layout.py vector_accesses), not 32 single-word loads."""
    k = tkir.compile(str(KERNEL))
    assert re.search(r'%lse = tk\.load %l_s\.1 \{access = \[\{op = "ld\.shared\.v2", tile = "l", degree = 1', k.ir), k.ir
    loads = re.findall(r"ld\.shared\.(v\d\.)?b32", k.asm["llvm"])
    assert loads and all(w == "v2." for w in loads), loads


def test_a_vector_narrower_than_a_cp_async_chunk(tmp_path: Path) -> None:
    """sm_80: a 4-element bf16 vector (8 bytes) has no 16-byte chunk to copy, so the loop is not ring-buffered and
    its @stages(2) is the located refusal (not a backend error); sm_90a keeps the vector an in-place copy of the
    consumers (TMA boxes are whole 16 bytes) and pipelines the tiles."""
    from tkir.diagnostics import CompileError

    path = tmp_path / "k.tk"
    path.write_text(SHARED_VECTOR_LOOP.replace("V: gl<bf16>[M]", "V: gl<bf16>[M4]").replace("Y: gl<bf16>[M]",
                    "Y: gl<bf16>[M4]").replace("sv<bf16, 64>", "sv<bf16, 4>").replace("rv<bf16, 64>", "rv<bf16, 4>"))
    with pytest.raises(CompileError, match=r"@stages\(2\): this loop cannot be pipelined: its copies do not meet"):
        tkir.compile(str(path), target="sm_80")
    k = tkir.compile(str(path))
    assert re.search(r"%a = tk\.alloc : st<bf16, 64, 64, [^>]*stages=2>", k.ir) and "sv<bf16, 4, stages" not in k.ir
