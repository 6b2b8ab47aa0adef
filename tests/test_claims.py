"""docs/bench/claims.py's kernels, checked on CPU: the FMA-ceiling loop is correct in the interpreter
and compiles to one FFMA per element per step (nothing else in the loop's arithmetic)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import tkir
from tkir.examples import check_interpreted, load_companion

ROOT = Path(__file__).parent.parent
FMA = str(ROOT / "docs/bench/claims/fma_ceiling.tk")

def _claims():
    spec = importlib.util.spec_from_file_location("claims", ROOT / "docs/bench/claims.py")
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
