"""A loop that reads one loaded tile in two products, the second deferred by overlap-mma into the next iteration,
carries the previous iteration's stage view (a shared-memory address) over the back edge: the backend carries it as
an i32 phi (backend/rules_core.py `_flatten`), where it once refused ("backend: cannot carry Smem through a loop").
Both targets assemble it without spills, and the interpreter agrees with numpy at a ragged size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.interp.frame import round_array

KERNEL = Path(__file__).resolve().parents[1] / "data" / "shared_b_twice.tk"
M, N, D = 100, 200, 64


def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = np.zeros((M, D), np.float64)
    for j in range(0, N, 64):
        bj = b[j:j + 64].astype(np.float64)
        s = round_array(a.astype(np.float64) @ bj.T, "bf16").astype(np.float64)
        acc += s @ bj
    return acc


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_stage_view_carried_over_the_back_edge(target: str) -> None:
    k = tkir.compile(str(KERNEL), target=target)
    if target == "sm_90a":
        loops = [op for op in k.module.kernel.walk() if op.name == "scf.for"]
        carried = [a for lp in loops for a in lp.body.args[1:] if getattr(a.type, "space", None) == "st"]
        assert carried, "overlap-mma no longer carries the stage view: the test no longer covers the backend's carry"
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0
    import ml_dtypes

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16) for shape in ((M, D), (N, D)))
    c = np.full((M, D), np.nan, ml_dtypes.bfloat16)
    tkir.interpret(k, a, b, c)
    ref = _reference(a.astype(np.float32), b.astype(np.float32))
    got = c.astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
