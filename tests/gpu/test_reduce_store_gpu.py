"""Reducing stores (`G[i, j] += t`) on the GPU against numpy: split-K (grid over K chunks, every chunk's block adding
its partial product into the same tile of Y) and many blocks adding into one row-tile, on sm_90a (TMA reduce-add,
cp.reduce.async.bulk.tensor), with --no-tma (red.global.add.f32) and, where the device runs it, sm_80's code.
Y starts non-zero, so a plain store in place of an add fails. Marked gpu: skipped where no CUDA device exists;
the same kernels in the interpreter are tests/ir/test_reduce_store.py. No torch: tkir's own device arrays."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

SPLITK = "tests/data/splitk_add.tk"
ROWS = "tests/data/rows_add.tk"
TARGETS = [("sm_90a", False), ("sm_90a", True), ("sm_80", False)]
TARGET_IDS = ["sm_90a", "sm_90a-no-tma", "sm_80"]


@pytest.mark.gpu
@pytest.mark.parametrize(("target", "no_tma"), TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize(("M", "N", "K", "consts"), [
    (256, 256, 1024, {}),                    # 4 chunks of 256 per tile
    (200, 136, 1000, {"KC": 128}),           # ragged M, N and K (the last chunk is short)
    (1000, 1000, 4096, {"KC": 64}),          # 64 blocks add into every tile
    (64, 64, 512, {"BM": 64, "BN": 64}),     # one warpgroup's accumulator
])
def test_split_k_on_gpu(target: str, no_tma: bool, M: int, N: int, K: int, consts: dict) -> None:
    import tkir
    from tkir.backend import cuda as tkcuda

    k = tkir.compile(SPLITK, target=target, no_tma=no_tma, **consts)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    Y0 = rng.standard_normal((M, N)).astype(np.float32)
    dY = tkcuda.to_device(Y0)
    k(tkcuda.to_device(A), tkcuda.to_device(B), dY)
    ref = Y0.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)
    got = dY.numpy()
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 1e-5, f"max relative error {err}"


@pytest.mark.gpu
@pytest.mark.parametrize(("target", "no_tma"), TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize(("R", "C"), [(16 * 1000, 256), (16 * 37 + 5, 200), (16, 64)])
def test_many_blocks_add_into_one_row_on_gpu(target: str, no_tma: bool, R: int, C: int) -> None:
    import tkir
    from tkir.backend import cuda as tkcuda

    k = tkir.compile(ROWS, target=target, no_tma=no_tma)
    X = np.random.default_rng(1).standard_normal((R, C)).astype(np.float32)
    Y0 = np.ones((16, C), np.float32)
    dY = tkcuda.to_device(Y0)
    k(tkcuda.to_device(X), dY)
    Xp = np.concatenate([X, np.zeros((-R % 16, C), np.float32)])
    ref = Y0 + Xp.reshape(-1, 16, C).astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(dY.numpy(), ref, rtol=1e-4, atol=1e-3 * np.sqrt(R / 16))


@pytest.mark.gpu
@pytest.mark.parametrize(("target", "no_tma"), TARGETS, ids=TARGET_IDS)
@pytest.mark.parametrize(("R", "C"), [(64 * 500, 256), (64 * 9 + 3, 200)])
def test_column_sums_added_into_one_vector_on_gpu(target: str, no_tma: bool, R: int, C: int) -> None:
    """Vectors held by every warp: each element is added once (by its owner thread), not once per holder."""
    import tkir
    from tkir.backend import cuda as tkcuda

    k = tkir.compile("tests/data/colsum_add.tk", target=target, no_tma=no_tma)
    X = np.random.default_rng(2).standard_normal((R, C)).astype(np.float32)
    S0 = np.ones(C, np.float32)
    dS = tkcuda.to_device(S0)
    k(tkcuda.to_device(X), dS)
    ref = S0 + X.astype(np.float64).sum(axis=0)
    np.testing.assert_allclose(dS.numpy(), ref, rtol=1e-4, atol=1e-3 * np.sqrt(R / 64))
