"""scripts/bench/claims.py's kernels, checked on CPU: the FMA-ceiling loop is correct in the interpreter
and compiles to one FFMA per element per step (nothing else in the loop's arithmetic)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
FMA = str(ROOT / "scripts/bench/claims/fma_ceiling.tk")

def _claims():
    spec = importlib.util.spec_from_file_location("claims", ROOT / "scripts/bench/claims.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def test_fma_ceiling_is_correct_in_the_interpreter() -> None:
    k = tkir.compile(FMA, passes=_claims().FMA_PIPELINE, ITERS=8)
    res = check_interpreted(k.module, load_companion(FMA), dict(N=64), {"ITERS": 8}, seed=1)
    assert all(r.ok for r in res), res

def test_fma_ceiling_loop_is_ffma_only() -> None:
    k = tkir.compile(FMA, passes=_claims().FMA_PIPELINE)
    sass = k.asm["sass"]
    ffma = len(re.findall(r"\bFFMA\b", sass))
    per_thread = 32 * 256 // 128  # ROWS x D / threads: independent chains per thread
    assert ffma >= per_thread and ffma % per_thread == 0, ffma
    assert not re.search(r"\bF(MUL|ADD)\b", sass)
    # without contract-fma: a multiply and an add per element, no FFMA
    plain = tkir.compile(FMA, passes=_claims().FMA_PIPELINE.replace("contract-fma,", ""))
    s2 = plain.asm["sass"]
    assert "FFMA" not in s2 and re.search(r"\bFMUL\b", s2)


MMA = str(ROOT / "scripts/bench/claims/mma_ceiling.tk")
MMA_SMEM = str(ROOT / "scripts/bench/claims/mma_smem_ceiling.tk")


def test_mma_ceilings_are_correct_in_the_interpreter() -> None:
    for path, sizes, consts in ((MMA, dict(M=256, N=64), {"ITERS": 3}), (MMA_SMEM, dict(M=512, N=128), {"ITERS": 2})):
        k = tkir.compile(path, target="sm_80", **consts)
        res = check_interpreted(k.module, load_companion(path), sizes, consts, seed=2)
        assert all(r.ok for r in res), (path, res)


def test_mma_ceiling_loops_are_mma_sync_only() -> None:
    """The register ceiling's loop is mma.sync and loop control only (no ldmatrix, no memory); the shared
    one loads the gemm's fragments (ldmatrix) but copies nothing and never waits at a barrier."""
    sass = tkir.compile(MMA, target="sm_80").asm["sass"]
    body = sass[sass.index("HMMA"):sass.rindex("HMMA")]
    assert not re.search(r"\b(LDSM|LDS|LDG|STS|STG|LDGSTS|BAR)\b", body)
    assert len(re.findall(r"\bHMMA\.16816\.F32\.BF16\b", sass)) % 16 == 0   # 2 m16 x 8 n8 blocks per step
    smem = tkir.compile(MMA_SMEM, target="sm_80").asm["sass"]
    body = smem[smem.index("HMMA"):smem.rindex("HMMA")]
    assert re.search(r"\bLDSM\b", body) and not re.search(r"\b(LDGSTS|BAR)\b", body)
