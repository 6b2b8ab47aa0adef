"""row_mean / row_var (tk.reduce kinds mean and var) and fuse-row-stats: the interpreter
against numpy on both targets' compiled IR (CPU), the verifier's refusals, and on the GPU the lowered
kernels (fused, and with the pass left out) against numpy, on rows with a large mean too."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend import cuda as tkcuda
from tkir.diagnostics import CompileError

TESTS = Path(__file__).resolve().parents[1]  # tests/

KERNEL = TESTS / "filecheck" / "passes" / "fuse-row-stats.tk"
BF16 = ml_dtypes.bfloat16
APART = "canonicalize,infer-layouts,create-tma,cache-policy,readonly-loads,plan-occupancy,canonicalize"


def _inputs(offset: float, m: int = 40, c: int = 2048) -> list[np.ndarray]:
    rng = np.random.default_rng(int(offset) + 3)
    x = (rng.standard_normal((m, c)) * 2 + offset + rng.standard_normal((m, 1))).astype(BF16)
    return [x, np.full(m, np.nan, np.float32), np.full(m, np.nan, np.float32), np.full(m, np.nan, np.float32)]


def _check(a: list[np.ndarray], tol: float) -> None:
    x = a[0].astype(np.float64)
    np.testing.assert_allclose(a[1], x.mean(axis=1), rtol=tol, atol=tol)
    np.testing.assert_allclose(a[2], x.var(axis=1), rtol=tol)
    np.testing.assert_allclose(a[3], 2 * x.mean(axis=1) + x.sum(axis=1), rtol=tol)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_row_mean_and_var_in_the_interpreter(target: str, offset: float) -> None:
    k = tkir.compile(str(KERNEL), target=target)
    assert "stats = 0" in k.ir
    a = _inputs(offset)
    tkir.interpret(k, *a)
    _check(a, 1e-5)


def test_var_and_mean_reduce_rows_only_and_stats_marks_them() -> None:
    from tkir.parser import parse_module
    from tkir.verifier import verify

    text = tkir.compile(str(KERNEL), passes="canonicalize").ir
    verify(parse_module(text))
    col = text.replace("{kind = var, axis = row}", "{kind = var, axis = col}")
    with pytest.raises(CompileError, match="reduces rows only"):
        verify(parse_module(col))
    bad = text.replace("{kind = sum, axis = row}", "{kind = sum, axis = row, stats = 3}")
    assert bad != text
    with pytest.raises(CompileError, match="marks a row mean or var"):
        verify(parse_module(bad))


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("offset", [0.0, 100.0])
def test_row_mean_and_var_on_the_gpu(target: str, fused: bool, offset: float) -> None:
    k = tkir.compile(str(KERNEL), target=target, passes=None if fused else APART)
    assert ("stats = 0" in k.ir) == fused
    host = _inputs(offset)
    dev = [tkcuda.to_device(v) for v in host]
    k(*dev)
    _check([host[0]] + [d.numpy() for d in dev[1:]], 1e-4)
