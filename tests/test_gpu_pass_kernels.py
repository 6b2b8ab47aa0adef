"""The kernels the attention-schedule FileCheck tests are written in (tests/passes/*.tk, not examples)
run on the GPU, on both targets, and match the interpreter running the same compiled IR (marked gpu;
no torch needed: tkir's own device arrays)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend import cuda as tkcuda

PASSES = Path(__file__).parent / "passes"
BF16 = ml_dtypes.bfloat16


def _inputs(name: str, rng: np.random.Generator) -> tuple[list[np.ndarray], list[int]]:
    """Input arrays (outputs NaN) and the indices of the outputs."""
    if name == "fold-scale.tk":
        x = (rng.standard_normal((256, 64)) * 8).astype(np.float32)
        return [x, np.full_like(x, np.nan)], [1]
    n = 300 if name == "split-masks.tk" else 256  # split-masks: a ragged last key block
    q, k, v = (rng.standard_normal((n, 64)).astype(BF16) for _ in range(3))
    return [q, k, v, np.full((n, 64), np.nan, BF16)], [3]


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ["fold-scale.tk", "split-masks.tk", "overlap-mma.tk"])
def test_pass_kernel_matches_interpreter_on_gpu(name: str, target: str) -> None:
    k = tkir.compile(str(PASSES / name), target=target)
    host, outs = _inputs(name, np.random.default_rng(7))
    ref = [a.copy() for a in host]
    tkir.interpret(k, *ref)
    dev = [tkcuda.to_device(a) for a in host]
    k(*dev)
    for i in outs:
        got, want = dev[i].numpy().astype(np.float64), ref[i].astype(np.float64)
        assert not np.isnan(got).any(), f"{name} {target}: output {i} not fully written"
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-2, f"{name} {target}: rel err {err:.3e}"
