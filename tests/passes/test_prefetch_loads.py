"""prefetch-loads (passes/prefetch_loads.py): a reducing loop's register loads issued one iteration ahead.

The FileCheck kernel (a row sum over chunks, ragged V) gives numpy's sums in the interpreter with the pass and
without it, on both targets; the user suite's row_argmax and cross-entropy are rewritten (their chunk loop has
row reductions), and examples/rmsnorm_bwd.tk's row loop is declined because the plan would halve its blocks per SM
(the trial plan is load-bearing: without it that kernel would not fit its registers at 1024 threads).
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "tests" / "filecheck" / "passes" / "prefetch-loads.tk"


def _attrs(k: tkir.api.CompiledKernel) -> dict:
    return k.module.kernel.attrs


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("edits", ["", "-prefetch-loads"])
@pytest.mark.parametrize("v", [1, 1023, 1024, 3000])
def test_row_sums_match_numpy(target: str, edits: str, v: int) -> None:
    k = tkir.compile(str(KERNEL), target=target, pass_edits=edits)
    assert ("prefetched_loads" in _attrs(k)) == (edits == "")
    rng = np.random.default_rng(v)
    x = rng.standard_normal((3, v), np.float32).astype(ml_dtypes.bfloat16)
    y = np.full(3, np.nan, np.float32)
    tkir.interpret(k, x, y)
    np.testing.assert_allclose(y, x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["row_argmax", "cross_entropy"])
def test_user_chunk_loops_prefetched(name: str) -> None:
    k = tkir.compile(str(ROOT / "examples" / "user" / f"{name}.tk"), target="sm_90a")
    assert _attrs(k)["prefetched_loads"] == 1
    loads = [op for op in k.module.kernel.walk() if op.name == "tk.load" and op.operands[0].name == "X"]
    assert [op.result.name for op in loads][:1] == ["x_first"]  # the first chunk before the loop


def test_plan_declines_halved_occupancy() -> None:
    k = tkir.compile(str(ROOT / "examples" / "rmsnorm_bwd.tk"), target="sm_90a")
    assert "prefetched_loads" not in _attrs(k)
    assert "the plan would go from 2 blocks per SM to 1" in _attrs(k)["prefetch_skipped"]
