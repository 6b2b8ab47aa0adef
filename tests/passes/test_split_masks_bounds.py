"""split-masks' split point at the lengths where an off-by-one bound shows: attention with keys masked past
the end of the sequence (`where(col_index(s) + j * BKV < N, ...)`) and, causal, after the query, at
N = -1, 0, +1 (mod BKV) and with a diagonal that ends one key past a block's first query. The split kernel
must compute, in the interpreter, bit for bit what the kernel without split-masks computes: the unmasked
first loop may only run the key blocks that no mask hides anything in. (A bound one too high runs the last
block unmasked at N = -1 mod BKV; its key N is read as 0 from the zero-filled tail and enters the softmax.
The output's bf16 rounding hides much of that; L, in f32, does not.)"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.passes.registry import DEFAULT_PIPELINE

ROOT = Path(__file__).resolve().parents[2]
ATTENTION = ROOT / "examples" / "attention_fwd.tk"
BKV = 64
WITHOUT_SPLIT = ",".join(p for p in DEFAULT_PIPELINE if p != "split-masks")


def _run(kernel: tkir.CompiledKernel, n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = np.full((1, 1, n, d), np.nan, ml_dtypes.bfloat16)
    lse = np.full((1, 1, n), np.nan, np.float32)
    tkir.interpret(kernel, q, k, v, o, lse)
    return o.astype(np.float32), lse


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("n", [BKV - 1, BKV + 1, 2 * BKV - 1, 2 * BKV, 2 * BKV + 1])
def test_split_attention_equals_unsplit_at_boundary_lengths(n: int, causal: int) -> None:
    consts = {"D": 64, "BQ": 64, "BKV": BKV, "CAUSAL": causal}
    split = tkir.compile(str(ATTENTION), **consts)
    assert "%split" in split.ir_after("split-masks"), "split-masks left attention's loop whole"
    plain = tkir.compile(str(ATTENTION), passes=WITHOUT_SPLIT, **consts)
    (o1, l1), (o2, l2) = _run(split, n, 64, n), _run(plain, n, 64, n)
    assert np.isfinite(o2).all() and np.isfinite(l2).all()
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(o1, o2)
