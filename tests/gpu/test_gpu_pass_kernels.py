"""The kernels the attention-schedule FileCheck tests are written in (tests/filecheck/passes/*.tk, not examples)
run on the GPU, on both targets, and match the interpreter running the same compiled IR (marked gpu;
no torch needed: tkir's own device arrays). The cache-policy.tk, contract-fma.tk and
fence-loads.tk pass kernels too, and their interpreter runs are checked against numpy on the CPU (both targets'
compiled IR)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend import cuda as tkcuda

TESTS = Path(__file__).resolve().parents[1]  # tests/

PASSES = TESTS / "filecheck" / "passes"
BF16 = ml_dtypes.bfloat16


def _inputs(name: str, rng: np.random.Generator) -> tuple[list[np.ndarray], list[int]]:
    """Input arrays (outputs NaN) and the indices of the outputs."""
    if name == "fold-scale.tk":
        x = (rng.standard_normal((256, 64)) * 8).astype(np.float32)
        return [x, np.full_like(x, np.nan)], [1]
    if name == "cache-policy.tk":  # X, S, A, Y
        m = 64
        return [rng.standard_normal((m, 256)).astype(BF16), rng.standard_normal(m).astype(np.float32),
                rng.standard_normal((m, 256)).astype(BF16), np.full((m, 256), np.nan, BF16)], [3]
    if name == "contract-fma.tk":  # X, Y, Z, W, G, V, U, F, T (W is read and written)
        def f32() -> np.ndarray:
            return rng.standard_normal((64, 64)).astype(np.float32)

        def nan() -> np.ndarray:
            return np.full((64, 64), np.nan, np.float32)

        return [f32(), nan(), nan(), f32().astype(BF16), f32(), nan(), nan(), f32(), nan()], [1, 2, 3, 5, 6, 8]
    if name == "readonly-loads.tk":  # X, S, A, Acc (read and written), Y
        m = 64
        return [rng.standard_normal((m, 512)).astype(BF16), rng.standard_normal(m).astype(np.float32),
                rng.standard_normal((m, 256)).astype(BF16), rng.standard_normal((m, 256)).astype(np.float32),
                np.full((m, 512), np.nan, BF16)], [3, 4]
    if name == "fence-loads.tk":  # X, W, Bias, Y, Z (Z unused at STORE_FIRST = 0)
        n, d = 5, 768
        return [rng.standard_normal((n, d)).astype(BF16), rng.standard_normal(d).astype(BF16),
                rng.standard_normal(d).astype(BF16), np.full((n, d), np.nan, BF16),
                rng.standard_normal(d).astype(BF16)], [3]
    n = 300 if name == "split-masks.tk" else 256  # split-masks: a ragged last key block
    q, k, v = (rng.standard_normal((n, 64)).astype(BF16) for _ in range(3))
    return [q, k, v, np.full((n, 64), np.nan, BF16)], [3]


def _compile(name: str, target: str) -> tkir.CompiledKernel:
    """The default pipeline; fence-loads.tk with its research pass added after hoist-loads."""
    passes = None
    if name == "fence-loads.tk":
        pipe = tkir.api.default_pipeline()
        passes = pipe[:pipe.index("hoist-loads") + 1] + ["fence-loads"] + pipe[pipe.index("hoist-loads") + 1:]
    return tkir.compile(str(PASSES / name), target=target, passes=passes)


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ["fold-scale.tk", "split-masks.tk", "overlap-mma.tk", "cache-policy.tk",
                                  "contract-fma.tk", "fence-loads.tk", "readonly-loads.tk"])
def test_pass_kernel_matches_interpreter_on_gpu(name: str, target: str) -> None:
    k = _compile(name, target)
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


def _numpy_reference(name: str, a: list[np.ndarray]) -> dict[int, np.ndarray]:
    """The pass kernels' outputs in float64 (bf16 ops rounded as the kernel rounds them)."""
    if name == "cache-policy.tk":
        x, s, aa = (v.astype(np.float64) for v in a[:3])
        return {3: x * s[:, None] + aa}
    if name == "readonly-loads.tk":  # Acc += X's first half; Y = (X * S + A) per 256-column half
        x, sc, aa, acc = (v.astype(np.float64) for v in a[:4])
        return {3: acc + x[:, :256], 4: x * sc[:, None] + np.concatenate([aa, aa], axis=1)}
    if name == "fence-loads.tk":  # layernorm of each row
        x, w, b = (v.astype(np.float64) for v in a[:3])
        xc = x - x.mean(axis=1, keepdims=True)
        return {3: xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + 1e-5) * w + b}
    x, h, g, f = (a[i].astype(np.float64) for i in (0, 3, 4, 7))
    hh = (a[3] * a[3]).astype(BF16)
    return {1: x * 3 + 0.5, 2: x * x - x * x * 2, 3: (hh + a[3]).astype(np.float64), 5: g * 4 + np.exp(x),
            6: x, 8: f * 5 + f + np.exp(x)}


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ["cache-policy.tk", "contract-fma.tk", "fence-loads.tk", "readonly-loads.tk"])
def test_pass_kernels_match_numpy_in_the_interpreter(name: str, target: str) -> None:
    """cache-policy.tk and contract-fma.tk (tests/filecheck/passes/; not examples) through the default pipeline for
    each target: the interpreter's outputs against numpy (the hints and contractions change no value
    beyond rounding). readonly-loads.tk too (its marks change no value either)."""
    k = _compile(name, target)
    assert ("tk.fence" in k.ir) == (name == "fence-loads.tk")
    host, outs = _inputs(name, np.random.default_rng(11))
    want = _numpy_reference(name, [v.copy() for v in host])
    tkir.interpret(k, *host)
    assert sorted(want) == outs
    for i in outs:
        got = host[i].astype(np.float64)
        err = np.linalg.norm(got - want[i]) / np.linalg.norm(want[i])
        assert err < 1e-2, f"{name} {target}: output {i} rel err {err:.3e}"
