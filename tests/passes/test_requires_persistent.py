"""A floored grid (`grid(M / BM, ...)`) keeps its requirement after `persistent` rewrites the grid.

Found while writing `tkc tune`: persistent's grid `cdiv((M / 128) * (cdiv(N, 128)), ...)` and its loop
bound (a product of per-dim tile counts) hid the floor from tkir.requires, so M = 192 with 128-row
tiles launched one tile row and left rows 128..191 unwritten, with no error."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.diagnostics import TkirError

SRC = """kernel g<BM=128, BN=128, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N])
    grid(M / BM, cdiv(N, BN))
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    for k in 0 .. cdiv(K, BK) {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    C[block.x, block.y] = bf16(acc)
}
"""


@pytest.mark.parametrize("passes", [None, "canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,"
                                          "create-tma,plan-occupancy,pipeline"])
def test_floored_grid_is_required_with_and_without_persistent(tmp_path: Path, passes: str | None) -> None:
    f = tmp_path / "g.tk"
    f.write_text(SRC)
    k = tkir.compile(str(f), passes=passes)
    assert any(r.expr == "M % 128" for r in k.launch.requires), k.launch.requires
    a = np.ones((192, 64), ml_dtypes.bfloat16)
    b = np.ones((64, 128), ml_dtypes.bfloat16)
    c = np.zeros((192, 128), ml_dtypes.bfloat16)
    with pytest.raises(TkirError, match="M % 128"):
        tkir.interpret(k, a, b, c)
    tkir.interpret(k, np.ones((256, 64), ml_dtypes.bfloat16), b, np.zeros((256, 128), ml_dtypes.bfloat16))
